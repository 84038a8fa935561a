"""The spec models: what a user writes under ``spec`` of an InferenceCapacity.

Every field's ``description`` is what ``kubectl explain`` shows. A rule that spans fields is
written twice, side by side: a CEL rule (``x-kubernetes-validations``) for the API server and a
validator here, so ``plan FILE.yaml`` rejects what the cluster would reject.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, Strict, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from .common import (
    _LIST_MAP_BY_NAME,
    _PRESERVE_UNKNOWN,
    CONFIG_KEY,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    ENGINE_VERSION,
    HTTP_URL,
    PROM_DURATION,
    RESOURCE_NAME,
    BlockSize,
    EngineName,
    KvCacheDtype,
    Mode,
    PrometheusMode,
    Quantile,
    Quantization,
    SBool,
    SFloat,
    SInt,
    SInt64,
    SizingRule,
    SStr,
    TargetKind,
    WeightDtype,
    _cel,
    _Spec,
    _validations,
)

__all__ = [
    "BurstSpec",
    "CaBundleRef",
    "Cohort",
    "EngineSpec",
    "HardwareSpec",
    "HeadroomSpec",
    "InferenceCapacitySpec",
    "ModelConfigMapRef",
    "ModelSpec",
    "OutputTokens",
    "PolicySpec",
    "PrometheusSource",
    "PromptTokens",
    "RolloutSpec",
    "TargetRef",
    "TokenSecretRef",
    "WorkloadSpec",
]


class TargetRef(_Spec):
    """The workload that serves the model: its pods run vLLM, and in Enforce mode its vLLM
    flags, replicas and rollout strategy are managed."""

    kind: TargetKind = Field(
        "Deployment", description="Kind of the target workload. Only Deployment is supported."
    )
    name: SStr = Field(
        min_length=1,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN,
        description="Name of the target, in the namespace of this InferenceCapacity.",
    )
    container: SStr | None = Field(
        None,
        min_length=1,
        max_length=63,
        pattern=DNS1123_LABEL,
        description=(
            "Name of the container that runs vLLM. null: the pod's only container, or the one "
            "whose command or args start vLLM."
        ),
    )


class ModelConfigMapRef(_Spec):
    """A Hugging Face config.json stored in a ConfigMap in this namespace."""

    name: SStr = Field(
        min_length=1,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN,
        description="Name of the ConfigMap.",
    )
    key: SStr = Field(
        "config.json",
        min_length=1,
        max_length=253,
        pattern=CONFIG_KEY,
        description="Key in the ConfigMap whose value is the model's config.json.",
    )


class TokenSecretRef(_Spec):
    """A bearer token stored in a Secret in the operator's view of this namespace."""

    name: SStr = Field(
        min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN, description="Name of the Secret."
    )
    key: SStr = Field(
        "token",
        min_length=1,
        max_length=253,
        pattern=CONFIG_KEY,
        description="Key in the Secret whose value is the bearer token.",
    )


class CaBundleRef(_Spec):
    """A PEM CA bundle stored in a ConfigMap in this namespace."""

    name: SStr = Field(
        min_length=1,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN,
        description="Name of the ConfigMap (e.g. kube-root-ca.crt).",
    )
    key: SStr = Field(
        "ca.crt",
        min_length=1,
        max_length=253,
        pattern=CONFIG_KEY,
        description="Key in the ConfigMap whose value is the PEM CA bundle.",
    )


