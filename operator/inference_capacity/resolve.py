"""From an ``InferenceCapacity`` spec (and the Deployment it targets, when known) to the plain
inputs of :func:`inference_capacity.planner.make_plan`.

The spec wins where it says something; the running vLLM flags fill what it leaves out (TP, PP,
max-model-len, kv-cache-dtype); where both speak and disagree, that is a conflict the caller
reports. The engine version comes from the spec, else the vLLM image tag, else the newest
supported version (and the caller says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .api.models import InferenceCapacitySpec
from .engines.versions import NEWEST_SUPPORTED, VersionError, parse_version
from .engines.vllm import EngineSettings
from .engines.vllm_args import find_vllm_container, flag_int, parse_image_version, read_flags
from .hardware import Gpu, custom_gpu, get_gpu
from .model import ModelConfigError, ModelShape, load_model, model_from_dict
from .model.limits import parse_config_json
from .planner import Headroom, PlanInput, RolloutInput
from .sizing.workload import Cohort, Quantiles, Workload


class ResolveError(ValueError):
    """The spec cannot be turned into a plan; ``field`` names the spec field at fault."""

    def __init__(self, field: str, message: str, reason: str = "InvalidSpec") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class Resolved:
    plan_input: PlanInput
    engine_version: str
    engine_version_source: str  # spec | image | default
    running_flags: dict[str, str] = field(default_factory=dict)
    conflicts: tuple[str, ...] = ()
    container_index: int | None = None


def _int_flag(flags: Mapping[str, str], key: str) -> int | None:
    value = flags.get(key)
    if value is None:
        return None
    try:
        return flag_int(key, value)
    except ValueError:
        return None


def resolve_model(
    spec: InferenceCapacitySpec, config_maps: Mapping[str, Mapping[str, str]] | None = None
) -> ModelShape:
    m = spec.model
    quant = m.quantization
    try:
        if m.config is not None:
            return model_from_dict(m.config, name="inline config", quantization=quant)
        if m.config_map_ref is not None:
            ref = m.config_map_ref
            data = (config_maps or {}).get(ref.name)
            if data is None:
                raise ResolveError(
                    "spec.model.configMapRef",
                    f"ConfigMap {ref.name!r} not found",
                    "ModelConfigNotFound",
                )
            if ref.key not in data:
                raise ResolveError(
                    "spec.model.configMapRef.key",
                    f"ConfigMap {ref.name!r} has no key {ref.key!r}",
                    "ModelConfigNotFound",
                )
            raw = data[ref.key]
            if not isinstance(raw, str):
                raise ResolveError(
                    "spec.model.configMapRef.key",
                    f"ConfigMap {ref.name!r} key {ref.key!r} holds a {type(raw).__name__}, "
                    "not the text of a config.json",
                    "InvalidModelConfig",
                )
            try:
                cfg = parse_config_json(raw, f"configmap/{ref.name}/{ref.key}")
            except ModelConfigError as exc:
                raise ResolveError(
                    "spec.model.configMapRef", str(exc), "InvalidModelConfig"
                ) from exc
            return model_from_dict(cfg, name=f"configmap/{ref.name}", quantization=quant)
        assert m.name is not None
        return load_model(m.name, quantization=quant)
    except ResolveError:
        raise
    except ModelConfigError as exc:
        if m.config is None:
            raise ResolveError("spec.model", str(exc), "UnknownModel") from exc
        raise ResolveError("spec.model.config", str(exc), "InvalidModelConfig") from exc
    except ValueError as exc:
        raise ResolveError("spec.model", str(exc), "UnknownModel") from exc


def resolve_gpu(spec: InferenceCapacitySpec) -> Gpu:
    hw = spec.hardware
    try:
        if hw.gpu_memory_gib is not None:
            base = get_gpu(hw.gpu) if hw.gpu else None
            g = custom_gpu(hw.gpu_memory_gib, name=hw.gpu or f"{hw.gpu_memory_gib}GiB")
            if base is not None:
                g = replace(base, total_bytes=g.total_bytes)
            return g
        assert hw.gpu is not None
        return get_gpu(hw.gpu)
    except ValueError as exc:
        raise ResolveError("spec.hardware.gpu", str(exc), "UnknownGpu") from exc


def resolve(
    spec: InferenceCapacitySpec,
    deployment: Mapping[str, Any] | None = None,
    config_maps: Mapping[str, Mapping[str, str]] | None = None,
    spare_gpus: int | None = None,
    hpa_min_replicas: int | None = None,
) -> Resolved:
    check_bounds(spec)
    running: dict[str, str] = {}
    conflicts: list[str] = []
    image_version = None
    index = None
    if deployment is not None:
        check_deployment(deployment)
        containers = (
            deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
        )
        index = find_vllm_container(containers, spec.target_ref.container)
        running = read_flags(containers[index])
        image_version = parse_image_version(str(containers[index].get("image", "")))

    def pick(name: str, spec_value: Any, flag: str, cast: Any = None) -> Any:
        cast = cast or (lambda text: flag_int(flag, text))
        run = running.get(flag)
        if spec_value is not None:
            run_norm = str(cast(run)) if run is not None and _castable(run, cast) else run
            if run is not None and run_norm != str(spec_value):
                conflicts.append(
                    f"{name} is {spec_value} in the spec but --{flag} {run} on the Deployment"
                )
            return spec_value
        if run is not None and _castable(run, cast):
            return cast(run)
        return None

    tp = (
        pick("spec.hardware.tensorParallel", spec.hardware.tensor_parallel, "tensor-parallel-size")
        or 1
    )
    pp = (
        pick(
            "spec.hardware.pipelineParallel",
            spec.hardware.pipeline_parallel,
            "pipeline-parallel-size",
        )
        or 1
    )
    max_len = pick("spec.workload.maxModelLen", spec.workload.max_model_len, "max-model-len")
    kv_dtype = (
        pick("spec.model.kvCacheDtype", spec.model.kv_cache_dtype, "kv-cache-dtype", str) or "auto"
    )
    batched = spec.engine.max_num_batched_tokens or _int_flag(running, "max-num-batched-tokens")
    block = spec.engine.block_size or _int_flag(running, "block-size")
    if spec.engine.version:
        version, source = spec.engine.version, "spec"
    elif image_version:
        version, source = image_version, "image"
    else:
        version, source = NEWEST_SUPPORTED, "default"
    if max_len is not None and max_len <= 0:
        max_len = None  # vLLM's -1 ("auto"): fit the context to the KV pool, as unset
    for what, value, limit in (
        ("tensor-parallel-size", tp, 64),
        ("pipeline-parallel-size", pp, 64),
        ("max-model-len", max_len, MAX_MODEL_LEN),
        ("max-num-batched-tokens", batched, MAX_BATCHED_TOKENS),
        ("block-size", block, 1024),
        ("data-parallel-size", _int_flag(running, "data-parallel-size"), 1024),
    ):
        if value is not None and not 0 < int(value) <= limit:
            raise ResolveError(
                f"--{what} on the Deployment",
                f"{value} is outside (0, {limit}]",
                "InvalidTarget",
            )
    try:
        parse_version(version)
    except VersionError as exc:
        where = "spec.engine.version" if source == "spec" else "the target container's image tag"
        raise ResolveError(where, str(exc), "UnsupportedEngineVersion") from exc
    shape = resolve_model(spec, config_maps)
    gpu = resolve_gpu(spec)
    dp = _int_flag(running, "data-parallel-size") or 1
    settings = EngineSettings(
        version=version,
        max_model_len=max_len,
        max_num_batched_tokens=batched,
        block_size=block,
        kv_cache_dtype=kv_dtype,
        dtype=spec.model.dtype,
        enforce_eager=spec.engine.enforce_eager or running.get("enforce-eager") == "true",
        max_loras=spec.model.max_loras,
        max_lora_rank=spec.model.max_lora_rank,
        data_parallel=dp,
        expert_parallel=running.get("enable-expert-parallel") == "true",
    )
    workload = None
    w = spec.workload
    if w.cohorts or w.peak_concurrency is not None:
        workload = Workload(
            cohorts=tuple(
                Cohort(
                    c.name,
                    c.weight,
                    Quantiles(c.prompt_tokens.p50, c.prompt_tokens.p95, c.prompt_tokens.p99),
                    Quantiles(c.output_tokens.p50, c.output_tokens.p95, c.output_tokens.p99),
                    c.shared_prefix_tokens,
                )
                for c in w.cohorts
            ),
            quantile=w.quantile,
            peak_concurrency=w.peak_concurrency,
            itl_target_ms=w.itl_target_ms,
        )
    hr = spec.headroom
    ro = spec.rollout
    inp = PlanInput(
        model=shape,
        gpu=gpu,
        tp=int(tp),
        pp=int(pp),
        engine=settings,
        workload=workload,
        headroom=Headroom(hr.operational_fraction, hr.kv_safety_fraction, hr.recovery_replicas),
        rollout=RolloutInput(ro.min_replicas, ro.max_replicas, spare_gpus, hpa_min_replicas),
        max_num_seqs_cap=spec.engine.max_num_seqs_cap,
    )
    return Resolved(inp, version, source, running, tuple(conflicts), index)


#: per-GPU memory above this is not a GPU (the largest today have 288 GB)
MAX_GPU_MEMORY_GIB = 4096.0
#: tokens per scheduler step; vLLM's defaults are 2k-16k, long-context prefill runs use ~1M
MAX_BATCHED_TOKENS = 10_000_000
#: the longest context of any model (Llama 4 Scout: 10M tokens); the schema's bound too
MAX_MODEL_LEN = 10_000_000
#: sequences per replica
MAX_NUM_SEQS = 1 << 20


def check_bounds(spec: InferenceCapacitySpec) -> None:
    """Schema-valid but absurd sizes, refused before any work with the field the user wrote
    and the limit (a ``gpuMemoryGiB: 1e12`` or ``maxNumBatchedTokens: 1e12`` would otherwise
    reach the ledger and come back as a message about another number)."""
    hw, eng = spec.hardware, spec.engine
    if hw.gpu_memory_gib is not None and not hw.gpu_memory_gib <= MAX_GPU_MEMORY_GIB:
        raise ResolveError(
            "spec.hardware.gpuMemoryGiB",
            f"must be at most {MAX_GPU_MEMORY_GIB:g} GiB per GPU, got {hw.gpu_memory_gib:g}",
        )
    if eng.max_num_batched_tokens is not None and eng.max_num_batched_tokens > MAX_BATCHED_TOKENS:
        raise ResolveError(
            "spec.engine.maxNumBatchedTokens",
            f"must be at most {MAX_BATCHED_TOKENS}, got {eng.max_num_batched_tokens:g}",
        )
    if eng.max_num_seqs_cap is not None and eng.max_num_seqs_cap > MAX_NUM_SEQS:
        raise ResolveError(
            "spec.engine.maxNumSeqsCap",
            f"must be at most {MAX_NUM_SEQS}, got {eng.max_num_seqs_cap}",
        )
    w = spec.workload
    if w.peak_concurrency is not None and w.peak_concurrency > MAX_NUM_SEQS * 1024:
        raise ResolveError(
            "spec.workload.peakConcurrency",
            f"must be at most {MAX_NUM_SEQS * 1024}, got {w.peak_concurrency}",
        )
    if spec.model.max_loras > 1024:
        raise ResolveError(
            "spec.model.maxLoras", f"must be at most 1024, got {spec.model.max_loras}"
        )


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def check_deployment(dep: Any) -> None:
    """Refuse a Deployment whose parts the operator reads have the wrong shape (a manifest
    written by hand: ``template: null``, ``containers`` as a map, ``strategy: Recreate``), naming
    the field, instead of failing inside the reader. The API server enforces these shapes on
    stored objects; files given to ``plan`` are not so checked."""
    name = dep.get("metadata", {}).get("name") if isinstance(dep, Mapping) else None
    where = f"deployment/{name}" if isinstance(name, str) else "deployment"

    def need(value: Any, path: str, kind: type | tuple[type, ...], what: str) -> None:
        if not isinstance(value, kind):
            raise ResolveError(
                f"{where}: {path}", f"must be {what}, got {_kind(value)}", "InvalidTarget"
            )

    need(dep, "(the object)", Mapping, "a mapping")
    need(dep.get("metadata", {}), "metadata", Mapping, "a mapping")
    spec = dep.get("spec")
    need(spec, "spec", Mapping, "a mapping")
    if spec.get("replicas") is not None and (
        isinstance(spec["replicas"], bool) or not isinstance(spec["replicas"], int)
    ):
        need(spec["replicas"], "spec.replicas", (), "an integer")
    if spec.get("strategy") is not None:
        need(spec["strategy"], "spec.strategy", Mapping, "a mapping (e.g. {type: Recreate})")
        ru = spec["strategy"].get("rollingUpdate")
        if ru is not None:
            need(ru, "spec.strategy.rollingUpdate", Mapping, "a mapping")
    if spec.get("selector") is not None:
        need(spec["selector"], "spec.selector", Mapping, "a mapping")
    template = spec.get("template")
    need(template, "spec.template", Mapping, "a mapping")
    need(template.get("metadata", {}), "spec.template.metadata", Mapping, "a mapping")
    pod = template.get("spec")
    need(pod, "spec.template.spec", Mapping, "a mapping")
    for list_key in ("containers", "initContainers"):
        containers = pod.get(list_key, [] if list_key == "initContainers" else None)
        if containers is None and list_key == "initContainers":
            continue
        need(containers, f"spec.template.spec.{list_key}", list, "a list")
        for i, c in enumerate(containers):
            at = f"spec.template.spec.{list_key}[{i}]"
            need(c, at, Mapping, "a mapping")
            for key in ("command", "args"):
                v = c.get(key)
                if v is not None:
                    need(v, f"{at}.{key}", list, "a list of strings")
                    for j, item in enumerate(v):
                        need(item, f"{at}.{key}[{j}]", str, "a string")
            for key in ("name", "image"):
                if c.get(key) is not None:
                    need(c[key], f"{at}.{key}", str, "a string")
            env = c.get("env")
            if env is not None:
                need(env, f"{at}.env", list, "a list")
                for j, e in enumerate(env):
                    need(e, f"{at}.env[{j}]", Mapping, "a mapping")
                    need(e.get("name"), f"{at}.env[{j}].name", str, "a string")
            if c.get("envFrom") is not None:
                need(c["envFrom"], f"{at}.envFrom", list, "a list")
            res = c.get("resources")
            if res is not None:
                need(res, f"{at}.resources", Mapping, "a mapping")
                for part in ("limits", "requests"):
                    if res.get(part) is not None:
                        need(res[part], f"{at}.resources.{part}", Mapping, "a mapping")


def _castable(value: str, cast: Any) -> bool:
    try:
        cast(value)
    except (TypeError, ValueError):
        return False
    return True
