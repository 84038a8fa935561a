"""One reader for a vLLM launch: :func:`read_engine` turns the flags and ``VLLM_*`` variables of a
``vllm serve`` command line into an :class:`EngineConfig`, a record of per-area settings shaped
like vLLM's own ``vllm/config/*.py`` (``ModelConfig``, ``CacheConfig``, ``ParallelConfig``,
``SchedulerConfig``, ``LoRAConfig``, ``SpeculativeConfig``, ``MultiModalConfig``,
``CompilationConfig``, ``KVTransferConfig``).

A container's command/args/env (``resolve``) and the what-if flags of ``plan --model`` (written
as the ``vllm serve`` flags they stand for, ``cli/flags.py::whatif_vllm_args``) are both read
here, so a what-if is sized exactly as a container carrying those flags.

Each field is typed, bounded and documented where it is declared. A value vLLM would refuse is
refused naming the flag: a value that is not a number is a :class:`~.vllm_flags.Unsupported`
in :attr:`EngineConfig.refused` (``Supported=False``), a number outside the field's bounds an
:class:`EngineConfigError`. ``None`` means the flag was not given (vLLM's default applies).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Final

from ..vocab import DTYPE_ALIASES, DTYPE_BYTES
from .vllm import EngineSettings
from .vllm_args import flag_int, read_flags
from .vllm_flags import (
    SpeculativeConfig,
    Unsupported,
    classify,
    cuda_graphs_off,
    is_int,
    parse_json_flag,
    parse_speculative_config,
)
from .vllm_mm import parse_limit_mm_per_prompt

#: the longest context of any model (Llama 4 Scout: 10M tokens); the CRD's bound too
MAX_MODEL_LEN: Final = 10_000_000
#: tokens per scheduler step; vLLM's defaults are 2k-16k, long-context prefill runs use ~1M
MAX_BATCHED_TOKENS: Final = 10_000_000
#: sequences per replica
MAX_NUM_SEQS: Final = 1 << 20
#: GPUs per tensor- or pipeline-parallel group (the CRD's bound too)
MAX_PARALLEL: Final = 64
#: data-parallel engines per pod
MAX_DATA_PARALLEL: Final = 1024
#: tokens per KV block (vLLM's are 16-256; a few kernels take 1024)
MAX_BLOCK_SIZE: Final = 1024
#: LoRA adapters per batch (the CRD's spec.model.maxLoras bound too)
MAX_LORAS: Final = 1024
#: LoRA rank: vLLM's largest MaxLoRARanks value (config/lora.py, 0.11-0.33)
MAX_LORA_RANK: Final = 512
#: bytes of a --kv-cache-memory-bytes pool per GPU (64 TiB: no GPU has more)
MAX_KV_CACHE_BYTES: Final = 1 << 46


class EngineConfigError(ValueError):
    """A flag's value is outside what vLLM (or any real GPU) accepts; ``flag`` names it."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag
        self.message = message


def _bounded(flag: str, high: float) -> Any:
    """A setting read from ``flag``, None when not given, else in (0, ``high``]."""
    return field(default=None, metadata={"flag": flag, "high": high})


class _Bounded:
    """Checks each field declared with :func:`_bounded` on construction."""

    __slots__ = ()

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            high = f.metadata.get("high")
            value = getattr(self, f.name)
            if high is not None and value is not None and not 0 < value <= high:
                top = int(high) if float(high).is_integer() else high
                raise EngineConfigError(f.metadata["flag"], f"{value} is outside (0, {top}]")


