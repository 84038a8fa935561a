"""Accuracy of the vLLM startup predictor against real startup logs.

Runs the predictor over every point of ``vllm-startup-logs.jsonl`` (default: the copy under
``tests/data/``) and prints, per point and overall, the error of weights, activation, available
KV GiB and KV tokens, and whether each failed start was flagged. Points that cannot be predicted
(model config not public, numbers inconsistent in the source, ...) are listed with the reason.

    python benchmarks/accuracy.py [--logs PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference_capacity.benchmarking import LogPoint, load_points, predict_point

DEFAULT_LOGS = Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm-startup-logs.jsonl"


#: points shown but left out of the mean, with the reason
EXCLUDED_FROM_MEAN = {
    "vllm-startup-019": "its logged terms do not add up to its KV figure",
}


@dataclass
class Row:
    point: LogPoint
    predicted: dict[str, Any] | None
    skipped: str | None


def pct(pred: float | None, real: float | None) -> float | None:
    if pred is None or real is None or real == 0:
        return None
    return 100.0 * (pred - real) / abs(real)


def fmt(x: float | None, spec: str = "+.2f") -> str:
    return "—" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", type=Path, default=DEFAULT_LOGS)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    rows: list[Row] = []
    for point in load_points(args.logs):
        pred, reason = predict_point(point)
        rows.append(Row(point, pred, reason))
    kv_err: list[float] = []
    tok_err: list[float] = []
    w_err: list[float] = []
    a_err: list[float] = []
    failed_total = failed_flagged = 0
    out = []
    header = (
        f"{'id':<18} {'eng':<4} {'model':<42} {'tp/pp':<5} {'wGiB':>7} {'w%':>6} "
        f"{'act':>5} {'act%':>7} {'kvGiB':>7} {'pred':>7} {'kv%':>6} {'tokens':>9} "
        f"{'tok%':>6} {'start':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        p, lg = r.point, r.point.logged
        if r.predicted is None:
            print(f"{p.id:<18} {p.engine:<4} {p.model[:42]:<42} skipped: {r.skipped}")
            out.append({"id": p.id, "skipped": r.skipped})
            continue
        pr = r.predicted
        # each worker logs its own line and the records keep the first worker's (rank 0);
        # the block count is the minimum over ranks
        r0 = pr["ranks"][0]
        we = pct(r0["weights_gib"], lg.get("weights_gib"))
        ae = pct(r0["activation_peak_gib"], lg.get("activation_peak_gib"))
        ke = pct(r0["available_kv_cache_gib"], lg.get("kv_cache_gib"))
        real_tokens = lg.get("kv_cache_tokens")
        if real_tokens is None and lg.get("gpu_blocks") and p.block_size:
            real_tokens = None  # blocks compared separately below
        te = pct(pr["kv_cache_tokens"], real_tokens)
        be = pct(pr["num_gpu_blocks"], lg.get("gpu_blocks"))
        failed = p.failed
        start = "ok"
        if failed:
            failed_total += 1
            if not pr["starts"]:
                failed_flagged += 1
                start = "flagged"
            else:
                start = "MISSED"
        elif not pr["starts"]:
            start = "FALSE-FAIL"
        excluded = p.id in EXCLUDED_FROM_MEAN
        if p.engine == "v1" and not failed and not excluded:
            if ke is not None:
                kv_err.append(abs(ke))
            if te is not None:
                tok_err.append(abs(te))
            elif be is not None:
                tok_err.append(abs(be))
        if we is not None:
            w_err.append(abs(we))
        if ae is not None:
            a_err.append(abs(ae))
        print(
            f"{p.id:<18} {p.engine:<4} {p.model[:42]:<42} {p.tp}/{p.pp:<3} "
            f"{r0['weights_gib']:>7.2f} {fmt(we):>6} {r0['activation_peak_gib']:>5.2f} "
            f"{fmt(ae):>7} {fmt(lg.get('kv_cache_gib'), '.2f'):>7} "
            f"{r0['available_kv_cache_gib']:>7.2f} {fmt(ke):>6} {pr['kv_cache_tokens']:>9} "
            f"{fmt(te if te is not None else be):>6} {start:>9}"
            + (f"  (not in the mean: {EXCLUDED_FROM_MEAN[p.id]})" if excluded else "")
        )
        out.append(
            {
                "id": p.id,
                "predicted": pr,
                "logged": lg,
                "kv_err_pct": ke,
                "tokens_err_pct": te,
                "blocks_err_pct": be,
                "weights_err_pct": we,
            }
        )
    print()

    def mean(xs: list[float]) -> str:
        return f"{statistics.fmean(xs):.2f} % over {len(xs)}" if xs else "n/a"

    print(f"mean |error| weights:              {mean(w_err)}")
    print(f"mean |error| activation peak:      {mean(a_err)}")
    print(f"mean |error| available KV (V1):    {mean(kv_err)}   (target <= 2 %)")
    print(f"mean |error| KV tokens/blocks (V1): {mean(tok_err)}   (target <= 2 %)")
    print(f"failed starts flagged:             {failed_flagged}/{failed_total}")
    print(f"points skipped:                    {sum(1 for r in rows if r.predicted is None)}")
    if args.json:
        json.dump(out, sys.stdout, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
