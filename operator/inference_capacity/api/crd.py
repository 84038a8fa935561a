"""Generate the InferenceCapacity CustomResourceDefinition from the pydantic models.

Why generate: the models are the one definition of the API (``spec.py``, ``status.py``); the CRD in
``crds/`` is derived from them so the API server, ``kubectl explain`` and the operator can never
disagree. A test compares the checked-in file with ``render_crd_yaml()``.

pydantic emits JSON Schema (2020-12); Kubernetes wants a *structural* OpenAPI v3.0 schema. The
conversion, done by ``openapi_schema``:

* ``$ref``s are inlined (a field's own description wins over the model's docstring);
* ``Optional[X]`` (``anyOf: [X, {type: null}]``) becomes ``X`` with ``nullable: true``, except
  for enums: the API server checks ``enum`` even on a null value (kube-openapi's common
  validator), so an optional enum is left non-nullable and an explicit ``null`` is pruned before
  validation, which means the same as leaving the field out;
* ``const`` becomes a one-value ``enum``; numeric ``exclusiveMinimum: n`` becomes
  ``minimum: n, exclusiveMinimum: true``;
* ``additionalProperties: false`` (``extra="forbid"``) is dropped: the API server prunes or, with
  ``kubectl --validate=strict``, rejects unknown fields itself;
* ``default: null`` and empty-collection defaults are dropped (absent means the same); an object
  field whose default is its model's defaults becomes ``default: {}``, from which the API server
  fills in the nested defaults (checked: the two must agree);
* anything else a structural schema cannot hold (another ``anyOf``, ``oneOf``, ``allOf``, a node
  without ``type``, a property without a description) is an error, not silently emitted.

Regenerate with ``python -m inference_capacity.api.crd --write crds/``; ``--check crds/`` exits
non-zero when the file is stale.
"""

from __future__ import annotations

import argparse
import copy
import functools
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from inference_capacity.api import (
    GROUP,
    KIND,
    VERSION,
    InferenceCapacity,
    InferenceCapacitySpec,
    InferenceCapacityStatus,
)

__all__ = [
    "CRD_FILENAME",
    "CRD_NAME",
    "LIST_KIND",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "CrdGenerationError",
    "apply_schema_defaults",
    "build_crd",
    "carries_default",
    "crd_path",
    "main",
    "openapi_schema",
    "status_schema",
    "render_crd_yaml",
]

PLURAL = "inferencecapacities"
SINGULAR = "inferencecapacity"
LIST_KIND = f"{KIND}List"
SHORT_NAMES = ("icap",)
CRD_NAME = f"{PLURAL}.{GROUP}"
CRD_FILENAME = f"{CRD_NAME}.yaml"

_HEADER = (
    "# Generated from operator/inference_capacity/api/ (the pydantic models) by\n"
    "#   python -m inference_capacity.api.crd --write crds/\n"
    "# Do not edit by hand: tests/test_crd.py fails when this file and the models disagree.\n"
)

# Keys a converted node may hold, in the order they are written.
_KEY_ORDER = (
    "description",
    "type",
    "format",
    "nullable",
    "enum",
    "default",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
)
_DROPPED = frozenset({"title"})
_PRESERVE = "x-kubernetes-preserve-unknown-fields"

_PRINTER_COLUMNS: tuple[dict[str, Any], ...] = (
    {
        "name": "Model",
        "type": "string",
        "jsonPath": ".spec.model.name",
        "description": "Model catalog key.",
        "priority": 1,
    },
    {
        "name": "GPU",
        "type": "string",
        "jsonPath": ".status.summary.gpu",
        "description": "GPU the sizing is for.",
    },
    {
        "name": "TP",
        "type": "integer",
        "jsonPath": ".status.summary.tensorParallel",
        "description": "Tensor-parallel size.",
    },
    {
        "name": "Util",
        "type": "number",
        "jsonPath": ".status.recommendation.gpuMemoryUtilization",
        "description": "Recommended --gpu-memory-utilization.",
    },
    {
        "name": "MaxSeqs",
        "type": "integer",
        "jsonPath": ".status.recommendation.maxNumSeqs",
        "description": "Recommended --max-num-seqs.",
    },
    {
        "name": "KV-Tokens",
        "type": "integer",
        "jsonPath": ".status.ledger.kvTokenCapacity",
        "description": "Tokens the KV-cache pool holds per replica.",
        "priority": 1,
    },
    {
        "name": "Replicas",
        "type": "integer",
        "jsonPath": ".status.recommendation.replicas",
        "description": "Recommended replicas.",
    },
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
        "description": "Ready condition.",
    },
    {
        "name": "Age",
        "type": "date",
        "jsonPath": ".metadata.creationTimestamp",
    },
)


