"""Every vLLM flag and ``VLLM_*`` environment variable of a container, classified.

The ledger plans on the numbers vLLM will use. A flag that moves vLLM's memory and that the
ledger does not read would make the plan silently wrong, and the operator would then write that
wrong number into the Deployment. So each flag and variable is one of:

* **modelled** — read into the plan (:data:`MODELLED_FLAGS`, :data:`MODELLED_ENV`); some only for
  some values (``--load-format``, ``--compilation-config`` keys, ``--speculative-config``
  methods): the others are refused;
* **neutral** — known not to change GPU memory or capacity (:data:`NEUTRAL_FLAGS`,
  :data:`NEUTRAL_ENV`): an explicit list, so a new vLLM flag is refused until someone classifies
  it;
* **refused** — everything else, including flags that are known to move memory but are not
  modelled (:data:`REFUSED_FLAGS` says why for the known ones) and flags nobody has classified.

A refusal is a :class:`Unsupported` naming the flag; the plan then says ``Supported=False`` and
the operator does not patch. Names are canonical (:func:`.vllm_args.normalise_flag`).

Before the classification, each flag is looked up in the table generated from vLLM's source
(:mod:`.vllm_flag_table`): a flag the container's vLLM release does not have is refused with
vLLM's words ("vLLM 0.19.0 has no --swap-space; removed in 0.18.0"), since ``vllm serve`` would
not start. Every flag of the table is in exactly one list: modelled, neutral, refused with a
reason, or refused as not yet reviewed (:data:`UNREVIEWED_FLAGS`); tests check both.

``-O`` (read as the pseudo-flag ``O``) is what vLLM's ``FlexibleArgumentParser.parse_args``
makes of it in that release: ``--optimization-level N`` from 0.12, ``--compilation-config
'{"level": N}'`` in 0.11 (:class:`FlagRules`, :func:`optimization_level`,
:func:`cuda_graphs_off`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..units import GiB, KiB, MiB, TiB
from ..vocab import KV_CACHE_DTYPES
from .vllm_flag_table import flag_table
from .vllm_mm import parse_limit_mm_per_prompt
from .vllm_rules import CUDAGRAPH_MODES, DEFAULT_CUDAGRAPH_MODE, VllmRules

__all__ = [
    "FlagRules",
    "MODELLED_ENV",
    "MODELLED_FLAGS",
    "NEUTRAL_ENV",
    "NEUTRAL_FLAGS",
    "REFUSED_FLAGS",
    "UNREVIEWED_FLAGS",
    "SpeculativeConfig",
    "Unsupported",
    "classify",
    "cuda_graphs_off",
    "human_readable_int",
    "optimization_level",
    "parse_json_flag",
    "parse_speculative_config",
]


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A flag (``--name``) or variable (``VLLM_X``) the plan cannot honour, and why."""

    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.name}: {self.why}"


#: Flags read into the plan (resolve.py). Value-dependent ones are checked in :func:`classify`.
MODELLED_FLAGS: Final = frozenset(
    {
        "model",
        "dtype",
        "quantization",
        "tensor-parallel-size",
        "pipeline-parallel-size",
        "data-parallel-size",
        "enable-expert-parallel",
        "max-model-len",
        "kv-cache-dtype",
        "max-num-batched-tokens",
        "max-num-seqs",
        "block-size",
        "enforce-eager",
        "gpu-memory-utilization",
        "kv-cache-memory-bytes",
        "enable-lora",
        "max-loras",
        "max-lora-rank",
        "max-cpu-loras",
        "speculative-config",
        "enable-prefix-caching",
        "no-enable-prefix-caching",
        "kv-transfer-config",
        "performance-mode",
        # the multimodal encoder profile (engines/vllm_mm.py; resolve.py refuses what it cannot
        # size: a tower it does not model, --mm-processor-kwargs on a profiled tower)
        "limit-mm-per-prompt",
        "skip-mm-profiling",
        "no-skip-mm-profiling",
        "mm-encoder-tp-mode",
        "mm-processor-kwargs",
        "compilation-config",
        "enable-chunked-prefill",
        "no-enable-chunked-prefill",
        "async-scheduling",
        "no-async-scheduling",
        "load-format",
        "lora-dtype",
        # -O / --optimization-level: CUDA graphs off at O0 (cuda_graphs_off), else captured
        "optimization-level",
    }
)

