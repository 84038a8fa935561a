"""Byte units and conversions, defined once for the whole package.

Binary units (KiB, MiB, GiB, TiB) are what CUDA, PyTorch and vLLM print ("GiB" in every vLLM
log line); decimal units (GB, TB) are what datasheets quote for bandwidth. Every other module
imports these names; ``tests/test_units.py`` checks that no other module spells ``2**30``.

Pure: standard library only, the bottom layer of the package.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "GB",
    "GiB",
    "KiB",
    "MiB",
    "TB",
    "TiB",
    "gib",
    "mib",
    "to_gib",
    "to_mib",
]

KiB: Final = 2**10
MiB: Final = 2**20
GiB: Final = 2**30
TiB: Final = 2**40

#: Decimal units, as vendors quote bandwidth and marketed capacity.
GB: Final = 10**9
TB: Final = 10**12


def gib(x: float) -> int:
    """Bytes in ``x`` GiB, rounded to the nearest byte (a logged "79.19 GiB" is that figure)."""
    return int(round(x * GiB))


def mib(x: float) -> int:
    """Bytes in ``x`` MiB, rounded to the nearest byte."""
    return int(round(x * MiB))


def to_gib(n: float) -> float:
    """``n`` bytes in GiB."""
    return n / GiB


def to_mib(n: float) -> float:
    """``n`` bytes in MiB."""
    return n / MiB
