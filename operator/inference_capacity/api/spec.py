"""Pydantic models of the ``InferenceCapacity`` custom resource (capacity.inference.dev/v1alpha1).

Why this module exists: one definition serves three readers.

* The API server: ``api/crd.py`` generates the CRD's structural OpenAPI schema from these models
  (``crds/`` holds the result, and a test fails when it drifts).
* ``kubectl explain``: every field's ``description`` is what a user reads, so each one says what
  the field means, its unit and what ``null`` means.
* The operator and the CLI: the same constraints are checked here in Python, so ``plan FILE.yaml``
  rejects what the cluster would reject, with the full field path
  (``spec.workload.cohorts[0].promptTokens.p95: ...``). A rule that spans fields is written twice,
  side by side: a CEL rule (``x-kubernetes-validations``) for the API server and a validator here.

Conventions: models are frozen; JSON names are camelCase (Python names are snake_case, both are
accepted on input); spec models forbid unknown fields so a typo is an error, and their scalars are
strict (``"2"`` is not an integer, ``0.19`` is not a version string), as they are for the API
server. Status models are written by the operator and ignore unknown fields, so an older operator
can read a newer status. ``null`` and an absent field mean the same thing everywhere.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from difflib import get_close_matches
from typing import Annotated, Any, Final, Literal, NamedTuple

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

from . import bounded_yaml

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "VERSION",
    "Applied",
    "BlockSize",
    "CaBundleRef",
    "Cohort",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "EngineName",
    "EngineSpec",
    "EngineVersionSource",
    "FieldError",
    "HardwareSpec",
    "HeadroomSpec",
    "InferenceCapacity",
    "InferenceCapacitySpec",
    "InferenceCapacityStatus",
    "KvCacheDtype",
    "Ledger",
    "LedgerItem",
    "LedgerRank",
    "Lifetime",
    "ManifestError",
    "ManifestSet",
    "Mode",
    "ModelConfigMapRef",
    "ModelSourceKind",
    "ModelSpec",
    "ModelStatus",
    "ObjectMeta",
    "Observed",
    "ObservedQuantiles",
    "OutputTokens",
    "PolicySpec",
    "PromptTokens",
    "PrometheusMode",
    "PrometheusSource",
    "Provenance",
    "Quantile",
    "Quantization",
    "Recommendation",
    "RolloutSpec",
    "BurstSpec",
    "Latency",
    "LatencyPoint",
    "Sizing",
    "SizingRule",
    "Summary",
    "TargetKind",
    "TargetRef",
    "TokenSecretRef",
    "VllmStartup",
    "WeightDtype",
    "WorkloadSpec",
    "load_manifests",
]

GROUP: Final = "capacity.inference.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "capacity.inference.dev/v1alpha1"  # GROUP/VERSION
KIND: Final = "InferenceCapacity"

# --------------------------------------------------------------------------------------------
# Value sets (the JSON values are the contract; Literal keeps them checkable by mypy).
# --------------------------------------------------------------------------------------------

Mode = Literal["Enforce", "Recommend"]
TargetKind = Literal["Deployment"]
WeightDtype = Literal["auto", "bfloat16", "float16", "float32"]
Quantization = Literal[
    "fp8",
    "compressed-tensors",
    "awq",
    "awq_marlin",
    "gptq",
    "gptq_marlin",
    "mxfp4",
    "bitsandbytes",
    "modelopt",
    "fbgemm_fp8",
    "experts_int8",
]
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
EngineName = Literal["vllm"]
BlockSize = Literal[8, 16, 32, 64, 128]
Quantile = Literal["p50", "p95", "p99"]
SizingRule = Literal["Distribution", "Conservative"]
PrometheusMode = Literal["replace", "max", "spec-only"]
ConditionType = Literal[
    "Ready",
    "Fits",
    "RolloutSafe",
    "Applied",
    "Observed",
    "Calibrated",
    "ModelResolved",
    "Supported",
]
ModelSourceKind = Literal["local", "catalog", "hub", "configMap", "inline"]
ConditionStatus = Literal["True", "False", "Unknown"]
Lifetime = Literal["worker", "request", "iteration", "startup"]
Provenance = Literal["exact", "calibrated", "assumed"]
EngineVersionSource = Literal["spec", "image", "default"]

# Kubernetes name rules (apimachinery validation), anchored: pydantic and the API server both
# search rather than match.
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
CONFIG_KEY = r"^[-._a-zA-Z0-9]+$"
RESOURCE_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
ENGINE_VERSION = r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?([-.+]?[0-9A-Za-z][-.+0-9A-Za-z]*)?$"
PROM_DURATION = r"^([0-9]+(ms|s|m|h|d|w|y))+$"
HTTP_URL = r"^https?://[^\s/?#]+[^\s]*$"
CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

# Strict scalars for the spec: the API server does not coerce "2" to 2 or true to 1, nor may we.
SInt = Annotated[int, Strict()]
SFloat = Annotated[float, Strict()]  # strict float still accepts an integer
SBool = Annotated[bool, Strict()]
SStr = Annotated[str, Strict()]


@dataclass(frozen=True)
class _Format:
    """Adds an OpenAPI ``format`` (e.g. int64) to a field's schema."""

    format: str

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        schema["format"] = self.format
        return schema


