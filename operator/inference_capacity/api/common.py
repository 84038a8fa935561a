"""What the spec, the status and the resource share: the API's group, version and kind, its
value sets, the Kubernetes name patterns, strict scalars, schema helpers and the two base models.

The base models carry the conventions: models are frozen; JSON names are camelCase (Python names
are snake_case, both are accepted on input); spec models (``_Spec``) forbid unknown fields so a
typo is an error, and their scalars are strict (``SInt``, ``SStr``, ...), as they are for the API
server. Status models (``_Status``) are written by the operator and ignore unknown fields, so an
older operator can read a newer status.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, Strict
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from ..vocab import ConditionStatus, ConditionType, Lifetime, Provenance
from ..vocab import QuantMethod as Quantization
from ..vocab import SpecKvCacheDtype as KvCacheDtype
from ..vocab import SpecWeightDtype as WeightDtype

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "VERSION",
    "BlockSize",
    "ConditionStatus",
    "ConditionType",
    "EngineName",
    "EngineVersionSource",
    "KvCacheDtype",
    "Lifetime",
    "Mode",
    "ModelSourceKind",
    "PrometheusMode",
    "Provenance",
    "Quantile",
    "Quantization",
    "SizingRule",
    "TargetKind",
    "WeightDtype",
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
EngineName = Literal["vllm"]
BlockSize = Literal[8, 16, 32, 64, 128]
Quantile = Literal["p50", "p95", "p99"]
SizingRule = Literal["Distribution", "Conservative"]
PrometheusMode = Literal["replace", "max", "spec-only"]
ModelSourceKind = Literal["local", "catalog", "hub", "configMap", "inline"]
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
