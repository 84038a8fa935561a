"""`plan FILE -o patch` is what the operator writes (issue 10, point 1).

A property test: Hypothesis draws an InferenceCapacity and a Deployment (mode, hysteresis, the
running --max-num-seqs and --gpu-memory-utilization, replicas, which parts the operator manages,
TP against the container's GPUs). The Deployment is applied to the real control plane and left to
settle; the CLI then plans the resource against the live Deployment and the cluster's Nodes and
Pods (as `kubectl get -o yaml` prints them), and the operator reconciles the same resource. The
CLI's decision must be the operator's: the same Applied/Ready conditions, and the Deployment the
operator leaves is the live one with the CLI's patch applied.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from inference_capacity.cli import main
from inference_capacity.decide import ANNOTATION_TEMPLATE_CHANGED
from inference_capacity.patching import ANNOTATION_APPLIED, apply_strategic
from tests.operator_harness import Cluster, cluster, load_example
from tests.realk8s.fixtures import wait_for

__all__ = ["cluster"]

NAME = "llama-8b"

cases = st.fixed_dictionaries(
    {
        "mode": st.sampled_from(["Enforce", "Recommend"]),
        "hysteresis": st.sampled_from([0.0, 5.0, 25.0]),
        # the running --max-num-seqs, relative to what the example recommends (None: absent)
        "seqs_offset": st.sampled_from([None, -40, -3, 0, 3, 40]),
        "gmu": st.sampled_from([None, "0.85", "0.95"]),
        "replicas": st.integers(1, 3),
        "manage_replicas": st.booleans(),
        "manage_strategy": st.booleans(),
        # (--tensor-parallel-size on the command line, nvidia.com/gpu of the container)
        "tp_gpus": st.sampled_from([(None, 1), (None, 1), (2, 2), (2, 1)]),
    }
)


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def recommended_seqs(tmp_path_factory: pytest.TempPathFactory) -> int:
    """The example's recommended --max-num-seqs (the running values are drawn around it)."""
    code, out, err = _cli("plan", str(Path("examples") / "llama-3.1-8b-h100.yaml"), "-o", "json")
    assert code == 0, err
    return int(json.loads(out)["recommendation"]["maxNumSeqs"])


