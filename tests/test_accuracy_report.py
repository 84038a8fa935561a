"""python -m benchmarks.accuracy: per-term errors, in/out-of-sample means, failed starts flagged."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_accuracy_report() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks.accuracy"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    text = r.stdout
    for term in ("w", "act", "nt", "cg", "kv", "blk", "tok"):
        assert re.search(rf"^{term}\s", text, re.M), term
    kv = re.search(r"^kv\s+([\d.]+) % over.*?([\d.]+) % over.*?([\d.]+) % over", text, re.M)
    assert kv is not None
    all_kv, in_kv, out_kv = (float(x) for x in kv.groups())
    assert all_kv <= 2.0 and in_kv <= 2.0
    # out-of-sample: the first vLLM >= 0.20 point (vllm-startup-047, gpt-oss-120b TP8 on a PCIe
    # Blackwell card, 0.28.0) misses KV by -7.6 % (non-torch at TP8, fitted on H100 TP2/TP4
    # logs only); it is reported, not fitted on, so the out-of-sample mean is above the 2 % goal
    assert out_kv < 5.0
    flagged = re.search(r"failed starts flagged: (\d+)/(\d+)", text)
    assert flagged is not None and flagged.group(1) == flagged.group(2)
    assert " in  v1" in text and " out v1" in text
    assert "one replayable startup log of vLLM >= 0.20" in text
