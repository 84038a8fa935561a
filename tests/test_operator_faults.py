"""Reliability: under the test server's fault injection the operator converges to the same
Deployment and status as without faults, never writes a stale patch, and logs each retry once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.operator_harness import Cluster, cluster, flag_value
from tests.operator_harness import load_example as _load_example
from tests.realk8s.fixtures import wait_for

__all__ = ["cluster"]

SEQS = "--max-num-seqs"


def load_example(name: str, ns: str) -> list[dict[str, Any]]:
    """The example with its pods pinned to a node pool that does not exist: the result must not
    depend on how many spare GPUs the shared cluster has left (its pods stay Pending)."""
    docs = _load_example(name, ns)
    for d in docs:
        if d["kind"] == "Deployment":
            d["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "faults-none"}
    return docs


def create(c: Cluster, icap: dict[str, Any] | None, dep: dict[str, Any] | None) -> None:
    """Create with POSTs only (the kubernetes client), so faults on GET/PATCH of the named
    objects hit the operator, not the test's own kubectl."""
    from kubernetes import client

    api = c.api.api_client()
    try:
        if dep is not None:
            client.AppsV1Api(api).create_namespaced_deployment(dep["metadata"]["namespace"], dep)
        if icap is not None:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                "capacity.inference.dev",
                "v1alpha1",
                icap["metadata"]["namespace"],
                "inferencecapacities",
                icap,
            )
    finally:
        api.close()