def _edit(icap: dict[str, Any], dep: dict[str, Any], case: dict[str, Any], seqs: int) -> None:
    spec = icap["spec"]
    spec["mode"] = case["mode"]
    spec["policy"]["hysteresisPercent"] = case["hysteresis"]
    spec["rollout"]["manageReplicas"] = case["manage_replicas"]
    spec["rollout"]["manageStrategy"] = case["manage_strategy"]
    dep["spec"]["replicas"] = case["replicas"]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    args = c["args"]
    if case["seqs_offset"] is not None:
        args += ["--max-num-seqs", str(max(1, seqs + case["seqs_offset"]))]
    if case["gmu"] is not None:
        args += ["--gpu-memory-utilization", case["gmu"]]
    tp, gpus = case["tp_gpus"]
    if tp is not None:
        args += ["--tensor-parallel-size", str(tp)]
    c["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)


def _settled(c: Cluster, ns: str) -> dict[str, Any]:
    """The Deployment once its controller has acted on it and its pods are placed (or known
    unschedulable): what the operator will read, unchanged until the operator writes."""

    def check() -> dict[str, Any] | None:
        dep = c.deployment(ns, NAME)
        st_ = dep.get("status") or {}
        if st_.get("observedGeneration") != dep["metadata"]["generation"]:
            return None
        pods = c.api.get_json("pods", "-n", ns)["items"]
        if len(pods) != dep["spec"]["replicas"]:
            return None
        for p in pods:
            placed = p["spec"].get("nodeName")
            unschedulable = any(
                x["type"] == "PodScheduled" and x["status"] == "False"
                for x in (p.get("status") or {}).get("conditions", [])
            )
            ready = any(
                x["type"] == "Ready" and x["status"] == "True"
                for x in (p.get("status") or {}).get("conditions", [])
            )
            if not (unschedulable or (placed and ready)):
                return None
        # the Deployment's status has caught up with its pods
        fresh = c.deployment(ns, NAME)
        if fresh["metadata"]["resourceVersion"] != dep["metadata"]["resourceVersion"]:
            return None
        return fresh

    out: dict[str, Any] = wait_for(check, timeout=30, interval=0.3, message="deployment settled")
    return out


def _applied_condition(c: Cluster, ns: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        icap = c.icap(ns, NAME)
        st_ = icap.get("status") or {}
        if st_.get("observedGeneration") != icap["metadata"]["generation"]:
            return None
        return next((x for x in st_.get("conditions", []) if x["type"] == "Applied"), None)

    out: dict[str, Any] = wait_for(check, timeout=30, interval=0.2, message="Applied condition")
    return out


def _compared(dep: dict[str, Any]) -> dict[str, Any]:
    """What a patch may change, without the template-changed time (the clock's)."""
    spec = dep["spec"]
    ann = dict(dep["metadata"].get("annotations") or {})
    ann.pop(ANNOTATION_TEMPLATE_CHANGED, None)
    ann = {k: v for k, v in ann.items() if k.startswith("capacity.inference.dev/")}
    c = spec["template"]["spec"]["containers"][0]
    return {
        "command": c.get("command"),
        "args": c.get("args"),
        "env": c.get("env"),
        "resources": c.get("resources"),
        "replicas": spec.get("replicas"),
        "strategy": spec.get("strategy"),
        "annotations": ann,
    }


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: each example is a cluster round trip
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases)
def test_cli_patch_is_what_the_operator_writes(
    cluster: Cluster, recommended_seqs: int, tmp_path: Path, case: dict[str, Any]
) -> None:
    c = cluster
    ns = c.namespace("parity")
    try:
        icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
        _edit(icap, dep, case, recommended_seqs)
        c.api.apply(dep)
        live = _settled(c, ns)
        world = c.api.get_json("nodes,pods", "-A")
        f = tmp_path / f"{ns}.yaml"
        f.write_text(yaml.safe_dump_all([icap, live, world]))
        code, out, err = _cli("plan", str(f), "-o", "json")
        assert code == 0, err
        decided = json.loads(out)["decision"]
        cli_applied = next(x for x in decided["conditions"] if x["type"] == "Applied")
        pcode, pout, perr = _cli("plan", str(f), "-o", "patch")
        c.api.apply(icap)
        if decided["action"] == "patch":
            assert pcode == 0, perr
            patch = json.loads(pout)

            def written() -> dict[str, Any] | None:
                d = c.deployment(ns, NAME)
                ann = d["metadata"].get("annotations") or {}
                return d if ANNOTATION_APPLIED in ann else None

            after = wait_for(written, timeout=30, interval=0.2, message="operator patch")
            assert _compared(after) == _compared(apply_strategic(live, patch)), (case, perr)
            # the operator's first write to this Deployment: status.applied records it (the
            # CLI's Applied message names the same hash), and no Applied Event is posted
            applied = wait_for(
                lambda: (c.icap(ns, NAME).get("status") or {}).get("applied"),
                timeout=30,
                interval=0.2,
                message="status.applied",
            )
            assert cli_applied["message"].endswith(f"(hash {applied['hash']})"), case
            assert not [e for e in c.events(ns) if e["reason"] == "Applied"], case
        else:
            assert pcode in (0, 3, 5), (pcode, perr)
            if decided["action"] == "refuse":
                assert pcode == 5
            op_applied = _applied_condition(c, ns)
            assert (op_applied["status"], op_applied["reason"], op_applied["message"]) == (
                cli_applied["status"],
                cli_applied["reason"],
                cli_applied["message"],
            ), case
            # and the operator wrote nothing
            assert _compared(c.deployment(ns, NAME)) == _compared(live), case
        if decided["pdbMinAvailable"] is not None:

            def pdb() -> dict[str, Any] | None:
                got = c.api.kubectl("get", "pdb", NAME, "-n", ns, "-o", "json", check=False)
                return json.loads(got.stdout) if got.returncode == 0 else None

            assert (
                wait_for(pdb, timeout=20, message="PDB")["spec"]["minAvailable"]
                == (decided["pdbMinAvailable"])
            )
    finally:
        c.api.delete_namespaces([ns], wait=True)
        c.namespaces.remove(ns)