#: Flags known not to change vLLM's GPU memory or per-replica capacity (server, logging,
#: tokenizer, download, parsers, host-side caches). Checked by name against vLLM's
#: ``arg_utils.py::EngineArgs.add_cli_args`` and ``entrypoints/openai/cli_args.py`` (0.11–0.33).
NEUTRAL_FLAGS: Final = frozenset(
    {
        # OpenAI server and frontend (entrypoints/openai/cli_args.py::make_arg_parser)
        "host",
        "port",
        "uds",
        "uvicorn-log-level",
        "disable-uvicorn-access-log",
        "allow-credentials",
        "allowed-origins",
        "allowed-methods",
        "allowed-headers",
        "api-key",
        "lora-modules",
        "chat-template",
        "chat-template-content-format",
        "trust-request-chat-template",
        "response-role",
        "ssl-keyfile",
        "ssl-certfile",
        "ssl-ca-certs",
        "ssl-cert-reqs",
        "enable-ssl-refresh",
        "root-path",
        "middleware",
        "return-tokens-as-token-ids",
        "disable-frontend-multiprocessing",
        "enable-request-id-headers",
        "enable-auto-tool-choice",
        "exclude-tools-when-tool-choice-none",
        "tool-call-parser",
        "tool-parser-plugin",
        "tool-server",
        "log-config-file",
        "max-log-len",
        "disable-fastapi-docs",
        "enable-prompt-tokens-details",
        "enable-server-load-tracking",
        "enable-force-include-usage",
        "enable-tokenizer-info-endpoint",
        "enable-log-outputs",
        "enable-log-requests",
        "disable-log-requests",
        "disable-log-stats",
        "h11-max-incomplete-event-size",
        "h11-max-header-count",
        "log-error-stack",
        "api-server-count",
        "served-model-name",
        "reasoning-parser",
        "enable-reasoning",
        "headless",
        "data-parallel-address",
        "data-parallel-rpc-port",
        "data-parallel-backend",
        "data-parallel-hybrid-lb",
        "data-parallel-external-lb",
        "data-parallel-start-rank",
        "distributed-executor-backend",
        # model source, tokenizer, download (ModelConfig/LoadConfig fields without memory effect)
        "tokenizer",
        "tokenizer-mode",
        "tokenizer-revision",
        "revision",
        "code-revision",
        "trust-remote-code",
        "download-dir",
        "config-format",
        "seed",
        "hf-token",
        "skip-tokenizer-init",
        "ignore-patterns",
        "use-tqdm-on-load",
        "pt-load-map-location",
        "max-parallel-loading-workers",
        "model-loader-extra-config",
        "safetensors-load-strategy",
        "generation-config",
        "override-generation-config",
        "max-logprobs",
        "logprobs-mode",
        # scheduling that does not change the pool or the profile's shape
        "scheduling-policy",
        "long-prefill-token-threshold",
        "max-num-partial-prefills",
        "max-long-partial-prefills",
        "disable-chunked-mm-input",
        "disable-cascade-attn",
        "stream-interval",
        "prefix-caching-hash-algo",
        "calculate-kv-scales",
        "structured-outputs-config",
        "guided-decoding-backend",
        "reasoning-config",
        # host memory only (V0 swap space; the multimodal processor cache, which
        # config/multimodal.py sizes per API and engine-core process in host RAM)
        "swap-space",
        "mm-processor-cache-gb",
        "mm-processor-cache-type",
        "mm-shm-cache-max-object-size-mb",
        "media-io-kwargs",
        "allowed-local-media-path",
        "allowed-media-domains",
        "interleave-mm-strings",
        # V0-era switches without a memory effect (0.6–0.10)
        "use-v2-block-manager",
        "disable-async-output-proc",
        "engine-use-ray",
        "worker-use-ray",
        "disable-mm-preprocessor-cache",
        # server, logging, networking and queue limits of 0.12–0.33 (entrypoints/*/cli_args.py,
        # config/observability.py, config/scheduler.py queue caps: no GPU memory)
        "aggregate-engine-logging",
        "anthropic-disabled-thinking-effort",
        "cohere-format",
        "cohere-is-reasoning-model",
        "cpu-distributed-timeout-seconds",
        "custom-histogram-buckets",
        "cudagraph-metrics",
        "data-parallel-rank",
        "data-parallel-supervisor-port",
        "default-chat-template-kwargs",
        "disable-access-log-for-endpoints",
        "distributed-timeout-seconds",
        "dp-supervisor-probe-failure-threshold",
        "dp-supervisor-probe-interval-s",
        "dp-supervisor-probe-timeout-s",
        "enable-layerwise-nvtx-tracing",
        "enable-log-deltas",
        "enable-logging-iteration-details",
        "enable-offline-docs",
        "enable-per-request-metrics",
        "fail-on-environ-validation",
        "grpc",
        "grpc-port",
        "jit-monitor-mode",
        "jit-monitor-verbose",
        "kv-cache-metrics-sample",
        "kv-events-config",
        "log-level",
        "logging-config",
        "master-addr",
        "master-port",
        "max-num-queued-reqs",
        "max-num-queued-tokens",
        "mm-hasher-algorithm",
        "numa-bind",
        "numa-bind-cpus",
        "numa-bind-nodes",
        "per-request-spec-decode-metrics",
        "profiler-config",
        "reasoning-effort-map",
        "reasoning-parser-plugin",
        "renderer-num-workers",
        "safetensors-prefetch-block-size",
        "safetensors-prefetch-num-threads",
        "shutdown-timeout",
        "sse-keep-alive-interval",
        "ssl-ciphers",
        "tokens-only",
        "tool-strict-level",
        "watchdog-config",
        # observability
        "otlp-traces-endpoint",
        "collect-detailed-traces",
        "show-hidden-metrics-for-version",
        "kv-cache-metrics",
        "enable-mfu-metrics",
        "ray-workers-use-nsight",
    }
)