class CrdGenerationError(ValueError):
    """The models hold something a structural CRD schema cannot express."""


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a model, as a CRD's openAPIV3Schema node."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs: dict[str, Any] = raw.pop("$defs", {})
    return _convert(raw, defs, model.__name__)


def build_crd() -> dict[str, Any]:
    """The InferenceCapacity CustomResourceDefinition (apiextensions.k8s.io/v1) as a dict."""
    spec = openapi_schema(InferenceCapacitySpec)
    status = openapi_schema(InferenceCapacityStatus)
    root = {
        "description": _docstring(InferenceCapacity),
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "description": (
                    "APIVersion defines the versioned schema of this representation of an object."
                ),
                "type": "string",
            },
            "kind": {
                "description": "Kind is a string value representing the REST resource.",
                "type": "string",
            },
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": LIST_KIND,
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [dict(c) for c in _PRINTER_COLUMNS],
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def render_crd_yaml() -> str:
    """The CRD as the YAML file checked in under crds/ (deterministic)."""
    body = yaml.safe_dump(
        build_crd(), sort_keys=False, default_flow_style=False, width=100, allow_unicode=True
    )
    return _HEADER + body


def crd_path(directory: str | Path) -> Path:
    """Where the CRD file lives in a directory (e.g. the repository's crds/)."""
    return Path(directory) / CRD_FILENAME


@functools.cache
def status_schema() -> Mapping[str, Any]:
    """The CRD's ``status`` schema, as served (the API server fills a written status's
    ``default``s in from it)."""
    root = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema: Mapping[str, Any] = root["properties"]["status"]
    return schema


def carries_default(schema: Mapping[str, Any]) -> bool:
    """Whether the schema or anything under it (properties, map values, array items) has a
    ``default``."""
    if "default" in schema:
        return True
    subs = [*schema.get("properties", {}).values()]
    for key in ("additionalProperties", "items"):
        if isinstance(schema.get(key), Mapping):
            subs.append(schema[key])
    return any(carries_default(sub) for sub in subs)


