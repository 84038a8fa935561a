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

from .api import InferenceCapacitySpec
from .engines import NEWEST_SUPPORTED, VersionError, era_of, parse_version
from .engines.vllm_args import (
    find_vllm_container,
    hidden_flags,
    parse_image_version,
    read_env,
    read_flags,
    unresolved_flags,
)
from .engines.vllm_config import (
    MAX_BATCHED_TOKENS,
    MAX_LORAS,
    MAX_NUM_SEQS,
    EngineConfig,
    EngineConfigError,
    MultimodalSettings,
    read_engine,
)
from .engines.vllm_flags import (
    DRAFT_MODEL_METHODS,
    MODELLED_FLAGS,
    SpeculativeConfig,
    Unsupported,
    parse_speculative_config,
)
from .engines.vllm_mm import (
    DEFAULT_MM_LIMIT,
    MM_PROFILE_ERAS,
    PIXEL_KWARGS,
    ProfileSizing,
    calibration,
    image_options,
    processor_pixels,
    profile_sizing,
    profiled_modality,
    qwen3_video_tokens,
    size_dynamic_tower,
    text_only,
    uses_options,
)
from .engines.vllm_rules import VllmRules
from .hardware import Gpu, custom_gpu, get_gpu
from .model import ModelConfigError, ModelShape, VisionTower, model_from_dict
from .model.config.vision import QWEN3_TOWERS
from .model.hub_async import HubClient, resolve_model_ref_async
from .model.limits import parse_config_json
from .model.source import VIDEO_PROCESSOR_KEY, ModelSourceError, ResolvedModel, resolve_model_ref
from .planner import Headroom, PlanInput, RolloutInput
from .sizing import Cohort, Quantiles, Workload
from .vocab import QUANT_ALIASES


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
    #: flags / VLLM_* variables of the container the plan cannot honour: Supported=False
    unsupported: tuple[Unsupported, ...] = ()
    notes: tuple[str, ...] = ()
    #: where spec.model.name resolved to (catalog, Hub, local); None for configMapRef / config
    model_source: ResolvedModel | None = None
    #: the target container's launch as :func:`read_engine` reads it (flags only; the spec's
    #: values are merged into ``plan_input.engine``)
    engine_config: EngineConfig | None = None

    @property
    def supported(self) -> bool:
        return not self.unsupported

    def unsupported_message(self) -> str:
        return "; ".join(str(u) for u in self.unsupported)


def resolve_model_source(
    spec: InferenceCapacitySpec,
    token: str | bool | None = None,
    timeout: float | None = None,
    allow_local: bool = True,
) -> ResolvedModel | None:
    """spec.model.name (and revision) through the resolution order local → catalog → Hub;
    None when the spec gives a configMapRef or an inline config."""
    m = spec.model
    if m.name is None:
        return None
    try:
        return resolve_model_ref(
            m.name, revision=m.revision, token=token, timeout=timeout, allow_local=allow_local
        )
    except ModelSourceError as exc:
        raise ResolveError("spec.model.name", str(exc), exc.reason) from exc


async def resolve_model_source_async(
    spec: InferenceCapacitySpec,
    token: str | bool | None,
    timeout: float | None,
    client: HubClient,
) -> ResolvedModel | None:
    """:func:`resolve_model_source` for the operator: never a path, the Hub fetched on
    ``client`` (:mod:`inference_capacity.model.hub_async`)."""
    m = spec.model
    if m.name is None:
        return None
    try:
        return await resolve_model_ref_async(m.name, m.revision, token, timeout, client)
    except ModelSourceError as exc:
        raise ResolveError("spec.model.name", str(exc), exc.reason) from exc