class ModelSpec(_Spec):
    """The model being served: its architecture (exactly one of name, configMapRef, config),
    weight and KV-cache precision, and LoRA adapters."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "(has(self.name) ? 1 : 0) + (has(self.configMapRef) ? 1 : 0)"
                " + (has(self.config) ? 1 : 0) == 1",
                "exactly one of spec.model.name, spec.model.configMapRef and spec.model.config"
                " must be set",
            ),
            _cel(
                "!has(self.revision) || has(self.name)",
                "spec.model.revision applies only to spec.model.name (a Hugging Face Hub id)",
            ),
            _cel(
                "!has(self.tokenSecretRef) || has(self.name)",
                "spec.model.tokenSecretRef applies only to spec.model.name (a Hugging Face Hub id)",
            ),
        )
    )

    name: SStr | None = Field(
        None,
        min_length=1,
        max_length=256,
        description=(
            "Model catalog key or Hugging Face Hub repository id (e.g. "
            "meta-llama/Llama-3.1-8B-Instruct). A name outside the built-in catalog is resolved "
            "on the Hub (HF_ENDPOINT of the operator, a mirror when air-gapped): its config.json "
            "and the safetensors headers of its weights, never the weights themselves."
        ),
    )
    revision: SStr | None = Field(
        None,
        min_length=1,
        max_length=256,
        pattern=r"^[-._/a-zA-Z0-9]+$",
        description=(
            "Hub revision of spec.model.name: a branch, tag or commit. null: main. The commit "
            "it resolves to is in status.model.revision; pin a commit for an immutable ledger."
        ),
    )
    token_secret_ref: TokenSecretRef | None = Field(
        None,
        description=(
            "A Secret in this InferenceCapacity's namespace holding a Hugging Face token, for "
            "gated or private models on the Hub. null: no token (the operator's own "
            "credentials are never used for a resource)."
        ),
    )
    config_map_ref: ModelConfigMapRef | None = Field(
        None, description="A ConfigMap holding the model's Hugging Face config.json."
    )
    config: dict[str, Any] | None = Field(
        None,
        description="The model's Hugging Face config.json, inline.",
        json_schema_extra=_PRESERVE_UNKNOWN,
    )
    dtype: WeightDtype = Field(
        "auto",
        description=(
            "Precision of unquantized weights and activations, as vLLM's --dtype. auto: the "
            "config's torch_dtype (float32 checkpoints are served in bfloat16)."
        ),
    )
    quantization: Quantization | None = Field(
        None,
        description=(
            "Weight quantization method, as vLLM's --quantization. null: read from the config's "
            "quantization_config (none if it has none)."
        ),
    )
    kv_cache_dtype: KvCacheDtype | None = Field(
        None,
        description=(
            "KV-cache element type, as vLLM's --kv-cache-dtype; fp8 variants store 1 byte per "
            "element, the per-token-head ones add a float32 scale per head and token (int4 "
            "packs two values a byte first), nvfp4 packs 4-bit values with an fp8 scale per 16 "
            "(from vLLM 0.20; int4_per_token_head from 0.25). null: read from the target's "
            "running flags, else auto (the model dtype)."
        ),
    )
    max_loras: SInt = Field(
        0,
        ge=0,
        description=(
            "LoRA adapters resident on the GPU at once, as vLLM's --max-loras. 0: LoRA disabled."
        ),
    )
    max_lora_rank: SInt = Field(
        16,
        ge=1,
        le=512,
        description="Largest LoRA rank to reserve memory for, as vLLM's --max-lora-rank.",
    )

    @model_validator(mode="after")
    def _exactly_one_source(self) -> ModelSpec:
        given = [
            alias
            for alias, value in (
                ("name", self.name),
                ("configMapRef", self.config_map_ref),
                ("config", self.config),
            )
            if value is not None
        ]
        if len(given) != 1:
            raise PydanticCustomError(
                "model_source",
                "exactly one of name, configMapRef and config must be set (got {given})",
                {"given": ", ".join(given) or "none"},
            )
        return self


class HardwareSpec(_Spec):
    """The accelerators each replica runs on and how the model is split across them."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "has(self.gpu) || has(self.gpuMemoryGiB)",
                "at least one of spec.hardware.gpu and spec.hardware.gpuMemoryGiB must be set",
            )
        )
    )

    gpu: SStr | None = Field(
        None,
        min_length=1,
        max_length=64,
        description=(
            "GPU catalog name (e.g. H100-SXM-80GB): total memory as CUDA reports it, HBM "
            "bandwidth, interconnect."
        ),
    )
    gpu_memory_gib: SFloat | None = Field(
        None,
        gt=0,
        alias="gpuMemoryGiB",
        description=(
            "Total memory of one GPU in GiB (2^30 bytes), as CUDA reports it; overrides the "
            "catalog's value. Needed when gpu is not in the catalog."
        ),
    )
    tensor_parallel: SInt | None = Field(
        None,
        ge=1,
        le=64,
        description=(
            "Tensor-parallel size (GPUs per pipeline stage), as vLLM's --tensor-parallel-size. "
            "null: read from the target's running flags, else 1."
        ),
    )
    pipeline_parallel: SInt | None = Field(
        None,
        ge=1,
        le=64,
        description=(
            "Pipeline-parallel size (stages), as vLLM's --pipeline-parallel-size. null: read from "
            "the target's running flags, else 1."
        ),
    )
    hbm_efficiency: SFloat | None = Field(
        None,
        gt=0,
        le=1,
        description=(
            "Fraction of the GPU's datasheet HBM bandwidth that decode kernels sustain, in "
            "(0, 1]; used by the decode-step latency model. null: the catalog default (0.80)."
        ),
    )
    gpu_resource_name: SStr = Field(
        "nvidia.com/gpu",
        min_length=1,
        max_length=317,
        pattern=RESOURCE_NAME,
        description=(
            "Extended resource name the pods request GPUs by; used to count spare GPUs on Nodes "
            "for rollout surge."
        ),
    )

    @model_validator(mode="after")
    def _some_memory_source(self) -> HardwareSpec:
        if self.gpu is None and self.gpu_memory_gib is None:
            raise PydanticCustomError(
                "gpu_memory_source", "at least one of gpu and gpuMemoryGiB must be set"
            )
        return self


