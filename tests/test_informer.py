"""The watch-fed Node and Pod caches (controller/informer.py) on the real control plane, as the
operator runs them: authenticated as the chart's ServiceAccount with the chart's RBAC, through the
fault proxy (which can end watches and make every resourceVersion seen so far too old)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from inference_capacity.controller import k8s
from inference_capacity.controller.informer import Informer, wait_tried
from tests.realk8s.fixtures import OPERATOR_NAMESPACE, RealKubeAPI, install_operator_rbac, wait_for


def _api(real_kube: RealKubeAPI, values: dict[str, Any] | None = None) -> client.CoreV1Api:
    # a release of its own: the session's operator release (and its ClusterRole, which other
    # modules' operators run under with their values) is never re-applied from here
    sa = install_operator_rbac(
        real_kube, values, release="informer-ns" if values else "informer-cluster"
    )
    path = real_kube.serviceaccount_kubeconfig(OPERATOR_NAMESPACE, sa)
    return client.CoreV1Api(config.new_client_from_config(config_file=str(path)))  # type: ignore[no-untyped-call]


@pytest.fixture
def namespace(real_kube: RealKubeAPI) -> Iterator[str]:
    ns = f"informer-{uuid.uuid4().hex[:6]}"
    real_kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        yield ns
    finally:
        real_kube.delete_namespaces([ns])


def _pod(ns: str, name: str, gpus: int, node: str | None = None) -> dict[str, Any]:
    """A Pod on ``node`` (bound at creation), or Pending on no Node when ``node`` is None."""
    placement: dict[str, Any] = (
        {"nodeName": node} if node else {"nodeSelector": {"pool": "no-such-pool"}}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "vllm"}},
        "spec": {
            **placement,
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.19.0",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def _in(informer: Informer, ns: str) -> list[dict[str, Any]]:
    return [
        p for p in informer.snapshot() or [] if (p.get("metadata") or {}).get("namespace") == ns
    ]


def test_pods_and_nodes_arrive_change_and_go_through_the_watch(
    real_kube: RealKubeAPI, namespace: str
) -> None:
    api = _api(real_kube)
    pods = Informer("pods", api.list_pod_for_all_namespaces, k8s.slim_pod,
                    field_selector=k8s.LIVE_PODS, watch_timeout=30, page_size=2)  # fmt: skip
    nodes = Informer("nodes", api.list_node, k8s.slim_node, watch_timeout=30, page_size=1)
    try:
        for i in (pods, nodes):
            i.start()
        assert wait_tried([pods, nodes], 60)
        # the kwok GPU Nodes, listed one per page, reduced to what spare-GPU counting reads
        listed = nodes.snapshot() or []
        assert len(listed) == len(real_kube.get_json("nodes")["items"]) >= 1
        gpu_nodes = [n for n in listed if "nvidia.com/gpu" in n["status"]["allocatable"]]
        assert gpu_nodes and set(gpu_nodes[0]) == {"metadata", "spec", "status"}
        assert "managedFields" not in gpu_nodes[0]["metadata"]
        view = pods.snapshot()
        assert view is not None and pods.snapshot() is view  # unchanged: one list, no copies
        # a Pending Pod on no Node holds no GPU: the server's field selector leaves it out
        real_kube.apply(_pod(namespace, "pending", 2))
        # a Pod created after the list on a Node arrives by the watch, with its GPU request
        node = next(
            n["metadata"]["name"]
            for n in real_kube.get_json("nodes")["items"]
            if "nvidia.com/gpu" in n["status"].get("allocatable", {})
        )
        real_kube.apply(_pod(namespace, "a", 2, node))
        got = wait_for(lambda: _in(pods, namespace), timeout=60, message="pod a in the cache")
        assert [p["spec"].get("nodeName") for p in got] == [node]  # "a", not "pending"
        assert pods.snapshot() is not view  # changed: a new list
        limits = got[0]["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {"nvidia.com/gpu": "2"}
        assert got[0]["metadata"]["labels"] == {"app": "vllm"}
        assert pods.lists == 1  # one list, then the watch
        # deleted: gone from the cache
        real_kube.kubectl("delete", "pod", "a", "-n", namespace, "--wait=false")
        wait_for(lambda: not _in(pods, namespace), timeout=90, message="pod a gone")
    finally:
        pods.stop()
        nodes.stop()


def test_an_expired_watch_lists_again_and_misses_nothing(
    real_kube: RealKubeAPI, namespace: str
) -> None:
    api = _api(real_kube)
    pods = Informer("pods", api.list_pod_for_all_namespaces, k8s.slim_pod,
                    field_selector=k8s.LIVE_PODS, watch_timeout=30)  # fmt: skip
    try:
        pods.start()
        assert wait_tried([pods], 60)
        node = next(n["metadata"]["name"] for n in real_kube.get_json("nodes")["items"])
        real_kube.apply(_pod(namespace, "before", 1, node))
        wait_for(lambda: _in(pods, namespace), timeout=60, message="pod before")
        # every resourceVersion seen so far is now too old: the resumed watch gets 410 Gone
        assert real_kube.faults.expire() >= 1
        real_kube.apply(_pod(namespace, "after", 1, node))
        wait_for(lambda: pods.lists >= 2, timeout=90, message="a second list after 410")
        wait_for(lambda: len(_in(pods, namespace)) == 2, timeout=60, message="both pods")
    finally:
        pods.stop()


def test_a_forbidden_list_is_not_known_never_empty(real_kube: RealKubeAPI) -> None:
    """Namespace-scoped chart without rbac.spareGpuCounting: no Node or Pod list cluster-wide.
    The cache says "not known" (None), so spare GPUs are never counted from an empty list."""
    real_kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "inference"}})
    api = _api(real_kube, {"watchNamespaces": ["inference"]})
    nodes = Informer("nodes", api.list_node, k8s.slim_node, watch_timeout=30)
    try:
        nodes.start()
        assert not wait_tried([nodes], 60)
        assert nodes.tried.is_set() and nodes.snapshot() is None
        assert nodes.any(lambda _: True) is None
    finally:
        nodes.stop()