#: Flags known to move memory or capacity that the ledger does not model, and why.
REFUSED_FLAGS: Final[Mapping[str, str]] = {
    "cpu-offload-gb": "moves weights to host memory (weights and bandwidth not modelled)",
    "kv-offloading-size": "adds a host KV tier (not modelled)",
    "kv-offloading-backend": "adds a host KV tier (not modelled)",
    "num-gpu-blocks-override": "overrides the number of KV blocks (not modelled)",
    "enable-sleep-mode": "CuMem allocator pools (not modelled)",
    "disable-sliding-window": "turns sliding-window layers into full attention (not modelled)",
    "hf-overrides": "changes the model config the ledger read",
    "hf-config-path": "reads another model config than the ledger's",
    "config": "a YAML file of further flags the operator cannot read",
    "rope-scaling": "changes the model's context length",
    "rope-theta": "changes the model's rotary settings",
    "max-seq-len-to-capture": "changes CUDA-graph capture (not modelled)",
    "cuda-graph-sizes": "changes CUDA-graph capture sizes (use --compilation-config)",
    "enable-eplb": "redundant experts and EPLB buffers (not modelled)",
    "eplb-config": "redundant experts and EPLB buffers (not modelled)",
    "num-redundant-experts": "redundant experts (not modelled)",
    "expert-placement-strategy": "expert placement (not modelled)",
    "all2all-backend": "expert-parallel all-to-all buffers (not modelled)",
    "enable-dbo": "dual-batch overlap micro-batches (not modelled)",
    "decode-context-parallel-size": "context parallelism (not modelled)",
    "data-parallel-size-local": "DP ranks per pod other than --data-parallel-size (not modelled)",
    "worker-cls": "a custom worker (memory profile unknown)",
    "worker-extension-cls": "a custom worker extension (memory profile unknown)",
    "scheduler-cls": "a custom scheduler (capacity unknown)",
    "fully-sharded-loras": "sharded LoRA slots (not modelled)",
    "enable-lora-bias": "LoRA bias slots (not modelled)",
    "max-lora-extra-vocab-size": "extra LoRA vocabulary rows (not modelled)",
    "long-lora-scaling-factors": "long-context LoRA (not modelled)",
    "enable-multimodal-encoder-data-parallel": "encoder data parallel (not modelled)",
    "mm-encoder-attn-backend": (
        "another attention kernel for the vision tower (the encoder profile assumes vLLM's "
        "default, without patches² scores)"
    ),
    "enable-mm-embeds": "embedding inputs keep encoder-cache space in the profile (not modelled)",
    "video-pruning-rate": "changes the video tokens per item (not modelled)",
    "mamba-ssm-cache-dtype": "Mamba state dtype (not modelled)",
    "mamba-cache-dtype": "Mamba state dtype (not modelled)",
    "mamba-block-size": "Mamba block size (not modelled)",
    "mamba-cache-mode": "Mamba cache mode (not modelled)",
    "pooler-config": "a pooling model (the ledger plans generative models)",
    "override-pooler-config": "a pooling model (the ledger plans generative models)",
    "task": "a non-generate task changes the profile (not modelled)",
    "runner": "a non-generate runner changes the profile (not modelled)",
    "convert": "converts the model to a pooling model (not modelled)",
    "model-impl": "the Transformers backend has other memory (not modelled)",
    "gpu-memory-utilization-override": "not a vLLM flag the ledger knows",
    "ubatch-size": "micro-batching (not modelled)",
    "disable-custom-all-reduce": "changes the memory taken before vLLM's snapshot (not modelled)",
    "cudagraph-capture-sizes": "CUDA-graph capture sizes (give them in --compilation-config)",
    "max-cudagraph-capture-size": "CUDA-graph capture sizes (give them in --compilation-config)",
    "nnodes": "a replica over several nodes (GPUs per pod not modelled)",
    "node-rank": "a replica over several nodes (GPUs per pod not modelled)",
}
#: vLLM flags (0.11–0.33, from the generated table) not reviewed for their memory effect: refused,
#: each with :data:`UNREVIEWED`, until someone reads vLLM's handling and classifies them
UNREVIEWED: Final = "a vLLM flag not yet reviewed for its memory effect (not modelled)"
UNREVIEWED_FLAGS: Final = frozenset(
    """additional-config allow-deprecated-quantization attention-backend attention-config
    aux-output-config cp-kv-cache-interleave-size cpu-offload-params data-parallel-multi-port-
    external-lb dbo-decode-token-threshold dbo-prefill-token-threshold dcp-comm-backend
    dcp-kv-cache-interleave-size dcp-q-replicate default-mm-loras device-ids diffusion-config
    disable-hybrid-kv-cache-manager disable-nccl-for-dp-synchronization dp-sync-interval
    ec-manager-config ec-transfer-config enable-bf16x3-router-gemm
    enable-mamba-fine-grained-prefix-cache elastic-ep-max-dp-size enable-batch-sharded-sampling
    enable-cumem-allocator enable-elastic-ep enable-ep-weight-filter enable-fault-tolerance
    enable-flash-late-interaction enable-flashinfer-autotune enable-hc-sp
    enable-mamba-cache-stochastic-rounding enable-mamba-shared-prefix-checkpoint
    enable-mixed-moe-lora-format enable-moe-shared-loras enable-nccl-comm-suspend
    enable-prompt-embeds enable-return-routed-experts enable-scale-out enable-shm-tensor-arena
    enable-tower-connector-lora enable-trace-replay engram-config eplb-log-balancedness
    eplb-step-interval eplb-window-size fault-tolerance-config fingerprint-mode fingerprint-value
    gdn-prefill-backend io-processor-plugin ir-op-priority kda-decode-backend kda-prefill-backend
    kernel-config kv-cache-dtype-skip-layers kv-sharing-fast-prefill language-model-only
    linear-backend logits-processor-pattern logits-processors long-prefill-token-threshold-
    adaptive lora-extra-vocab-size lora-target-modules mamba-backend mamba-cache-philox-rounds
    mamba-ssu-algorithm max-lora-cls-labels max-num-active-seqs max-num-scheduled-tokens
    mm-device-do-normalize mm-encoder-attn-dtype mm-encoder-fp8-scale-path
    mm-encoder-fp8-scale-save-margin mm-encoder-fp8-scale-save-path mm-encoder-only
    mm-ipc-gpu-memory-gb mm-processor-device mm-tensor-ipc model-class-overrides moe-backend
    monokernel num-lookahead-slots offload-backend offload-group-size offload-num-in-group
    offload-params offload-prefetch-step override-attention-dtype prefill-context-parallel-size
    prefill-schedule-interval prefix-cache-retention-interval prefix-match-unit
    quantization-config replayssm-buffer-len return-sampling-mask scheduler-reserve-full-isl
    sleep-mode-backend sleep-mode-offload-cudagraph sleep-preserve-parameter-names
    sparse-indexer-topk-backend spec-method spec-model spec-tokens specialize-active-lora
    swa-bounded-replay trust-request-mm-kwargs use-fp64-gumbel use-gpu-for-pooling-score
    use-replayssm video-pruning-method watermark watermark-config weight-transfer-config""".replace(
        "-\n    ", "-"
    ).split()
)

