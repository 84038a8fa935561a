"""Plans per second: a full ledger + vLLM startup prediction, on one core.

Target (issue 2): under 5 ms per plan, so a what-if sweep over GPUs × TP × utilization of a
thousand points takes seconds. Prints one row per model and the sweep time.

    python -m benchmarks.plan_speed [--repeat N] [--cpu]

``--cpu`` times with the process's CPU time instead of the wall clock (on a shared, loaded
machine wall times swing several-fold between runs; CPU time does not).
"""

from __future__ import annotations

import argparse
import itertools
import time

from inference_capacity.engines.vllm import EngineSettings
from inference_capacity.hardware import get_gpu
from inference_capacity.ledger import weights
from inference_capacity.model import load_model
from inference_capacity.planner import PlanInput, make_plan

#: the clock every row is timed with (``--cpu``: process CPU time)
CLOCK = time.perf_counter

MODELS = [
    ("meta-llama/Llama-3.1-8B-Instruct", 1),
    ("meta-llama/Llama-3.1-70B-Instruct", 4),
    ("Qwen/Qwen3-30B-A3B", 1),
    ("deepseek-ai/DeepSeek-V3", 8),
    ("google/gemma-2-9b-it", 1),
    ("openai/gpt-oss-120b", 2),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 4),
]


def time_plan(inp: PlanInput, repeat: int, cold: bool) -> float:
    """Seconds per plan; ``cold`` clears the per-shape weight memo before each plan."""
    make_plan(inp)
    t0 = CLOCK()
    for _ in range(repeat):
        if cold:
            weights._MEMO.clear()
        make_plan(inp)
    return (CLOCK() - t0) / repeat


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--cpu", action="store_true", help="time CPU, not the wall clock")
    a = ap.parse_args(argv)
    global CLOCK
    if a.cpu:
        CLOCK = time.process_time
    h200 = get_gpu("H200-SXM-141GB")
    print(f"{'model':<45} {'tp':>3} {'cold ms':>8} {'warm ms':>8} {'plans/s':>8}")
    times = []
    for name, tp in MODELS:
        m = load_model(name)
        inp = PlanInput(
            model=m, gpu=h200, tp=tp, engine=EngineSettings(version="0.19.0", max_model_len=8192)
        )
        cold = time_plan(inp, a.repeat, cold=True)
        dt = time_plan(inp, a.repeat, cold=False)
        times.append(cold)
        print(f"{name:<45} {tp:>3} {cold * 1e3:>8.2f} {dt * 1e3:>8.2f} {1 / dt:>8.0f}")
    print(f"{'mean (cold)':<45} {'':>3} {sum(times) / len(times) * 1e3:>8.2f}")
    # a what-if sweep: GPUs × TP × utilization for Llama-3.1-70B
    m = load_model("meta-llama/Llama-3.1-70B-Instruct")
    gpus = [
        get_gpu(g)
        for g in ("H100-SXM-80GB", "H200-SXM-141GB", "A100-SXM-80GB", "L40S", "B200-180GB")
    ]
    utils = [0.80 + 0.01 * i for i in range(20)]
    points = list(itertools.product(gpus, (1, 2, 4, 8, 16, 32, 64)[:5], utils))[:1000]
    while len(points) < 1000:
        points += points[: 1000 - len(points)]
    t0 = CLOCK()
    for g, tp, u in points:
        make_plan(
            PlanInput(
                model=m,
                gpu=g,
                tp=tp,
                engine=EngineSettings(
                    version="0.19.0", max_model_len=8192, gpu_memory_utilization=u
                ),
                choose_utilization=False,
                choose_max_num_seqs=False,
            )
        )
    dt = CLOCK() - t0
    print(
        f"\nsweep of {len(points)} what-if plans (GPUs × TP × utilization): {dt:.2f} s "
        f"({dt / len(points) * 1e3:.2f} ms each)"
    )
    latency_rows(a.repeat)
    return 0


def latency_rows(repeat: int) -> None:
    """Issue 19: the same with a workload, so the latency model (its step model, the
    closed-loop scheduler at every curve point) runs. "cold": a new latency model each plan
    (its memo cleared and a fresh PlanCache; the workload's Monte Carlo, shared by
    every plan of a workload, is kept, as in a sweep); 1,000 what-if plans of one workload
    over GPUs × TP × KV-cache dtype × utilization."""
    from inference_capacity.planner import PlanCache
    from inference_capacity.sizing import latency
    from inference_capacity.sizing.workload import Cohort, Quantiles, Workload

    chat = Cohort("chat", 1.0, Quantiles(1000, 2000, 4000), Quantiles(200, 500, 1000))
    wl = Workload((chat,), peak_concurrency=256, itl_target_ms=40.0, ttft_target_ms=3000.0)
    h200 = get_gpu("H200-SXM-141GB")
    print(
        f"\nwith a workload (latency model)\n{'model':<45} {'tp':>3} {'cold ms':>8} {'warm ms':>8}"
    )
    for name, tp in MODELS:
        m = load_model(name)
        inp = PlanInput(
            model=m,
            gpu=h200,
            tp=tp,
            engine=EngineSettings(version="0.19.0", max_model_len=8192),
            workload=wl,
            choose_max_num_seqs=False,
        )
        cache = PlanCache()  # the caller's memo, kept between the warm plans
        make_plan(inp, cache)
        t0 = CLOCK()
        for _ in range(repeat):
            latency._BY_MODEL.clear()
            weights._MEMO.clear()
            make_plan(inp)  # a fresh PlanCache
        cold = (CLOCK() - t0) / repeat
        t0 = CLOCK()
        for _ in range(repeat):
            make_plan(inp, cache)
        warm = (CLOCK() - t0) / repeat
        print(f"{name:<45} {tp:>3} {cold * 1e3:>8.2f} {warm * 1e3:>8.2f}")
    m = load_model("meta-llama/Llama-3.1-70B-Instruct")
    gpus = [get_gpu(g) for g in ("H100-SXM-80GB", "H200-SXM-141GB", "B200-180GB")]
    utils = [0.85 + 0.005 * i for i in range(20)]
    points = list(itertools.product(gpus, (2, 4, 8), ("auto", "fp8"), utils))
    points = (points * 3)[:1000]
    # one caller making the plans in a row on one thread: one PlanCache for the sweep, as the
    # module-level batch memo was before the cache became the caller's (planner.PlanCache)
    sweep_cache = PlanCache()
    t0 = CLOCK()
    for g, tp, kv, u in points:
        make_plan(
            PlanInput(
                model=m,
                gpu=g,
                tp=tp,
                engine=EngineSettings(
                    version="0.19.0",
                    max_model_len=8192,
                    gpu_memory_utilization=u,
                    kv_cache_dtype=kv,
                ),
                workload=wl,
                choose_utilization=False,
                choose_max_num_seqs=False,
            ),
            sweep_cache,
        )
    dt = CLOCK() - t0
    print(
        f"sweep of {len(points)} what-if plans with the workload (GPUs × TP × KV dtype × "
        f"utilization): {dt:.2f} s ({dt / len(points) * 1e3:.2f} ms each)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
