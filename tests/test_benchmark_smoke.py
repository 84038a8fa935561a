"""The reconcile benchmark at a small size on the real control plane (issue 22: the wall-clock
and RSS bounds live in the benchmark; this is its CI smoke). It asserts what the run reports,
not how fast: every resource reconciled, and the requests per object counted by the operator
itself (no proxy in between) with one status write and one Deployment patch per resource."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
N = 20


def test_a_small_drain_reports_every_resource_and_its_requests(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "benchmarks.reconcile", "--cluster", "real"]
    cmd += ["--sizes", str(N), "--skip-edits", "--drain", "--workdir", str(tmp_path)]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    out = run.stdout
    assert run.returncode == 0, f"rc {run.returncode}\n{out[-3000:]}\n{run.stderr[-3000:]}"
    assert re.search(rf"done within the timeout\s+{N}/{N}", out), out
    section = out.split(f"operator requests, real drain {N} run (per object):", 1)[1]
    counts = {
        m.group(1).strip(): int(m.group(2))
        for m in re.finditer(r"^  (\S+ \S+ \S+)\s+(\d+)\s+[\d.]+$", section, re.M)
    }
    assert counts.get("kopf patch inferencecapacities/status", 0) >= N, section
    assert counts.get("client patch deployments", 0) >= N, section
    writes = sum(v for k, v in counts.items() if k.split()[1] in ("create", "patch", "update"))
    assert writes <= 5 * N, section  # generous: 3 a resource in a quiet run
