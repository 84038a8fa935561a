"""What every part of the CLI shares: exit codes, the error it prints, reading input."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..planner import PlanInput

EXIT_INPUT = 2


EXIT_NOT_FITS = 1


class CliError(Exception):
    pass


def _read_text(path: str) -> str:
    """A manifest's text, read at most MAX_MANIFEST_BYTES + 1 bytes (``/dev/zero`` or a huge
    file is refused, not read to the end)."""
    from ..api.bounded_yaml import MAX_MANIFEST_BYTES

    try:
        if path == "-":
            raw = sys.stdin.buffer.read(MAX_MANIFEST_BYTES + 1)
        else:
            with Path(path).open("rb") as f:
                raw = f.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise CliError(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _name_of(doc: Any) -> Any:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    return meta.get("name") if isinstance(meta, dict) else None


def _sizing_overrides(a: argparse.Namespace, inp: PlanInput) -> PlanInput:
    """--sizing / --preemption-target / --hbm-efficiency over the spec's (or the defaults)."""
    if a.preemption_target is not None and not 0 < a.preemption_target < 0.5:
        raise CliError(f"--preemption-target must be in (0, 0.5), got {a.preemption_target}")
    return replace(
        inp,
        sizing_rule=a.sizing or inp.sizing_rule,
        preemption_target=(
            a.preemption_target if a.preemption_target is not None else inp.preemption_target
        ),
        hbm_efficiency=a.hbm_efficiency if a.hbm_efficiency is not None else inp.hbm_efficiency,
    )


#: exit codes of ``plan -o patch`` (README "Exit codes")
EXIT_NOTHING_TO_PATCH = 3


EXIT_NO_DEPLOYMENT = 4


EXIT_REFUSED = 5