def draft_model_ref(
    spec: InferenceCapacitySpec, deployment: Mapping[str, Any] | None
) -> tuple[str, str | None] | None:
    """(model, revision) of the target container's ``--speculative-config`` drafter when its
    method takes a separate draft model (:data:`DRAFT_MODEL_METHODS`); None otherwise, or when
    the container cannot be read (:func:`resolve` reports that)."""
    if deployment is None:
        return None
    try:
        containers = (
            deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
        )
        running = read_flags(containers[find_vllm_container(containers, spec.target_ref.container)])
        value = running.get("speculative-config")
        if value is None:
            return None
        sc = parse_speculative_config(value)
    except (ValueError, LookupError, TypeError, AttributeError):
        return None
    if sc.method not in DRAFT_MODEL_METHODS or not sc.model:
        return None
    return sc.model, sc.revision


def resolve_draft_source(
    ref: str,
    revision: str | None = None,
    token: str | bool | None = None,
    timeout: float | None = None,
    allow_local: bool = True,
) -> ResolvedModel:
    """A ``--speculative-config`` draft model through the same order as spec.model.name
    (local → catalog → Hub: config.json and safetensors headers); the operator passes
    spec.model's token (or ``False``) and ``allow_local=False``. Raises ModelSourceError."""
    return resolve_model_ref(
        ref, revision=revision, token=token, timeout=timeout, allow_local=allow_local
    )


#: the drafters already resolved (the operator's, under its deadline), by (model, revision)
DraftSources = Mapping[tuple[str, str | None], ResolvedModel]


def _draft_shape(
    sc: SpeculativeConfig, sources: DraftSources | None
) -> tuple[ModelShape | None, str]:
    """The drafter's shape and a note saying where it came from, or (None, why it cannot be
    sized: a Supported=False reason)."""
    ref = sc.model or ""
    if not ref:
        return None, f'method {sc.method!r} needs a draft model ("model")'
    try:
        if sources is not None:
            src = sources.get((ref, sc.revision))
            if src is None:
                return None, f"draft model {ref!r} was not resolved"
        else:
            src = resolve_draft_source(ref, sc.revision)
        shape = src.shape()
    except ModelSourceError as exc:
        return None, f"draft model {ref!r}: {exc}"
    except ModelConfigError as exc:
        return None, f"draft model {ref!r}: its config cannot be sized ({exc})"
    where = src.source + (f" at commit {src.revision}" if src.revision else "")
    if src.checkpoint_bytes is not None:
        where += f"; checkpoint {src.checkpoint_bytes} B from its safetensors headers"
    return shape, f"--speculative-config draft model {src.id} ({sc.method}) from {where}"


