"""Reading manifests: splitting a YAML stream by kind, and the field-path errors.

A manifest the API server would reject raises :class:`ManifestError`, with one line per bad
field, each starting with its full JSON path (``spec.workload.cohorts[0].promptTokens.p95:
...``): pydantic's errors are translated here to the API's camelCase names, with a "did you
mean" for an unknown field and the meaning of a pattern rather than the regular expression.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping, Sequence
from difflib import get_close_matches
from typing import Any, NamedTuple

import yaml
from pydantic import BaseModel

from . import bounded_yaml
from .common import (
    CONDITION_REASON,
    CONFIG_KEY,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    ENGINE_VERSION,
    HTTP_URL,
    KIND,
    PROM_DURATION,
    RESOURCE_NAME,
)

__all__ = [
    "FieldError",
    "ManifestError",
    "ManifestSet",
    "load_manifests",
]


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


def _field_error(err: Any, root: type[BaseModel]) -> FieldError:
    loc = _json_loc(err["loc"], root)
    kind = err["type"]
    path = _format_loc(loc)
    if kind == "missing":
        return FieldError(path, "required field is missing")
    if kind == "extra_forbidden" and loc and isinstance(loc[-1], str):
        guess = get_close_matches(loc[-1], _known_fields(loc[:-1], root), n=1, cutoff=0.6)
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


def _json_loc(loc: Sequence[int | str], root: type[BaseModel]) -> tuple[int | str, ...]:
    """The error location with JSON (camelCase) names: pydantic reports a defaulted field that
    failed validation by its Python name."""
    out: list[int | str] = []
    model: type[BaseModel] | None = root
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


def _known_fields(loc: Sequence[int | str], root: type[BaseModel]) -> list[str]:
    """JSON names of the fields of the model found at ``loc`` under ``root`` (the resource)."""
    model: Any = root
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