def converge(c: Cluster, ns: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create the example and wait until the operator has applied it; (deployment spec,
    status)."""
    icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
    create(c, icap, dep)
    c.wait_args(ns, "llama-8b", lambda a: SEQS in a, timeout=40)
    c.wait_condition(ns, "llama-8b", "Applied", "True", timeout=40)
    d = c.deployment(ns, "llama-8b")
    st = c.icap(ns, "llama-8b")["status"]
    return d["spec"], st


def comparable(spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    cont = spec["template"]["spec"]["containers"][0]
    return {
        "args": cont["args"],
        "command": cont["command"],
        "replicas": spec["replicas"],
        "strategy": spec["strategy"],
        "recommendation": status["recommendation"],
        "ledger": status["ledger"],
        "vllmStartup": status["vllmStartup"],
        # "Applied" right after the patch, "UpToDate" once a later reconcile finds nothing to do
        "conditions": {
            c["type"]: (c["status"], "UpToDate" if c["reason"] == "Applied" else c["reason"])
            for c in status["conditions"]
        },
    }


@pytest.fixture(scope="module")
def baseline(cluster: Cluster) -> dict[str, Any]:
    ns = cluster.namespace("base")
    return comparable(*converge(cluster, ns))


def _then_expire(faults: Any, rule: Any) -> Any:
    faults.expire()
    return rule


FAULTS = {
    "409-on-deployment-patch": lambda f: f.fail(409, "PATCH", r"/deployments/llama-8b", times=2),
    # the Deployment is read from the watch (controller/objcache.py), not with a GET: the 429
    # goes on its patch, which the operator's client retries after Retry-After (throttle.py)
    "429-on-deployment-patch": lambda f: f.fail(
        429, "PATCH", r"/deployments/llama-8b\b", times=2, retry_after=1
    ),
    "500-on-status-patch": lambda f: f.fail(
        500, "PATCH", r"/inferencecapacities/.*/status", times=2
    ),
    # requests only the operator makes (the test's kubectl never creates PDBs or lists Nodes)
    "503-on-pdb-create": lambda f: f.fail(503, "POST", r"/poddisruptionbudgets", times=2),
    # Nodes come from a watch-fed cache: every resourceVersion made too old, so its watch
    # gets 410 and it lists again, into the fault (it keeps the last list meanwhile)
    "500-on-node-list": lambda f: _then_expire(f, f.fail(500, "GET", r"^/api/v1/nodes", times=2)),
    "slow-responses": lambda f: f.delay(0.8, "*", r"/namespaces/flt-", times=8),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_converges_to_the_same_result_under_faults(
    cluster: Cluster, baseline: dict[str, Any], fault: str
) -> None:
    c = cluster
    ns = c.namespace("flt")
    rule = FAULTS[fault](c.api.faults)
    try:
        got = comparable(*converge(c, ns))
    finally:
        c.api.faults.clear()
    assert got == baseline
    if fault != "slow-responses":
        assert rule.hits >= 1, "the fault was never hit: the test would prove nothing"


def test_dropped_watches_and_expired_versions(cluster: Cluster, baseline: dict[str, Any]) -> None:
    c = cluster
    ns = c.namespace("watch")
    icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
    c.api.faults.expire()
    c.api.faults.drop_watches()
    create(c, icap, dep)
    c.wait_args(ns, "llama-8b", lambda a: SEQS in a, timeout=40)
    c.wait_condition(ns, "llama-8b", "Applied", "True", timeout=40)
    # and again while running: edits after a 410 relist still arrive
    c.api.faults.expire()
    c.api.faults.drop_watches()
    c.api.kubectl(
        "patch",
        "icap",
        "llama-8b",
        "-n",
        ns,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"workload": {"maxModelLen": 16384}}}),
    )
    c.wait_args(ns, "llama-8b", lambda a: flag_value(a, "--max-model-len") == "16384", timeout=40)
    c.operator.assert_alive()


def test_a_concurrent_edit_is_never_overwritten_by_a_stale_patch(cluster: Cluster) -> None:
    """The operator's patch carries the resourceVersion it computed from: when someone edits the
    Deployment in between, the server answers 409 and the operator re-reads, keeping the edit.
    (Without the resourceVersion the args list of the stale patch would replace the edit.)"""
    c = cluster
    ns = c.namespace("stale")
    icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
    create(c, None, dep)
    # hold the operator's PATCH for 2 s; a human edit lands while it waits
    rule = c.api.faults.delay(2.0, "PATCH", rf"/namespaces/{ns}/deployments/llama-8b", times=1)
    create(c, icap, None)
    wait_for(lambda: rule.hits >= 1, timeout=20, message="the operator's PATCH")
    c.api.kubectl(
        "patch",
        "deployment",
        "llama-8b",
        "-n",
        ns,
        "--type=json",
        "-p",
        json.dumps(
            [
                {
                    "op": "add",
                    "path": "/spec/template/spec/containers/0/args/-",
                    "value": "--enable-prefix-caching",
                }
            ]
        ),
    )
    args = c.wait_args(ns, "llama-8b", lambda a: SEQS in a, timeout=40)
    assert "--enable-prefix-caching" in args, "a stale patch overwrote a concurrent edit"
    conflicts = [
        r
        for r in c.api.requests.records()
        if r.method == "PATCH" and r.namespace == ns and r.code == 409
    ]
    assert conflicts, "the stale patch should have been refused with 409"
    c.api.faults.clear()


def test_each_retry_is_logged_once(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("logs")
    start = len(c.operator.log())
    rule = c.api.faults.fail(
        503, "PATCH", rf"/namespaces/{ns}/inferencecapacities/llama-8b/status", times=2
    )
    converge(c, ns)
    assert rule.hits == 2
    log = c.operator.log()[start:]
    # the status is written by Kopf with its own bookkeeping; Kopf retries the request and
    # logs each attempt once ("Request attempt #n/5 failed; will retry: PATCH <url> -> 503");
    # a retry of the whole handler is logged as "transient API error on <ns>/<name>"
    retries = [
        line
        for line in log.splitlines()
        if (
            f"/namespaces/{ns}/inferencecapacities/llama-8b/status" in line and "will retry" in line
        )
        or f"transient API error on {ns}/llama-8b" in line
    ]
    assert len(retries) == rule.hits, log[-3000:]
    assert all("503" in line for line in retries)
