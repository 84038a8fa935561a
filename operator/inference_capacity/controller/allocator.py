"""The C allocator's settings for the operator process (glibc's ``mallopt``), set at start.

Measured (``benchmarks/reconcile.py --cluster memory --sizes 300``, 2 cores): the operator's
Python objects peak at ~45 MB over a 300-resource wave (tracemalloc), yet its RSS grew by
~84 MB: the rest is memory glibc keeps after it was freed: one arena per thread that
allocates (up to 8 per core; Kopf's handler threads, the refresh threads, the I/O loop, the
watch threads) and freed chunks below a dynamic mmap threshold that stay in the heap. With
two arenas and a fixed 128 KiB mmap/trim threshold the peak was 162-168 MB instead of
186-189 MB (two runs each), at the same CPU.

A variable the user sets (``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, or a malloc tunable in ``GLIBC_TUNABLES``) wins: that parameter is
left alone. On a C library without ``mallopt`` (musl) nothing is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Mapping

#: mallopt parameter numbers (glibc ``malloc/malloc.h``)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

#: parameter -> (value, the environment variable that overrides it)
SETTINGS: dict[int, tuple[int, str]] = {
    M_ARENA_MAX: (2, "MALLOC_ARENA_MAX"),
    M_MMAP_THRESHOLD: (128 * 1024, "MALLOC_MMAP_THRESHOLD_"),
    M_TRIM_THRESHOLD: (128 * 1024, "MALLOC_TRIM_THRESHOLD_"),
}


def wanted(env: Mapping[str, str]) -> dict[int, int]:
    """The parameters to set: those the environment does not set itself."""
    if "glibc.malloc" in env.get("GLIBC_TUNABLES", ""):
        return {}
    return {param: value for param, (value, var) in SETTINGS.items() if var not in env}


def tune(env: Mapping[str, str] | None = None) -> dict[int, int]:
    """Apply :func:`wanted` with ``mallopt``; returns what was set (empty: nothing, e.g. not
    glibc). Call it before the operator starts its threads."""
    name = ctypes.util.find_library("c")
    if name is None:
        return {}
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return {}
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return {}
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done: dict[int, int] = {}
    for param, value in wanted(os.environ if env is None else env).items():
        if mallopt(param, value) == 1:  # 1: success, 0: refused
            done[param] = value
    return done
