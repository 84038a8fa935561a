"""Issue 19: the latency model against measured end-to-end vLLM points.

    python -m benchmarks.latency_accuracy [--points] [--set fit|validation|all]

Replays every point of ``tests/data/latency-points.jsonl`` (aiconfigurator-core 0.12.0's
measured vLLM runs; see tests/data/LATENCY-SOURCES.md): the planner at the run's model, GPU,
TP, vLLM version and default flags, with a workload of fixed prompt/output lengths, evaluated at
the run's concurrency. Prints per point (``--points``) and per regime the error of TPOT (mean, as
``vllm bench serve`` reports it), TTFT (mean) and output throughput (derived from the measured
TTFT/TPOT by Little's law), out-of-sample ("validation") apart from in-sample ("fit") points.
Error = predicted / measured − 1.

aiconfigurator's own estimate is not printed: its estimator needs its full runtime (pandas,
its parquet databases and backend-specific op models) per point; see the README.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference_capacity.engines.vllm import EngineSettings
from inference_capacity.hardware import get_gpu
from inference_capacity.model.source import resolve_model_ref
from inference_capacity.planner import PlanCache, PlanInput, make_plan
from inference_capacity.sizing import LatencyPoint
from inference_capacity.sizing.latency import build_latency_model, queued
from inference_capacity.sizing.workload import Cohort, Quantiles, Workload

ROOT = Path(__file__).resolve().parent.parent
POINTS = ROOT / "tests" / "data" / "latency-points.jsonl"
#: the version a run is planned at when its row names none (or a nightly build)
FALLBACK_VERSION = "0.11.0"


def load_points(path: Path = POINTS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@functools.lru_cache(maxsize=64)
def _shape(model: str, quantization: str | None) -> Any:
    return resolve_model_ref(model).shape(quantization)


@dataclass(frozen=True)
class Scored:
    point: dict[str, Any]
    pred: LatencyPoint | None
    error: str = ""

    def err(self, key: str) -> float | None:
        if self.pred is None:
            return None
        got = {
            "tpot": self.pred.tpot_ms_mean,
            "ttft": self.pred.ttft_ms_p50,
            "tput": self.pred.output_tokens_per_s,
        }[key]
        want = {"tpot": "tpot_ms", "ttft": "ttft_ms", "tput": "output_tokens_per_s"}[key]
        return got / float(self.point[want]) - 1.0


def predict(p: dict[str, Any]) -> Scored:
    """The model's point for one measured run."""
    shape = _shape(p["model"], p["quantization"])
    version = p["vllm_version"] or FALLBACK_VERSION
    if version.startswith("nightly"):
        version = FALLBACK_VERSION
    isl, osl, n = int(p["prompt_tokens"]), int(p["output_tokens"]), int(p["concurrency"])
    wl = Workload(
        (Cohort("bench", 1.0, Quantiles(isl, isl, isl), Quantiles(osl, osl, osl)),),
    )
    inp = PlanInput(
        model=shape,
        gpu=get_gpu(p["gpu"]),
        tp=int(p["tp"]),
        engine=EngineSettings(version=version),
        workload=wl,
        choose_max_num_seqs=False,
    )
    cache = PlanCache()  # the plan's latency batches, read again below
    try:
        plan = make_plan(inp, cache)
    except (ValueError, KeyError) as exc:
        return Scored(p, None, f"plan: {exc}")
    if not plan.fits or plan.distribution is None:
        return Scored(p, None, f"plan: {plan.reason}")
    model = build_latency_model(inp.model, inp.gpu, plan.prediction, inp.hbm_efficiency)
    if model is None:
        return Scored(p, None, "no latency model")
    batches = cache.batch_latency(model, plan.distribution)
    # the replica runs at most max-num-seqs and what its KV pool holds; the rest queue
    kv_seqs = plan.prediction.kv_cache_tokens // max(isl + osl, 1)
    run = max(1, min(n, plan.prediction.settings.max_num_seqs, kv_seqs, batches.max_n))
    pt = queued(batches.point(run), n, float(osl))
    return Scored(p, pt)