class EngineSpec(_Spec):
    """The inference engine and the engine settings that shape its memory use."""

    name: EngineName = Field("vllm", description="Inference engine. Only vllm is supported.")
    version: SStr | None = Field(
        None,
        max_length=64,
        pattern=ENGINE_VERSION,
        description=(
            'Engine version (e.g. "0.19.0" or "0.10.1.dev101+gbda9d0535"; quote it in YAML). '
            "vLLM's memory budget changed meaning between versions. null: from the target "
            "container's image tag, else the newest supported version (condition says so)."
        ),
    )
    block_size: BlockSize | None = Field(
        None,
        description=(
            "KV-cache block size in tokens, as vLLM's --block-size. null: the engine's default "
            "for the model and version."
        ),
    )
    max_num_batched_tokens: SInt | None = Field(
        None,
        ge=1,
        description=(
            "Tokens processed per scheduler step (sizes the activation peak), as vLLM's "
            "--max-num-batched-tokens. null: read from the target's running flags, else the "
            "engine's default."
        ),
    )
    max_num_seqs_cap: SInt | None = Field(
        None,
        ge=1,
        description=(
            "Upper bound on the recommended --max-num-seqs (sequences per replica). null: no "
            "bound beyond what memory and the ITL target allow."
        ),
    )
    enforce_eager: SBool = Field(
        False,
        description=(
            "The target runs with --enforce-eager (no CUDA graphs, so no CUDA-graph memory pool)."
        ),
    )
    compile_cache: Literal["warm", "cold"] = Field(
        "warm",
        description=(
            "vLLM's torch.compile cache when a pod starts: warm (the compiled graphs saved "
            "under VLLM_CACHE_ROOT survive the pod, on a PersistentVolumeClaim or hostPath) or "
            "cold (they go with the pod, e.g. the container's filesystem or an emptyDir: every "
            "pod compiles inside vLLM's memory profile, whose peak then holds a copy of the "
            "embedding table, so the KV pool is smaller). The compileCache risk says which the "
            "Deployment's volumes give."
        ),
    )
    kv_cache_memory_bytes: SInt64 | None = Field(
        None,
        ge=1,
        description=(
            "KV-cache pool per GPU in bytes, as vLLM's --kv-cache-memory-bytes: the operator "
            "plans this pool and sets either it or the utilization that gives it "
            "(spec.policy.useKvCacheMemoryBytes), never both. null: read from the target's "
            "running flags, else the largest safe pool."
        ),
    )
    data_parallel: SInt | None = Field(
        None,
        ge=1,
        le=64,
        description=(
            "Data-parallel engines per pod, as vLLM's --data-parallel-size (each its own "
            "max-num-seqs; GPUs per pod TP × PP × DP). null: read from the target's running "
            "flags, else 1."
        ),
    )
    enable_prefix_caching: SBool | None = Field(
        None,
        description=(
            "The target runs with prefix caching (vLLM's default) or with "
            "--no-enable-prefix-caching (no shared-prefix credit; Mamba state in 'none' mode). "
            "null: read from the target's running flags."
        ),
    )


