"""Reading the flags: the third layer, vLLM's argparse, over the words of the two before.

Each token is one argument as vLLM will see it (after Kubernetes expansion and, for a shell
script, the shell's word splitting) and remembers where its raw text lives: a list element, or
a span inside the script. :func:`_parse` reads them argparse-like into flag occurrences, and
lists the hazards that make a rewrite unsafe (a shell expansion after the entry point that may
hide flags, a command substitution, a here-document). A read is best effort: hazards do not stop
:func:`read_flags`.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..vllm_flags import DASH_O
from .entrypoints import _argv, _container_name, _Entry, _entry_at, _find_entry, _Site, _str_list
from .environment import _Env, _env_table, _expand, _Expanded, _Ref
from .errors import VllmArgsError, _unsafe
from .shell import _Lexer, _ShellError, _simple_commands, _Word
from .vocabulary import _BOOL_WORDS, _BOOLEAN_FLAGS, normalise_flag

__all__ = ["hidden_flags", "read_flags", "unresolved_flags"]


_NEGATIVE_NUMBER: Final = re.compile(r"-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
#: ``-O3``, ``-O=3`` (vLLM's FlexibleArgumentParser.parse_args: -O without a space); ``-O.x``
#: (the dotted compilation-config form) is not this
_DASH_O_INLINE: Final = re.compile(r"-O=?([^.=].*)")


@dataclass(frozen=True)
class _Token:
    """One argument as vLLM sees it, and where its raw text lives."""

    text: str
    raw: str
    site: _Site
    unknown_at: int | None  # index in ``text`` of the first character whose value is unknown
    refs: tuple[_Ref, ...]  # Kubernetes references in ``raw`` (offsets relative to raw)
    dynamic: bool = False  # shell expansion: unknown value, may split into words
    cmdsub: bool = False
    continuation: bool = False
    split_ref: bool = False  # a known reference's value spreads over several shell words

    @property
    def shell(self) -> bool:
        return self.site.span is not None

    @property
    def known(self) -> bool:
        return self.unknown_at is None

    @property
    def opaque(self) -> bool:
        """The token starts with an unknown value: it might be anything, flags included."""
        return self.unknown_at == 0

    def looks_like_flag(self) -> bool:
        return (
            len(self.text) > 1
            and self.text.startswith("-")
            and not self.opaque
            and not _NEGATIVE_NUMBER.fullmatch(self.text)
        )


def _list_token(site: _Site, raw: str, env: _Env) -> _Token:
    expanded = _expand(raw, env)
    return _Token(expanded.text, raw, site, expanded.unknown_at, expanded.refs)


def _shell_token(word: _Word, script: str, expanded: _Expanded, site: _Site) -> _Token:
    lo, hi = expanded.raw_lo[word.start], expanded.raw_hi[word.end - 1]
    inside = tuple(
        _Ref(r.name, r.raw_start - lo, r.raw_end - lo, r.out_start, r.out_end, r.known)
        for r in expanded.refs
        if lo <= r.raw_start and r.raw_end <= hi
    )
    split = any(
        r.out_start < word.end
        and r.out_end > word.start
        and not (word.start <= r.out_start and r.out_end <= word.end)
        for r in expanded.refs
    )
    return _Token(
        word.text,
        script[lo:hi],
        _Site(site.field, site.index, (lo, hi)),
        word.unknown_at,
        inside,
        word.dynamic,
        word.cmdsub,
        word.continuation,
        split,
    )


@dataclass(frozen=True)
class _Occurrence:
    name: str
    flag: _Token | None  # None for the positional model
    value: _Token | None  # separate value token; None for inline and boolean flags
    inline: bool
    text: str
    known: bool


@dataclass(frozen=True)
class _Parsed:
    container: str
    occurrences: tuple[_Occurrence, ...]
    hazards: tuple[VllmArgsError, ...]
    append_at: _Site  # span (offset, offset) for a shell script; span None: end of list
    env: _Env
    ref_counts: Counter[str]

    def find(self, name: str) -> list[_Occurrence]:
        return [o for o in self.occurrences if o.name == name]


def _parse_flags(
    tokens: Sequence[_Token], positional_model: bool, container: str
) -> tuple[list[_Occurrence], list[VllmArgsError]]:
    """argparse-like reading of the tokens after the entry point.

    Returns the occurrences and the hazards: things that make a rewrite unsafe
    (a token that may expand to flags, a command substitution).
    """
    occurrences: list[_Occurrence] = []
    hazards = [
        _unsafe(container, f"command substitution {t.raw!r} in the vLLM command")
        for t in tokens
        if t.cmdsub
    ]
    model_seen, options_done, i = not positional_model, False, 0
    dynamic_model: _Token | None = None  # ``vllm serve $X m``: $X was flags, not the model
    while i < len(tokens):
        token, used = tokens[i], 1
        if options_done or not token.looks_like_flag():
            if dynamic_model is not None:
                hazards.append(_may_hide_flags(container, dynamic_model))
                dynamic_model = None
            if (token.dynamic or token.opaque) and (model_seen or _all_positionals(token)):
                hazards.append(_may_hide_flags(container, token))
            elif not model_seen:
                occurrences.append(
                    _Occurrence("model", None, token, False, token.text, token.known)
                )
                model_seen = True
                dynamic_model = token if token.dynamic or token.opaque else None
        elif token.text == "--":
            options_done = True
        else:
            occurrence, used = _option_at(tokens, i)
            if occurrence is None:
                hazards.append(_may_hide_flags(container, token))
            else:
                occurrences.append(occurrence)
        i += used
    return occurrences, hazards


def _option_at(tokens: Sequence[_Token], i: int) -> tuple[_Occurrence | None, int]:
    """The option starting at ``tokens[i]`` and how many tokens it spans.

    None when the option's name itself is unknown (``--$NAME``).
    """
    token = tokens[i]
    known_upto = len(token.text) if token.unknown_at is None else token.unknown_at
    dash_o = _DASH_O_INLINE.fullmatch(token.text) if token.known else None
    if dash_o is not None:
        return _Occurrence(DASH_O, token, None, True, dash_o.group(1), True), 1
    equals = token.text.find("=")
    if 0 <= equals < known_upto:
        name, value = normalise_flag(token.text[:equals]), token.text[equals + 1 :]
        return _Occurrence(name, token, None, True, value, token.known), 1
    if not token.known:
        return None, 1
    name = normalise_flag(token.text)
    nxt = tokens[i + 1] if i + 1 < len(tokens) else None
    if nxt is None or nxt.looks_like_flag():
        return _Occurrence(name, token, None, False, "true", True), 1
    if (name in _BOOLEAN_FLAGS or name.startswith("no-")) and nxt.text not in _BOOL_WORDS:
        return _Occurrence(name, token, None, False, "true", True), 1
    return _Occurrence(name, token, nxt, False, nxt.text, nxt.known), 2


def _all_positionals(token: _Token) -> bool:
    """``"$@"``/``$*``: the script's own arguments, which may be any flags."""
    return token.dynamic and any(s in token.text for s in ("$@", "$*", "${@", "${*"))


