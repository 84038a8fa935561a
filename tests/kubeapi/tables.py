"""``meta.k8s.io/v1`` Tables (``kubectl get`` columns) and a JSONPath subset for printer columns."""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Cell = Callable[[dict[str, Any]], Any]


def parse_time(text: str) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError, AttributeError):
        return None


def human_age(timestamp: Any, now: datetime.datetime | None = None) -> str | None:
    """Render an age like kubectl (``45s``, ``3m10s``, ``17m``, ``5h2m``, ``3d4h``)."""
    then = parse_time(timestamp) if isinstance(timestamp, str) else None
    if then is None:
        return None
    now = now or datetime.datetime.now(datetime.UTC)
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if days < 8:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y"


# ---------------------------------------------------------------------------- JSONPath subset

_SEGMENT = re.compile(
    r"""\.(?P<name>[A-Za-z0-9_\-/$]+)
      | \[(?P<index>-?\d+)\]
      | \[\*\]
      | \[['"](?P<key>[^'"]+)['"]\]
      | \[\?\(@\.(?P<fkey>[A-Za-z0-9_.\-]+)\s*(?P<fop>==|!=)\s*['"]?(?P<fval>[^'")]*)['"]?\)\]
      | \.\*
    """,
    re.VERBOSE,
)


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Evaluate ``.a.b``, ``[0]``, ``['k']``, ``[*]``, ``[?(@.k=="v")]``; returns the matches."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    if text.startswith("$"):
        text = text[1:]
    current = [obj]
    pos = 0
    while pos < len(text):
        match = _SEGMENT.match(text, pos)
        if not match:
            return []
        pos = match.end()
        token = match.group(0)
        nxt: list[Any] = []
        for item in current:
            if match.group("name") is not None or match.group("key") is not None:
                key = match.group("name") or match.group("key")
                if isinstance(item, dict) and key in item:
                    nxt.append(item[key])
            elif match.group("index") is not None:
                idx = int(match.group("index"))
                if isinstance(item, list) and -len(item) <= idx < len(item):
                    nxt.append(item[idx])
            elif match.group("fkey") is not None:
                if isinstance(item, list):
                    for element in item:
                        value: Any = element
                        for part in match.group("fkey").split("."):
                            value = value.get(part) if isinstance(value, dict) else None
                        equal = str(value) == match.group("fval") if value is not None else False
                        if equal == (match.group("fop") == "=="):
                            nxt.append(element)
            elif token in ("[*]", ".*"):
                if isinstance(item, list):
                    nxt.extend(item)
                elif isinstance(item, dict):
                    nxt.extend(item.values())
        current = nxt
    return current


def cell_value(obj: dict[str, Any], path: str, kind: str) -> Any:
    values = jsonpath(obj, path)
    if not values:
        return None
    value = values[0] if len(values) == 1 else values
    if kind == "date":
        return human_age(value) if isinstance(value, str) else None
    if kind == "integer":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if kind == "number":
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


@dataclass
class Column:
    name: str
    type: str
    cell: Cell
    priority: int = 0
    description: str = ""
    format: str = ""

    def definition(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        }


@dataclass
class TableSpec:
    columns: list[Column] = field(default_factory=list)


def age_column() -> Column:
    return Column(
        "Age",
        "date",
        lambda o: human_age((o.get("metadata") or {}).get("creationTimestamp")),
        description="CreationTimestamp is a timestamp representing the server time when this "
        "object was created.",
    )


def name_column() -> Column:
    return Column(
        "Name",
        "string",
        lambda o: (o.get("metadata") or {}).get("name"),
        format="name",
        description="Name must be unique within a namespace.",
    )


def printer_columns(definitions: list[dict[str, Any]]) -> list[Column]:
    """Columns of a CRD version: Name + additionalPrinterColumns (or Name + Age)."""
    if not definitions:
        return [name_column(), age_column()]
    columns = [name_column()]
    for spec in definitions:
        kind = spec.get("type", "string")
        path = spec.get("jsonPath", "")
        columns.append(
            Column(
                spec.get("name", ""),
                kind,
                (lambda o, p=path, k=kind: cell_value(o, p, k)),
                priority=int(spec.get("priority", 0) or 0),
                description=spec.get("description", ""),
                format=spec.get("format", ""),
            )
        )
    return columns


def make_table(
    columns: list[Column],
    objects: list[dict[str, Any]],
    resource_version: str,
    metadata_extra: dict[str, Any] | None = None,
    include_object: str = "Metadata",
) -> dict[str, Any]:
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [col.cell(obj) for col in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            }
        rows.append(row)
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if metadata_extra:
        meta.update(metadata_extra)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": [col.definition() for col in columns],
        "rows": rows,
    }