class PromptTokens(_Spec):
    """Prompt length distribution of a cohort, in tokens per request."""

    p50: SInt = Field(ge=0, description="Median prompt length (tokens).")
    p95: SInt = Field(ge=0, description="95th-percentile prompt length (tokens); >= p50.")
    p99: SInt = Field(ge=0, description="99th-percentile prompt length (tokens); >= p95.")

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel("self.p50 <= self.p95", "p95 must be greater than or equal to p50"),
            _cel("self.p95 <= self.p99", "p99 must be greater than or equal to p95"),
        )
    )

    @field_validator("p95", "p99")
    @classmethod
    def _ordered(cls, value: int, info: ValidationInfo) -> int:
        lower = {"p95": "p50", "p99": "p95"}[str(info.field_name)]
        bound = info.data.get(lower)
        if isinstance(bound, int) and value < bound:
            raise PydanticCustomError(
                "quantile_order",
                "{field} ({value}) must be greater than or equal to {lower} ({bound})",
                {"field": info.field_name, "value": value, "lower": lower, "bound": bound},
            )
        return value


class OutputTokens(PromptTokens):
    """Output (generated) length distribution of a cohort, in tokens per request."""

    p50: SInt = Field(ge=1, description="Median output length (tokens).")
    p95: SInt = Field(ge=1, description="95th-percentile output length (tokens); >= p50.")
    p99: SInt = Field(ge=1, description="99th-percentile output length (tokens); >= p95.")


class Cohort(_Spec):
    """A class of requests with its own length distribution (e.g. chat, RAG, batch)."""

    name: SStr = Field(
        min_length=1,
        max_length=63,
        pattern=DNS1123_LABEL,
        description="Cohort name, unique within the list.",
    )
    weight: SFloat = Field(
        gt=0,
        le=1,
        description=(
            "Share of concurrent requests in this cohort, in (0, 1]. Weights need not sum to 1: "
            "they are normalised."
        ),
    )
    prompt_tokens: PromptTokens = Field(description="Prompt length quantiles (tokens).")
    output_tokens: OutputTokens = Field(description="Output length quantiles (tokens).")
    shared_prefix_tokens: SInt = Field(
        0,
        ge=0,
        description=(
            "Leading prompt tokens shared by all requests of the cohort (system prompt); with "
            "prefix caching they occupy KV blocks once per replica, not once per request."
        ),
    )
    # not "n": a YAML 1.1 reader (PyYAML, kubectl's round trips) reads the key n as false
    samples: SInt = Field(
        1,
        ge=1,
        le=64,
        description=(
            "Parallel samples per request (the OpenAI/vLLM sampling parameter n): each is a "
            "sequence counted by max-num-seqs; with prefix caching they share the prompt's full "
            "blocks."
        ),
    )


class PrometheusSource(_Spec):
    """Measure the workload from the vLLM metrics in Prometheus instead of (or as well as)
    the cohorts given in the spec."""

    url: SStr = Field(
        max_length=2048,
        pattern=HTTP_URL,
        description="Base URL of the Prometheus HTTP API (e.g. http://prometheus.monitoring:9090).",
    )
    window: SStr = Field(
        "7d",
        max_length=32,
        pattern=PROM_DURATION,
        description="Look-back window, a Prometheus duration (e.g. 30m, 6h, 7d).",
    )
    bearer_token_secret_ref: TokenSecretRef | None = Field(
        None, description="Secret holding a bearer token for the Prometheus API. null: none."
    )
    insecure_skip_verify: SBool = Field(
        False, description="Skip TLS certificate verification (testing only)."
    )
    ca_config_map_ref: CaBundleRef | None = Field(
        None,
        description="ConfigMap holding the CA bundle that signs Prometheus' certificate. "
        "null: the system trust store.",
    )
    selector: SStr | None = Field(
        None,
        max_length=1024,
        description=(
            'Extra PromQL label matchers for the vLLM series, e.g. namespace="ml",'
            'model_name="llama". null: the target\'s pods.'
        ),
    )
    mode: PrometheusMode = Field(
        "max",
        description=(
            "How observations combine with the spec: replace (observed lengths and concurrency "
            "replace the spec's), max (the larger of the two per quantile), spec-only (observe "
            "and calibrate, but size from the spec)."
        ),
    )
    refresh_seconds: SInt = Field(
        300, ge=30, description="Seconds between Prometheus queries (minimum 30)."
    )