Int64 = Annotated[int, _Format("int64")]
SInt64 = Annotated[int, Strict(), _Format("int64")]  # a spec byte count
DateTime = datetime  # serialised as an RFC 3339 string (OpenAPI format date-time)


def _cel(rule: str, message: str) -> dict[str, str]:
    return {"rule": rule, "message": message}


def _validations(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


_LIST_MAP_BY_NAME: dict[str, Any] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["name"],
}
_PRESERVE_UNKNOWN: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}


class _Spec(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        populate_by_name=True,
        alias_generator=to_camel,
        extra="forbid",
    )


class _Status(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        populate_by_name=True,
        alias_generator=to_camel,
        extra="ignore",
    )


# --------------------------------------------------------------------------------------------
# spec
# --------------------------------------------------------------------------------------------


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
            "element. null: read from the target's running flags, else auto (the model dtype)."
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
            "whose decode step meets it (its p95 under the Distribution rule, the bandwidth "
            "lower bound under Conservative). null: no latency cap."
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


# --------------------------------------------------------------------------------------------
# status
# --------------------------------------------------------------------------------------------


class Condition(_Status):
    """An observation of one aspect of the resource, per Kubernetes API conventions."""

    type: ConditionType = Field(
        description=(
            "Ready, Fits, RolloutSafe, Applied, Observed, Calibrated, ModelResolved or Supported."
        )
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=CONDITION_REASON,
        description="Machine-readable CamelCase reason for the last transition.",
    )
    message: str = Field("", max_length=32768, description="Human-readable details.")
    last_transition_time: DateTime = Field(description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation the condition was computed from."
    )


class Summary(_Status):
    """What was sized, resolved from the spec and the target."""

    model: str = Field(description="Model name (catalog key, or the config's architecture).")
    gpu: str = Field(description="GPU name (catalog name, or the memory size given).")
    tensor_parallel: int = Field(ge=1, description="Tensor-parallel size in effect.")
    pipeline_parallel: int = Field(ge=1, description="Pipeline-parallel size in effect.")


class ModelStatus(_Status):
    """Where the model's architecture and weights were read from."""

    source: ModelSourceKind = Field(
        description="catalog (built in), hub (Hugging Face Hub), configMap or inline."
    )
    id: str = Field(description="Catalog key or Hub repository id.")
    revision: str | None = Field(
        None, description="The Hub commit the model resolved to. null: not from the Hub."
    )
    requested_revision: str | None = Field(
        None, description="spec.model.revision as given (a branch, tag or commit)."
    )
    checkpoint_bytes: Int64 | None = Field(
        None,
        ge=0,
        description=(
            "Sum of the tensors' bytes in the checkpoint's safetensors headers. null: no headers."
        ),
    )
    disk_bytes: Int64 | None = Field(
        None, ge=0, description="Sum of the repository's file sizes. null: not known."
    )