#: ``--load-format`` values that read the same weights into the same layout
#: (config/load.py::LoadConfig.load_format); others (bitsandbytes, gguf, ...) change weights.
_NEUTRAL_LOAD_FORMATS: Final = frozenset(
    {"auto", "pt", "safetensors", "npcache", "fastsafetensors", "runai_streamer", "dummy"}
)
#: ``--compilation-config`` keys that do not move memory; capture sizes and the graph mode are
#: modelled (resolve.py), everything else is refused.
_MODELLED_COMPILATION_KEYS: Final = frozenset(
    {"cudagraph_capture_sizes", "max_cudagraph_capture_size", "cudagraph_mode"}
)
_NEUTRAL_COMPILATION_KEYS: Final = frozenset(
    {"level", "mode", "debug_dump_path", "cache_dir", "compile_sizes", "use_inductor"}
)
#: ``--speculative-config`` methods whose memory is modelled (config/speculative.py):
#: prompt look-up methods hold no weights and no KV; MTP heads come with the checkpoint.
NGRAM_METHODS: Final = frozenset({"ngram", "suffix"})
MTP_METHODS: Final = frozenset(
    {"mtp", "deepseek_mtp", "qwen3_next_mtp", "glm4_moe_mtp", "ernie_mtp", "mimo_mtp"}
)
#: a separate drafter checkpoint (``--speculative-config`` ``model``) whose config is a decoder
#: the ledger sizes: its weights (safetensors headers when it has them) and its attention layers
#: in the KV cache (v1/spec_decode/eagle.py, draft_model.py).
DRAFT_MODEL_METHODS: Final = frozenset({"eagle", "eagle3", "draft_model"})
#: methods vLLM has that the ledger refuses by name: Medusa heads and MLP speculators are not
#: decoder layers (their weights and the graphs around them are not modelled); both are gone
#: from config/speculative.py::SpeculativeMethod in 0.33.
UNMODELLED_SPEC_METHODS: Final = {
    "medusa": "Medusa heads (not decoder layers; their weights are not modelled)",
    "mlp_speculator": "an MLP speculator (not decoder layers; its weights are not modelled)",
}
_SPEC_KEYS: Final = frozenset(
    {
        "method",
        "model",
        "num_speculative_tokens",
        "prompt_lookup_max",
        "prompt_lookup_min",
        "draft_tensor_parallel_size",
        "revision",
        "disable_by_batch_size",
        "suffix_decoding_max_tree_depth",
        "suffix_decoding_max_cached_requests",
        "suffix_decoding_max_spec_factor",
        "suffix_decoding_min_token_prob",
    }
)
#: ``--kv-transfer-config`` connectors that register the KV cache for transfer without a
#: separate GPU buffer (distributed/kv_transfer/kv_connector/factory.py); P2P NCCL and others
#: keep their own GPU buffers and are refused.
_KV_CONNECTORS: Final = frozenset(
    {"NixlConnector", "LMCacheConnectorV1", "OffloadingConnector", "SharedStorageConnector"}
)

