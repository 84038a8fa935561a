"""Issue 14: max-num-seqs by both rules for the examples, the time the distribution sizing
takes (target < 20 ms), and the sweep (target < 2 s) with its top three options.

    python -m benchmarks.sizing [--repeat N]

"cold" clears the Monte Carlo cache first (a new workload); "warm" re-sizes the same workload
on another pool (the planner's fixed-point loop, a sweep over TP/dtype/GPU).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from inference_capacity.api import InferenceCapacity, load_manifests
from inference_capacity.planner import _distribution, make_plan
from inference_capacity.resolve import resolve
from inference_capacity.sizing import distribution
from inference_capacity.whatif import sweep

ROOT = Path(__file__).resolve().parent.parent


def examples() -> list[tuple[str, object]]:
    out = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        docs = load_manifests(path.read_text())
        icap = InferenceCapacity.from_manifest(docs.capacities[0], ignore_status=True)
        dep = next((d for d in docs.others if d.get("kind") == "Deployment"), None)
        out.append((path.stem, resolve(icap.spec, dep, {}).plan_input))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    rows = []
    sweeps = []
    for name, inp in examples():
        res = {}
        for rule in ("conservative", "distribution"):
            p = make_plan(replace(inp, sizing_rule=rule))  # type: ignore[type-var]
            assert p.distribution is not None
            n = p.recommendation.max_num_seqs
            res[rule] = (n, p.recommendation.rollout.replicas, p.distribution.probability(n))
        p = make_plan(inp)  # type: ignore[arg-type]
        d = p.distribution
        assert d is not None and inp.workload is not None  # type: ignore[attr-defined]
        cap = min(1 << 20, p.prediction.settings.max_num_batched_tokens)
        cold, warm = [], []
        for _ in range(a.repeat):
            distribution.clear_cache()
            t0 = time.perf_counter()
            _distribution(inp, inp.workload, p.prediction, cap)  # type: ignore[arg-type, attr-defined]
            cold.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            _distribution(inp, inp.workload, p.prediction, cap - 1)  # type: ignore[arg-type, attr-defined]
            warm.append(time.perf_counter() - t0)
        rows.append((name, res, d, min(cold), min(warm), p))
        distribution.clear_cache()
        t0, c0 = time.perf_counter(), time.process_time()
        options = sweep(inp, {})  # type: ignore[arg-type]
        sweeps.append(
            (name, len(options), time.perf_counter() - t0, time.process_time() - c0, options[:3])
        )

    print("max-num-seqs, replicas and P(preemption) by rule (target 1 %)")
    print(
        f"{'example':<24} {'conservative':>26} {'distribution':>26} {'P at default':>14} "
        f"{'cold ms':>8} {'warm ms':>8}"
    )
    for name, res, d, cold_s, warm_s, _ in rows:
        c, di = res["conservative"], res["distribution"]
        print(
            f"{name:<24} {c[0]:>6} seqs {c[1]:>2} repl {c[2]:>6.2%}  "
            f"{di[0]:>6} seqs {di[1]:>2} repl {di[2]:>6.2%}  "
            f"{d.preemption_probability_at_default:>6.2%} @{d.default_max_num_seqs:<5} "
            f"{cold_s * 1e3:>8.1f} {warm_s * 1e3:>8.1f}"
        )
    print()
    print("latency at the distribution rule's max-num-seqs")
    for name, _, _, _, _, p in rows:
        lat = p.latency
        at = lat.at_max_num_seqs if lat is not None else None
        if at is not None:
            print(
                f"  {name:<24} ITL p50 {at.itl_ms_p50:7.1f} ms  p95 {at.itl_ms_p95:7.1f} ms  "
                f"{at.output_tokens_per_s:9,.0f} output tokens/s per replica"
            )
    print()
    print("sweep (every catalog GPU x TP 1/2/4/8 x KV auto/fp8), unpriced: ranked by GPUs")
    for name, count, wall, cpu, top in sweeps:
        print(f"  {name}: {count} options in {wall:.2f} s wall, {cpu:.2f} s CPU; top three:")
        for o in top:
            j = o.to_json()
            print(
                f"    {j['gpu']:<16} TP{j['tp']} KV {j['kv_cache_dtype']:<5} {j['replicas']} "
                f"replicas = {j['gpus']} GPUs, max-num-seqs {j['max_num_seqs']}, "
                f"P {j['preemption_probability']:.2%}, ITL p95 {j['itl_ms_p95']} ms"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