class LedgerItem(_Status):
    """One line of a rank's memory ledger."""

    name: str = Field(description="What the memory holds (e.g. weights, kv-cache, cuda-graphs).")
    lifetime: Lifetime = Field(
        description=(
            "How long it lives: worker (process lifetime), request, iteration (one scheduler "
            "step) or startup (profiling only)."
        )
    )
    owner: str = Field(description="Who allocates it (e.g. torch, vllm, cuda, nccl, operator).")
    bytes: Int64 = Field(description="Size in bytes (negative only for a deficit).")
    gib: float = Field(description="Size in GiB (2^30 bytes), for reading.")
    provenance: Provenance = Field(
        description="exact (from config/headers), calibrated (from metrics) or assumed."
    )


class LedgerRank(_Status):
    """The memory ledger of one GPU (rank)."""

    rank: int = Field(ge=0, description="Global rank (GPU index within a replica).")
    stage: int = Field(ge=0, description="Pipeline stage of this rank.")
    items: tuple[LedgerItem, ...] = Field((), description="Line items; they sum to totalBytes.")
    total_bytes: Int64 = Field(description="Sum of the items (bytes); equals the device total.")


class Ledger(_Status):
    """Per-rank GPU memory ledger and the KV-cache capacity it leaves."""

    ranks: tuple[LedgerRank, ...] = Field((), description="One ledger per rank.")
    device_bytes: Int64 = Field(ge=0, description="Total memory of one GPU (bytes).")
    kv_bytes_per_token: Int64 = Field(
        ge=0, description="KV-cache bytes per token on the limiting rank."
    )
    kv_token_capacity: Int64 = Field(
        ge=0, description="Tokens the KV pool holds (numGpuBlocks x blockSize, minimum over ranks)."
    )
    num_gpu_blocks: int = Field(ge=0, description="KV-cache blocks per rank (minimum over ranks).")
    block_size: int = Field(ge=1, description="KV-cache block size (tokens).")


class VllmStartup(_Status):
    """What vLLM is predicted to log at startup with the recommended flags."""

    weights_gib: float = Field(description="Model weights loaded per rank (GiB).")
    activation_peak_gib: float = Field(description="Peak activation memory while profiling (GiB).")
    non_torch_gib: float = Field(description="Non-torch memory: CUDA context, NCCL (GiB).")
    cuda_graph_gib: float = Field(description="CUDA-graph memory pool (GiB).")
    available_kv_cache_gib: float = Field(description='"Available KV cache memory" (GiB).')
    num_gpu_blocks: int = Field(ge=0, description="KV-cache blocks vLLM allocates.")
    kv_cache_tokens: int = Field(ge=0, description='"GPU KV cache size" (tokens).')
    max_concurrency: float = Field(
        ge=0, description='"Maximum concurrency" at max-model-len tokens per request.'
    )
    starts: bool = Field(description="vLLM is expected to start with these flags.")
    error: str | None = Field(None, description="The startup error predicted, if it won't start.")


class Recommendation(_Status):
    """The vLLM flags, replicas and rollout settings the operator recommends (and, in Enforce
    mode, applies)."""

    gpu_memory_utilization: float = Field(
        gt=0, le=1, description="--gpu-memory-utilization (fraction of GPU memory vLLM may use)."
    )
    kv_cache_memory_bytes: SInt64 | None = Field(
        None, ge=0, description="--kv-cache-memory-bytes (bytes), when policy asks for it."
    )
    max_num_seqs: int = Field(ge=0, description="--max-num-seqs (sequences per replica).")
    max_model_len: int = Field(ge=1, description="--max-model-len (tokens).")
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="--max-num-batched-tokens (tokens per step)."
    )
    kv_cache_dtype: str | None = Field(None, description="--kv-cache-dtype.")
    per_replica_concurrency: int = Field(
        ge=0, description="Concurrent requests one replica holds at the sizing quantile."
    )
    replicas: int = Field(ge=0, description="Replicas: minReplicasForPeak + recoveryReplicas.")
    min_replicas_for_peak: int = Field(
        ge=0, description="Fewest replicas that hold peakConcurrency."
    )
    max_surge: int = Field(ge=0, description="Rolling-update maxSurge (pods).")
    max_unavailable: int = Field(ge=0, description="Rolling-update maxUnavailable (pods).")
    pdb_min_available: int = Field(ge=0, description="PodDisruptionBudget minAvailable (pods).")
    provenance: dict[str, Provenance] = Field(
        {}, description="Per field above: exact, calibrated or assumed."
    )