def apply_schema_defaults(value: Any, schema: Mapping[str, Any]) -> Any:
    """A copy of ``value`` with the schema's ``default``s filled in, as the API server does:
    top-down, and into defaults it has just filled in (so ``default: {}`` picks up the nested
    defaults). Nulls are left alone."""
    if isinstance(value, dict):
        out = dict(value)
        properties: Mapping[str, Any] = schema.get("properties", {})
        for name, sub in properties.items():
            if name not in out and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
            if name in out:
                out[name] = apply_schema_defaults(out[name], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for name in out:
                if name not in properties:
                    out[name] = apply_schema_defaults(out[name], extra)
        return out
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            return [apply_schema_defaults(v, items) for v in value]
        return list(value)
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m inference_capacity.api.crd [--write DIR | --check DIR]``."""
    parser = argparse.ArgumentParser(
        prog="python -m inference_capacity.api.crd",
        description="Print, write or check the InferenceCapacity CRD generated from the models.",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="DIR", help=f"write DIR/{CRD_FILENAME}")
    group.add_argument(
        "--check", metavar="DIR", help=f"exit 1 if DIR/{CRD_FILENAME} is missing or stale"
    )
    args = parser.parse_args(argv)
    text = render_crd_yaml()
    if args.write:
        path = crd_path(args.write)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
        return 0
    if args.check:
        path = crd_path(args.check)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            print(
                f"{path} is stale: run python -m inference_capacity.api.crd --write {args.check}",
                file=sys.stderr,
            )
            return 1
        print(f"{path} is up to date")
        return 0
    sys.stdout.write(text)
    return 0


# --------------------------------------------------------------------------------------------
# JSON Schema (pydantic) -> structural OpenAPI v3 (Kubernetes)
# --------------------------------------------------------------------------------------------


def _docstring(model: type[BaseModel]) -> str:
    return " ".join((model.__doc__ or "").split())


def _resolve(
    node: Mapping[str, Any], defs: Mapping[str, Any], path: str
) -> tuple[dict[str, Any], bool]:
    """Inline $ref and unwrap Optional; returns the merged node and whether it was Optional."""
    node = dict(node)
    optional = False
    while True:
        if "$ref" in node:
            name = str(node.pop("$ref")).rsplit("/", 1)[-1]
            if name not in defs:
                raise CrdGenerationError(f"{path}: unresolved $ref {name!r}")
            node = {**defs[name], **node}  # the field's own keys win over the model's
        elif "anyOf" in node:
            variants = node.pop("anyOf")
            others = [v for v in variants if v != {"type": "null"}]
            if len(others) != 1 or len(others) == len(variants):
                raise CrdGenerationError(
                    f"{path}: anyOf other than Optional[X] is not structural: {variants}"
                )
            optional = True
            node = {**others[0], **node}
        else:
            return node, optional


def _convert(raw: Mapping[str, Any], defs: Mapping[str, Any], path: str) -> dict[str, Any]:
    node, optional = _resolve(raw, defs, path)
    for key in ("oneOf", "allOf", "not", "$defs", "uniqueItems", "prefixItems"):
        if key in node:
            raise CrdGenerationError(f"{path}: {key!r} is not allowed in a structural schema")
    for key in _DROPPED:
        node.pop(key, None)
    if "description" in node:
        node["description"] = " ".join(str(node["description"]).split())
    if "x-kubernetes-validations" in node:
        node["x-kubernetes-validations"] = [
            {"rule": rule["rule"], "message": rule["message"]}
            for rule in node["x-kubernetes-validations"]
        ]
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = node.get(bound)
        if isinstance(value, int | float) and not isinstance(value, bool):
            node[inclusive] = value
            node[bound] = True

    preserve = node.get(_PRESERVE) is True
    extra = node.get("additionalProperties")
    if extra is False or (extra is True and preserve):
        del node["additionalProperties"]
    elif extra is True:
        raise CrdGenerationError(
            f"{path}: a free-form object needs x-kubernetes-preserve-unknown-fields"
        )
    elif isinstance(extra, Mapping):
        node["additionalProperties"] = _convert(extra, defs, f"{path}.*")

    if "properties" in node:
        converted: dict[str, Any] = {}
        for name, sub in node["properties"].items():
            child = _convert(sub, defs, f"{path}.{name}")
            if not child.get("description"):
                raise CrdGenerationError(f"{path}.{name}: every field needs a description")
            converted[name] = child
        node["properties"] = converted
    if "items" in node:
        node["items"] = _convert(node["items"], defs, f"{path}[]")

    if "type" not in node and not preserve:
        raise CrdGenerationError(f"{path}: every schema node needs a type")
    if optional and "enum" not in node:
        node["nullable"] = True
    _convert_default(node, path)

    unknown = set(node) - set(_KEY_ORDER)
    if unknown:
        raise CrdGenerationError(f"{path}: unsupported schema keys {sorted(unknown)}")
    return {key: node[key] for key in _KEY_ORDER if key in node}


def _convert_default(node: dict[str, Any], path: str) -> None:
    if "default" not in node:
        return
    default = node["default"]
    if default is None or default == [] or (default == {} and "properties" not in node):
        del node["default"]
    elif isinstance(default, dict) and "properties" in node:
        implied = apply_schema_defaults({}, node)
        if _without_empty(default) != _without_empty(implied):
            raise CrdGenerationError(
                f"{path}: default {default} is not the model's own defaults {implied}"
            )
        node["default"] = {}


def _without_empty(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _without_empty(v) for k, v in value.items() if v is not None and v != [] and v != {}
        }
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


if __name__ == "__main__":
    raise SystemExit(main())
