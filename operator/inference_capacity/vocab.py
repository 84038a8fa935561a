"""The package's value sets, defined once: dtypes and their widths, KV-cache dtypes, quantization
methods, the lifetime and provenance of ledger terms, status condition types and reasons.

Each set is a ``Literal`` (so mypy checks every spelling) and a ``frozenset`` or mapping read at
run time (``get_args`` of the Literal, so the two cannot drift). The spec (``api/``), the CLI,
the model parser, the ledger and the vLLM rules read these; none keeps its own list.

Pure: standard library only, the bottom layer of the package with ``units``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal, get_args

__all__ = [
    "CALIBRATION_REASONS",
    "CLI_DTYPE_CHOICES",
    "CLI_KV_CACHE_DTYPE_CHOICES",
    "CONDITION_REASONS",
    "CONDITION_STATUSES",
    "CONDITION_TYPES",
    "CalibrationReason",
    "ControllerReason",
    "ConditionReason",
    "ConditionStatus",
    "ConditionType",
    "DTYPE_ALIASES",
    "DTYPE_BYTES",
    "DTYPE_CHOICES",
    "FIT_REASONS",
    "FitReason",
    "KV_CACHE_DTYPES",
    "KV_DTYPE_BYTES",
    "KvCacheDtype",
    "LIFETIMES",
    "Lifetime",
    "ModelDtype",
    "OBSERVATION_REASONS",
    "ObservationReason",
    "PROVENANCES",
    "Provenance",
    "QUANT_ALIASES",
    "QUANT_METHODS",
    "QuantMethod",
    "ROLLOUT_REASONS",
    "RolloutReason",
    "SPEC_KV_CACHE_DTYPES",
    "SpecKvCacheDtype",
    "SpecWeightDtype",
    "TORCH_DTYPE_BYTES",
    "WEIGHT_DTYPES",
]

# --- model (weight and activation) dtypes ---------------------------------------------------

#: The dtypes vLLM serves a model in (after ``--dtype auto`` is resolved).
ModelDtype = Literal["bfloat16", "float16", "float32"]
#: Bytes per element of each model dtype.
DTYPE_BYTES: Final[Mapping[str, int]] = MappingProxyType(
    {"bfloat16": 2, "float16": 2, "float32": 4}
)
#: config.json ``torch_dtype`` spellings with their widths: the model dtypes plus torch's own
#: aliases ``torch.float`` and ``torch.half`` (used for ``mamba_ssm_dtype`` and friends).
TORCH_DTYPE_BYTES: Final[Mapping[str, int]] = MappingProxyType(
    {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
)
#: ``--dtype`` short spellings vLLM accepts, to the dtype they name.
DTYPE_ALIASES: Final[Mapping[str, str]] = MappingProxyType(
    {"half": "float16", "fp16": "float16", "bf16": "bfloat16"}
)
#: Every ``--dtype`` value the predictor accepts (vLLM's choices it models).
DTYPE_CHOICES: Final = ("auto", "bfloat16", "float16", "float32", "half", "bf16", "fp16")
#: ``--dtype`` choices of the CLI (the long spellings plus ``half``).
CLI_DTYPE_CHOICES: Final = ("auto", "bfloat16", "float16", "float32", "half")
#: ``spec.model.dtype`` in the CRD.
SpecWeightDtype = Literal["auto", "bfloat16", "float16", "float32"]
WEIGHT_DTYPES: Final = frozenset(get_args(SpecWeightDtype))

# --- KV-cache dtypes ------------------------------------------------------------------------

#: Bytes per KV element: 0 for "auto" (the model dtype's width). ``int8`` is a storage format a
#: checkpoint's kv_cache_scheme can name, not a ``--kv-cache-dtype`` value.
KV_DTYPE_BYTES: Final[Mapping[str, int]] = MappingProxyType(
    {
        "auto": 0,
        "bfloat16": 2,
        "float16": 2,
        "fp8": 1,
        "fp8_e4m3": 1,
        "fp8_e5m2": 1,
        "int8": 1,
        "fp8_per_token_head": 1,
        "int8_per_token_head": 1,
        "int4_per_token_head": 1,  # elements; two a byte (ledger.kv.kv_token_format's layout)
        "fp8_ds_mla": 1,
        "nvfp4": 1,  # elements; the packed size is ledger.kv.kv_token_format's
    }
)
#: ``spec.model.kvCacheDtype`` in the CRD: the values a spec may ask for. The per-token-head
#: and nvfp4 formats are vLLM 0.20+ choices, int4_per_token_head 0.25+ (cache/config.py
#: CacheDType); an earlier release is refused by the flag table (engines/vllm.py
#: resolve_settings).
SpecKvCacheDtype = Literal[
    "auto",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_per_token_head",
    "int8_per_token_head",
    "int4_per_token_head",
    "nvfp4",
]
SPEC_KV_CACHE_DTYPES: Final = frozenset(get_args(SpecKvCacheDtype))
#: ``--kv-cache-dtype`` values the ledger sizes (vLLM cache/config.py CacheDType; page layouts
#: in ledger/kv.py KV_FORMATS): the spec's plus the 16-bit names and DeepSeek's MLA layout.
KvCacheDtype = Literal[SpecKvCacheDtype, "bfloat16", "float16", "fp8_ds_mla"]
KV_CACHE_DTYPES: Final = frozenset(get_args(KvCacheDtype))
#: ``--kv-cache-dtype`` choices of the CLI: the spec's plus the 16-bit ones.
CLI_KV_CACHE_DTYPE_CHOICES: Final = (*get_args(SpecKvCacheDtype), "bfloat16", "float16")

# --- quantization methods -------------------------------------------------------------------

#: ``quant_method`` / ``--quantization`` values whose weight bytes the ledger sizes
#: (model/quant.py); the CRD's ``spec.model.quantization`` enum is the same set.
QuantMethod = Literal[
    "fp8",
    "compressed-tensors",
    "awq",
    "awq_marlin",
    "gptq",
    "gptq_marlin",
    "mxfp4",
    "bitsandbytes",
    "modelopt",
    "modelopt_fp4",
    "fbgemm_fp8",
    "experts_int8",
    "ptpc_fp8",
]
#: In the order vLLM's docs list them (error messages name them in this order).
QUANT_METHODS: Final[tuple[str, ...]] = get_args(QuantMethod)
#: ``--quantization`` names that are the same format as another entry.
QUANT_ALIASES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "awq_marlin": "awq",
        "gptq_marlin": "gptq",
        "fbgemm_fp8": "fp8",
        "modelopt": "fp8",
        "modelopt_fp8": "fp8",
        "ptpc_fp8": "fp8",
    }
)

# --- ledger terms ---------------------------------------------------------------------------

#: How long a ledger item's bytes stay allocated.
Lifetime = Literal["worker", "request", "iteration", "startup"]
LIFETIMES: Final = frozenset(get_args(Lifetime))
#: How a figure was obtained: from vLLM's code (exact), fitted on startup logs (calibrated), or
#: an assumption written next to the constant (assumed).
Provenance = Literal["exact", "calibrated", "assumed"]
PROVENANCES: Final = frozenset(get_args(Provenance))

# --- status conditions ----------------------------------------------------------------------

ConditionType = Literal[
    "Ready",
    "Fits",
    "RolloutSafe",
    "Applied",
    "Observed",
    "Calibrated",
    "ModelResolved",
    "Supported",
    "PredictionDrift",
]
CONDITION_TYPES: Final = frozenset(get_args(ConditionType))
ConditionStatus = Literal["True", "False", "Unknown"]
CONDITION_STATUSES: Final = frozenset(get_args(ConditionStatus))

#: ``Fits`` reasons (planner.make_plan).
FitReason = Literal[
    "Fits",
    "VllmWillNotStart",
    "KvPoolUnreachable",
    "OverCommitted",
    "WorkloadDoesNotFit",
    "ExceedsMaxReplicas",
]
FIT_REASONS: Final = frozenset(get_args(FitReason))
#: ``RolloutSafe`` reasons (sizing.rollout.plan_rollout).
RolloutReason = Literal["NoCapacity", "ExceedsMaxReplicas", "NoRolloutHeadroom", "RolloutHeadroom"]
ROLLOUT_REASONS: Final = frozenset(get_args(RolloutReason))
#: ``Observed`` reasons (observe.observation).
ObservationReason = Literal[
    "Observed",
    "BucketsTooCoarse",
    "PrometheusUnreachable",
    "AuthRefused",
    "QueryRejected",
    "NoSeries",
    "InsufficientData",
    "PrometheusNotAllowed",
    "TokenSecretNotAllowed",
    "Pending",
]
OBSERVATION_REASONS: Final = frozenset(get_args(ObservationReason))
#: ``Calibrated`` reasons (observe.calibration).
CalibrationReason = Literal["Calibrated", "PredictionDrift", "NoPoolData"]
CALIBRATION_REASONS: Final = frozenset(get_args(CalibrationReason))
#: Reasons the controller sets on ``Ready``, ``Applied``, ``Supported`` and ``ModelResolved``
#: itself (controller/reconcile.py), besides the reasons above it passes through.
ControllerReason = Literal[
    "Ready",
    "Applied",
    "UpToDate",
    "RecommendOnly",
    "StabilizationWindow",
    "RolloutInProgress",
    "NoSafeRollout",
    "NotFits",
    "ObservationPending",
    "PodDisruptionBudgetConflict",
    "InsufficientGpusPerPod",
    "InvalidInput",
    "InvalidSpec",
    "SpecConflict",
    "TargetConflict",
    "TargetNotFound",
    "Supported",
    "UnsupportedFlag",
]
#: Every reason a condition of this operator can carry, except the model-resolution reasons
#: (model.source.ModelSourceError.reason), which name the failure of a Hub or file access.
ConditionReason = (
    FitReason | RolloutReason | ObservationReason | CalibrationReason | ControllerReason
)
CONDITION_REASONS: Final = (
    FIT_REASONS
    | ROLLOUT_REASONS
    | OBSERVATION_REASONS
    | CALIBRATION_REASONS
    | frozenset(get_args(ControllerReason))
)