class BurstSpec(_Spec):
    """The cohort mix of the burst hour (e.g. more long requests); max-num-seqs is sized for the
    worse of the steady and the burst mix."""

    weights: dict[str, Annotated[float, Strict(), Field(ge=0, le=1)]] = Field(
        description=(
            "Weight of each cohort (by name) during the burst, each in [0, 1]; cohorts not "
            "listed have weight 0. At least one weight must be positive; they are normalised."
        ),
    )

    @field_validator("weights")
    @classmethod
    def _some_positive(cls, weights: dict[str, float]) -> dict[str, float]:
        if not any(w > 0 for w in weights.values()):
            raise PydanticCustomError("burst_weights", "at least one weight must be positive", {})
        return weights


class WorkloadSpec(_Spec):
    """The traffic each replica and the fleet must hold."""

    # burst.weights naming cohorts is checked by the operator (_burst_names_cohorts), not by a
    # CEL rule: kube-apiserver estimates that rule (map keys × cohorts × name lengths) at 5.3×
    # its cost budget and refuses the whole CRD

    max_model_len: SInt | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description=(
            "Longest request (prompt + output, tokens), as vLLM's --max-model-len; one such "
            "request must fit the KV pool for vLLM to start. null: read from the target's "
            "running flags, else the model's context length."
        ),
    )
    cohorts: tuple[Cohort, ...] = Field(
        (),
        max_length=16,
        description="Request cohorts and their length distributions (at most 16).",
        json_schema_extra=_LIST_MAP_BY_NAME,
    )
    quantile: Quantile = Field(
        "p95",
        description=(
            "Length quantile that per-sequence KV reservations are sized at under "
            "spec.policy.sizing Conservative (the Distribution rule uses all three quantiles)."
        ),
    )
    peak_concurrency: SInt | None = Field(
        None,
        ge=0,
        description=(
            "Concurrent requests the whole fleet must hold at peak; sizes replicas. null: from "
            "Prometheus if configured, else replicas are not sized from demand."
        ),
    )
    itl_target_ms: SFloat | None = Field(
        None,
        gt=0,
        description=(
            "Target inter-token latency in milliseconds; caps max-num-seqs at the largest batch "
            "whose ITL (at itlQuantile, and the mean TPOT where that is longer: the rare long "
            "prefill-chunk steps of long prompts) meets it under the Distribution rule (the "
            "bandwidth lower bound under Conservative). null: no latency cap."
        ),
    )
    itl_quantile: Literal["p95", "p99"] = Field(
        "p95", description="Which ITL quantile itlTargetMs bounds: p95 (default) or p99."
    )
    ttft_target_ms: SFloat | None = Field(
        None,
        gt=0,
        description=(
            "Target time to first token (p95) in milliseconds; caps max-num-seqs with "
            "itlTargetMs (the Distribution rule). null: no TTFT cap."
        ),
    )
    from_prometheus: PrometheusSource | None = Field(
        None, description="Measure the workload from Prometheus. null: use the spec only."
    )
    burst: BurstSpec | None = Field(
        None,
        description=(
            "The burst hour's cohort mix; max-num-seqs is sized for the worse of it and the "
            "cohorts' own weights. null: no burst mix."
        ),
    )

    @model_validator(mode="after")
    def _burst_names_cohorts(self) -> WorkloadSpec:
        if self.burst is not None:
            names = {c.name for c in self.cohorts}
            for key in self.burst.weights:
                if key not in names:
                    raise PydanticCustomError(
                        "burst_cohort",
                        "burst.weights names '{name}', which is not a cohort (cohorts: {known})",
                        {"name": key, "known": ", ".join(sorted(names)) or "none"},
                    )
        return self

    @field_validator("cohorts")
    @classmethod
    def _unique_names(cls, cohorts: tuple[Cohort, ...]) -> tuple[Cohort, ...]:
        seen: dict[str, int] = {}
        for index, cohort in enumerate(cohorts):
            if cohort.name in seen:
                raise PydanticCustomError(
                    "duplicate_cohort",
                    "duplicate cohort name '{name}' (items {first} and {second})",
                    {"name": cohort.name, "first": seen[cohort.name], "second": index},
                )
            seen[cohort.name] = index
        return cohorts


