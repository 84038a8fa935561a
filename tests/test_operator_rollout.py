"""Real rollouts on the real control plane: the operator's patch starts a rolling update of a
Deployment whose pods request GPUs on kwok GPU Nodes; the real deployment controller, scheduler and
kwok carry it out.

Each test gets its own pool of kwok Nodes (label ``pool=<namespace>``) and the Deployment's
``nodeSelector`` names that pool, so the spare GPUs are exactly those of the pool."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from tests.operator_harness import Cluster, cluster, flag_value, load_example
from tests.realk8s.fixtures import wait_for

__all__ = ["cluster"]

SEQS = "--max-num-seqs"
SAMPLE_SECONDS = 0.2


def _ready(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def _pod_seqs(pod: dict[str, Any]) -> int:
    c = pod["spec"]["containers"][0]
    value = flag_value([*(c.get("command") or []), *(c.get("args") or [])], SEQS)
    # vLLM's default when the flag is absent (0.19: max_num_seqs=256 for H100-class GPUs);
    # every pod here runs with the operator's flag, so this is never reached in a passing run
    return int(value) if value else 256


@dataclass
class Sample:
    t: float
    ready_capacity: int  # Σ over Ready pods of their --max-num-seqs
    ready: int
    pods: int
    pending_unschedulable: int
    available_replicas: int
    min_seqs: int  # the smallest --max-num-seqs among the pods (old or new template)
    templates: int  # distinct pod templates among the pods: 2 while a rollout is under way
    bound_gpus: dict[str, int] = field(default_factory=dict)


class Sampler:
    """Every 200 ms: the Deployment's available replicas and its pods (Ready, Pending, bound)."""

    def __init__(self, c: Cluster, ns: str, name: str) -> None:
        from kubernetes import client

        self.api_client = c.api.api_client()
        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.ns, self.name = ns, name
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            pods = self.api_client.sanitize_for_serialization(
                self.core.list_namespaced_pod(self.ns, label_selector=f"app={self.name}")
            )["items"]
            dep = self.apps.read_namespaced_deployment(self.name, self.ns)
            bound: dict[str, int] = {}
            for p in pods:
                node = p["spec"].get("nodeName")
                if node and not p["metadata"].get("deletionTimestamp"):
                    gpus = p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
                    bound[node] = bound.get(node, 0) + int(gpus)
            unschedulable = sum(
                1
                for p in pods
                if any(
                    c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                    for c in (p.get("status") or {}).get("conditions") or []
                )
            )
            ready = [p for p in pods if _ready(p)]
            self.samples.append(
                Sample(
                    t=time.monotonic() - t0,
                    ready_capacity=sum(_pod_seqs(p) for p in ready),
                    ready=len(ready),
                    pods=len([p for p in pods if not p["metadata"].get("deletionTimestamp")]),
                    pending_unschedulable=unschedulable,
                    available_replicas=(dep.status.available_replicas or 0),
                    min_seqs=min((_pod_seqs(p) for p in pods), default=0),
                    templates=len({p["metadata"]["labels"].get("pod-template-hash") for p in pods}),
                    bound_gpus=bound,
                )
            )
            self._stop.wait(SAMPLE_SECONDS)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.api_client.close()


def _pool(c: Cluster, ns: str, gpus: list[int]) -> list[str]:
    return c.node_pool(ns, gpus)


def _delete_pool(c: Cluster, ns: str, names: list[str]) -> None:
    c.delete_node_pool(ns, names)


#: a new pod counts as available only after this long Ready (vLLM takes minutes to load a model;
#: kwok makes pods Ready at once, which would finish a rollout between two samples)
MIN_READY_SECONDS = 2


