"""What the operator does with what vLLM printed (controller/startup.py::adjust): a failed start
steps back once per template hash and stabilization window, never a loop; calibrateFromObserved
sizes from observed KV tokens only when they are below the prediction."""

from __future__ import annotations

from pathlib import Path

import yaml

from inference_capacity.api import InferenceCapacity
from inference_capacity.controller import startup
from inference_capacity.decision import plan_for_target
from inference_capacity.planner import Plan
from inference_capacity.resolve import resolve

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "llama-3.1-8b-h100.yaml"


def _setup():  # type: ignore[no-untyped-def]
    icap, dep = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    spec = InferenceCapacity.from_manifest(icap).spec
    resolved = resolve(spec, dep)
    return spec, dep, resolved.plan_input


def _plan(spec, dep, inp):  # type: ignore[no-untyped-def]
    return plan_for_target(inp, spec, dep, None, None, "")[0]


def _failed(h: str, short: float) -> dict[str, object]:
    return {
        "templateHash": h,
        "pod": f"p-{h}",
        "reason": "Failed",
        "failure": "CudaOutOfMemory",
        "shortfallGib": short,
        "message": "CUDA out of memory",
    }


def test_a_failed_start_steps_back_once_per_hash_and_window() -> None:
    spec, dep, inp = _setup()
    key = "adjust-test"
    startup.forget(key)
    base_plan = _plan(spec, dep, inp)
    base = base_plan.recommendation.gpu_memory_utilization
    a = startup.adjust(key, inp, [_failed("h1", 4.0)], True, 300, 5.0, False, now=1000.0)
    assert a.failed == ("CudaOutOfMemory", "CUDA out of memory") and a.status is not None
    stepped_plan = _plan(spec, dep, a.plan_input)
    stepped = stepped_plan.recommendation.gpu_memory_utilization

    # 4 GiB of the H100's 79.19 GiB (the catalog's bytes): the measured shortfall, added to
    # the operational headroom; the smaller pool may size a smaller batch, whose fewer CUDA
    # graphs free the difference of the two pools
    def item(p: Plan, name: str) -> int:
        return next(i.bytes for i in p.ledger[0].items if i.name == name)

    grown = item(stepped_plan, "operational_headroom") - item(base_plan, "operational_headroom")
    assert grown == 4 * 2**30
    freed = item(base_plan, "cuda_graph_pool") - item(stepped_plan, "cuda_graph_pool")
    assert freed >= 0
    assert base - stepped >= (4 * 2**30 - freed) / inp.gpu.total_bytes - 1e-4
    # the same hash again, and a new hash inside the window: no further step
    for h, t in (("h1", 2000.0), ("h2", 1200.0)):
        again = startup.adjust(key, inp, [_failed(h, 4.0)], True, 300, 5.0, False, now=t)
        assert _plan(spec, dep, again.plan_input).recommendation.gpu_memory_utilization == stepped
    # a new hash after the window: one more step
    later = startup.adjust(key, inp, [_failed("h3", 4.0)], True, 300, 5.0, False, now=1400.0)
    assert _plan(spec, dep, later.plan_input).recommendation.gpu_memory_utilization < stepped
    startup.forget(key)
    # Recommend mode: the failure is reported, nothing stepped back
    rec = startup.adjust(key, inp, [_failed("h1", 4.0)], False, 300, 5.0, False, now=1.0)
    assert rec.failed is not None and rec.plan_input == inp and rec.status is None
    startup.forget(key)


def test_calibrate_from_observed_only_lowers() -> None:
    spec, dep, inp = _setup()
    key = "calibrate-test"
    startup.forget(key)
    base = _plan(spec, dep, inp).recommendation
    entry = {"templateHash": "h", "reason": "Observed", "predictedKvCacheTokens": 100_000}
    low = startup.adjust(key, inp, [{**entry, "kvCacheTokens": 80_000}], True, 0, 5, True)
    assert low.status is not None and low.status["kvTokensRatio"] == 0.8
    sized = _plan(spec, dep, low.plan_input).recommendation
    assert (
        sized.max_num_seqs < base.max_num_seqs and sized.rollout.replicas >= base.rollout.replicas
    )
    high = startup.adjust(key, inp, [{**entry, "kvCacheTokens": 120_000}], True, 0, 5, True)
    assert high.status is None and high.plan_input == inp  # never raised
    off = startup.adjust(key, inp, [{**entry, "kvCacheTokens": 80_000}], True, 0, 5, False)
    assert off.plan_input == inp
    startup.forget(key)