def regime(p: dict[str, Any]) -> str:
    tp = int(p["tp"])
    return "TP1" if tp == 1 else "TP2-4" if tp <= 4 else "TP8"


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def summarize(scored: list[Scored]) -> dict[str, dict[str, float]]:
    """Per regime (and "all"): median |error| of TPOT, TTFT, throughput, the signed medians,
    the worst |error| of TPOT/throughput and the count."""
    out: dict[str, dict[str, float]] = {}
    groups: dict[str, list[Scored]] = {"all": []}
    for s in scored:
        if s.pred is None:
            continue
        groups["all"].append(s)
        groups.setdefault(regime(s.point), []).append(s)
    for name, ss in groups.items():
        row: dict[str, float] = {"n": float(len(ss))}
        for key in ("tpot", "ttft", "tput"):
            e = [x for x in (s.err(key) for s in ss) if x is not None]
            row[f"{key}_abs"] = _med([abs(x) for x in e])
            row[f"{key}_signed"] = _med(e)
            row[f"{key}_worst"] = max((abs(x) for x in e), default=float("nan"))
        out[name] = row
    return out


def score(which: str = "all") -> list[Scored]:
    pts = [p for p in load_points() if which == "all" or p["set"] == which]
    return [predict(p) for p in pts]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", action="store_true", help="print every point")
    ap.add_argument("--set", default="all", choices=["fit", "validation", "all"])
    a = ap.parse_args()
    scored = score(a.set)
    if a.points:
        print(
            f"{'set':<10} {'model':<34} {'gpu':<15} {'tp':>2} {'isl':>5} {'osl':>5} {'N':>4} "
            f"{'TPOT ms':>8} {'pred':>8} {'err':>6} {'TTFT ms':>8} {'pred':>8} {'err':>6} "
            f"{'tok/s':>8} {'pred':>8} {'err':>6} sat"
        )
        for s in scored:
            p = s.point
            head = (
                f"{p['set']:<10} {p['model'][-34:]:<34} {p['gpu']:<15} {p['tp']:>2} "
                f"{p['prompt_tokens']:>5} {p['output_tokens']:>5} {p['concurrency']:>4} "
            )
            if s.pred is None:
                print(head + f"not planned: {s.error}")
                continue
            print(
                head
                + f"{p['tpot_ms']:>8.2f} {s.pred.tpot_ms_mean:>8.2f} {s.err('tpot'):>+6.0%} "
                + f"{p['ttft_ms']:>8.1f} {s.pred.ttft_ms_p50:>8.1f} {s.err('ttft'):>+6.0%} "
                + f"{p['output_tokens_per_s']:>8.0f} {s.pred.output_tokens_per_s:>8.0f} "
                + f"{s.err('tput'):>+6.0%} {'yes' if s.pred.saturated else ''}"
            )
        print()
    for which in ("validation", "fit"):
        sub = [s for s in scored if s.point["set"] == which]
        if not sub:
            continue
        label = "out-of-sample (validation)" if which == "validation" else "in-sample (fit)"
        missing = sum(1 for s in sub if s.pred is None)
        print(f"{label}: {len(sub)} points" + (f", {missing} not planned" if missing else ""))
        print(
            f"  {'regime':<7} {'n':>4} {'|TPOT| med':>10} {'signed':>7} {'worst':>6} "
            f"{'|TTFT| med':>10} {'signed':>7} {'|tput| med':>10} {'signed':>7} {'worst':>6}"
        )
        summ = summarize(sub)
        for name in ("TP1", "TP2-4", "TP8", "all"):
            r = summ.get(name)
            if r is None:
                continue
            print(
                f"  {name:<7} {int(r['n']):>4} {r['tpot_abs']:>10.1%} {r['tpot_signed']:>+7.1%} "
                f"{r['tpot_worst']:>6.0%} {r['ttft_abs']:>10.1%} {r['ttft_signed']:>+7.1%} "
                f"{r['tput_abs']:>10.1%} {r['tput_signed']:>+7.1%} {r['tput_worst']:>6.0%}"
            )
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
