"""The CRD reference in Markdown, generated from the CRD's own schema (so it cannot drift):

python -m inference_capacity.api.reference > docs/crd-reference.md
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from .crd import build_crd


def _type(node: Mapping[str, Any]) -> str:
    t = str(node.get("type", "object" if "properties" in node else "any"))
    if t == "array":
        return f"array of {_type(node.get('items', {}))}"
    fmt = node.get("format")
    return f"{t} ({fmt})" if fmt else t


def _constraints(node: Mapping[str, Any]) -> str:
    parts = []
    if "enum" in node:
        parts.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    for key, label in (
        ("minimum", "≥"),
        ("maximum", "≤"),
        ("exclusiveMinimum", ">"),
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("maxItems", "max items"),
        ("pattern", "pattern"),
    ):
        if key in node and node[key] is not False:
            value = node[key]
            if key == "exclusiveMinimum" and value is True:
                value = node.get("minimum")
                parts = [p for p in parts if not p.startswith("≥")]
            parts.append(f"{label} `{value}`")
    if "default" in node and node["default"] not in ({}, []):
        parts.append(f"default `{json.dumps(node['default'])}`")
    for rule in node.get("x-kubernetes-validations", []) or []:
        parts.append(f"rule: {rule.get('message', rule.get('rule'))}")
    return "; ".join(parts)


def _rows(node: Mapping[str, Any], path: str) -> Iterator[tuple[str, str, bool, str, str]]:
    required = set(node.get("required", []) or [])
    for name, child in (node.get("properties") or {}).items():
        p = f"{path}.{name}"
        desc = " ".join(str(child.get("description", "")).split())
        yield p, _type(child), name in required, desc, _constraints(child)
        if "properties" in child:
            yield from _rows(child, p)
        elif child.get("type") == "array" and "properties" in child.get("items", {}):
            yield from _rows(child["items"], p + "[]")


def render() -> str:
    crd = build_crd()
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    g = crd["spec"]["group"]
    lines = [
        f"# `{crd['spec']['names']['kind']}` reference ({g}/{version['name']})",
        "",
        "Generated from the CRD schema by `python -m inference_capacity.api.reference`; "
        "`kubectl explain inferencecapacity.spec` shows the same descriptions.",
        "",
    ]
    for top in ("spec", "status"):
        node = schema["properties"][top]
        lines += [
            f"## {top}",
            "",
            " ".join(str(node.get("description", "")).split()),
            "",
            "| field | type | required | description | constraints |",
            "|---|---|---|---|---|",
        ]
        for p, t, req, desc, cons in _rows(node, top):
            lines.append(
                f"| `{p}` | {t} | {'yes' if req else ''} | {desc.replace('|', '/')} "
                f"| {cons.replace('|', '/')} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
