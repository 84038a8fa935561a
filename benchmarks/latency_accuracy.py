"""Issue 19: the latency model against measured end-to-end vLLM points.

    python -m benchmarks.latency_accuracy [--points]

Replays every point of ``tests/data/latency-points.jsonl`` (aiconfigurator-core 0.12.0's
measured end-to-end vLLM runs, ``silicon_sample.csv``; see tests/data/LATENCY-SOURCES.md): the
planner at the run's model, GPU, TP, vLLM version and default flags, with a workload of fixed
prompt/output lengths, evaluated at the run's concurrency. Prints per point (``--points``) and
per regime (TP1, TP2-4, TP8) the median |error| of TPOT (mean, as ``vllm bench serve`` reports
it), TTFT (mean) and output throughput (derived from the measured TTFT/TPOT by Little's law),
and how many points are beyond 60 %. Error = predicted / measured − 1.

Every point is **out of sample**: the constants of sizing/perf.py are fitted on
aiconfigurator's per-operation tables (``benchmarks.latency_fit``), never on an end-to-end run,
so there is no in-sample set (a point marked otherwise in the data is refused).

aiconfigurator's own estimate is not printed: its estimator is the compiled Rust engine of the
wheel plus its full Python runtime and per-model configs; see the README.
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
from inference_capacity.planner import PlanInput, _batches, make_plan
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
    try:
        plan = make_plan(inp)
    except (ValueError, KeyError) as exc:
        return Scored(p, None, f"plan: {exc}")
    if not plan.fits or plan.distribution is None:
        return Scored(p, None, f"plan: {plan.reason}")
    model = build_latency_model(inp.model, inp.gpu, plan.prediction, inp.hbm_efficiency)
    if model is None:
        return Scored(p, None, "no latency model")
    batches = _batches(model, plan.distribution)
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


#: the issue's per-point bound on |error|
OVER = 0.60


def summarize(scored: list[Scored]) -> dict[str, dict[str, float]]:
    """Per regime (and "all"): median |error| of TPOT, TTFT, throughput, the signed medians,
    the worst |error|, the points beyond :data:`OVER` per metric (``*_over``) and the points
    with TPOT or throughput beyond it (``over``), and the count."""
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
            row[f"{key}_over"] = float(sum(1 for x in e if abs(x) > OVER))
        row["over"] = float(
            sum(1 for s in ss if abs(s.err("tpot") or 0) > OVER or abs(s.err("tput") or 0) > OVER)
        )
        out[name] = row
    return out


def score() -> list[Scored]:
    """Every point (all out of sample)."""
    pts = load_points()
    fitted = [p["id"] for p in pts if p.get("set") != "validation"]
    if fitted:
        raise ValueError(
            f"points marked as fitted on (end-to-end data is validation only): {fitted}"
        )
    return [predict(p) for p in pts]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", action="store_true", help="print every point")
    a = ap.parse_args()
    scored = score()
    if a.points:
        print(
            f"{'model':<34} {'gpu':<15} {'tp':>2} {'isl':>5} {'osl':>5} {'N':>4} "
            f"{'TPOT ms':>8} {'pred':>8} {'err':>6} {'TTFT ms':>8} {'pred':>8} {'err':>6} "
            f"{'tok/s':>8} {'pred':>8} {'err':>6} sat"
        )
        for s in scored:
            p = s.point
            head = (
                f"{p['model'][-34:]:<34} {p['gpu']:<15} {p['tp']:>2} "
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
    missing = sum(1 for s in scored if s.pred is None)
    print(
        f"out-of-sample (all; nothing is fitted on end-to-end runs): {len(scored)} points"
        + (f", {missing} not planned (the ledger says vLLM will not start)" if missing else "")
    )
    print(
        f"  {'regime':<7} {'n':>4} {'|TPOT| med':>10} {'signed':>7} {'>60%':>5} "
        f"{'|TTFT| med':>10} {'signed':>7} {'>60%':>5} {'|tput| med':>10} {'signed':>7} "
        f"{'>60%':>5} {'any>60%':>7}"
    )
    summ = summarize(scored)
    for name in ("TP1", "TP2-4", "TP8", "all"):
        r = summ.get(name)
        if r is None:
            continue
        print(
            f"  {name:<7} {int(r['n']):>4} {r['tpot_abs']:>10.1%} {r['tpot_signed']:>+7.1%} "
            f"{int(r['tpot_over']):>5} {r['ttft_abs']:>10.1%} {r['ttft_signed']:>+7.1%} "
            f"{int(r['ttft_over']):>5} {r['tput_abs']:>10.1%} {r['tput_signed']:>+7.1%} "
            f"{int(r['tput_over']):>5} {int(r['over']):>7}"
        )
    print(
        "  goals: median |TPOT| and |tput| <= 15 %, no TP class beyond 25 %, no point beyond"
        f" {OVER:.0%} of TPOT or throughput ('any>60%' counts those points)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