#: ``--kv-cache-dtype`` values the ledger sizes (cache/config.py CacheDType; page layouts in
#: ledger/kv.py KV_FORMATS).
_MODELLED_KV_DTYPES: Final = KV_CACHE_DTYPES

#: ``VLLM_*`` variables read into the plan.
MODELLED_ENV: Final = frozenset(
    {
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS",
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
        "VLLM_USE_V1",
        "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE",
        "VLLM_USE_V2_MODEL_RUNNER",
    }
)
#: modelled variables that vLLM parses with ``int()`` (envs.py): any other value fails there
INTEGER_ENV: Final = frozenset({"VLLM_USE_V2_MODEL_RUNNER"})


def is_int(text: str) -> bool:
    """Whether Python's ``int()``, as vLLM's envs.py applies it, accepts ``text``."""
    try:
        int(text)
    except ValueError:
        return False
    return True


#: ``VLLM_*`` variables known not to move memory (vllm/envs.py, 0.11–0.33).
NEUTRAL_ENV: Final = frozenset(
    {
        "VLLM_LOGGING_LEVEL",
        "VLLM_CONFIGURE_LOGGING",
        "VLLM_LOGGING_CONFIG_PATH",
        "VLLM_LOGGING_PREFIX",
        "VLLM_LOGGING_STREAM",
        "VLLM_LOG_STATS_INTERVAL",
        "VLLM_HOST_IP",
        "VLLM_PORT",
        "VLLM_API_KEY",
        "VLLM_NO_USAGE_STATS",
        "VLLM_DO_NOT_TRACK",
        "VLLM_USAGE_SOURCE",
        "VLLM_USAGE_STATS_SERVER",
        "VLLM_CACHE_ROOT",
        "VLLM_CONFIG_ROOT",
        "VLLM_ASSETS_CACHE",
        "VLLM_RPC_TIMEOUT",
        "VLLM_ENGINE_ITERATION_TIMEOUT_S",
        "VLLM_ENGINE_READY_TIMEOUT_S",
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE",
        "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH",
        "VLLM_WORKER_MULTIPROC_METHOD",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
        "VLLM_SERVER_DEV_MODE",
        "VLLM_DEBUG_LOG_API_SERVER_RESPONSE",
        "VLLM_TRACE_FUNCTION",
        "VLLM_RINGBUFFER_WARNING_INTERVAL",
        "VLLM_IMAGE_FETCH_TIMEOUT",
        "VLLM_VIDEO_FETCH_TIMEOUT",
        "VLLM_AUDIO_FETCH_TIMEOUT",
        "VLLM_MEDIA_URL_ALLOW_REDIRECTS",
        "VLLM_USE_MODELSCOPE",
        "VLLM_DISABLE_COMPILE_CACHE",
    }
)

_HUMAN_INT: Final = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL_SUFFIX: Final = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY_SUFFIX: Final = {"K": KiB, "M": MiB, "G": GiB, "T": TiB}


def human_readable_int(text: str) -> int:
    """vLLM's integer flag parser (``engine/arg_utils.py::human_readable_int``, 0.10–0.33):
    a lowercase suffix is decimal (``25.6k`` = 25,600), an uppercase one binary and integral
    (``32K`` = 32,768; ``1.5K`` is an error); otherwise a plain ``int``."""
    value = text.strip()
    match = _HUMAN_INT.fullmatch(value)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL_SUFFIX:
            return int(float(number) * _DECIMAL_SUFFIX[suffix])
        if "." in number:
            raise ValueError(
                f"decimals are not allowed with binary suffixes like {suffix} in {text!r}"
            )
        return int(number) * _BINARY_SUFFIX[suffix]
    return int(value)


