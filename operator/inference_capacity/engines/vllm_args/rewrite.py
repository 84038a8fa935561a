"""Rewriting the flags with a minimal diff.

A present flag is changed in place in its own spelling; an absent one is appended at the end of
the vLLM invocation; a value held in a literal ``env`` var through ``$(VAR)`` is changed in the
env var. Every other list element, and every other character of a shell script, stays
byte-identical, so a GitOps diff shows exactly what the operator did and a no-op rewrite is the
identity. When the change cannot be made safely, :class:`VllmArgsError` says why.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .entrypoints import _Site
from .environment import _k8s_escape
from .errors import VllmArgsError, _unsafe
from .parse import _Occurrence, _parse, _Parsed, _Token
from .vocabulary import normalise_flag

__all__ = ["rewrite_flags"]


_SOLE_REF: Final = re.compile(r"\$\(([^)]*)\)")
_INLINE_REF: Final = re.compile(r"(-[^$=\s'\"\\]*)=\$\(([^)]*)\)")


@dataclass(frozen=True)
class _Edit:
    site: _Site
    new: str
    delete: bool = False  # a list element to drop (a removed flag)


@dataclass(frozen=True)
class _EnvEdit:
    name: str
    index: int
    value: str


def rewrite_flags(
    container: Mapping[str, Any], desired: Mapping[str, str], remove: Collection[str] = ()
) -> dict[str, Any]:
    """A new container with each desired flag set; the input is never mutated.

    A present flag is changed in place in its own spelling (``--flag value``,
    ``--flag=value``, ``--flag_name``, ``-tp``); an absent one is appended at the end of
    the vLLM invocation; a value held in a literal ``env`` var through ``$(VAR)`` is
    changed in the env var. Everything else stays byte-identical; when every value
    already matches, the result equals the input. Raises :class:`VllmArgsError` when
    the change cannot be made safely. A flag given several times is changed where it is given
    last (vLLM's argparse keeps the last value). Values are written as given (``--flag value``);
    switching boolean flags on or off is not supported. Each flag of ``remove`` that is present
    is deleted with its value (``--kv-cache-memory-bytes`` when the plan sets the utilization).
    """
    parsed = _parse(container)
    if parsed.hazards and (desired or any(parsed.find(normalise_flag(r)) for r in remove)):
        raise parsed.hazards[0]
    edits: list[_Edit] = []
    env_edits: list[tuple[_EnvEdit, _Occurrence]] = []
    appends: list[tuple[str, str]] = []
    for name, value in _canonical(desired, parsed.container).items():
        found = parsed.find(name)
        if not found:
            appends.append((name, value))
            continue
        # a flag given twice (Helm-built args often repeat one): vLLM's argparse keeps the last,
        # so the last is the one changed; the earlier ones stay as written, without effect
        plan = _plan(parsed, found[-1], value)
        if isinstance(plan, _Edit):
            edits.append(plan)
        elif isinstance(plan, _EnvEdit):
            env_edits.append((plan, found[-1]))
    _check_env_edits(parsed, env_edits)
    edits.extend(_appends(parsed.append_at, appends))
    for name in sorted({normalise_flag(r) for r in remove}):
        if name in desired or any(normalise_flag(k) == name for k in desired):
            raise VllmArgsError("DuplicateFlag", parsed.container, "asked to set and remove", name)
        edits.extend(e for occ in parsed.find(name) for e in _removal(parsed.container, occ))
    return _apply(container, edits, [e for e, _ in env_edits])


def _removal(container: str, occ: _Occurrence) -> list[_Edit]:
    """Edits that delete a flag and its separate value token."""
    tokens = [t for t in (occ.flag, occ.value) if t is not None]
    for token in tokens:
        if token.dynamic or token.continuation or not token.known and token is occ.flag:
            raise _unsafe(container, f"cannot remove {token.raw!r} safely", occ.name)
    first, last = tokens[0], tokens[-1]
    if first.site.span is None:
        return [_Edit(t.site, "", delete=True) for t in tokens]
    assert last.site.span is not None
    start, end = first.site.span[0], last.site.span[1]
    return [_Edit(_Site(first.site.field, first.site.index, (start, end)), "", delete=True)]


def _canonical(desired: Mapping[str, str], container: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in desired.items():
        name = normalise_flag(key)
        if out.get(name, value) != value:
            raise VllmArgsError("DuplicateFlag", container, "asked for two different values", name)
        out[name] = value
    return out


def _plan(parsed: _Parsed, occ: _Occurrence, value: str) -> _Edit | _EnvEdit | None:
    """How to give a present flag ``value``: splice its token, change its env var, or nothing."""
    if occ.flag is not None and occ.value is None and not occ.inline:
        raise VllmArgsError("MissingFlagValue", parsed.container, "given without a value", occ.name)
    if occ.known and occ.text == value:
        return None
    if occ.inline:
        assert occ.flag is not None
        token = occ.flag
        match = _INLINE_REF.fullmatch(_unquoted(token))
        ref = match.group(2) if match and len(token.refs) == 1 else None
    else:
        assert occ.value is not None
        token = occ.value
        match = _SOLE_REF.fullmatch(_unquoted(token))
        ref = match.group(1) if match and len(token.refs) == 1 else None
    if ref is not None and not token.split_ref:
        return _plan_env(parsed, occ, token, ref, value)
    _check_plain(parsed.container, occ, token)
    if occ.inline:
        return _Edit(token.site, _inline_replacement(token, value))
    return _Edit(token.site, _value_replacement(token, value))


def _unquoted(token: _Token) -> str:
    raw = token.raw
    if token.shell and len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    return raw


def _plan_env(
    parsed: _Parsed, occ: _Occurrence, token: _Token, ref: str, value: str
) -> _EnvEdit | None:
    var = parsed.env.vars.get(ref)
    if var is None:
        raise VllmArgsError(
            "UnresolvedReference",
            parsed.container,
            f"value $({ref}) names no env var of the container (envFrom?)",
            occ.name,
        )
    if var.value_from:
        raise VllmArgsError(
            "ValueFromReference",
            parsed.container,
            f"value comes from env var {ref} set with valueFrom",
            occ.name,
        )
    if var.known and var.value == value:
        return None
    if token.shell and shlex.quote(value) != value:
        raise _unsafe(parsed.container, f"value {value!r} would need quoting in $({ref})", occ.name)
    return _EnvEdit(ref, var.index, value)


def _check_plain(container: str, occ: _Occurrence, token: _Token) -> None:
    """Refuse to splice a token whose raw text is not plain text."""
    if token.dynamic:
        raise _unsafe(container, f"value {token.raw!r} is a shell expansion", occ.name)
    if token.refs:
        var = token.refs[0].name
        reason = "UnsupportedReference" if token.known else "UnresolvedReference"
        raise VllmArgsError(reason, container, f"{token.raw!r} mixes $({var}) with text", occ.name)
    if token.continuation:
        raise _unsafe(container, f"line continuation inside {token.raw!r}", occ.name)


def _check_env_edits(parsed: _Parsed, env_edits: Sequence[tuple[_EnvEdit, _Occurrence]]) -> None:
    planned: Counter[str] = Counter(edit.name for edit, _ in env_edits)
    values: dict[str, str] = {}
    for edit, occ in env_edits:
        if values.setdefault(edit.name, edit.value) != edit.value:
            raise VllmArgsError(
                "SharedReference",
                parsed.container,
                f"env var {edit.name} feeds flags asked for different values",
                occ.name,
            )
        if parsed.ref_counts[edit.name] > planned[edit.name]:
            raise VllmArgsError(
                "SharedReference",
                parsed.container,
                f"env var {edit.name} is also used elsewhere; changing it would change that too",
                occ.name,
            )


def _shell_word(old_raw: str, value: str) -> str:
    """``value`` as a shell word, in the quote style of the word it replaces when possible."""
    quoted = shlex.quote(value)
    if quoted == value and len(old_raw) >= 2 and old_raw[0] == old_raw[-1] and old_raw[0] in "'\"":
        quoted = f"{old_raw[0]}{value}{old_raw[0]}"
    return quoted


def _value_replacement(token: _Token, value: str) -> str:
    return _k8s_escape(_shell_word(token.raw, value) if token.shell else value)


def _inline_replacement(token: _Token, value: str) -> str:
    prefix, _, old_value = token.raw.partition("=")
    if not token.shell:
        return f"{prefix}={_k8s_escape(value)}"
    spelled = token.text.split("=", 1)[0]
    if prefix == spelled:
        return f"{prefix}={_k8s_escape(_shell_word(old_value, value))}"
    return _k8s_escape(shlex.quote(f"{spelled}={value}"))


def _appends(at: _Site, flags: Sequence[tuple[str, str]]) -> list[_Edit]:
    if not flags:
        return []
    if at.span is not None:
        text = "".join(f" --{name} {shlex.quote(value)}" for name, value in flags)
        return [_Edit(at, _k8s_escape(text))]
    return [_Edit(at, item) for name, value in flags for item in (f"--{name}", _k8s_escape(value))]


def _apply(
    container: Mapping[str, Any], edits: Sequence[_Edit], env_edits: Sequence[_EnvEdit]
) -> dict[str, Any]:
    new: dict[str, Any] = copy.deepcopy(dict(container))
    if not edits and not env_edits:
        return new
    for list_name in {e.site.field for e in edits}:
        new[list_name] = list(new.get(list_name) or [])
    spans: dict[tuple[str, int], list[_Edit]] = {}
    dropped: dict[str, set[int]] = {}
    for edit in edits:
        if edit.delete and edit.site.span is None:
            dropped.setdefault(edit.site.field, set()).add(edit.site.index)
        elif edit.site.span is not None:
            spans.setdefault((edit.site.field, edit.site.index), []).append(edit)
        elif edit.site.index < 0:
            new[edit.site.field].append(edit.new)
        else:
            new[edit.site.field][edit.site.index] = edit.new
    for (list_name, index), group in spans.items():
        new[list_name][index] = _splice(new[list_name][index], group)
    for list_name, indices in dropped.items():
        new[list_name] = [v for i, v in enumerate(new[list_name]) if i not in indices]
    if env_edits:
        new["env"] = [dict(e) for e in new["env"]]
        for env_edit in env_edits:
            new["env"][env_edit.index]["value"] = _k8s_escape(env_edit.value)
    return new


def _splice(text: str, edits: Sequence[_Edit]) -> str:
    for edit in sorted(edits, key=lambda e: e.site.span or (0, 0), reverse=True):
        assert edit.site.span is not None
        start, end = edit.site.span
        if edit.delete:
            while start > 0 and text[start - 1] in " \t":
                start -= 1  # the blank before a removed flag goes with it
        text = text[:start] + edit.new + text[end:]
    return text
