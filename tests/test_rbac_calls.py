"""The RBAC rules cover exactly the API calls the operator makes.

The fault proxy in front of the real kube-apiserver records every request the operator makes, as
the chart's ServiceAccount under the chart's RBAC. This module drives the operator (Kopf, as a
subprocess) through every feature that touches the API — create, edit, drift, a refusal, spare
GPUs from Nodes and Pods, an HPA, a model from a ConfigMap, a Prometheus bearer token from a
Secret, deletion — then compares the recorded (group, resource, verb) triples with the
ClusterRole the Helm chart renders (the kustomize base is checked identical elsewhere):
nothing used may be missing, and nothing granted may go unused unless it is listed below with
the reason.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from collections import Counter
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from inference_capacity.controller.apirequest import NON_RESOURCE
from tests.operator_harness import Cluster, cluster, load_example
from tests.realk8s.faults import RequestRecord
from tests.test_packaging import chart_docs

__all__ = ["cluster"]

#: granted but not exercised by the scenario, each for a reason
JUSTIFIED_UNUSED = {
    (
        "capacity.inference.dev",
        "inferencecapacities/finalizers",
        "update",
    ): "admission (OwnerReferencesPermissionEnforcement) checks it for the PDB's "
    "blockOwnerDeletion owner reference; it is never a request",
    (
        "capacity.inference.dev",
        "inferencecapacities/status",
        "get",
    ): "read-your-status for kubectl-style tooling; the operator reads the main resource",
    ("", "events", "patch"): "Kopf aggregates repeated events by patching their count",
    (
        "capacity.inference.dev",
        "inferencecapacities",
        "patch",
    ): "Kopf keeps its state in the status now (controller/diffbase.py); it still removes the "
    "finalizer that versions before the refresh loop put on every resource (a metadata patch, "
    "only on resources those versions created)",
    (
        "policy",
        "poddisruptionbudgets",
        "get",
    ): "PDBs come from the watch-fed cache; read only when a create meets an existing one "
    "(409: created meanwhile, or a cache that lagged), or when the cache is not synced",
    (
        "apps",
        "deployments",
        "get",
    ): "Deployments come from the versions the watch carries (controller/objcache.py); read "
    "only when the watch has not shown one yet, or after a conflict it did not answer in 1 s",
}


def _operator_records(c: Cluster) -> list[RequestRecord]:
    return [r for r in c.operator_requests() if r.resource]


def _granted(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    out = set()
    for rule in rules:
        for g in rule.get("apiGroups", []):
            for res in rule.get("resources", []):
                for v in rule.get("verbs", []):
                    out.add((g, res, v))
    return out


def _node(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
    }


def test_recorded_calls_match_the_chart_role(cluster: Cluster, closed_port_url: str) -> None:
    c = cluster
    api = c.api
    api.apply(_node("rbac-gpu", 8))
    api.kubectl(
        "patch",
        "node",
        "rbac-gpu",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"allocatable": {"nvidia.com/gpu": "8"}}}),
    )
    ns = c.namespace("rbac")
    # a model from a ConfigMap, a Prometheus token from a Secret, an HPA
    cfg = load_example("llama-3.1-8b-h100.yaml", ns)[0]
    from inference_capacity.model import load_config

    _, config_json = load_config("meta-llama/Llama-3.1-8B-Instruct")
    api.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "llama-config", "namespace": ns},
            "data": {"config.json": json.dumps(config_json)},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "prom-token",
                "namespace": ns,
                "labels": {"capacity.inference.dev/prometheus-token": "true"},
            },
            "data": {"token": base64.b64encode(b"s3cret").decode()},
        },
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "other", "namespace": ns},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other"},
                "minReplicas": 1,
                "maxReplicas": 2,
            },
        },
    )
    icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
    icap["spec"]["model"] = {"configMapRef": {"name": "llama-config"}}
    icap["spec"]["workload"]["fromPrometheus"] = {
        "url": closed_port_url,
        "bearerTokenSecretRef": {"name": "prom-token"},
    }
    assert cfg["metadata"]["name"] == icap["metadata"]["name"]
    api.apply(icap, dep)
    c.wait_args(ns, "llama-8b", lambda a: "--max-num-seqs" in a)
    # an edit, a refusal, drift put back, deletion
    c.patch_icap(ns, "llama-8b", {"spec": {"workload": {"maxModelLen": 16384}}})
    c.wait_args(ns, "llama-8b", lambda a: "16384" in a)
    from tests.realk8s.fixtures import wait_for

    # someone else edits the Deployment: its watch event makes the operator read the
    # InferenceCapacity (get) and reconcile it
    api.kubectl(
        "patch", "deployment", "llama-8b", "-n", ns, "--type=merge", "-p",
        json.dumps({"spec": {"template": {"metadata": {"annotations": {"example.com/by": "me"}}}}}),
    )  # fmt: skip
    wait_for(
        lambda: any(
            r.resource == "inferencecapacities" and r.verb == "get" and not r.subresource
            for r in _operator_records(c)
        ),
        timeout=60,
        message="a get of the InferenceCapacity after a Deployment edit",
    )

    # vLLM's startup lines: the operator lists the target's pods and reads a Ready one's log
    wait_for(
        lambda: any(r.subresource == "log" for r in _operator_records(c)),
        timeout=60,
        message="a pods/log read of a Ready pod of the target",
    )
    before = api.get_json("pdb", "llama-8b", "-n", ns)["spec"]["minAvailable"]
    c.patch_icap(ns, "llama-8b", {"spec": {"workload": {"peakConcurrency": 500}}})
    wait_for(
        lambda: api.get_json("pdb", "llama-8b", "-n", ns)["spec"]["minAvailable"] != before,
        timeout=20,
        message="the PDB follows the peak",
    )
    icap2, dep2 = load_example("llama-3.1-8b-h100.yaml", ns)
    icap2["metadata"]["name"] = dep2["metadata"]["name"] = "huge"
    icap2["spec"]["targetRef"]["name"] = "huge"
    icap2["spec"]["model"]["name"] = "meta-llama/Llama-3.1-70B-Instruct"
    api.apply(icap2, dep2)
    c.wait_condition(ns, "huge", "Applied", "False", "NotFits")
    api.kubectl("delete", "icap", "llama-8b", "-n", ns, "--wait=true")
    api.kubectl("delete", "node", "rbac-gpu")

    records = _operator_records(c)
    assert records, "no operator request recorded"
    # the real apiserver enforced the chart's RBAC on every one of them
    forbidden = sorted({f"{r.method} {r.path.split('?')[0]}" for r in records if r.rbac_denied})
    assert not forbidden, f"the apiserver refused (403) the operator's: {forbidden}"
    used = {
        (r.group, f"{r.resource}/{r.subresource}" if r.subresource else r.resource, r.verb)
        for r in records
    }
    # the token Secret is readable only when named in rbac.secretNames (none by default)
    role = next(
        d
        for d in chart_docs({"rbac": {"secretNames": ["prom-token"]}})
        if d["kind"] == "ClusterRole"
        and "rules" in d
        and any("deployments" in r.get("resources", []) for r in d["rules"])
    )
    rules = role["rules"]
    missing = {p for p in used if not any(_allows(rule, *p) for rule in rules)}
    assert not missing, f"used but not granted by the chart's ClusterRole: {sorted(missing)}"
    unused = {g for g in _granted(rules) if g not in used}
    unexplained = sorted(u for u in unused if u not in JUSTIFIED_UNUSED)
    assert not unexplained, f"granted but never used (remove or justify): {unexplained}"

    # the operator's own count of its requests (inference_capacity_api_requests_total, what
    # benchmarks/reconcile.py reads when no proxy is in between) is what the proxy saw, per
    # client, verb and resource (watches aside: the proxy records one when it ends)
    def seen() -> Counter[tuple[str, str, str]]:
        return Counter(
            (
                "kopf" if r.user_agent.startswith("kopf") else "operator",
                r.verb,
                f"{r.resource}/{r.subresource}" if r.subresource else r.resource,
            )
            for r in _operator_records(c)
            if r.verb != "watch"
        )

    def own() -> Counter[tuple[str, str, str]]:
        url = f"http://127.0.0.1:{c.operator.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        out: Counter[tuple[str, str, str]] = Counter()
        for fam in text_string_to_metric_families(text):
            for smp in fam.samples:
                lab = smp.labels
                if smp.name != "inference_capacity_api_requests_total" or lab["verb"] == "watch":
                    continue
                if lab["resource"] != NON_RESOURCE:
                    out[(lab["client"], lab["verb"], lab["resource"])] += int(smp.value)
        return out

    deadline = time.monotonic() + 30  # a request in flight is counted by one side first
    while own() != seen() and time.monotonic() < deadline:
        time.sleep(0.2)
    mine, proxy = own(), seen()
    assert mine == proxy, (
        f"counted by the operator only: {mine - proxy}; by the proxy only: {proxy - mine}"
    )
    assert sum(mine.values()) > 20 and any(k[0] == "kopf" for k in mine)


def _allows(rule: dict[str, Any], group: str, resource: str, verb: str) -> bool:
    return (
        group in rule.get("apiGroups", [])
        and resource in rule.get("resources", [])
        and verb in rule.get("verbs", [])
    )