def multimodal_profile(
    shape: ModelShape,
    version: str,
    mm: MultimodalSettings,
    bad: list[Unsupported],
    notes: list[str],
    preprocessor: Mapping[str, Any] | None = None,
) -> tuple[tuple[tuple[str, int], ...] | None, bool, ModelShape]:
    """The encoder-profile inputs (``--limit-mm-per-prompt`` counts, ``--skip-mm-profiling``),
    by the class :func:`~.engines.vllm_mm.profile_sizing` gives the architecture: sized (the
    ledger adds it), calibrated (inside a fitted constant: a note in ``notes`` names it and the
    log) or unknown (a refusal in ``bad``). Refused as well: any multimodal profile of a vLLM
    before 0.11, and ``--mm-processor-kwargs`` on a sized or calibrated profile (it can change
    the dummy item: pan-and-scan crops, max pixels, tiles). Text-only profiles (every modality
    0, or skipped) are exact for sized and unknown towers: nothing is added.

    A Qwen2(.5)-VL tower is sized here (:func:`size_dynamic`) from ``preprocessor`` (the
    repository's preprocessor_config.json), ``--mm-processor-kwargs`` max_pixels/min_pixels and
    the options form's image width/height; the shape returned carries the sized tower."""
    limits = mm.limits
    skip = mm.skip_mm_profiling
    counts = mm.counts
    v = parse_version(version)
    profiled = era_of(v) in MM_PROFILE_ERAS
    if (
        limits is not None
        and not VllmRules.for_version(v).mm_limit_options
        and mm.limit_mm_per_prompt is not None
        and uses_options(mm.limit_mm_per_prompt)
    ):
        bad.append(
            Unsupported(
                "--limit-mm-per-prompt",
                f"vLLM {version} takes a count per modality; the options form "
                '({"image": {"count": ...}}) came with 0.11.1',
            )
        )
        return counts, skip, shape
    tower = shape.vision_tower
    if tower is not None and not tower.sized and profiled and not skip:
        if not text_only(limits, shape.mm_modalities):
            got = size_dynamic(shape, version, mm, preprocessor, notes)
            if isinstance(got, tuple):
                bad.append(Unsupported(*got))
                return counts, skip, shape
            return counts, skip, replace(shape, vision_tower=got)
    sizing = profile_sizing(shape)
    cal = calibration(shape)
    if sizing is None:
        return counts, skip, shape
    if text_only(limits, shape.mm_modalities) or (skip and profiled):
        return counts, skip, shape  # no encoder step: a calibrated profile is not counted
    if skip:
        bad.append(
            Unsupported(
                "--skip-mm-profiling",
                f"not modelled for vLLM {version} (before 0.11); pass --limit-mm-per-prompt "
                "with every modality 0 instead",
            )
        )
        return counts, skip, shape
    fix = (
        "--limit-mm-per-prompt with every modality at 0 ("
        + json.dumps(dict.fromkeys(shape.mm_modalities, 0))
        + ") makes the profile text-only"
        + (", or --skip-mm-profiling" if profiled else "")
    )
    if not profiled:
        why = f"the multimodal encoder profile of vLLM {version} (before 0.11) is not modelled"
    elif sizing is ProfileSizing.UNKNOWN:
        why = (
            f"the multimodal encoder profile of {shape.architecture} is not sized (its "
            "dummy item and vision tower are not modelled), so the activation peak vLLM "
            "subtracts is unknown"
        )
    elif mm.mm_processor_kwargs is not None:
        bad.append(
            Unsupported(
                "--mm-processor-kwargs",
                f"may change {shape.architecture}'s dummy image (crops, pixels, tiles), which "
                f"the encoder profile is {sizing.value} on; {fix}",
            )
        )
        return counts, skip, shape
    else:
        if cal is not None:
            notes.append(cal.note(shape.architecture))
        return counts, skip, shape
    bad.append(Unsupported("--limit-mm-per-prompt", f"{why}; {fix}"))
    return counts, skip, shape


#: the three ways to give a Qwen2(.5)-VL dummy image's size
PIXEL_WAYS = (
    "give the image processor's max_pixels: --mm-processor-kwargs '{\"max_pixels\": N}', "
    "the model's preprocessor_config.json (a Hub or local model that has one), or the "
    "--limit-mm-per-prompt options form's image width/height with max_pixels"
)


def _qwen3_video(shape: ModelShape) -> bool:
    """Whether ``shape``'s tower is a Qwen3-VL / Qwen3.5 wrapper's: its dummy video is 2 frames,
    one temporal patch (``Qwen3VLDummyInputsBuilder``; Qwen3.5 and Qwen3.5-MoE use it,
    models/qwen3_5.py 0.24.0)."""
    return shape.vision_tower is not None and shape.vision_tower.tower in QWEN3_TOWERS