class Sizing(_Status):
    """How max-num-seqs was chosen and the preemption risk it runs."""

    rule: Literal["distribution", "conservative"] = Field(description="The sizing rule used.")
    max_num_seqs: int = Field(ge=0, description="--max-num-seqs chosen (sequences per replica).")
    preemption_probability: float = Field(
        ge=0,
        le=1,
        description=(
            "Probability that a batch of maxNumSeqs sequences at full length outgrows the usable "
            "KV blocks (Monte Carlo; the worse of the steady and burst mixes)."
        ),
    )
    preemption_probability_at_default: float = Field(
        ge=0, le=1, description="The same probability at vLLM's default --max-num-seqs."
    )
    default_max_num_seqs: int = Field(ge=0, description="vLLM's default --max-num-seqs here.")
    preemption_target: float = Field(ge=0, le=1, description="spec.policy.preemptionTarget.")
    limited_by: str = Field(description="What bound maxNumSeqs: kv, itl or cap.")
    binding_mix: str = Field(description="The cohort mix that bound it: steady or burst.")


class LatencyPoint(_Status):
    """Decode-step latency and throughput of one replica at one batch size."""

    max_num_seqs: int = Field(ge=0, description="Running sequences.")
    itl_ms_p50: float = Field(ge=0, description="Inter-token latency, median (ms).")
    itl_ms_p95: float = Field(ge=0, description="Inter-token latency, 95th percentile (ms).")
    output_tokens_per_s: float = Field(ge=0, description="Output tokens per second per replica.")
    preemption_probability: float = Field(ge=0, le=1, description="Preemption probability.")


class Latency(_Status):
    """The decode-step latency model at the recommended max-num-seqs."""

    itl_ms_p50: float | None = Field(None, ge=0, description="ITL median (ms).")
    itl_ms_p95: float | None = Field(None, ge=0, description="ITL 95th percentile (ms).")
    output_tokens_per_s: float | None = Field(
        None, ge=0, description="Output tokens per second per replica."
    )
    itl_limit: int | None = Field(
        None, ge=0, description="Largest batch meeting workload.itlTargetMs. null: no target."
    )
    hbm_efficiency: float = Field(gt=0, le=1, description="HBM bandwidth fraction assumed.")


class Applied(_Status):
    """What the operator last wrote to the target."""

    flags: dict[str, str] = Field({}, description="vLLM flags set, without the leading --.")
    replicas: int | None = Field(None, ge=0, description="Replicas set. null: not managed.")
    at: DateTime = Field(description="When it was applied (RFC 3339).")
    hash: str = Field(description="Hash of what was applied; re-applying the same is a no-op.")


class ObservedQuantiles(_Status):
    """Observed length quantiles (tokens)."""

    p50: float = Field(ge=0, description="Median (tokens).")
    p95: float = Field(ge=0, description="95th percentile (tokens).")
    p99: float = Field(ge=0, description="99th percentile (tokens).")