def _may_hide_flags(container: str, token: _Token) -> VllmArgsError:
    reason = "UnsafeShellForm" if token.shell else "UnresolvedReference"
    return VllmArgsError(
        reason, container, f"{token.raw!r} after the vLLM entry point may expand to flags"
    )


def _count_refs(container: Mapping[str, Any], env: _Env) -> Counter[str]:
    """How many times each env var is referenced from command, args and other env values."""
    counts: Counter[str] = Counter(
        r.name for _, raw in _argv(container) for r in _expand(raw, env).refs
    )
    entries = container.get("env")
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, Mapping) and isinstance(entry.get("value"), str):
            counts.update(r.name for r in _expand(entry["value"], env).refs)
    return counts


def _parse(container: Mapping[str, Any]) -> _Parsed:
    name = _container_name(container)
    entry = _find_entry(container)
    if entry is None:
        raise VllmArgsError(
            "NoVllmContainer", name, "no vLLM invocation found in its command, args or image"
        )
    env = _env_table(container)
    if entry.kind == "shell":
        tokens, positional, append_at, hazards = _shell_tokens(container, entry, env, name)
    else:
        tokens, positional, append_at = _list_tokens(container, entry, env)
        hazards = []
    occurrences, flag_hazards = _parse_flags(tokens, positional, name)
    return _Parsed(
        name,
        tuple(occurrences),
        tuple(hazards + flag_hazards),
        append_at,
        env,
        _count_refs(container, env),
    )