def _video_processor(
    shape: ModelShape, version: str, preprocessor: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    """The repository's video processor settings where the dummy video they bound is read
    (Qwen3-VL / Qwen3.5, :data:`VllmRules.qwen3_video_dummy_read`), else None."""
    if not _qwen3_video(shape) or preprocessor is None:
        return None
    if not VllmRules.for_version(parse_version(version)).qwen3_video_dummy_read:
        return None
    video = preprocessor.get(VIDEO_PROCESSOR_KEY)
    return video if isinstance(video, Mapping) else None


def size_dynamic(
    shape: ModelShape,
    version: str,
    mm: MultimodalSettings,
    preprocessor: Mapping[str, Any] | None,
    notes: list[str],
) -> tuple[str, str] | VisionTower:
    """A Qwen2(.5)-VL / Qwen3-VL / Qwen3.5 tower with its dummy image sized, or the refusal
    (flag, why). An active video is refused unless it is Qwen3-VL's 2-frame dummy with its
    video processor known and fewer tokens than the image (then the profile runs images)."""
    arch = shape.architecture
    all_zero = json.dumps(dict.fromkeys(shape.mm_modalities, 0))
    video_active = (mm.limits or {}).get("video", DEFAULT_MM_LIMIT) != 0
    video = _video_processor(shape, version, preprocessor) if video_active else None
    if video_active and video is None:
        # 0.20 encoder_budget.py::get_modality_with_max_tokens (ties go to "video") and
        # get_num_frames_with_most_features: an active video's dummy (up to 14 frames) has at
        # least an image's tokens, and goes through the video processor, not modelled here;
        # Qwen3-VL / Qwen3.5's 2-frame dummy is compared once its video processor is known
        known = (
            "; its 2-frame dummy video is compared with the image once the repository's "
            "video_preprocessor_config.json is read (a Hub or local model that has one)"
            if _qwen3_video(shape)
            else ""
        )
        return (
            "--limit-mm-per-prompt",
            f"the multimodal encoder profile of {arch} runs its dummy video (video is active, "
            f"and may have at least an image's tokens), which is not sized{known}; "
            '"video": 0 in --limit-mm-per-prompt sizes the image profile; every modality at 0 ('
            + all_zero
            + ") or --skip-mm-profiling makes it text-only",
        )
    kwargs: dict[str, Any] = {}
    if mm.mm_processor_kwargs is not None:
        try:
            kwargs = json.loads(mm.mm_processor_kwargs)
        except json.JSONDecodeError:
            kwargs = {"": None}
        if not isinstance(kwargs, dict) or set(kwargs) - PIXEL_KWARGS:
            return (
                "--mm-processor-kwargs",
                f"only {', '.join(sorted(PIXEL_KWARGS))} are modelled for {arch}'s dummy image",
            )
    try:
        px = processor_pixels(preprocessor, kwargs, image_options(mm.limit_mm_per_prompt))
        if px is None:
            return (
                "--limit-mm-per-prompt",
                f"the multimodal encoder profile of {arch} is not sized: its dummy image "
                f"follows the image processor's max_pixels, which is not known; {PIXEL_WAYS}",
            )
        assert shape.vision_tower is not None
        tower = size_dynamic_tower(shape.vision_tower, px, parse_version(version))
    except ValueError as exc:
        return ("--mm-processor-kwargs", f"{arch}'s dummy image: {exc}")
    if video is not None:
        try:
            vt = qwen3_video_tokens(tower, video, kwargs, parse_version(version))
        except ValueError as exc:
            return ("--limit-mm-per-prompt", f"{arch}'s dummy video: {exc}")
        if profiled_modality({"image": tower.tokens_per_item, "video": vt}) == "video":
            return (
                "--limit-mm-per-prompt",
                f"the multimodal encoder profile of {arch} runs its dummy video ({vt} tokens, "
                f"at least an image's {tower.tokens_per_item}), which is not sized; "
                '"video": 0 in --limit-mm-per-prompt sizes the image profile; every modality '
                f"at 0 ({all_zero}) or --skip-mm-profiling makes it text-only",
            )
        notes.append(
            f"{arch}'s dummy video (2 frames, video_preprocessor_config.json): {vt} tokens, "
            f"fewer than an image's {tower.tokens_per_item}, so the profile runs images "
            "(get_modality_with_max_tokens)"
        )
    notes.append(
        f"{arch}'s dummy image from {px.source} (max_pixels {px.max_pixels}): "
        f"{tower.tokens_per_item} tokens per image in the encoder budget, "
        f"{tower.patches_per_crop} patches per dummy item"
    )
    return tower


def resolve_model(
    spec: InferenceCapacitySpec,
    config_maps: Mapping[str, Mapping[str, str]] | None = None,
    source: ResolvedModel | None = None,
) -> ModelShape:
    m = spec.model
    quant = m.quantization
    try:
        if source is not None:
            return source.shape(quant)
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
        src = resolve_model_source(spec)
        assert src is not None
        return src.shape(quant)
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


@dataclass
class _Reading:
    """What resolve reads off the target container, and what it finds wrong on the way: the
    flags and VLLM_* variables (read into an :class:`EngineConfig` by :func:`read_engine`), the
    spec/Deployment conflicts, the flags it cannot honour, the notes (each kept in the order
    found)."""

    deployed: bool = False
    running: dict[str, str] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)
    bad: list[Unsupported] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    image_version: str | None = None
    index: int | None = None
    cfg: EngineConfig = EngineConfig(NEWEST_SUPPORTED)

    def refused(self, flag: str) -> bool:
        return any(u.name == flag for u in self.bad)

    def pick(self, name: str, spec_value: Any, flag: str, run: Any) -> Any:
        """The spec's value (a different ``--flag`` on the Deployment is a conflict), else the
        flag's (``run``, as read), else None."""
        if spec_value is not None:
            if run is not None and str(run) != str(spec_value):
                self.conflicts.append(
                    f"{name} is {spec_value} in the spec but --{flag} {run} on the Deployment"
                )
            return spec_value
        return run


