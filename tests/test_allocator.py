"""The operator's allocator settings (controller/allocator.py): glibc takes them, and a setting
the user made in the environment wins."""

from __future__ import annotations

import json
import subprocess
import sys

from inference_capacity.controller import allocator


def test_the_environment_wins_per_parameter() -> None:
    assert allocator.wanted({}) == {p: v for p, (v, _) in allocator.SETTINGS.items()}
    got = allocator.wanted({"MALLOC_ARENA_MAX": "4"})
    assert allocator.M_ARENA_MAX not in got
    assert got[allocator.M_MMAP_THRESHOLD] == 128 * 1024
    assert allocator.wanted({"GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}) == {}
    assert allocator.wanted({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}) != {}


def test_glibc_takes_every_setting_in_a_fresh_process() -> None:
    # a fresh interpreter (the settings are process-wide): every parameter mallopt accepted
    code = (
        "import json; from inference_capacity.controller import allocator; "
        "print(json.dumps(allocator.tune({})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    done = {int(k): v for k, v in json.loads(out.stdout).items()}
    assert done == {p: v for p, (v, _) in allocator.SETTINGS.items()}


ARENAS = """
import ctypes, sys, threading
from inference_capacity.controller import allocator
if sys.argv[1] == "tuned":
    allocator.tune({})
alive = threading.Barrier(8)
def work():
    keep = [bytearray(4096) for _ in range(64)]  # glibc malloc, not pymalloc (> 512 bytes)
    alive.wait()  # all eight threads alive at once (an exited thread's arena is reused)
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL("libc.so.6").malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


def _arenas(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", ARENAS, mode], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return sum(1 for line in out.stderr.splitlines() if line.startswith("Arena "))


def test_threads_share_two_arenas_when_tuned() -> None:
    # glibc gives each new thread an arena of its own up to 8 per core; tuned, at most two
    untuned, tuned = _arenas("default"), _arenas("tuned")
    assert tuned <= 2
    assert untuned > 2