def parse_json_flag(name: str, text: str) -> dict[str, Any]:
    """A JSON-object flag value (``--speculative-config '{...}'``); ValueError naming the flag."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--{name}: not a JSON object ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ValueError(f"--{name}: not a JSON object")
    return value


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    """What ``--speculative-config`` asks for (config/speculative.py::SpeculativeConfig)."""

    method: str
    num_speculative_tokens: int | None  # None: MTP's default, the model's MTP layer count
    model: str | None = None
    revision: str | None = None  # the draft model's Hub revision


def parse_speculative_config(text: str) -> SpeculativeConfig:
    """Read ``--speculative-config``. vLLM infers the method from the draft model's name when
    ``method`` is absent (``SpeculativeConfig.__post_init__``); here an absent method with a
    model is ``draft_model``, and ``[ngram]`` as the model means n-gram look-up."""
    cfg = parse_json_flag("speculative-config", text)
    model = cfg.get("model")
    method = cfg.get("method")
    if method is None:
        method = "ngram" if model in ("[ngram]", "ngram") else "draft_model"
    k = cfg.get("num_speculative_tokens")
    if k is None and method in MTP_METHODS:
        # config/speculative.py: MTP defaults num_speculative_tokens to the model's n_predict
        return SpeculativeConfig(str(method), None, None)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError("--speculative-config: num_speculative_tokens must be an integer >= 1")
    if method in NGRAM_METHODS:
        model = None
    rev = cfg.get("revision")
    return SpeculativeConfig(
        str(method),
        k,
        str(model) if model is not None else None,
        str(rev) if rev is not None and model is not None else None,
    )


def _value_problem(name: str, value: str) -> str | None:
    """Why a modelled flag's value is not modelled, or None."""
    if name == "load-format" and value not in _NEUTRAL_LOAD_FORMATS:
        return f"load format {value!r} changes the weights (not modelled)"
    if name == "lora-dtype" and value not in ("auto", "bfloat16", "float16"):
        return f"LoRA dtype {value!r} (not modelled)"
    if name == "compilation-config":
        if re.fullmatch(r"\d", value.strip()):
            return None  # -O3 / --compilation-config 3: the optimisation level only
        try:
            cfg = parse_json_flag(name, value)
        except ValueError as exc:
            return str(exc)
        extra = sorted(set(cfg) - _MODELLED_COMPILATION_KEYS - _NEUTRAL_COMPILATION_KEYS)
        if extra:
            return f"keys {', '.join(extra)} are not modelled"
        return None
    if name == "speculative-config":
        try:
            cfg = parse_json_flag(name, value)
            spec = parse_speculative_config(value)
        except ValueError as exc:
            return str(exc)
        extra = sorted(set(cfg) - _SPEC_KEYS)
        if extra:
            return f"keys {', '.join(extra)} are not modelled"
        if spec.method in UNMODELLED_SPEC_METHODS:
            return f"method {spec.method!r}: {UNMODELLED_SPEC_METHODS[spec.method]}"
        if spec.method not in NGRAM_METHODS | MTP_METHODS | DRAFT_MODEL_METHODS:
            return f"method {spec.method!r} is not modelled"
        if cfg.get("draft_tensor_parallel_size") not in (None, 1):
            return "draft_tensor_parallel_size other than 1 is not modelled"
        return None
    if name == "kv-transfer-config":
        try:
            cfg = parse_json_flag(name, value)
        except ValueError as exc:
            return str(exc)
        connector = cfg.get("kv_connector")
        if connector not in _KV_CONNECTORS:
            return f"connector {connector!r} keeps its own GPU buffers (not modelled)"
        return None
    if name == "limit-mm-per-prompt":
        try:
            parse_limit_mm_per_prompt(value)
        except ValueError as exc:
            return str(exc).removeprefix("--limit-mm-per-prompt: ")
        return None
    if name == "mm-encoder-tp-mode" and value != "weights":
        # config/multimodal.py MMEncoderTPMode: "data" keeps the whole tower on every rank
        return f"mode {value!r} replicates the vision tower on every TP rank (not modelled)"
    if name == "kv-cache-dtype" and value not in _MODELLED_KV_DTYPES:
        why = f"KV dtype {value!r} is not one the ledger sizes"
        # "int8" is a checkpoint's kv_cache_scheme storage type, not a --kv-cache-dtype value
        return why + (" (int8 is not a vLLM KV dtype)" if value == "int8" else "")
    if name == "performance-mode" and value not in ("balanced", "throughput", "interactivity"):
        return f"performance mode {value!r} is not one vLLM defines"
    return None


@dataclass(frozen=True, slots=True)
class FlagRules:
    """The version-dependent flag rules of one vLLM release, in one record (the release's own
    flags and what ``-O`` means come from the table generated from vLLM's source)."""

    version: str | None
    #: the table's release ``version`` reads (the newest at or below it); None: before the
    #: table (0.11.0) or no version, where only the hand-written classification applies
    release: str | None
    #: what ``-O<n>`` becomes (``FlexibleArgumentParser.parse_args``): ``optimization-level``
    #: (0.12+), ``compilation-config.level`` (0.11.0) / ``.mode`` (0.11.1, 0.11.2), None
    dash_o: str | None

    @classmethod
    def for_version(cls, version: str | None) -> FlagRules:
        if version is None:
            return cls(None, None, None)
        table = flag_table()
        return cls(version, table.release(version), table.dash_o_target(version))

    @property
    def dash_o_is_compilation(self) -> bool:
        return self.dash_o is not None and self.dash_o.startswith("compilation-config")

    def absent(self, name: str) -> str | None:
        """vLLM's words when this release has no ``--name`` (None: it has it, or the release
        is before the table)."""
        if self.version is None or self.release is None or name == DASH_O:
            return None
        return _absent(name, self.version)

    def invalid_choice(self, name: str, value: str) -> str | None:
        """vLLM's words when this release's ``--name`` has choices and ``value`` is none of
        them (argparse refuses it: ``vllm serve`` would not start)."""
        if self.version is None or self.release is None or name == DASH_O:
            return None
        return flag_table().invalid_choice(name, value, self.version)