def _read_container(spec: InferenceCapacitySpec, deployment: Mapping[str, Any] | None) -> _Reading:
    rd = _Reading()
    if deployment is None:
        return rd
    check_deployment(deployment)
    containers = (
        deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    )
    index = find_vllm_container(containers, spec.target_ref.container)
    c = containers[index]
    rd.deployed, rd.index = True, index
    rd.running, rd.env = read_flags(c), read_env(c)
    rd.image_version = parse_image_version(str(c.get("image", "")))
    rd.bad += [
        Unsupported("(command line)", f"flags the operator cannot read may be set: {why}")
        for why in hidden_flags(c)
    ]
    # a modelled flag whose value Kubernetes or the shell fills in at run time
    rd.bad += [
        Unsupported(f"--{f}", "its value is set at run time; the operator cannot read it")
        for f in sorted(unresolved_flags(c))
        if f in MODELLED_FLAGS and f != "model"
    ]
    if c.get("envFrom"):
        rd.notes.append("the vLLM container has envFrom: VLLM_* variables from it cannot be read")
    return rd


def _read_engine(rd: _Reading, version: str) -> None:
    """The container's flags read against ``version``'s own (:func:`read_engine`); what it
    refuses goes first, a number out of its bounds is the Deployment's fault."""
    try:
        rd.cfg = read_engine(rd.running, rd.env, version)
    except EngineConfigError as exc:
        raise ResolveError(f"{exc.flag} on the Deployment", exc.message, "InvalidTarget") from exc
    rd.bad[:0] = rd.cfg.refused


@dataclass(frozen=True)
class _Sizes:
    tp: int
    pp: int
    auto_len: bool  # --max-model-len -1 / auto
    max_len: int | None
    kv_dtype: str
    batched: int | None
    block: int | None


