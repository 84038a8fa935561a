"""From an ``InferenceCapacity`` spec (and the Deployment it targets, when known) to the plain
inputs of :func:`inference_capacity.planner.make_plan`.

The spec wins where it says something; the running vLLM flags fill what it leaves out (TP, PP,
max-model-len, kv-cache-dtype); where both speak and disagree, that is a conflict the caller
reports. The engine version comes from the spec, else the vLLM image tag, else the newest
supported version (and the caller says so).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .api.models import InferenceCapacitySpec
from .engines.versions import NEWEST_SUPPORTED
from .engines.vllm import EngineSettings
from .engines.vllm_args import find_vllm_container, parse_image_version, read_flags
from .hardware import Gpu, custom_gpu, get_gpu
from .model import ModelShape, load_model, model_from_dict
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
        return int(value)
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
            try:
                cfg = json.loads(data[ref.key])
            except json.JSONDecodeError as exc:
                raise ResolveError(
                    "spec.model.configMapRef",
                    f"{ref.name}/{ref.key} is not JSON: {exc.msg}",
                    "InvalidModelConfig",
                ) from exc
            return model_from_dict(cfg, name=f"configmap/{ref.name}", quantization=quant)
        assert m.name is not None
        return load_model(m.name, quantization=quant)
    except ResolveError:
        raise
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
    running: dict[str, str] = {}
    conflicts: list[str] = []
    image_version = None
    index = None
    if deployment is not None:
        containers = (
            deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
        )
        index = find_vllm_container(containers, spec.target_ref.container)
        running = read_flags(containers[index])
        image_version = parse_image_version(str(containers[index].get("image", "")))
    shape = resolve_model(spec, config_maps)
    gpu = resolve_gpu(spec)

    def pick(name: str, spec_value: Any, flag: str, cast: type = int) -> Any:
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
                    c.samples,
                )
                for c in w.cohorts
            ),
            quantile=w.quantile,
            peak_concurrency=w.peak_concurrency,
            itl_target_ms=w.itl_target_ms,
            burst_weights=(
                tuple(w.burst.weights.get(c.name, 0.0) for c in w.cohorts)
                if w.burst is not None
                else None
            ),
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
        sizing_rule=spec.policy.sizing.lower(),
        preemption_target=spec.policy.preemption_target,
        hbm_efficiency=spec.hardware.hbm_efficiency,
    )
    return Resolved(inp, version, source, running, tuple(conflicts), index)


def _castable(value: str, cast: type) -> bool:
    try:
        cast(value)
    except (TypeError, ValueError):
        return False
    return True
