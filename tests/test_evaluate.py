"""One glue (issue 20 item 5): ``evaluate.evaluate(spec, Snapshot)`` reads once and decides once,
and both ``plan FILE`` and the controller call it (a structural test keeps a second copy of the
glue out of the adapters)."""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path
from typing import Any

import yaml

import inference_capacity
from inference_capacity.api import InferenceCapacity, load_manifests
from inference_capacity.evaluate import STRATEGY_NOT_MANAGED, Snapshot, evaluate, read
from tests.test_vllm_flag_table import cli

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(inference_capacity.__file__).resolve().parent
EXAMPLE = ROOT / "examples" / "llama-3.1-8b-h100.yaml"


def _example() -> tuple[Any, dict[str, Any]]:
    docs = load_manifests(EXAMPLE.read_text())
    icap = InferenceCapacity.from_manifest(docs.capacities[0], ignore_status=True)
    dep = next(d for d in docs.others if d.get("kind") == "Deployment")
    return icap, dep


def _stamped(patch: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(patch)
    for where in (out, out.get("spec", {}).get("template", {})):
        (where.get("metadata") or {}).get("annotations", {}).pop(
            "capacity.inference.dev/template-changed-at", None
        )
    return out


def test_plan_file_prints_the_patch_evaluate_decides() -> None:
    icap, dep = _example()
    snapshot = Snapshot(dep, nodes_unknown="spare GPUs unknown (no Nodes in the input)")
    ev = evaluate(icap.spec, snapshot, owner=f"default/{icap.metadata.name}")
    assert ev.decision is not None and ev.plan is not None
    assert ev.decision.action == "patch"
    code, out, err = cli("plan", str(EXAMPLE), "-o", "patch")
    assert code == 0, err
    assert _stamped(json.loads(out)) == _stamped(ev.decision.patch)
    # the numbers the patch writes are the plan's (the distribution rule: 120 seqs, 4 replicas)
    assert ev.decision.flags["max-num-seqs"] == str(ev.plan.recommendation.max_num_seqs)
    assert ev.decision.replicas == ev.plan.recommendation.rollout.replicas


def test_read_once_the_caller_may_pass_what_it_read() -> None:
    icap, dep = _example()
    snapshot = Snapshot(dep)
    resolved = read(icap.spec, snapshot)
    once = evaluate(icap.spec, snapshot, resolved=resolved)
    again = evaluate(icap.spec, snapshot)
    assert once.resolved is resolved
    assert once.decision == again.decision and once.spare_message == again.spare_message


def test_without_a_deployment_only_the_plan() -> None:
    icap, _ = _example()
    ev = evaluate(icap.spec, Snapshot(None))
    assert ev.plan is not None and ev.plan.fits and ev.decision is None


def test_an_unsupported_container_gets_no_plan() -> None:
    icap, dep = _example()
    dep = copy.deepcopy(dep)
    dep["spec"]["template"]["spec"]["containers"][0]["args"] += ["--swap-space", "4"]
    ev = evaluate(icap.spec, Snapshot(dep))
    assert ev.plan is None and ev.decision is not None
    assert ev.decision.reason == "UnsupportedFlag"
    assert "vLLM 0.19.0 has no --swap-space; removed in 0.18.0" in ev.decision.applied_message


def test_spare_gpus_from_the_snapshot() -> None:
    icap, dep = _example()
    unknown = evaluate(icap.spec, Snapshot(dep, nodes_unknown="spare GPUs unknown (test)"))
    assert unknown.spare_message == "spare GPUs unknown (test)"
    node = {
        "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }
    counted = evaluate(icap.spec, Snapshot(dep, nodes=[node]))
    assert counted.spare_message != unknown.spare_message
    assert "spare GPUs unknown" not in counted.spare_message
    spec = icap.spec.model_copy(
        update={"rollout": icap.spec.rollout.model_copy(update={"manage_strategy": False})}
    )
    assert evaluate(spec, Snapshot(dep, nodes=[node])).spare_message == STRATEGY_NOT_MANAGED


#: the glue's steps: only evaluate.py calls them in order (an adapter calls read and evaluate)
GLUE = {"resolve", "plan_for_target", "spare_for_target", "decide"}


def _calls(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            out.add(name)
    return out


def test_the_adapters_call_the_one_glue() -> None:
    for rel in ("cli/manifest.py", "controller/reconcile.py"):
        calls = _calls(PACKAGE / rel)
        assert not calls & GLUE, f"{rel} calls {sorted(calls & GLUE)}: use evaluate"
        assert {"read", "evaluate"} <= calls, rel


def test_the_example_file_is_what_the_test_reads() -> None:
    # the example has the InferenceCapacity and its Deployment (and the test plans that pair)
    kinds = [d["kind"] for d in yaml.safe_load_all(EXAMPLE.read_text())]
    assert kinds == ["InferenceCapacity", "Deployment"]
