"""Byte units are defined once, in inference_capacity/units.py (issue 10)."""

from __future__ import annotations

import re
from pathlib import Path

from inference_capacity import units

PACKAGE = Path(units.__file__).resolve().parent

#: 2**30, 2 ** 40, 1 << 30, 1024**3, 1024 * 1024 * 1024: a GiB (or TiB) spelt out
_SPELLED_UNIT = re.compile(
    r"\b2\s*\*\*\s*(?:30|40)\b|\b1\s*<<\s*(?:30|40)\b|\b1024\s*\*\*\s*[34]\b"
    r"|\b1024\s*\*\s*1024\s*\*\s*1024\b"
)
#: Modules being rewritten elsewhere that still spell a GiB out; remove an entry once the
#: module uses inference_capacity.units (cli.py: 3 places, in main's rewrite).
_PENDING: set[str] = set()


def test_byte_units_are_defined_only_in_units_py() -> None:
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "units.py" or rel in _PENDING:
            continue
        for no, line in enumerate(path.read_text().splitlines(), 1):
            if _SPELLED_UNIT.search(line):
                hits.append(f"{rel}:{no}: {line.strip()}")
    assert not hits, "byte units spelt out outside units.py:\n" + "\n".join(hits)


def test_units_py_defines_them() -> None:
    text = (PACKAGE / "units.py").read_text()
    assert _SPELLED_UNIT.search(text)
    assert units.GiB == 1024 * units.MiB == 1024 * 1024 * units.KiB
    assert units.TiB == 1024 * units.GiB


def test_conversions() -> None:
    assert units.gib(1) == 1073741824
    assert units.gib(79.19) == round(79.19 * 1073741824)
    assert isinstance(units.gib(0.5), int)
    assert units.to_gib(3 * 1073741824) == 3.0
    assert units.mib(2) == 2097152
    assert units.to_mib(1048576) == 1.0
