"""The InferenceCapacity API (capacity.inference.dev/v1alpha1): pydantic models of the custom
resource, manifest loading with field-path errors, and generation of the CRD from the models.

Why these models exist: one definition serves three readers.

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

Modules, each importing only those above it:

* :mod:`.common` -- group, version and kind; value sets; name patterns; strict scalars; the
  ``_Spec`` and ``_Status`` base models.
* :mod:`.spec` -- the spec models, :class:`InferenceCapacitySpec` and its parts.
* :mod:`.status` -- the status models, :class:`InferenceCapacityStatus` and its parts.
* :mod:`.manifests` -- :func:`load_manifests`, :class:`ManifestError` and the field-path errors.
* :mod:`.resource` -- :class:`InferenceCapacity` (metadata, spec, status, ``from_manifest``).

``crd.py`` and ``reference.py`` generate the CRD and its Markdown reference from them; callers
import from the package.
"""

from .common import (
    API_VERSION,
    GROUP,
    KIND,
    VERSION,
    BlockSize,
    ConditionStatus,
    ConditionType,
    EngineName,
    EngineVersionSource,
    KvCacheDtype,
    Lifetime,
    Mode,
    ModelSourceKind,
    PrometheusMode,
    Provenance,
    Quantile,
    Quantization,
    SizingRule,
    TargetKind,
    WeightDtype,
)
from .manifests import FieldError, ManifestError, ManifestSet, load_manifests
from .resource import InferenceCapacity, ObjectMeta
from .spec import (
    BurstSpec,
    CaBundleRef,
    Cohort,
    EngineSpec,
    HardwareSpec,
    HeadroomSpec,
    InferenceCapacitySpec,
    ModelConfigMapRef,
    ModelSpec,
    OutputTokens,
    PolicySpec,
    PrometheusSource,
    PromptTokens,
    RolloutSpec,
    TargetRef,
    TokenSecretRef,
    WorkloadSpec,
)
from .status import (
    Applied,
    Condition,
    InferenceCapacityStatus,
    Latency,
    LatencyPoint,
    Ledger,
    LedgerItem,
    LedgerRank,
    ModelStatus,
    Observed,
    ObservedQuantiles,
    Recommendation,
    Sizing,
    StatusContractError,
    Summary,
    VllmStartup,
    status_document,
)

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "VERSION",
    "Applied",
    "BlockSize",
    "BurstSpec",
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
    "StatusContractError",
    "status_document",
    "KvCacheDtype",
    "Latency",
    "LatencyPoint",
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
    "PrometheusMode",
    "PrometheusSource",
    "PromptTokens",
    "Provenance",
    "Quantile",
    "Quantization",
    "Recommendation",
    "RolloutSpec",
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
