"""spec.policy.setMemoryRequest (issue 23, item 5): the load-time host estimate (risks.py, the one
function the risk report, ``plan -o patch`` and the operator read), the resources patch it gives
(never lowering a request, raising a lower limit), and the OOMKilled step up (once per template
hash and stabilization window, bounded, never a loop)."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from inference_capacity.api import InferenceCapacity
from inference_capacity.cli import main
from inference_capacity.controller import startup
from inference_capacity.decision import World, decide, plan_for_target
from inference_capacity.patching import ANNOTATION_APPLIED, apply_strategic
from inference_capacity.resolve import resolve
from inference_capacity.risks import (
    HOST_BASE_BYTES,
    MAX_MEMORY_STEPS,
    MEMORY_STEP_FACTOR,
    HostInput,
    MemoryStep,
    assess,
    host_input,
    host_peak_bytes,
    memory_resources,
    memory_target_bytes,
    quantity,
)
from inference_capacity.units import GiB

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama-3.1-8b-h100.yaml"
MiB = 2**20


def _docs(memory: dict[str, str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    icap, dep = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    icap["spec"]["policy"]["setMemoryRequest"] = True
    res = dep["spec"]["template"]["spec"]["containers"][0]["resources"]
    for part, value in (memory or {}).items():
        res.setdefault(part, {})["memory"] = value
    return icap, dep


def _decide(icap: dict[str, Any], dep: dict[str, Any], step: MemoryStep | None = None) -> Any:
    spec = InferenceCapacity.from_manifest(icap).spec
    resolved = resolve(spec, dep)
    plan, _ = plan_for_target(resolved.plan_input, spec, dep, None, None, "")
    world = World(deployment=dep, now=1e9, memory_step=step)
    return plan, decide(spec, "default/llama-8b", resolved, plan, world)


def test_the_estimate_terms() -> None:
    plan, _ = _decide(*_docs())
    weights = sum(r.weights.total for r in plan.prediction.ranks)
    # a text-only model on one GPU: one base process and the weights through the page cache
    assert host_peak_bytes(plan, HostInput()) == HOST_BASE_BYTES + weights
    # --swap-space per rank; --mm-processor-cache-gb once per API server and engine core
    # (vLLM config/multimodal.py: "duplicated for each API process and engine core process")
    h = HostInput(swap_space_gb=4, mm_processor_cache_gb=2)
    assert host_peak_bytes(plan, h) == HOST_BASE_BYTES + weights + 4 * GiB + 2 * 2 * GiB
    # the risk reads the same function
    risk = assess(plan, HostInput(memory_request=64 * GiB))[-1]
    assert risk.margin_bytes == 64 * GiB - host_peak_bytes(plan, HostInput())


def test_host_input_reads_the_container() -> None:
    c = {"resources": {"requests": {"memory": "16Gi"}, "limits": {"memory": "20000M"}}}
    h = host_input(c, {"swap-space": "2", "mm-processor-cache-gb": "0"})
    assert h.memory_request == 16 * GiB and h.memory_limit == 20_000_000_000
    assert h.swap_space_gb == 2 and h.mm_processor_cache_gb == 0
    assert host_input({}, {}).mm_processor_cache_gb is None  # unset: vLLM's default applies


def test_resources_never_lower_and_raise_a_lower_limit() -> None:
    target = 20 * GiB + 1
    q = quantity(target)
    assert q == f"{math.ceil(target / MiB)}Mi" == "20481Mi"
    # no memory set: the request only (no limit is invented)
    got = memory_resources({}, target)
    assert got == ({"requests": {"memory": q}}, (None, 20481 * MiB))
    # a request above the target: nothing; never lowered
    assert memory_resources({"resources": {"requests": {"memory": "32Gi"}}}, target) is None
    # a limit below: raised to the request
    low = {"resources": {"requests": {"memory": "8Gi"}, "limits": {"memory": "16Gi"}}}
    res, (old, _) = memory_resources(low, target) or ({}, (None, 0))
    assert res == {"requests": {"memory": q}, "limits": {"memory": q}} and old == 8 * GiB
    # a limit alone, above the target: the API server's request is that limit, nothing to do
    assert memory_resources({"resources": {"limits": {"memory": "64Gi"}}}, target) is None
    with pytest.raises(ValueError, match="not a quantity"):
        memory_resources({"resources": {"requests": {"memory": "lots"}}}, target)


def test_the_decision_writes_the_request_once() -> None:
    icap, dep = _docs({"requests": "4Gi", "limits": "8Gi"})
    plan, d = _decide(icap, dep)
    peak = host_peak_bytes(plan, HostInput())
    assert d.action == "patch"
    (c,) = d.patch["spec"]["template"]["spec"]["containers"]
    assert c["resources"] == {
        "requests": {"memory": quantity(peak)},
        "limits": {"memory": quantity(peak)},
    }
    assert "resources.requests.memory 4.00Gi→" in d.want
    assert json.loads(d.patch["metadata"]["annotations"][ANNOTATION_APPLIED])["resources"]
    # applied: the next decision has no memory to change (idempotent), the GPU limit is kept
    after = apply_strategic(dep, d.patch)
    res = after["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert res["limits"]["nvidia.com/gpu"] == "1"
    _, again = _decide(icap, after)
    assert again.action == "none" and not again.patch
    # off (the default): no resources in the patch
    icap["spec"]["policy"]["setMemoryRequest"] = False
    _, off = _decide(icap, dep)
    assert "resources" not in off.patch["spec"]["template"]["spec"]["containers"][0]


def test_a_memory_step_raises_the_target() -> None:
    icap, dep = _docs({"requests": "30Gi"})
    plan, none = _decide(icap, dep)
    assert none.action == "patch"  # the flags
    assert "resources" not in none.patch["spec"]["template"]["spec"]["containers"][0]
    step = MemoryStep(MEMORY_STEP_FACTOR, 30 * GiB)
    assert memory_target_bytes(plan, HostInput(), step) == math.ceil(1.25 * 30 * GiB)
    _, stepped = _decide(icap, dep, step)
    (c,) = stepped.patch["spec"]["template"]["spec"]["containers"]
    assert c["resources"] == {"requests": {"memory": quantity(math.ceil(1.25 * 30 * GiB))}}


def _oom(h: str) -> list[dict[str, Any]]:
    return [{"templateHash": h, "pod": f"p-{h}", "reason": "Failed", "failure": "OOMKilled"}]


def test_oomkilled_steps_up_once_per_hash_and_window_and_is_bounded() -> None:
    icap, dep = _docs()
    spec = InferenceCapacity.from_manifest(icap).spec
    inp = resolve(spec, dep).plan_input
    key = "mem-step-test"
    startup.forget(key)
    host = HostInput(memory_request=16 * GiB)

    def adj(h: str, t: float, enforce: bool = True) -> startup.Adjustment:
        return startup.adjust(key, inp, _oom(h), enforce, 300, 5.0, False, now=t, host=host)

    a = adj("h1", 1000.0)
    assert a.failed is not None and a.failed[0] == "OOMKilled"
    assert a.memory_step == MemoryStep(1.25, 16 * GiB)
    assert a.status is not None and a.status["kind"] == "MemoryStepUp"
    assert a.status["memoryStepFactor"] == 1.25 and a.status["memoryBaseBytes"] == 16 * GiB
    # the same hash later, a new hash inside the window: the same step (no loop)
    assert adj("h1", 5000.0).memory_step == a.memory_step
    assert adj("h2", 1200.0).memory_step == a.memory_step
    # a new hash after the window: one more step, from the same base
    b = adj("h3", 1400.0)
    assert b.memory_step == MemoryStep(1.25**2, 16 * GiB)
    # bounded: at most MAX_MEMORY_STEPS in all
    for i, t in enumerate((2000.0, 3000.0, 4000.0, 5000.0)):
        last = adj(f"x{i}", t)
    assert last.memory_step is not None
    assert last.memory_step.factor == pytest.approx(MEMORY_STEP_FACTOR**MAX_MEMORY_STEPS)
    startup.forget(key)
    # Recommend mode, or setMemoryRequest off (no host given): reported, no step
    rec = adj("h1", 1.0, enforce=False)
    assert rec.failed is not None and rec.memory_step is None and rec.status is None
    off = startup.adjust(key, inp, _oom("h1"), True, 300, 5.0, False, now=1.0)
    assert off.memory_step is None
    startup.forget(key)


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_plan_o_patch_carries_the_request(tmp_path: Path) -> None:
    icap, dep = _docs({"requests": "4Gi"})
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump_all([icap, dep]))
    code, out, err = _cli("plan", str(f), "-o", "patch")
    assert code == 0, err
    patch = json.loads(out)
    plan, d = _decide(icap, dep)
    want = quantity(host_peak_bytes(plan, HostInput()))
    (c,) = patch["spec"]["template"]["spec"]["containers"]
    assert (
        c["resources"]
        == {"requests": {"memory": want}}
        == (d.patch["spec"]["template"]["spec"]["containers"][0]["resources"])
    )


def test_an_unmodelled_host_flag_fails_closed() -> None:
    icap, dep = _docs({"requests": "4Gi"})
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    args += ["--api-server-count", "2"]
    _, d = _decide(icap, dep)
    assert d.action == "refuse" and d.reason == "UnsupportedFlag" and not d.patch
    assert "--api-server-count" in d.applied_message
    args[-1] = "1"  # one API server: what the estimate assumes
    _, ok = _decide(icap, dep)
    assert ok.action == "patch"
    # the policy off: the flag is none of the decision's business
    icap["spec"]["policy"]["setMemoryRequest"] = False
    args[-1] = "2"
    _, off = _decide(icap, dep)
    assert off.action == "patch"