#: the pseudo-flag :mod:`.vllm_args` reads ``-O3`` / ``-O 3`` / ``-O=3`` into
DASH_O: Final = "O"
#: optimization levels vLLM defines (0.12+ config/vllm.py OPTIMIZATION_LEVEL_TO_CONFIG; 0.11
#: config/compilation.py CompilationLevel 0..3)
_LEVELS: Final = ("0", "1", "2", "3")


def optimization_level(flags: Mapping[str, str], version: str | None) -> tuple[str, str] | None:
    """(``optimization-level`` or ``compilation-config.level``, N) when ``-O`` or
    ``--optimization-level`` sets a level, as ``version`` reads it; None when neither is given."""
    target = FlagRules.for_version(version).dash_o
    if "optimization-level" in flags:
        return "optimization-level", flags["optimization-level"].strip()
    if DASH_O in flags:
        return target or "compilation-config.level", flags[DASH_O].strip()
    return None


def _json_mode(flags: Mapping[str, str]) -> str | None:
    """The compilation level/mode a ``--compilation-config`` JSON sets, when it sets one and no
    ``cudagraph_mode`` (which would win)."""
    text = flags.get("compilation-config", "").strip()
    if not text.startswith("{"):
        return None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(cfg, dict) or "cudagraph_mode" in cfg:
        return None
    mode = cfg.get("mode", cfg.get("level"))
    return None if mode is None else str(mode)


def cuda_graphs_off(flags: Mapping[str, str], version: str | None) -> bool:
    """Whether the optimization level turns CUDA graphs off in ``version``.

    0.12–0.33 (``--optimization-level``, config/vllm.py OPTIMIZATION_LEVEL_00..03): O0 sets
    ``cudagraph_mode`` NONE; O1 PIECEWISE, O2 and O3 FULL_AND_PIECEWISE (graphs captured: the
    ledger's CUDA-graph estimate applies, for O1 an upper bound as it has no full graphs).
    0.11.x (``-O N`` is ``--compilation-config '{"level": N}'``, ``"mode"`` from 0.11.1;
    config/__init__.py and config/vllm.py VllmConfig.__post_init__): with ``cudagraph_mode``
    unset, a level/mode other than 3 (PIECEWISE / VLLM_COMPILE) leaves it NONE; the same for the
    level or mode given in the JSON. An explicit ``cudagraph_mode`` in ``--compilation-config``
    is read by the caller (it wins in vLLM too)."""
    got = optimization_level(flags, version)
    if got is not None and got[0] == "optimization-level":
        return got[1] == "0"
    if FlagRules.for_version(version).dash_o_is_compilation:
        level = got[1] if got is not None else _json_mode(flags)
        return level is not None and level != "3"
    return False


def _graph_mode_problem(flags: Mapping[str, str], version: str | None) -> Unsupported | None:
    """Why ``--compilation-config``'s ``cudagraph_mode`` is not modelled, or None: a name that
    is not a ``CUDAGraphMode`` (vLLM parses it upper-cased, config/compilation.py::
    CompilationConfig.validate_cudagraph_mode_before); a mode other than NONE with
    optimization level 0 (which sets compilation mode NONE: FULL graphs stay, piecewise ones
    go, config/vllm.py VllmConfig.__post_init__ 0.20.0; the plan would read it as eager); or
    PIECEWISE, FULL or FULL_DECODE_ONLY in a release whose graph counts were not read
    (:attr:`.vllm_rules.VllmRules.cudagraph_modes_read`)."""
    text = flags.get("compilation-config", "").strip()
    if not text.startswith("{"):
        return None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError:
        return None  # reported by _value_problem
    if not isinstance(cfg, dict) or "cudagraph_mode" not in cfg:
        return None
    raw = cfg["cudagraph_mode"]
    mode = raw.upper() if isinstance(raw, str) else None
    if mode not in CUDAGRAPH_MODES:
        return Unsupported(
            "--compilation-config",
            f"cudagraph_mode {raw!r} is not one of {', '.join(CUDAGRAPH_MODES)}",
        )
    level = optimization_level(flags, version)
    if mode != "NONE" and level is not None and level[1] == "0":
        return Unsupported(
            "--compilation-config",
            f"cudagraph_mode {mode} with optimization level 0: compilation mode NONE keeps "
            "FULL graphs and drops piecewise ones (not modelled)",
        )
    if mode in ("NONE", DEFAULT_CUDAGRAPH_MODE) or version is None:
        return None
    try:
        read = VllmRules.for_version(version).cudagraph_modes_read
    except ValueError:
        return None  # the version itself is reported elsewhere
    if not read:
        return Unsupported(
            "--compilation-config",
            f"cudagraph_mode {mode}: the graphs it captures were read for vLLM 0.20–0.28 "
            f"only, not {version}",
        )
    return None