@dataclass(frozen=True, slots=True)
class ModelSettings(_Bounded):
    """vLLM's ``config/model.py::ModelConfig``: what is served and how long a sequence may be."""

    #: the positional MODEL (or ``--model``) as written
    model: str | None = None
    #: ``--revision``: the Hub revision of the weights
    revision: str | None = None
    #: ``--dtype``: the weights' dtype, aliases resolved (``half`` is float16); None: auto
    dtype: str | None = None
    #: ``--quantization`` as written (the checkpoint's own method is read from its config)
    quantization: str | None = None
    #: ``--max-model-len`` (human_readable_int: ``32k`` is 32000); None: the model's length or,
    #: with :attr:`auto_max_model_len`, fitted to the KV pool; a value ≤ 0 other than -1 reads
    #: as None
    max_model_len: int | None = _bounded("--max-model-len", MAX_MODEL_LEN)
    #: ``--max-model-len -1`` (or ``auto``, 0.3x): the longest context the KV pool holds
    auto_max_model_len: bool = False
    #: ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``: a length past the model's own is allowed
    allow_long_max_model_len: bool = False


@dataclass(frozen=True, slots=True)
class CacheSettings(_Bounded):
    """vLLM's ``config/cache.py::CacheConfig``: the KV cache and the memory it may take."""

    #: ``--block-size``: tokens per KV block; None: the attention backend's
    block_size: int | None = _bounded("--block-size", MAX_BLOCK_SIZE)
    #: ``--kv-cache-dtype`` as written; None: auto (the model dtype)
    kv_cache_dtype: str | None = None
    #: ``--gpu-memory-utilization``: CacheConfig's gt=0, le=1 field
    gpu_memory_utilization: float | None = _bounded("--gpu-memory-utilization", 1.0)
    #: ``--kv-cache-memory-bytes`` (0.11+): the KV pool per GPU, the utilization ignored
    kv_cache_memory_bytes: int | None = _bounded("--kv-cache-memory-bytes", MAX_KV_CACHE_BYTES)
    #: ``--enable-prefix-caching`` / ``--no-enable-prefix-caching``; None: vLLM's default
    enable_prefix_caching: bool | None = None


@dataclass(frozen=True, slots=True)
class ParallelSettings(_Bounded):
    """vLLM's ``config/parallel.py::ParallelConfig``."""

    #: ``--tensor-parallel-size``; None: 1
    tensor_parallel_size: int | None = _bounded("--tensor-parallel-size", MAX_PARALLEL)
    #: ``--pipeline-parallel-size``; None: 1
    pipeline_parallel_size: int | None = _bounded("--pipeline-parallel-size", MAX_PARALLEL)
    #: ``--data-parallel-size``: engines per pod; None: 1
    data_parallel_size: int | None = _bounded("--data-parallel-size", MAX_DATA_PARALLEL)
    #: ``--enable-expert-parallel``: MoE experts split over TP × DP ranks
    enable_expert_parallel: bool = False


@dataclass(frozen=True, slots=True)
class SchedulerSettings(_Bounded):
    """vLLM's ``config/scheduler.py::SchedulerConfig``."""

    #: ``--max-num-seqs``: sequences per engine step; None: the version's batch default
    max_num_seqs: int | None = _bounded("--max-num-seqs", MAX_NUM_SEQS)
    #: ``--max-num-batched-tokens``: tokens per step; None: the version's batch default
    max_num_batched_tokens: int | None = _bounded("--max-num-batched-tokens", MAX_BATCHED_TOKENS)
    #: ``--enable-chunked-prefill`` / ``--no-enable-chunked-prefill``; None: vLLM's default
    enable_chunked_prefill: bool | None = None
    #: ``--async-scheduling`` / ``--no-async-scheduling``; None: vLLM's default (on from 0.26)
    async_scheduling: bool | None = None
    #: ``--performance-mode`` (0.3x); None: balanced
    performance_mode: str | None = None


@dataclass(frozen=True, slots=True)
class LoraSettings(_Bounded):
    """vLLM's ``config/lora.py::LoRAConfig`` (adapter slots exist only with ``--enable-lora``)."""

    #: ``--enable-lora``
    enable_lora: bool = False
    #: ``--max-loras``: adapters per batch; None: LoRAConfig's default, 1
    max_loras: int | None = _bounded("--max-loras", MAX_LORAS)
    #: ``--max-lora-rank``; None: LoRAConfig's default, 16
    max_lora_rank: int | None = _bounded("--max-lora-rank", MAX_LORA_RANK)
    #: ``--max-cpu-loras``: adapters cached in host memory (no GPU bytes)
    max_cpu_loras: int | None = _bounded("--max-cpu-loras", MAX_NUM_SEQS)

    @property
    def slots(self) -> tuple[int, int]:
        """(max_loras, max_lora_rank) of the GPU's adapter slots: (0, 16) without --enable-lora."""
        if not self.enable_lora:
            return 0, 16
        return self.max_loras or 1, self.max_lora_rank or 16