def _list_tokens(
    container: Mapping[str, Any], entry: _Entry, env: _Env
) -> tuple[list[_Token], bool, _Site]:
    argv = _argv(container)
    start = entry.position + entry.length if entry.kind == "argv" else 0
    tokens = [_list_token(site, raw, env) for site, raw in argv[start:]]
    has_args = _str_list(container.get("args")) is not None
    target = "args" if has_args or container.get("command") is None else "command"
    return tokens, entry.positional_model, _Site(target, -1)


def _shell_tokens(
    container: Mapping[str, Any], entry: _Entry, env: _Env, name: str
) -> tuple[list[_Token], bool, _Site, list[VllmArgsError]]:
    site, script = _argv(container)[entry.position]
    try:
        shlex.split(script)
    except ValueError as exc:
        raise _unsafe(name, f"shell script cannot be tokenised: {exc}") from exc
    expanded = _expand(script, env)
    lexer = _Lexer(expanded.text, expanded.opaque)
    try:
        words = lexer.run()
    except _ShellError as exc:
        raise _unsafe(name, f"shell script cannot be tokenised: {exc}") from exc
    found = [
        (command, k, hit) for command in _simple_commands(words) for k, hit in _first_entry(command)
    ]
    if len(found) != 1:
        detail = "several vLLM invocations" if found else "vLLM is not run as a simple command"
        raise _unsafe(name, f"shell script: {detail}")
    command, k, (length, positional) = found[0]
    tokens = [_shell_token(w, script, expanded, site) for w in command[k + length :]]
    end = expanded.raw_hi[command[-1].end - 1]
    hazards = [_unsafe(name, "here-document in the shell script")] if lexer.heredoc else []
    return tokens, positional, _Site(site.field, site.index, (end, end)), hazards


def _first_entry(command: Sequence[_Word]) -> list[tuple[int, tuple[int, bool]]]:
    texts = [w.text for w in command]
    for k, word in enumerate(command):
        hit = _entry_at(texts, k) if word.unknown_at is None else None
        if hit is not None:
            return [(k, hit)]
    return []


def read_flags(container: Mapping[str, Any]) -> dict[str, str]:
    """The vLLM flags the container sets, ``{canonical-name: value}``.

    Boolean flags read ``"true"``; the served model is ``"model"``; ``$(VAR)`` values
    are resolved from literal ``env`` entries. An unresolvable value (``valueFrom``,
    an undefined name, a shell expansion) is returned as written and listed by
    :func:`unresolved_flags`. A flag given twice reads as the last one (argparse).
    Best effort: hazards that make a rewrite unsafe do not stop a read.
    """
    return {o.name: o.text for o in _parse(container).occurrences}


def hidden_flags(container: Mapping[str, Any]) -> list[str]:
    """Why flags may hide in the command line where :func:`read_flags` cannot see them (a shell
    expansion or unresolved reference after the entry point, a command substitution): empty
    when every flag vLLM will parse was read."""
    return [str(h) for h in _parse(container).hazards]


def unresolved_flags(container: Mapping[str, Any]) -> set[str]:
    """Flags whose value :func:`read_flags` could not resolve."""
    last = {o.name: o for o in _parse(container).occurrences}
    return {name for name, o in last.items() if not o.known}