def _sizes(spec: InferenceCapacitySpec, rd: _Reading) -> _Sizes:
    """Parallelism, lengths, KV dtype and block size: the spec's, else the Deployment's."""
    hw, eng, cfg = spec.hardware, spec.engine, rd.cfg
    par = cfg.parallel
    tp = (
        rd.pick(
            "spec.hardware.tensorParallel",
            hw.tensor_parallel,
            "tensor-parallel-size",
            par.tensor_parallel_size,
        )
        or 1
    )
    pp = (
        rd.pick(
            "spec.hardware.pipelineParallel",
            hw.pipeline_parallel,
            "pipeline-parallel-size",
            par.pipeline_parallel_size,
        )
        or 1
    )
    # --max-model-len -1 (or "auto", human_readable_int_or_auto in 0.3x): fit to the KV memory
    auto_len = cfg.model.auto_max_model_len and spec.workload.max_model_len is None
    run_len = -1 if cfg.model.auto_max_model_len else cfg.model.max_model_len
    max_len = (
        None
        if auto_len
        else rd.pick(
            "spec.workload.maxModelLen", spec.workload.max_model_len, "max-model-len", run_len
        )
    )
    kv_dtype = (
        rd.pick(
            "spec.model.kvCacheDtype",
            spec.model.kv_cache_dtype,
            "kv-cache-dtype",
            cfg.cache.kv_cache_dtype,
        )
        or "auto"
    )
    batched = rd.pick(
        "spec.engine.maxNumBatchedTokens",
        eng.max_num_batched_tokens,
        "max-num-batched-tokens",
        cfg.scheduler.max_num_batched_tokens,
    )
    block = rd.pick("spec.engine.blockSize", eng.block_size, "block-size", cfg.cache.block_size)
    return _Sizes(tp, pp, auto_len, max_len, kv_dtype, batched, block)


def _engine_version(spec: InferenceCapacitySpec, rd: _Reading) -> tuple[str, str]:
    """(version, where it came from: spec | image | default); a version that is not a released
    one is refused, naming where it came from."""
    if spec.engine.version:
        version, source = spec.engine.version, "spec"
    elif rd.image_version:
        version, source = rd.image_version, "image"
    else:
        version, source = NEWEST_SUPPORTED, "default"
    try:
        parse_version(version)
    except VersionError as exc:
        where = "spec.engine.version" if source == "spec" else "the target container's image tag"
        raise ResolveError(where, str(exc), "UnsupportedEngineVersion") from exc
    return version, source


def _data_parallel(spec: InferenceCapacitySpec, rd: _Reading) -> int:
    dp: int = (
        rd.pick(
            "spec.engine.dataParallel",
            spec.engine.data_parallel,
            "data-parallel-size",
            rd.cfg.parallel.data_parallel_size,
        )
        or 1
    )
    if rd.deployed and dp > 1 and "data-parallel-size" not in rd.running:
        rd.conflicts.append(
            f"spec.engine.dataParallel is {dp} but the Deployment does not pass "
            "--data-parallel-size (the operator does not set it)"
        )
    return dp


def _dtype(spec: InferenceCapacitySpec, rd: _Reading) -> str:
    """The weights' dtype: the spec's, else --dtype (aliases resolved, an unmodelled one refused
    by :func:`read_engine`)."""
    dtype: str = spec.model.dtype
    run_dtype = rd.cfg.model.dtype
    if run_dtype is None:
        return dtype
    if dtype == "auto":
        return run_dtype
    if run_dtype != dtype:
        rd.conflicts.append(f"spec.model.dtype is {dtype} in the spec but --dtype {run_dtype}")
    return dtype


def _check_quantization(spec: InferenceCapacitySpec, shape: ModelShape, rd: _Reading) -> None:
    run_quant = rd.cfg.model.quantization
    if run_quant is None:
        return
    # a kernel variant of the same format (awq_marlin for awq) stores the same weights
    q = shape.quantization
    have = q.method if q is not None else None
    if q is not None and q.producer == "modelopt" and run_quant.startswith("modelopt"):
        # the ModelOpt config classes' override_quantization_method pick the format from
        # the checkpoint's quant_algo whatever modelopt* name is given (modelopt.py, 0.25.0)
        run_quant = q.method
    run_quant = QUANT_ALIASES.get(run_quant, run_quant)
    spec_quant = spec.model.quantization
    if spec_quant is not None and run_quant != QUANT_ALIASES.get(spec_quant, spec_quant):
        rd.conflicts.append(
            f"spec.model.quantization is {spec.model.quantization} in the spec but "
            f"--quantization {run_quant} on the Deployment"
        )
    elif spec.model.quantization is None and run_quant != have:
        rd.bad.append(
            Unsupported(
                "--quantization",
                f"{run_quant!r} differs from the checkpoint's ({have or 'none'}); set "
                "spec.model.quantization so the ledger sizes those weights",
            )
        )