@dataclass(frozen=True, slots=True)
class SpeculativeSettings:
    """vLLM's ``config/speculative.py::SpeculativeConfig``."""

    #: ``--speculative-config`` read (None: not given, or refused)
    config: SpeculativeConfig | None = None


@dataclass(frozen=True, slots=True)
class MultimodalSettings:
    """vLLM's ``config/multimodal.py::MultiModalConfig`` (the encoder profile's inputs)."""

    #: ``--limit-mm-per-prompt`` as written (the options form is read from it)
    limit_mm_per_prompt: str | None = None
    #: its item count per modality (None: not given, or refused: 999 each in vLLM)
    limits: Mapping[str, int] | None = None
    #: ``--skip-mm-profiling``: profile_run runs no encoder
    skip_mm_profiling: bool = False
    #: ``--mm-processor-kwargs`` as written (JSON)
    mm_processor_kwargs: str | None = None

    @property
    def counts(self) -> tuple[tuple[str, int], ...] | None:
        """:attr:`limits` as EngineSettings.mm_limits holds them (sorted pairs)."""
        return tuple(sorted(self.limits.items())) if self.limits is not None else None


@dataclass(frozen=True, slots=True)
class CompilationSettings(_Bounded):
    """vLLM's ``config/compilation.py::CompilationConfig`` and ``--enforce-eager``."""

    #: ``--enforce-eager``
    enforce_eager: bool = False
    #: the optimization level turns CUDA graphs off (``-O0``; 0.11's ``-O`` other than 3):
    #: :func:`~.vllm_flags.cuda_graphs_off`
    level_without_graphs: bool = False
    #: ``cudagraph_capture_sizes`` of ``--compilation-config``
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    #: ``max_cudagraph_capture_size`` of ``--compilation-config``: the largest batch captured
    #: (vLLM caps it at max_num_batched_tokens)
    max_cudagraph_capture_size: int | None = _bounded("--compilation-config", MAX_BATCHED_TOKENS)
    #: ``"cudagraph_mode": "NONE"`` in ``--compilation-config``
    cudagraph_mode_none: bool = False
    #: ``cudagraph_mode`` of ``--compilation-config``, upper-cased as vLLM parses it
    #: (``CompilationConfig.validate_cudagraph_mode_before``); None: the version's default
    cudagraph_mode: str | None = None

    @property
    def eager(self) -> bool:
        """No CUDA graph is captured."""
        return self.enforce_eager or self.level_without_graphs or self.cudagraph_mode_none


@dataclass(frozen=True, slots=True)
class KvTransferSettings:
    """vLLM's ``config/kv_transfer.py::KVTransferConfig``."""

    #: ``--kv-transfer-config`` given
    enabled: bool = False
    #: its ``kv_connector``
    connector: str | None = None