def _level_problem(flags: Mapping[str, str], version: str | None) -> Unsupported | None:
    got = optimization_level(flags, version)
    rules = FlagRules.for_version(version)
    target = rules.dash_o
    mode = _json_mode(flags)
    if got is None:
        if mode is not None and mode != "3" and not rules.dash_o_is_compilation:
            return Unsupported(
                "--compilation-config",
                f"compilation mode {mode} without cudagraph_mode: from 0.12 the CUDA-graph mode "
                "it leads to changes between releases (not modelled); give cudagraph_mode",
            )
        return None
    _, level = got
    name = "--optimization-level" if "optimization-level" in flags else "-O"
    if level not in _LEVELS:
        return Unsupported(name, f"optimization level {level!r} is not one of 0-3")
    if DASH_O in flags and "optimization-level" in flags:
        return Unsupported(
            "-O",
            "given with --optimization-level: which one vLLM uses depends on their order, "
            "which the plan does not keep",
        )
    if version is not None and target is None and DASH_O in flags:
        return Unsupported("-O", f"what -O means in vLLM {version} (before 0.11) is not modelled")
    if DASH_O in flags and target != "optimization-level" and "compilation-config" in flags:
        return Unsupported(
            "-O",
            f"in vLLM {version} -O is --compilation-config, which is given too: vLLM uses "
            "the last one, and the plan does not keep their order",
        )
    return None


def _absent(name: str, version: str) -> str | None:
    """vLLM's words when ``version`` has no such flag; ``no-x`` is looked up as ``x``'s
    ``--no-x`` alias (BooleanOptionalAction)."""
    table = flag_table()
    if name == DASH_O:
        return None
    if name.startswith("no-") and name not in table.flags and name[3:] in table.flags:
        run = table.run(name[3:], version)
        if run is None:
            return table.absence(name[3:], version)
        if f"--{name}" not in run.aliases:
            return f"vLLM {version} has no --{name} (--{name[3:]} takes a value)"
        return None
    return table.absence(name, version)


def classify(
    flags: Mapping[str, str], env: Mapping[str, str | None], version: str | None = None
) -> list[Unsupported]:
    """The flags and ``VLLM_*`` variables the plan cannot honour (empty: all classified).

    ``flags`` as :func:`.vllm_args.read_flags` returns them; ``env`` maps each variable of the
    container's ``env`` to its value, None when Kubernetes resolves it at run time
    (``valueFrom``) so the operator cannot read it. With ``version``, a flag that release of
    vLLM does not have is refused first (vLLM would not start).
    """
    out: list[Unsupported] = []
    level = _level_problem(flags, version)
    if level is not None:
        out.append(level)
    graph_mode = _graph_mode_problem(flags, version)
    if graph_mode is not None:
        out.append(graph_mode)
    rules = FlagRules.for_version(version)
    for name, value in flags.items():
        missing = rules.absent(name)
        if missing is not None:
            out.append(Unsupported(f"--{name}", missing))
        elif (invalid := rules.invalid_choice(name, value)) is not None:
            out.append(Unsupported(f"--{name}", invalid))
        elif name == DASH_O:
            continue  # checked above
        elif name in MODELLED_FLAGS:
            problem = _value_problem(name, value)
            if problem is not None:
                out.append(Unsupported(f"--{name}", problem))
        elif name in NEUTRAL_FLAGS:
            continue
        elif name.startswith("no-") and name[3:] in NEUTRAL_FLAGS:
            continue
        elif name in REFUSED_FLAGS:
            out.append(Unsupported(f"--{name}", REFUSED_FLAGS[name]))
        elif name in UNREVIEWED_FLAGS:
            out.append(Unsupported(f"--{name}", UNREVIEWED))
        else:
            out.append(
                Unsupported(
                    f"--{name}",
                    "not a flag the ledger knows; it may move memory, so the plan refuses it "
                    "until it is classified",
                )
            )
    for var, env_value in env.items():
        if not var.startswith("VLLM_") or var in NEUTRAL_ENV:
            continue
        if var in MODELLED_ENV:
            if env_value is None:
                out.append(Unsupported(var, "set from valueFrom; the operator cannot read it"))
            elif var in INTEGER_ENV and not is_int(env_value):
                out.append(
                    Unsupported(var, f"{env_value!r} is not an integer; vLLM reads it with int()")
                )
            continue
        out.append(
            Unsupported(
                var,
                "a vLLM environment variable the ledger does not model; it may move memory",
            )
        )
    return out
