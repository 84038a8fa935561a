"""Would the ITL target have held? The sizing's choice against the measured runs (issue 19).

    python -m benchmarks.sweep_check [--quantile p95]

For every setup of ``tests/data/latency-points.jsonl`` (served model, precision, GPU, TP,
vLLM version, prompt/output lengths) measured at three or more concurrencies (runs labelled
``not_comparable`` left out), each measured mean TPOT is taken as an ITL target: the planner's
batch curve picks the largest N whose predicted ITL (p95 by default, the sizing's) meets it,
as ``--itl-target-ms`` does, and the measured TPOT at that N (linear between the measured
concurrencies; a pick above the largest measured one is scored at it, a lower bound) says
whether the target held. The issue's bound: a pick whose measured ITL misses the target by
more than 25 %. Prints the misses and the share of picks within 0 %, 10 % and 25 %.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any

from benchmarks.latency_accuracy import admitted, batches_for, load_points, setup

#: the issue's bound on a pick's measured ITL over its target
BOUND = 0.25


def measured_at(runs: list[tuple[int, float]], n: int) -> float:
    """Mean TPOT at concurrency ``n``, linear between the measured ones (sorted by N; below
    the smallest the smallest's, above the largest the largest's)."""
    if n <= runs[0][0]:
        return runs[0][1]
    for (n0, t0), (n1, t1) in zip(runs, runs[1:], strict=False):
        if n <= n1:
            return t0 + (t1 - t0) * (n - n0) / (n1 - n0)
    return runs[-1][1]


def check(quantile: str) -> list[dict[str, Any]]:
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for p in load_points():
        if not p.get("not_comparable"):
            groups[setup(p)].append(p)
    out = []
    for key, pts in sorted(groups.items(), key=lambda kv: str(kv[0])):
        by_n: dict[int, list[float]] = defaultdict(list)
        for p in pts:
            by_n[int(p["concurrency"])].append(float(p["tpot_ms"]))
        runs = sorted((n, sum(v) / len(v)) for n, v in by_n.items())
        if len(runs) < 3:
            continue
        got_batches = batches_for(pts[0])
        if isinstance(got_batches, str):
            continue
        plan, batches = got_batches
        cap = max(1, min(admitted(pts[0] | {"concurrency": 10**6}, plan), batches.max_n))
        for _, target in runs:
            n = batches.largest_meeting(target, cap, quantile)
            if n <= 0:
                continue  # no batch meets it: the sizing refuses, nothing is picked
            got = measured_at(runs, n)
            out.append(
                {
                    "setup": key,
                    "target_ms": target,
                    "picked_n": n,
                    "beyond_measured": n > runs[-1][0],
                    "measured_ms": got,
                    "miss": got / target - 1.0,
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quantile", default="p95", choices=("p50", "p95", "p99"))
    a = ap.parse_args(argv)
    rows = check(a.quantile)
    if not rows:
        print("no setup measured at three or more concurrencies")
        return 1
    misses = [r for r in rows if r["miss"] > BOUND]
    print(f"{len(rows)} picks ({a.quantile} ITL = each measured TPOT as the target)")
    for lim in (0.0, 0.10, BOUND):
        share = sum(1 for r in rows if r["miss"] <= lim) / len(rows)
        print(f"  measured ITL within {lim:.0%} of the target: {share:.1%}")
    print(f"  beyond {BOUND:.0%}: {len(misses)}")
    for r in misses:
        m, prec, gpu, tp, ver, isl, osl = r["setup"]
        print(
            f"    {m} ({prec}) {gpu} TP{tp} v{ver} {isl}/{osl}: target {r['target_ms']:.2f} ms, "
            f"picked N = {r['picked_n']}{' (beyond the measured)' if r['beyond_measured'] else ''}"
            f", measured {r['measured_ms']:.2f} ms ({r['miss']:+.0%})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
