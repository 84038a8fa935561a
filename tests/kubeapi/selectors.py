"""Label and field selectors (the string forms of ``labelSelector`` and ``fieldSelector``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .errors import bad_request

Matcher = Callable[[dict[str, Any]], bool]

_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def _check_key(key: str, whole: str) -> None:
    if not key or not _LABEL_KEY.match(key) or len(key.split("/")[-1]) > 63:
        raise bad_request(
            f'unable to parse requirement: invalid label key "{key}" in selector "{whole}"'
        )


def _check_value(value: str, whole: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise bad_request(
            f'unable to parse requirement: invalid label value: "{value}" in selector "{whole}"'
        )


def parse_label_selector(text: str | None) -> Matcher | None:
    """Parse ``a=b,c!=d,e in (x,y),f notin (z),g,!h``; None when the selector is empty."""
    if not text or not text.strip():
        return None
    terms: list[Matcher] = []
    for part in _split_top(text):
        set_match = re.fullmatch(r"([^\s!=()]+)\s+(in|notin)\s*\(([^()]*)\)", part)
        if set_match:
            key, op, raw = set_match.groups()
            _check_key(key, text)
            values = {v.strip() for v in raw.split(",") if v.strip()}
            for value in values:
                _check_value(value, text)
            if op == "in":
                terms.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                terms.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
            continue
        eq_match = re.fullmatch(r"([^\s!=()]+)\s*(==|=|!=)\s*([^\s!=(),]*)", part)
        if eq_match:
            key, op, value = eq_match.groups()
            _check_key(key, text)
            _check_value(value, text)
            if op == "!=":
                terms.append(lambda labels, k=key, v=value: labels.get(k) != v)
            else:
                terms.append(lambda labels, k=key, v=value: labels.get(k) == v)
            continue
        exists_match = re.fullmatch(r"(!?)\s*([^\s!=()]+)", part)
        if exists_match:
            neg, key = exists_match.groups()
            _check_key(key, text)
            if neg:
                terms.append(lambda labels, k=key: k not in labels)
            else:
                terms.append(lambda labels, k=key: k in labels)
            continue
        raise bad_request(f"unable to parse requirement: found '{part}', expected: selector")

    def match(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(term(labels) for term in terms)

    return match


def field_value(obj: dict[str, Any], path: str) -> str | None:
    """Resolve a dotted field path; non-string scalars are rendered as the API server does."""
    current: Any = obj
    for key in path.split("."):
        if not isinstance(current, dict) or key not in current:
            return None if path not in ("metadata.namespace",) else ""
        current = current[key]
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    if isinstance(current, str | int | float):
        return str(current)
    return None


def parse_field_selector(text: str | None) -> Matcher | None:
    if not text or not text.strip():
        return None
    terms: list[Matcher] = []
    for part in _split_top(text):
        match = re.fullmatch(r"([^\s!=]+)\s*(==|=|!=)\s*(.*)", part)
        if not match:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        key, op, value = match.groups()
        value = value.strip()
        if op == "!=":
            terms.append(lambda obj, k=key, v=value: (field_value(obj, k) or "") != v)
        else:
            terms.append(lambda obj, k=key, v=value: (field_value(obj, k) or "") == v)

    def match_all(obj: dict[str, Any]) -> bool:
        return all(term(obj) for term in terms)

    return match_all


def combine(*matchers: Matcher | None) -> Matcher | None:
    active = [m for m in matchers if m is not None]
    if not active:
        return None
    return lambda obj: all(m(obj) for m in active)