class Observed(_Status):
    """What Prometheus shows the fleet doing, and how the prediction compares."""

    num_gpu_blocks: int | None = Field(None, ge=0, description="KV-cache blocks vLLM reports.")
    block_size: int | None = Field(None, ge=1, description="KV-cache block size vLLM reports.")
    gpu_memory_utilization: float | None = Field(
        None, ge=0, le=1, description="--gpu-memory-utilization vLLM reports."
    )
    kv_usage_p95: float | None = Field(
        None, ge=0, le=1, description="95th percentile of KV-cache usage (fraction of the pool)."
    )
    prompt_tokens: ObservedQuantiles | None = Field(None, description="Prompt lengths (tokens).")
    output_tokens: ObservedQuantiles | None = Field(None, description="Output lengths (tokens).")
    peak_concurrency: float | None = Field(
        None, ge=0, description="Peak concurrent requests (running + waiting), fleet-wide."
    )
    preemptions_per_hour: float | None = Field(
        None, ge=0, description="Preemptions per hour, fleet-wide."
    )
    prefix_cache_hit_rate: float | None = Field(
        None, ge=0, le=1, description="Prefix-cache hit rate (fraction)."
    )
    predicted_num_gpu_blocks: int | None = Field(
        None, ge=0, description="KV-cache blocks the ledger predicted for the observed flags."
    )
    prediction_error_percent: float | None = Field(
        None, description="(predicted - observed) / observed x 100 for numGpuBlocks."
    )
    samples: int = Field(
        0, ge=0, description="Finished requests in the window the quantiles are drawn from."
    )
    window: str = Field(description="Look-back window queried (Prometheus duration).")
    at: DateTime = Field(description="When Prometheus was queried (RFC 3339).")