@dataclass(frozen=True, slots=True)
class EnvSettings:
    """The ``VLLM_*`` variables that move memory (``vllm/envs.py``)."""

    #: ``VLLM_USE_V1``: "v0" for 0, "v1" for 1, None unset (the version's default engine)
    engine: str | None = None
    #: ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``; None: the version's default
    estimate_cuda_graphs: bool | None = None
    #: ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE``
    chunked_local_hybrid: bool | None = None
    #: ``VLLM_USE_V2_MODEL_RUNNER``: its integer as a choice of runner; None unset
    v2_model_runner: bool | None = None


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything a ``vllm serve`` launch says that the plan reads, by area."""

    #: the vLLM release the flags are read against
    version: str
    model: ModelSettings = ModelSettings()
    cache: CacheSettings = CacheSettings()
    parallel: ParallelSettings = ParallelSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    lora: LoraSettings = LoraSettings()
    speculative: SpeculativeSettings = SpeculativeSettings()
    multimodal: MultimodalSettings = MultimodalSettings()
    compilation: CompilationSettings = CompilationSettings()
    kv_transfer: KvTransferSettings = KvTransferSettings()
    env: EnvSettings = EnvSettings()
    #: the flags as read (name without dashes → last value), for the rewrite and the log checks
    flags: Mapping[str, str] = field(default_factory=dict)
    #: flags and variables the plan cannot honour, in the order found (Supported=False)
    refused: tuple[Unsupported, ...] = ()

    def settings(self) -> EngineSettings:
        """The :class:`~.vllm.EngineSettings` of this launch (the draft model's shape, resolved
        from a model source, and a ``--kv-cache-memory-bytes`` pool, the plan's
        ``kv_pool_bytes``, are the caller's)."""
        max_loras, max_rank = self.lora.slots
        return EngineSettings(
            version=self.version,
            engine=self.env.engine,
            gpu_memory_utilization=self.cache.gpu_memory_utilization,
            max_model_len=self.model.max_model_len,
            max_num_seqs=self.scheduler.max_num_seqs,
            max_num_batched_tokens=self.scheduler.max_num_batched_tokens,
            block_size=self.cache.block_size,
            kv_cache_dtype=self.cache.kv_cache_dtype or "auto",
            dtype=self.model.dtype or "auto",
            enforce_eager=self.compilation.eager,
            enable_chunked_prefill=self.scheduler.enable_chunked_prefill,
            max_loras=max_loras,
            max_lora_rank=max_rank,
            data_parallel=self.parallel.data_parallel_size or 1,
            expert_parallel=self.parallel.enable_expert_parallel,
            estimate_cuda_graphs=self.env.estimate_cuda_graphs,
            use_v2_model_runner=self.env.v2_model_runner,
            speculative=self.speculative.config,
            enable_prefix_caching=self.cache.enable_prefix_caching,
            kv_transfer=self.kv_transfer.enabled,
            kv_connector=self.kv_transfer.connector,
            performance_mode=self.scheduler.performance_mode or "balanced",
            cudagraph_capture_sizes=self.compilation.cudagraph_capture_sizes,
            max_cudagraph_capture_size=self.compilation.max_cudagraph_capture_size,
            cudagraph_mode=self.compilation.cudagraph_mode,
            auto_max_model_len=self.model.auto_max_model_len,
            async_scheduling=self.scheduler.async_scheduling,
            chunked_local_hybrid=self.env.chunked_local_hybrid,
            allow_long_max_model_len=self.model.allow_long_max_model_len,
            mm_limits=self.multimodal.counts,
            skip_mm_profiling=self.multimodal.skip_mm_profiling,
        )


#: the ``VLLM_USE_V1`` values and the engine they choose (envs.py: "0"/"1")
_ENGINES: Final[Mapping[str, str]] = MappingProxyType({"0": "v0", "1": "v1"})
#: the truthy spellings of a boolean ``VLLM_*`` variable the plan reads
_ENV_TRUE: Final = ("1", "true")


def argv_flags(argv: Sequence[str]) -> dict[str, str]:
    """The flags of ``vllm serve`` followed by ``argv``, read as a container's are."""
    return read_flags({"name": "vllm", "command": ["vllm", "serve"], "args": list(argv)})


class _Reader:
    """The flags of one launch, read once each, with the refusals found on the way."""

    def __init__(self, flags: Mapping[str, str], refused: list[Unsupported]) -> None:
        self.flags = flags
        self.refused = refused

    def has(self, key: str) -> bool:
        return key in self.flags

    def refuses(self, key: str) -> bool:
        return any(u.name == f"--{key}" for u in self.refused)

    def refuse(self, key: str, why: str) -> None:
        if not self.refuses(key):
            self.refused.append(Unsupported(f"--{key}", why))

    def text(self, key: str) -> str | None:
        return self.flags.get(key)

    def integer(self, key: str) -> int | None:
        """An integer flag as vLLM reads it (human_readable_int where it does)."""
        value = self.flags.get(key)
        if value is None:
            return None
        try:
            return flag_int(key, value)
        except ValueError:
            self.refuse(key, f"value {value!r} is not an integer")
            return None

    def number(self, key: str) -> float | None:
        value = self.flags.get(key)
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            self.refuse(key, f"value {value!r} is not a number")
            return None

    def boolean(self, key: str) -> bool | None:
        """A BooleanOptionalAction flag: ``--key`` True, ``--no-key`` False, absent None."""
        if key in self.flags:
            return self.flags[key].lower() != "false"
        if f"no-{key}" in self.flags:
            return False
        return None

    def json(self, key: str) -> dict[str, Any] | None:
        """A JSON-object flag not refused already (classify checked its value)."""
        value = self.flags.get(key)
        if value is None or not value.strip().startswith("{") or self.refuses(key):
            return None
        return parse_json_flag(key, value)


def _model(r: _Reader, env: Mapping[str, str | None]) -> ModelSettings:
    dtype = r.text("dtype")
    if dtype == "auto":
        dtype = None
    elif dtype is not None:
        dtype = DTYPE_ALIASES.get(dtype, dtype)
        if dtype not in DTYPE_BYTES:
            r.refuse("dtype", f"dtype {r.text('dtype')!r} is not modelled")
            dtype = None
    raw_len = r.text("max-model-len")
    auto = raw_len in ("-1", "auto")
    length = None if auto else r.integer("max-model-len")
    return ModelSettings(
        model=r.text("model"),
        revision=r.text("revision"),
        dtype=dtype,
        quantization=r.text("quantization"),
        max_model_len=length if length is not None and length > 0 else None,
        auto_max_model_len=auto,
        allow_long_max_model_len=env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") in _ENV_TRUE,
    )


def _compilation(r: _Reader, version: str) -> CompilationSettings:
    cfg = r.json("compilation-config") or {}
    sizes = cfg.get("cudagraph_capture_sizes")
    top = cfg.get("max_cudagraph_capture_size")
    mode = cfg.get("cudagraph_mode")
    return CompilationSettings(
        enforce_eager=r.boolean("enforce-eager") is True,
        level_without_graphs=cuda_graphs_off(r.flags, version),
        cudagraph_capture_sizes=tuple(int(x) for x in sizes) if isinstance(sizes, list) else None,
        max_cudagraph_capture_size=int(top) if isinstance(top, int) else None,
        cudagraph_mode_none=str(cfg.get("cudagraph_mode", "")).upper() == "NONE",
        cudagraph_mode=str(mode).upper() if mode is not None else None,
    )


def _multimodal(r: _Reader) -> MultimodalSettings:
    limits = None
    raw = r.text("limit-mm-per-prompt")
    if raw is not None and not r.refuses("limit-mm-per-prompt"):
        limits = MappingProxyType(parse_limit_mm_per_prompt(raw))
    return MultimodalSettings(
        limit_mm_per_prompt=raw,
        limits=limits,
        skip_mm_profiling=r.boolean("skip-mm-profiling") is True,
        mm_processor_kwargs=r.text("mm-processor-kwargs"),
    )


def _env(env: Mapping[str, str | None]) -> EnvSettings:
    est = env.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS")
    hybrid = env.get("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE")
    runner = env.get("VLLM_USE_V2_MODEL_RUNNER")
    return EnvSettings(
        engine=_ENGINES.get(env.get("VLLM_USE_V1") or ""),
        estimate_cuda_graphs=None if est is None else est not in ("0", "false", "False"),
        chunked_local_hybrid=None if hybrid is None else hybrid in _ENV_TRUE,
        # envs.py reads it with int(); any other value is refused by classify (None here)
        v2_model_runner=None if runner is None or not is_int(runner) else bool(int(runner)),
    )


def read_engine(
    args: Mapping[str, str] | Sequence[str], env: Mapping[str, str | None], version: str
) -> EngineConfig:
    """The settings of a ``vllm serve`` launch of ``version``: ``args`` are the flags as
    :func:`.vllm_args.read_flags` reads a container (name → last value), or the argv after
    ``vllm serve``; ``env`` the container's variables (None: set at run time). The flags are
    checked against that release's own first (:func:`~.vllm_flags.classify`: a flag it does
    not have, an unmodelled one or value), then read area by area. Raises
    :class:`EngineConfigError` for a number outside its field's bounds."""
    flags = dict(args) if isinstance(args, Mapping) else argv_flags(args)
    r = _Reader(flags, classify(flags, env, version))
    model = _model(r, env)
    parallel = ParallelSettings(
        tensor_parallel_size=r.integer("tensor-parallel-size"),
        pipeline_parallel_size=r.integer("pipeline-parallel-size"),
        data_parallel_size=r.integer("data-parallel-size"),
        enable_expert_parallel=r.boolean("enable-expert-parallel") is True,
    )
    cache = CacheSettings(
        block_size=r.integer("block-size"),
        kv_cache_dtype=r.text("kv-cache-dtype"),
        gpu_memory_utilization=r.number("gpu-memory-utilization"),
        kv_cache_memory_bytes=r.integer("kv-cache-memory-bytes"),
        enable_prefix_caching=r.boolean("enable-prefix-caching"),
    )
    scheduler = SchedulerSettings(
        max_num_seqs=r.integer("max-num-seqs"),
        max_num_batched_tokens=r.integer("max-num-batched-tokens"),
        enable_chunked_prefill=r.boolean("enable-chunked-prefill"),
        async_scheduling=r.boolean("async-scheduling"),
        performance_mode=r.text("performance-mode"),
    )
    lora = LoraSettings(
        enable_lora=r.boolean("enable-lora") is True,
        max_loras=r.integer("max-loras"),
        max_lora_rank=r.integer("max-lora-rank"),
        max_cpu_loras=r.integer("max-cpu-loras"),
    )
    speculative = None
    if r.has("speculative-config") and not r.refuses("speculative-config"):
        speculative = parse_speculative_config(flags["speculative-config"])
    transfer = r.json("kv-transfer-config")
    connector = transfer.get("kv_connector") if transfer is not None else None
    return EngineConfig(
        version=version,
        model=model,
        cache=cache,
        parallel=parallel,
        scheduler=scheduler,
        lora=lora,
        speculative=SpeculativeSettings(speculative),
        multimodal=_multimodal(r),
        compilation=_compilation(r, version),
        kv_transfer=KvTransferSettings(r.has("kv-transfer-config"), str(connector or "") or None),
        env=_env(env),
        flags=MappingProxyType(flags),
        refused=tuple(r.refused),
    )


#: the flags the operator writes that a pod may run at other values than the plan's
_WRITTEN: Final = (
    "--gpu-memory-utilization",
    "--max-num-seqs",
    "--max-model-len",
    "--kv-cache-memory-bytes",
)


def at_running_flags(settings: EngineSettings, flags: Mapping[str, str]) -> EngineSettings | None:
    """``settings`` at the values a pod runs of the flags the operator writes
    (--gpu-memory-utilization, --max-num-seqs, --max-model-len, --kv-cache-memory-bytes), read
    by :func:`read_engine` against ``settings.version``; None when vLLM could not read one of
    them (not a number, or out of bounds)."""
    try:
        cfg = read_engine(flags, {}, settings.version)
    except EngineConfigError:
        return None
    if any(u.name in _WRITTEN for u in cfg.refused):
        return None
    changed: dict[str, Any] = {
        "gpu_memory_utilization": cfg.cache.gpu_memory_utilization,
        "max_num_seqs": cfg.scheduler.max_num_seqs,
        "max_model_len": cfg.model.max_model_len,
        "kv_cache_memory_bytes": cfg.cache.kv_cache_memory_bytes,
    }
    return replace(settings, **{k: v for k, v in changed.items() if v is not None})