def _lora(spec: InferenceCapacitySpec, rd: _Reading) -> tuple[int, int]:
    """(max_loras, max_lora_rank): vLLM's LoRAConfig defaults max_loras 1, max_lora_rank 16;
    slots only with --enable-lora."""
    max_loras, max_rank = spec.model.max_loras, spec.model.max_lora_rank
    lora = rd.cfg.lora
    if lora.enable_lora:
        run_loras, run_rank = lora.slots
        if max_loras and (max_loras, max_rank) != (run_loras, run_rank):
            rd.conflicts.append(
                f"spec.model.maxLoras/maxLoraRank are {max_loras}/{max_rank} in the spec but "
                f"--max-loras {run_loras} --max-lora-rank {run_rank} on the Deployment"
            )
        max_loras, max_rank = run_loras, run_rank
        if lora.max_cpu_loras:
            rd.notes.append(
                f"--max-cpu-loras {lora.max_cpu_loras}: LoRA adapters cached in host memory, "
                "not on the GPU"
            )
    elif rd.deployed and max_loras:
        rd.conflicts.append(
            f"spec.model.maxLoras is {max_loras} but the Deployment does not pass --enable-lora"
        )
    return max_loras, max_rank


def _speculative(
    rd: _Reading, draft_sources: DraftSources | None
) -> tuple[SpeculativeConfig | None, ModelShape | None]:
    speculative = rd.cfg.speculative.config
    if speculative is None:
        return None, None
    draft: ModelShape | None = None
    if speculative.method in DRAFT_MODEL_METHODS:
        draft, said = _draft_shape(speculative, draft_sources)
        if draft is None:
            rd.bad.append(Unsupported("--speculative-config", said))
        else:
            rd.notes.append(said)
    return speculative, draft


def _cuda_graphs(spec: InferenceCapacitySpec, rd: _Reading) -> bool:
    """Eager (no CUDA graph): the spec's enforceEager, else the Deployment's flags (-O0,
    --enforce-eager, cudagraph_mode NONE)."""
    comp = rd.cfg.compilation
    if rd.deployed and spec.engine.enforce_eager and not comp.enforce_eager:
        rd.conflicts.append(
            "spec.engine.enforceEager is true but the Deployment does not pass --enforce-eager"
        )
    return spec.engine.enforce_eager or comp.eager


def _prefix_caching(spec: InferenceCapacitySpec, rd: _Reading) -> bool | None:
    prefix = rd.cfg.cache.enable_prefix_caching
    want = spec.engine.enable_prefix_caching
    if want is None or not rd.deployed:
        return prefix
    # vLLM V1 caches prefixes unless told not to
    if want != (True if prefix is None else prefix):
        rd.conflicts.append(
            f"spec.engine.enablePrefixCaching is {str(want).lower()} but the Deployment runs "
            + ("--no-enable-prefix-caching" if prefix is False else "with prefix caching")
        )
    return want


def _workload(spec: InferenceCapacitySpec) -> Workload | None:
    w = spec.workload
    if not w.cohorts and w.peak_concurrency is None:
        return None
    return Workload(
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
        itl_quantile=w.itl_quantile,
        ttft_target_ms=w.ttft_target_ms,
        burst_weights=(
            tuple(w.burst.weights.get(c.name, 0.0) for c in w.cohorts)
            if w.burst is not None
            else None
        ),
    )