def _example(ns: str, edit: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
    dep["spec"]["template"]["spec"]["nodeSelector"] = {"pool": ns}
    dep["spec"]["minReadySeconds"] = MIN_READY_SECONDS
    if edit:
        edit(icap, dep)
    return icap, dep


def _rolled_out(c: Cluster, ns: str, name: str) -> bool:
    d = c.deployment(ns, name)
    st, spec = d.get("status") or {}, d["spec"]
    return bool(
        st.get("observedGeneration") == d["metadata"]["generation"]
        and st.get("updatedReplicas") == spec["replicas"]
        and st.get("availableReplicas") == spec["replicas"]
        and st.get("replicas") == spec["replicas"]
    )


def _wait_rolled_out(c: Cluster, ns: str, name: str, timeout: float = 90) -> None:
    try:
        wait_for(lambda: _rolled_out(c, ns, name), timeout=timeout, interval=0.2)
    except AssertionError:
        raise AssertionError(
            f"rollout of {ns}/{name} did not complete: {c.deployment(ns, name).get('status')}\n"
            f"{c.api.kubectl('get', 'pods', '-n', ns, '-o', 'wide').stdout}\n"
            f"{c.operator.log()[-2000:]}"
        ) from None


def _plan_replicas(c: Cluster, ns: str) -> dict[str, Any]:
    """What the operator decided, once it has applied it."""
    c.wait_condition(ns, "llama-8b", "Applied", "True", timeout=60)
    rec: dict[str, Any] = c.icap(ns, "llama-8b")["status"]["recommendation"]
    return rec


def test_rollout_keeps_peak_capacity_and_surges_onto_spare_gpus(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("roll")
    nodes = _pool(c, ns, [8, 8])
    try:
        icap, dep = _example(ns)
        c.api.apply(icap, dep)
        rec = _plan_replicas(c, ns)
        _wait_rolled_out(c, ns, "llama-8b")
        peak = icap["spec"]["workload"]["peakConcurrency"]
        replicas = rec["replicas"]
        spare = 16 - replicas  # pool GPUs minus one GPU per running replica
        assert rec["maxSurge"] == min(spare, replicas) > 0, rec
        # a material change: the context cap (new --max-model-len, a new pod template)
        before = c.deployment(ns, "llama-8b")["metadata"]["generation"]
        with Sampler(c, ns, "llama-8b") as sampler:
            c.patch_icap(ns, "llama-8b", {"spec": {"workload": {"maxModelLen": 24576}}})
            wait_for(
                lambda: c.deployment(ns, "llama-8b")["metadata"]["generation"] > before,
                timeout=60,
                message="the operator's patch",
            )
            _wait_rolled_out(c, ns, "llama-8b")
            time.sleep(2 * SAMPLE_SECONDS)
        new = c.icap(ns, "llama-8b")["status"]["recommendation"]
        args = c.wait_args(ns, "llama-8b", lambda a: flag_value(a, "--max-model-len") == "24576")
        assert flag_value(args, SEQS) == str(new["maxNumSeqs"])
        s = sampler.samples
        rolling = [x for x in s if x.templates > 1]
        assert len(rolling) >= 2, f"the rollout was not observed: {s}"
        worst = min(s, key=lambda x: x.ready_capacity)
        assert worst.ready_capacity >= peak, (
            f"capacity fell to {worst.ready_capacity} < peak {peak} at t={worst.t:.1f}s "
            f"({worst.ready} ready pods)"
        )
        # surge pods were scheduled (spare GPUs existed): more pods than replicas at some point,
        # never more than replicas + maxSurge, never more GPUs bound than a Node has
        assert max(x.pods for x in s) > new["replicas"], "no surge pod was observed"
        assert max(x.pods for x in s) <= new["replicas"] + new["maxSurge"]
        assert all(g <= 8 for x in s for g in x.bound_gpus.values())
        assert max(x.pending_unschedulable for x in s) == 0
    finally:
        _delete_pool(c, ns, nodes)


def test_without_spare_gpus_the_verdict_matches_the_scheduler(cluster: Cluster) -> None:
    """A pool with exactly the GPUs the replicas use: the operator says no surge is possible.
    With recovery headroom it rolls with maxUnavailable (the rollout completes); without any, it
    refuses (NoSafeRollout) — and a surge rollout forced by hand stays Pending, as predicted."""
    c = cluster
    ns = c.namespace("nospare")
    # replicas the plan needs (one GPU each): the operator's own plan of the same manifest
    replicas = _cli_replicas(*_example(ns))
    nodes = _pool(c, ns, [replicas])
    try:
        icap, dep = _example(ns)
        c.api.apply(icap, dep)
        rec = _plan_replicas(c, ns)
        assert rec["replicas"] == replicas
        _wait_rolled_out(c, ns, "llama-8b")
        c.patch_icap(ns, "llama-8b", {"spec": {"workload": {"maxModelLen": 24576}}})
        c.wait_args(ns, "llama-8b", lambda a: flag_value(a, "--max-model-len") == "24576", 60)
        # what the patch set (read at once: mid-rollout an old pod's GPU is briefly free, and
        # the status then says so, while the operator changes nothing until the rollout is done)
        ru = c.deployment(ns, "llama-8b")["spec"]["strategy"]["rollingUpdate"]
        assert ru["maxSurge"] == 0 and ru["maxUnavailable"] >= 1, ru
        _wait_rolled_out(c, ns, "llama-8b")  # the scheduler agrees: it completes without surge

        # no recovery headroom: the operator refuses to roll at all ...
        c.patch_icap(ns, "llama-8b", {"spec": {"headroom": {"recoveryReplicas": 0}}})
        c.wait_condition(ns, "llama-8b", "RolloutSafe", "False", timeout=60)
        # ... and a surge rollout forced by hand cannot schedule its surge pod
        c.api.kubectl(
            "patch", "deployment", "llama-8b", "-n", ns, "--type=merge",
            "-p", json.dumps({"spec": {
                "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {"metadata": {"annotations": {"forced": "yes"}}},
            }}),
        )  # fmt: skip

        def unschedulable() -> bool:
            pods = c.api.get_json("pods", "-n", ns)["items"]
            return any(
                cond.get("reason") == "Unschedulable"
                and "nvidia.com/gpu" in (cond.get("message") or "")
                for p in pods
                for cond in (p.get("status") or {}).get("conditions") or []
            )

        wait_for(unschedulable, timeout=30, interval=0.2, message="an Unschedulable surge pod")
    finally:
        _delete_pool(c, ns, nodes)


def _cli_replicas(icap: dict[str, Any], dep: dict[str, Any]) -> int:
    """``inference-capacity plan -o json`` of the resource and its Deployment (what the operator
    decides for them): the replicas it needs."""
    import subprocess
    import sys
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump_all([icap, dep], f)
    out = subprocess.run(
        [sys.executable, "-m", "inference_capacity.cli", "plan", f.name, "-o", "json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    doc = json.loads(out.stdout)
    replicas: int = doc["recommendation"]["replicas"]
    return replicas