class InferenceCapacityStatus(_Status):
    """Observed state, written by the operator: the ledger, the recommendation, what was applied
    and what was measured."""

    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation this status was computed from."
    )
    conditions: tuple[Condition, ...] = Field(
        (),
        description=(
            "Ready, Fits, RolloutSafe, Applied, Observed, Calibrated, ModelResolved, Supported."
        ),
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    engine_version: str | None = Field(None, description="Engine version the sizing assumed.")
    engine_version_source: EngineVersionSource | None = Field(
        None, description="Where engineVersion came from: spec, image (tag) or default."
    )
    summary: Summary | None = Field(
        None, description="What was sized: model, GPU and parallelism, resolved."
    )
    model: ModelStatus | None = Field(
        None,
        description=(
            "Where the model came from: catalog or Hub id, the Hub commit, checkpoint bytes."
        ),
    )
    ledger: Ledger | None = Field(
        None, description="Per-rank GPU memory ledger and the KV-cache capacity it leaves."
    )
    vllm_startup: VllmStartup | None = Field(
        None,
        description="What vLLM is predicted to log at startup with the recommended flags.",
    )
    recommendation: Recommendation | None = Field(
        None,
        description=(
            "The vLLM flags, replicas and rollout settings recommended (and, in Enforce mode, "
            "applied), each with its provenance."
        ),
    )
    sizing: Sizing | None = Field(
        None, description="How max-num-seqs was sized and its preemption risk. null: no workload."
    )
    latency: Latency | None = Field(
        None,
        description="Decode-step latency and throughput at the recommendation. null: unknown.",
    )
    applied: Applied | None = Field(
        None, description="What the operator last wrote to the target. null: nothing yet."
    )
    observed: Observed | None = Field(
        None,
        description=(
            "What Prometheus shows the fleet doing, and how the prediction compares. null: not "
            "observed."
        ),
    )

    def condition(self, type_: ConditionType) -> Condition | None:
        """The condition of that type, or None."""
        return next((c for c in self.conditions if c.type == type_), None)


# --------------------------------------------------------------------------------------------
# the resource
# --------------------------------------------------------------------------------------------


class ObjectMeta(_Status):
    """The parts of Kubernetes object metadata the operator reads."""

    name: str = Field(min_length=1, description="Object name.")
    namespace: str | None = Field(None, description="Namespace.")
    uid: str | None = Field(None, description="UID.")
    generation: int | None = Field(None, description="Spec generation.")
    resource_version: str | None = Field(None, description="Resource version.")
    labels: dict[str, str] = Field({}, description="Labels.")
    annotations: dict[str, str] = Field({}, description="Annotations.")
    creation_timestamp: DateTime | None = Field(None, description="Creation time.")


class FieldError(NamedTuple):
    """One invalid field: its dotted path and what is wrong with it."""

    path: str
    message: str


class ManifestError(ValueError):
    """An InferenceCapacity manifest that the API server would reject; the message has one line
    per bad field, each starting with the field's full path."""

    def __init__(self, message: str, errors: Sequence[FieldError] = ()) -> None:
        super().__init__(message)
        self.errors: tuple[FieldError, ...] = tuple(errors)


class ManifestSet(NamedTuple):
    """The documents of a YAML stream, split by kind."""

    capacities: list[dict[str, Any]]
    others: list[dict[str, Any]]


class InferenceCapacity(_Spec):
    """InferenceCapacity sizes a vLLM Deployment from a per-GPU memory ledger: it recommends (and
    in Enforce mode sets) --gpu-memory-utilization, --max-num-seqs, replicas and rolling-update
    headroom."""

    api_version: Literal["capacity.inference.dev/v1alpha1"] = Field(
        API_VERSION, description="capacity.inference.dev/v1alpha1."
    )
    kind: Literal["InferenceCapacity"] = Field(KIND, description="InferenceCapacity.")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: InferenceCapacitySpec = Field(description="Desired state.")
    status: InferenceCapacityStatus | None = Field(None, description="Observed state.")

    @property
    def namespaced_name(self) -> str:
        """``namespace/name`` (or ``name`` when the manifest has no namespace)."""
        meta = self.metadata
        return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name

    def to_dict(self, *, exclude_none: bool = True) -> dict[str, Any]:
        """The object as JSON-ready data with camelCase keys."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=exclude_none)

    @classmethod
    def from_manifest(
        cls, obj: Mapping[str, Any], *, ignore_status: bool = False
    ) -> InferenceCapacity:
        """Parse and validate one InferenceCapacity object (a YAML document, a Kopf body, an
        API response). Raises ManifestError naming every bad field by its full path."""
        if not isinstance(obj, Mapping):
            raise ManifestError(f"an InferenceCapacity must be a mapping, not {type(obj).__name__}")
        data = _plain(obj)
        ident = _identify(data)
        problems: list[FieldError] = []
        if data.get("apiVersion") != API_VERSION:
            problems.append(
                FieldError(
                    "apiVersion", f"must be {API_VERSION!r} (got {data.get('apiVersion')!r})"
                )
            )
        if data.get("kind") != KIND:
            problems.append(FieldError("kind", f"must be {KIND!r} (got {data.get('kind')!r})"))
        if problems:
            raise ManifestError(_format_problems(ident, problems), problems)
        if ignore_status:
            data.pop("status", None)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = [_field_error(err) for err in exc.errors()]
            raise ManifestError(_format_problems(ident, problems), problems) from None


def load_manifests(text: str) -> ManifestSet:
    """Split a (multi-document) YAML stream into InferenceCapacity documents and the rest (e.g. the
    Deployment it targets). ``kind: List`` documents are flattened; empty documents are skipped.
    Documents are returned as plain dicts, unvalidated: pass each capacity to
    ``InferenceCapacity.from_manifest``."""
    try:
        documents = [doc for doc in bounded_yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise ManifestError(f"invalid YAML: {exc}") from None
    result = ManifestSet([], [])
    for number, doc in enumerate(_flatten_lists(documents), start=1):
        if not isinstance(doc, dict):
            raise ManifestError(
                f"document {number} is a {type(doc).__name__}, not a Kubernetes object"
            )
        (result.capacities if doc.get("kind") == KIND else result.others).append(doc)
    return result


# --------------------------------------------------------------------------------------------
# error formatting
# --------------------------------------------------------------------------------------------


def _flatten_lists(documents: Iterable[Any]) -> Iterable[Any]:
    for doc in documents:
        if (
            isinstance(doc, dict)
            and doc.get("kind") == "List"
            and isinstance(doc.get("items"), list)
        ):
            yield from doc["items"]
        else:
            yield doc


def _plain(value: Any) -> Any:
    """Deep copy of Mapping/Sequence views (Kopf bodies) into dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _identify(data: Mapping[str, Any]) -> str:
    meta = data.get("metadata")
    if isinstance(meta, Mapping) and isinstance(meta.get("name"), str):
        namespace = meta.get("namespace")
        name = f"{namespace}/{meta['name']}" if isinstance(namespace, str) else meta["name"]
        return f"{KIND} {name}"
    return KIND


def _format_problems(ident: str, problems: Sequence[FieldError]) -> str:
    noun = "field" if len(problems) == 1 else "fields"
    lines = [f"{ident}: {len(problems)} invalid {noun}:"]
    lines += [f"  {p.path}: {p.message}" for p in problems]
    return "\n".join(lines)


def _format_loc(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path or "(root)"


# Our own cross-field errors already quote the values involved.
# What a pattern means, for error messages (pydantic would quote the regular expression).
_PATTERN_MEANING = {
    DNS1123_SUBDOMAIN: "must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', "
    "starting and ending with a letter or digit",
    DNS1123_LABEL: "must be a DNS-1123 label: lowercase letters, digits and '-', starting and "
    "ending with a letter or digit",
    CONFIG_KEY: "must consist of letters, digits, '-', '_' and '.'",
    RESOURCE_NAME: "must be a resource name such as nvidia.com/gpu",
    ENGINE_VERSION: 'must be a version such as "0.19.0" or "0.10.1.dev101+gbda9d0535"',
    PROM_DURATION: "must be a Prometheus duration such as 30m, 6h or 7d",
    HTTP_URL: "must be an http:// or https:// URL",
    CONDITION_REASON: "must be a CamelCase reason",
}

_SELF_DESCRIBING = frozenset(
    {"model_source", "gpu_memory_source", "quantile_order", "duplicate_cohort", "replica_bounds"}
)


def _field_error(err: Any) -> FieldError:
    loc = _json_loc(err["loc"])
    kind = err["type"]
    path = _format_loc(loc)
    if kind == "missing":
        return FieldError(path, "required field is missing")
    if kind == "extra_forbidden" and loc and isinstance(loc[-1], str):
        guess = get_close_matches(loc[-1], _known_fields(loc[:-1]), n=1, cutoff=0.6)
        return FieldError(
            path, "unknown field" + (f" (did you mean {guess[0]!r}?)" if guess else "")
        )
    message = str(err["msg"])
    if kind == "string_pattern_mismatch":
        pattern = str((err.get("ctx") or {}).get("pattern"))
        message = _PATTERN_MEANING.get(pattern, message)
    value = err.get("input")
    if isinstance(value, bool | int | float | str) and kind not in _SELF_DESCRIBING:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        message = f"{message} (got {shown})"
    return FieldError(path, message)


def _json_loc(loc: Sequence[int | str]) -> tuple[int | str, ...]:
    """The error location with JSON (camelCase) names: pydantic reports a defaulted field that
    failed validation by its Python name."""
    out: list[int | str] = []
    model: type[BaseModel] | None = InferenceCapacity
    for part in loc:
        if isinstance(part, int) or model is None:
            out.append(part)
            continue
        found = next(((n, f) for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if found is None:
            out.append(part)
            model = None
            continue
        name, field = found
        out.append(field.alias or name)
        model = _unwrap_model(field.annotation)
    return tuple(out)


def _known_fields(loc: Sequence[int | str]) -> list[str]:
    """JSON names of the fields of the model found at ``loc`` under InferenceCapacity."""
    model: Any = InferenceCapacity
    for part in loc:
        if isinstance(part, int):
            continue  # tuple index: the item type was already unwrapped
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return []
        model = _unwrap_model(field.annotation)
        if model is None:
            return []
    return [f.alias or n for n, f in model.model_fields.items()]


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _unwrap_model(arg)
        if found is not None:
            return found
    return None