def resolve(
    spec: InferenceCapacitySpec,
    deployment: Mapping[str, Any] | None = None,
    config_maps: Mapping[str, Mapping[str, str]] | None = None,
    spare_gpus: int | None = None,
    hpa_min_replicas: int | None = None,
    model_source: ResolvedModel | None = None,
    draft_sources: DraftSources | None = None,
) -> Resolved:
    """``model_source``: spec.model.name already resolved (the operator does it with the
    resource's token and a deadline); otherwise it is resolved here. ``draft_sources``: the
    ``--speculative-config`` drafters already resolved likewise (:func:`draft_model_ref`);
    without it a drafter is resolved here (:func:`resolve_draft_source`)."""
    check_bounds(spec)
    rd = _read_container(spec, deployment)
    if model_source is None and spec.model.name is not None:
        model_source = resolve_model_source(spec)
    shape = resolve_model(spec, config_maps, model_source)
    gpu = resolve_gpu(spec)
    version, source = _engine_version(spec, rd)
    # the flags against that release's own (the table from vLLM's source), then read
    _read_engine(rd, version)
    sz = _sizes(spec, rd)
    dp = _data_parallel(spec, rd)
    dtype = _dtype(spec, rd)
    _check_quantization(spec, shape, rd)
    max_loras, max_rank = _lora(spec, rd)
    speculative, draft = _speculative(rd, draft_sources)
    eager = _cuda_graphs(spec, rd)
    kv_bytes = rd.pick(
        "spec.engine.kvCacheMemoryBytes",
        spec.engine.kv_cache_memory_bytes,
        "kv-cache-memory-bytes",
        rd.cfg.cache.kv_cache_memory_bytes,
    )
    prefix = _prefix_caching(spec, rd)
    preprocessor = model_source.preprocessor if model_source is not None else None
    mm_limits, skip_mm, shape = multimodal_profile(
        shape, version, rd.cfg.multimodal, rd.bad, rd.notes, preprocessor
    )
    settings = replace(
        rd.cfg.settings(),
        # the two flags the operator writes: the plan chooses them
        gpu_memory_utilization=None,
        max_num_seqs=None,
        max_model_len=sz.max_len,
        max_num_batched_tokens=sz.batched,
        block_size=sz.block,
        kv_cache_dtype=sz.kv_dtype,
        dtype=dtype,
        enforce_eager=eager,
        compile_cache=spec.engine.compile_cache,
        max_loras=max_loras,
        max_lora_rank=max_rank,
        data_parallel=dp,
        speculative=speculative,
        draft_model=draft,
        enable_prefix_caching=prefix,
        auto_max_model_len=sz.auto_len,
        mm_limits=mm_limits,
        skip_mm_profiling=skip_mm,
    )
    hr, ro = spec.headroom, spec.rollout
    inp = PlanInput(
        model=shape,
        gpu=gpu,
        tp=int(sz.tp),
        pp=int(sz.pp),
        engine=settings,
        workload=_workload(spec),
        headroom=Headroom(hr.operational_fraction, hr.kv_safety_fraction, hr.recovery_replicas),
        rollout=RolloutInput(ro.min_replicas, ro.max_replicas, spare_gpus, hpa_min_replicas),
        max_num_seqs_cap=spec.engine.max_num_seqs_cap,
        kv_pool_bytes=kv_bytes,
        notes=tuple(rd.notes),
        sizing_rule=spec.policy.sizing.lower(),
        preemption_target=spec.policy.preemption_target,
        hbm_efficiency=spec.hardware.hbm_efficiency,
    )
    unsupported = tuple({u.name: u for u in reversed(rd.bad)}.values())[::-1]
    return Resolved(
        inp,
        version,
        source,
        rd.running,
        tuple(rd.conflicts),
        rd.index,
        unsupported,
        tuple(rd.notes),
        model_source,
        rd.cfg,
    )


#: per-GPU memory above this is not a GPU (the largest today have 288 GB)
MAX_GPU_MEMORY_GIB = 4096.0


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
    if spec.model.max_loras > MAX_LORAS:
        raise ResolveError(
            "spec.model.maxLoras", f"must be at most {MAX_LORAS}, got {spec.model.max_loras}"
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
