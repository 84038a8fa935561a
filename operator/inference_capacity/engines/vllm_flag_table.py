"""Which ``vllm serve`` flags each vLLM release has: the table generated from vLLM's source.

``engines/data/vllm_flags.json`` is written by ``tools/gen_vllm_flags.py``, which reads the
argument parser of every vLLM release from 0.11 on out of its source distribution on PyPI
(``EngineArgs.add_cli_args``, the frontend's ``make_arg_parser`` and ``FrontendArgs``; vLLM is
never imported). Per flag it keeps its runs of releases with the same attributes: the aliases
(``-tp``, ``-O``, ``--no-x``), the kind (``bool``: no value; ``optional``; ``value``), choices,
literal defaults, ``deprecated``. The classification (modelled / neutral / refused) is
hand-written in :mod:`.vllm_flags`, keyed on these names.

A release in the table's range is looked up by the newest release of the table at or below it
(``0.19.1.post1`` reads 0.19.1; 0.15.x, which has wheels only on PyPI, reads 0.14.1). Releases
before the table's first (0.11.0) are not checked against it: the hand-written classification
alone applies to them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Final

from .versions import parse_version

__all__ = ["FlagRun", "FlagTable", "flag_table"]


@dataclass(frozen=True, slots=True)
class FlagRun:
    """A flag's attributes over consecutive releases ``first``..``last`` of the table."""

    first: str
    last: str
    kind: str  # bool | optional | value | count
    aliases: tuple[str, ...] = ()
    choices: tuple[Any, ...] | None = None
    default: Any = None
    deprecated: bool = False


@cache
def _key(version: str) -> tuple[int, int, int]:
    """A release's sort key (memoised: a pure function of the string, looked up per flag)."""
    return parse_version(version).key


@dataclass(frozen=True)
class FlagTable:
    versions: tuple[str, ...]
    no_sdist: tuple[str, ...]
    dash_o: Mapping[str, str | None]
    flags: Mapping[str, tuple[FlagRun, ...]]

    def release(self, version: str) -> str | None:
        """The table's release that ``version`` reads (the newest at or below it); None below
        the table's first release."""
        key = _key(version)
        below = [v for v in self.versions if _key(v) <= key]
        return below[-1] if below else None

    def run(self, name: str, version: str) -> FlagRun | None:
        """``--name``'s attributes in ``version`` (canonical name); None when it has no such
        flag (or the version is before the table)."""
        release = self.release(version)
        if release is None:
            return None
        key = _key(release)
        for r in self.flags.get(name, ()):
            if _key(r.first) <= key <= _key(r.last):
                return r
        return None

    def absence(self, name: str, version: str) -> str | None:
        """vLLM's words when ``version`` has no ``--name``, e.g. "vLLM 0.19.0 has no
        --swap-space; removed in 0.18.0"; None when it has it or the table does not cover the
        version."""
        release = self.release(version)
        if release is None or self.run(name, version) is not None:
            return None
        runs = self.flags.get(name, ())
        key = _key(release)
        where = f"vLLM {version} has no --{name}"
        before = [r for r in runs if _key(r.last) < key]
        after = [r for r in runs if _key(r.first) > key]
        if before:
            gone = self.versions[self.versions.index(before[-1].last) + 1]
            skipped = [v for v in self.no_sdist if _key(before[-1].last) < _key(v) < _key(gone)]
            return f"{where}; removed in {gone}" + (
                f" (or in {', '.join(skipped)}, which have no source on PyPI)" if skipped else ""
            )
        if after:
            return f"{where}; added in {after[0].first}"
        return (
            f"{where}: no vLLM release {self.versions[0]}–{self.versions[-1]} has it "
            "(not a vllm serve flag)"
        )

    def invalid_choice(self, name: str, value: str, version: str) -> str | None:
        """vLLM's words when ``version``'s ``--name`` has choices and ``value`` is none of
        them (argparse converts the value with the choices' type, then tests membership:
        ``literal_to_kwargs``, engine/arg_utils.py 0.11–0.33), e.g. "vLLM 0.19.0: invalid
        choice 'nvfp4'; accepted from 0.20.0" for ``--kv-cache-dtype``; None when it is one,
        the flag has no choices there, or the table does not cover the version."""
        run = self.run(name, version)
        if run is None or not run.choices:
            return None
        kind = type(run.choices[0])
        try:
            typed: Any = kind(value.strip()) if kind is int else value
        except ValueError:
            return f"vLLM {version}: invalid {kind.__name__} value {value!r}"
        if typed in run.choices:
            return None
        where = f"vLLM {version}: invalid choice {value!r}"
        key = _key(version)
        later = [
            r
            for r in self.flags.get(name, ())
            if _key(r.first) > key and (not r.choices or typed in r.choices)
        ]
        if later:
            return f"{where}; accepted from {later[0].first}"
        shown = ", ".join(str(c) for c in run.choices)
        return f"{where} (choose from {shown})"

    @property
    def names(self) -> frozenset[str]:
        """Every canonical flag name of any release in the table."""
        return frozenset(self.flags)

    def aliases(self) -> dict[str, str]:
        """Every alias (without dashes) of any release → its canonical name; ``no-x`` forms
        are left out (they stay ``no-x``, see :mod:`.vllm_args.vocabulary`)."""
        out: dict[str, str] = {}
        for name, runs in self.flags.items():
            for r in runs:
                for alias in r.aliases:
                    bare = alias.lstrip("-")
                    inverse = bare.split("-", 1)[0] in ("enable", "disable") and (
                        bare.split("-", 1)[0] != name.split("-", 1)[0]
                    )  # EnableDisableAction's --disable-x for --enable-x: a negation
                    if not alias.startswith("--no-") and not inverse and bare != name:
                        out[bare] = name
        return out

    def boolean(self) -> frozenset[str]:
        """Names (canonical and aliases, ``no-x`` included) that take no value in some
        release."""
        out: set[str] = set()
        for name, runs in self.flags.items():
            for r in runs:
                if r.kind in ("bool", "count"):
                    out.add(name)
                    out.update(a.lstrip("-") for a in r.aliases)
        return frozenset(out)

    def dash_o_target(self, version: str) -> str | None:
        """What ``-O3`` is in ``version`` (``FlexibleArgumentParser.parse_args``):
        ``optimization-level`` (0.12 on), ``compilation-config.level`` (0.11), None before the
        table."""
        release = self.release(version)
        return self.dash_o.get(release) if release is not None else None


def _run(raw: Mapping[str, Any]) -> FlagRun:
    choices = raw.get("choices")
    return FlagRun(
        first=raw["from"],
        last=raw["to"],
        kind=raw["kind"],
        aliases=tuple(raw.get("aliases", ())),
        choices=tuple(choices) if choices is not None else None,
        default=raw.get("default"),
        deprecated=bool(raw.get("deprecated", False)),
    )


@cache
def flag_table() -> FlagTable:
    """The committed table (engines/data/vllm_flags.json), read once."""
    text = resources.files(__package__).joinpath(_DATA).read_text("utf-8")
    raw = json.loads(text)
    return FlagTable(
        versions=tuple(raw["versions"]),
        no_sdist=tuple(raw.get("no_sdist", ())),
        dash_o=dict(raw.get("dash_o", {})),
        flags={name: tuple(_run(r) for r in runs) for name, runs in raw["flags"].items()},
    )


_DATA: Final = "data/vllm_flags.json"
