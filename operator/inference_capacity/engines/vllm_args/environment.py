"""Kubernetes ``$(VAR)`` expansion: the first layer between a container spec and vLLM.

Kubernetes expands ``$(VAR)`` in ``command``/``args`` (``$$`` escapes ``$``) from the
container's environment; unknown names are left as written. :func:`_expand` does the same and
keeps, for every character of the result, the span of raw text it came from, so that a rewrite
can splice exactly those characters; a reference whose value cannot be known here (``valueFrom``,
``envFrom``) stays as written, its characters marked opaque.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["read_env"]


_ENV_NAME: Final = re.compile(r"[A-Z_][A-Z0-9_]*")


@dataclass(frozen=True)
class _EnvVar:
    index: int
    value_from: bool
    known: bool
    value: str


@dataclass(frozen=True)
class _Env:
    """The names Kubernetes can expand in a container: its ``env``, maybe more.

    A name missing from ``env`` may still come from ``envFrom`` or, when it has the
    shape of one, from a service-link variable (``REDIS_SERVICE_HOST``); otherwise
    Kubernetes leaves ``$(name)`` as written.
    """

    vars: Mapping[str, _EnvVar]
    env_from: bool

    def left_as_written(self, name: str) -> bool:
        return name not in self.vars and not self.env_from and not _ENV_NAME.fullmatch(name)


@dataclass(frozen=True)
class _Ref:
    """A ``$(NAME)`` reference: its raw span and the span of its expansion."""

    name: str
    raw_start: int
    raw_end: int
    out_start: int
    out_end: int
    known: bool


@dataclass(frozen=True)
class _Expanded:
    """Text after Kubernetes expansion, with a map from each character to its raw span."""

    text: str
    raw_lo: tuple[int, ...]
    raw_hi: tuple[int, ...]
    opaque: tuple[bool, ...]
    refs: tuple[_Ref, ...]

    @property
    def unknown_at(self) -> int | None:
        return next((r.out_start for r in self.refs if not r.known), None)


def _expand(raw: str, env: _Env) -> _Expanded:
    """Kubernetes ``$(VAR)`` expansion (k8s.io/kubernetes third_party expansion.Expand).

    ``$$`` is one literal ``$``; ``$(NAME)`` becomes the value of a known literal env
    var; a reference whose value we cannot know stays as written with its characters
    marked opaque; a name Kubernetes cannot expand is plain text.
    """
    out: list[str] = []
    lo: list[int] = []
    hi: list[int] = []
    opaque: list[bool] = []
    refs: list[_Ref] = []

    def emit(text: str, start: int, end: int, is_opaque: bool = False) -> None:
        for ch in text:
            out.append(ch)
            lo.append(start)
            hi.append(end)
            opaque.append(is_opaque)

    i = 0
    while i < len(raw):
        if raw[i] != "$" or i + 1 >= len(raw):
            emit(raw[i], i, i + 1)
            i += 1
            continue
        nxt = raw[i + 1]
        close = raw.find(")", i + 2) if nxt == "(" else -1
        name = raw[i + 2 : close]
        if nxt == "$":
            emit("$", i, i + 2)
        elif close >= 0 and not env.left_as_written(name):
            var = env.vars.get(name)
            value = var.value if var is not None and var.known else None
            start = len(out)
            emit(raw[i : close + 1] if value is None else value, i, close + 1, value is None)
            refs.append(_Ref(name, i, close + 1, start, len(out), value is not None))
            i = close + 1
            continue
        else:
            emit("$", i, i + 1)
            emit(nxt, i + 1, i + 2)
        i += 2
    return _Expanded("".join(out), tuple(lo), tuple(hi), tuple(opaque), tuple(refs))


def _env_table(container: Mapping[str, Any]) -> _Env:
    """The container's ``env`` as Kubernetes resolves it (later entries see earlier ones)."""
    env_from = bool(container.get("envFrom"))
    table: dict[str, _EnvVar] = {}
    entries = container.get("env")
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        name: str = entry["name"]
        if entry.get("valueFrom") is not None:
            table[name] = _EnvVar(index, True, False, "")
            continue
        raw = entry.get("value")
        expanded = _expand(raw if isinstance(raw, str) else "", _Env(dict(table), env_from))
        table[name] = _EnvVar(index, False, expanded.unknown_at is None, expanded.text)
    return _Env(table, env_from)


def _k8s_escape(text: str) -> str:
    """Escape ``$`` so Kubernetes passes ``text`` through unexpanded."""
    return text.replace("$", "$$")


def read_env(container: Mapping[str, Any]) -> dict[str, str | None]:
    """The container's ``env`` as Kubernetes resolves it: ``{name: value}``, None where the
    value is set at run time (``valueFrom``) or refers to what the operator cannot read."""
    return {
        name: (v.value if v.known and not v.value_from else None)
        for name, v in _env_table(container).vars.items()
    }