class HeadroomSpec(_Spec):
    """Memory and replicas held back from what the workload needs."""

    operational_fraction: SFloat = Field(
        0.05,
        ge=0,
        le=0.5,
        description=(
            "Fraction of each GPU's memory kept free beyond what vLLM accounts for (allocator "
            "fragmentation, other processes), in [0, 0.5]."
        ),
    )
    kv_safety_fraction: SFloat = Field(
        0.10,
        ge=0,
        le=0.9,
        description=(
            "Fraction of the KV-cache pool not promised to admitted sequences under either "
            "sizing rule (guards against what the sizing does not model: prefill chunks in "
            "flight, speculative tokens, lengths beyond the given quantiles), in [0, 0.9]."
        ),
    )
    recovery_replicas: SInt = Field(
        1,
        ge=0,
        description="Replicas kept beyond peak demand so the fleet survives losing that many pods.",
    )


class RolloutSpec(_Spec):
    """Replica bounds and what the operator manages on the target during rollouts."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "!has(self.minReplicas) || !has(self.maxReplicas)"
                " || self.minReplicas <= self.maxReplicas",
                "spec.rollout.minReplicas must be less than or equal to spec.rollout.maxReplicas",
            )
        )
    )

    min_replicas: SInt = Field(1, ge=0, description="Fewest replicas to recommend or set.")
    max_replicas: SInt = Field(
        16,
        ge=1,
        validate_default=True,  # minReplicas above the default must fail here too
        description="Most replicas to recommend or set; >= minReplicas.",
    )
    manage_replicas: SBool = Field(
        True,
        description=(
            "Set the target's replicas (Enforce mode). Turn off when an HPA or KEDA owns them."
        ),
    )
    manage_strategy: SBool = Field(
        True,
        description="Set the target's rolling-update maxSurge and maxUnavailable (Enforce mode).",
    )
    manage_pod_disruption_budget: SBool = Field(
        True,
        description="Create and update a PodDisruptionBudget for the target (Enforce mode).",
    )
    spare_gpu_node_selector: dict[str, str] | None = Field(
        None,
        description=(
            "Labels of the Nodes whose free GPUs may host surge pods during a rollout, on top of "
            "the pod template's nodeSelector (which the scheduler enforces, so it always "
            "applies). null: every Ready Node of the GPU product that matches the nodeSelector."
        ),
    )

    @field_validator("max_replicas")
    @classmethod
    def _max_not_below_min(cls, value: int, info: ValidationInfo) -> int:
        minimum = info.data.get("min_replicas")
        if isinstance(minimum, int) and value < minimum:
            raise PydanticCustomError(
                "replica_bounds",
                "maxReplicas ({value}) must be greater than or equal to minReplicas ({minimum})",
                {"value": value, "minimum": minimum},
            )
        return value


class PolicySpec(_Spec):
    """Which optional vLLM flags the operator may set, and when it patches."""

    set_max_model_len: SBool = Field(False, description="Set --max-model-len on the target.")
    set_max_num_batched_tokens: SBool = Field(
        False, description="Set --max-num-batched-tokens on the target."
    )
    set_kv_cache_dtype: SBool = Field(False, description="Set --kv-cache-dtype on the target.")
    hysteresis_percent: SFloat = Field(
        5.0,
        ge=0,
        le=50,
        description=(
            "Percent by which a recommended value must move before the target is patched "
            "(avoids rollout storms), in [0, 50]."
        ),
    )
    use_kv_cache_memory_bytes: SBool = Field(
        False,
        description=(
            "Set --kv-cache-memory-bytes (an absolute KV-cache size) instead of "
            "--gpu-memory-utilization, where the vLLM version supports it (0.11 and later)."
        ),
    )
    sizing: SizingRule = Field(
        "Distribution",
        description=(
            "How max-num-seqs is sized. Distribution: the largest batch whose probability of "
            "outgrowing the KV pool (a preemption) is below preemptionTarget, with lengths "
            "log-normal from the cohorts' quantiles. Conservative: every sequence reserves its "
            "prompt + output at workload.quantile."
        ),
    )
    preemption_target: SFloat = Field(
        0.01,
        gt=0,
        lt=0.5,
        description=(
            "Highest acceptable probability that a full batch outgrows the KV pool (Distribution "
            "sizing), in (0, 0.5)."
        ),
    )
    stabilization_window_seconds: SInt | None = Field(
        None,
        ge=0,
        le=86_400,
        description=(
            "At most one pod-template change (a rolling restart) of the target per this many "
            "seconds; later changes wait and are applied together as the last desired state. "
            "Changes that only lower --gpu-memory-utilization or --kv-cache-memory-bytes are "
            "not held. null: the operator's default (300 s)."
        ),
    )
    replica_stabilization_window_seconds: SInt | None = Field(
        None,
        ge=0,
        le=86_400,
        description=(
            "Replicas go down only to the highest count recommended during this many seconds, "
            "and at most once per window (scale-up is immediate). null: the operator's default "
            "(300 s)."
        ),
    )
    prediction_drift_percent: SFloat = Field(
        3.0,
        gt=0,
        le=100,
        description=(
            "PredictionDrift=True (and one Event) when the KV-cache tokens a pod's vLLM printed at "
            'startup ("GPU KV cache size: N tokens") differ from the prediction for that '
            "pod's flags by more than this percent, in (0, 100]."
        ),
    )
    calibrate_from_observed: SBool = Field(
        False,
        description=(
            "Size max-num-seqs and replicas from the KV-cache tokens vLLM printed at startup "
            "when they are below the prediction (never raised above it); recorded in "
            "status.observed.adjustment."
        ),
    )
    set_memory_request: SBool = Field(
        False,
        description=(
            "Set the vLLM container's resources.requests.memory to the load-time host peak "
            "the ledger estimates (the weights read through the page cache, a base process per "
            "rank, --cpu-offload-gb/--swap-space per rank, the multimodal processor cache), "
            "raising resources.limits.memory when it is lower; never lowers a request. After an "
            "OOMKilled start (mode Enforce), one bounded step up per stabilization window, "
            "recorded in status.observed.adjustment."
        ),
    )
    observe_startup: SBool = Field(
        True,
        description=(
            "Read the startup lines of one Ready pod per pod-template hash (pods/log, the first "
            "256 KiB) and write status.observed.startup."
        ),
    )


class InferenceCapacitySpec(_Spec):
    """Desired state: which Deployment serves which model on which GPUs, for what traffic."""

    mode: Mode = Field(
        "Enforce",
        description=(
            "Enforce: patch the target's vLLM flags, replicas, rollout strategy and PDB. "
            "Recommend: write status only, never the target."
        ),
    )
    target_ref: TargetRef = Field(
        description=(
            "The Deployment that serves the model: its pods run vLLM, and in Enforce mode its vLLM "
            "flags, replicas and rollout strategy are managed."
        )
    )
    model: ModelSpec = Field(
        description=(
            "The model being served: its architecture (exactly one of name, configMapRef and "
            "config), weight and KV-cache precision, and LoRA adapters."
        )
    )
    hardware: HardwareSpec = Field(
        description=(
            "The GPUs each replica runs on (at least one of gpu and gpuMemoryGiB) and how the "
            "model is split across them."
        )
    )
    engine: EngineSpec = Field(
        EngineSpec(),
        description="The inference engine and the engine settings that shape its memory use.",
    )
    workload: WorkloadSpec = Field(
        WorkloadSpec(),
        description=(
            "The traffic to hold: request length cohorts, peak concurrency, latency target, "
            "and optionally measurements from Prometheus."
        ),
    )
    headroom: HeadroomSpec = Field(
        HeadroomSpec(), description="Memory and replicas held back from what the workload needs."
    )
    rollout: RolloutSpec = Field(
        RolloutSpec(),
        description="Replica bounds, and what the operator manages on the target for rollouts.",
    )
    policy: PolicySpec = Field(
        PolicySpec(),
        description="Which optional vLLM flags the operator may set, and when it patches.",
    )
