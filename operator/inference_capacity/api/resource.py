"""The InferenceCapacity resource: apiVersion, kind, metadata, spec and status, and
:meth:`InferenceCapacity.from_manifest`, which validates one object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError

from .common import API_VERSION, KIND, DateTime, _Spec, _Status
from .manifests import FieldError, ManifestError, _field_error, _format_problems, _identify, _plain
from .spec import InferenceCapacitySpec
from .status import InferenceCapacityStatus

__all__ = [
    "InferenceCapacity",
    "ObjectMeta",
]


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
            problems = [_field_error(err, InferenceCapacity) for err in exc.errors()]
            raise ManifestError(_format_problems(ident, problems), problems) from None
