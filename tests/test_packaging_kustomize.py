"""The kustomize tree, rendered by the real ``kubectl kustomize`` and applied to the real
kube-apiserver (``tests/realk8s``) with the real ``kubectl apply``."""

from __future__ import annotations

import pytest

from tests.realk8s.fixtures import CleanKubeAPI as KubeAPI
from tests.test_packaging import (
    ICAP_CRD,
    MANIFESTS,
    NAMESPACE,
    OVERLAYS,
    assert_installed,
    container,
    find,
    install,
    kustomize_docs,
    one,
)


def test_every_overlay_and_component_is_covered() -> None:
    on_disk = sorted(p.name for p in (MANIFESTS / "overlays").iterdir() if p.is_dir())
    assert on_disk == sorted(OVERLAYS)
    components = sorted(p.name for p in (MANIFESTS / "components").iterdir() if p.is_dir())
    assert components == ["dashboard", "flowcontrol", "peering", "servicemonitor"]
    ha = (MANIFESTS / "overlays" / "cluster-wide-ha" / "kustomization.yaml").read_text()
    assert all(f"../../components/{c}" in ha for c in components)
    for overlay in OVERLAYS:  # every install gets its own API Priority and Fairness level
        docs = kustomize_docs(f"overlays/{overlay}")
        assert {d["metadata"]["name"] for d in find(docs, "FlowSchema")} == {"inference-capacity"}
        assert len(find(docs, "PriorityLevelConfiguration")) == 1


@pytest.mark.parametrize("path", ["base", *(f"overlays/{o}" for o in OVERLAYS)])
def test_renders_with_namespaced_objects_in_the_operator_namespace(path: str) -> None:
    docs = kustomize_docs(path)
    kinds = {d["kind"] for d in docs}
    assert {
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Service",
    } <= kinds
    assert path == "base" or {"FlowSchema", "PriorityLevelConfiguration"} <= kinds
    assert {d["metadata"]["name"] for d in find(docs, "CustomResourceDefinition")} == {
        ICAP_CRD,
        "kopfpeerings.kopf.dev",
        "clusterkopfpeerings.kopf.dev",
    }
    for doc in docs:
        if doc["kind"] in ("Role", "RoleBinding"):
            assert doc["metadata"]["namespace"] == "inference"  # the watched namespace
        elif doc["kind"] in (
            "ServiceAccount",
            "Deployment",
            "Service",
            "ServiceMonitor",
            "ConfigMap",
        ):
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]
    assert [n["metadata"]["name"] for n in find(docs, "Namespace")] == [NAMESPACE]
    for binding in find(docs, "ClusterRoleBinding") + find(docs, "RoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "inference-capacity", "namespace": NAMESPACE}
        ]
    for schema in find(docs, "FlowSchema"):  # the same ServiceAccount the bindings name
        assert [r["subjects"] for r in schema["spec"]["rules"]] == [
            [
                {
                    "kind": "ServiceAccount",
                    "serviceAccount": {"name": "inference-capacity", "namespace": NAMESPACE},
                }
            ]
        ]
    deployment = one(docs, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "inference-capacity",
        "app.kubernetes.io/instance": "inference-capacity",
    }
    assert one(docs, "Service")["spec"]["selector"].items() <= pod_labels.items()
    assert container(docs)["image"] == "ghcr.io/inference-capacity/inference-capacity:0.1.0"


def test_cluster_wide_is_the_base_with_flow_control() -> None:
    flow = ("FlowSchema", "PriorityLevelConfiguration")
    overlay = kustomize_docs("overlays/cluster-wide")
    assert [d for d in overlay if d["kind"] not in flow] == kustomize_docs("base")
    assert sorted(d["kind"] for d in overlay if d["kind"] in flow) == sorted(flow)
    args = container(kustomize_docs("base"))["args"]
    assert "--standalone" in args and not any(a.startswith("--namespace") for a in args)


def test_namespace_scoped_watches_one_namespace_without_cluster_wide_writes() -> None:
    docs = kustomize_docs("overlays/namespace-scoped")
    assert container(docs)["args"][-1] == "--namespace=inference"
    assert one(docs, "ClusterRole")["rules"] == [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["list", "watch"],
        }
    ]
    assert one(docs, "RoleBinding")["roleRef"]["kind"] == "Role"
    # The watched namespace is the user's: never created (nor deleted by `kubectl delete -k`).
    assert "inference" not in {n["metadata"]["name"] for n in find(docs, "Namespace")}


def test_ha_overlay_runs_two_peered_replicas() -> None:
    docs = kustomize_docs("overlays/cluster-wide-ha")
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    args = container(docs)["args"]
    assert "--peering=inference-capacity" in args and "--standalone" not in args
    assert one(docs, "ClusterKopfPeering")["metadata"]["name"] == "inference-capacity"
    rules = one(docs, "ClusterRole")["rules"]
    assert rules[-1] == {
        "apiGroups": ["kopf.dev"],
        "resources": ["clusterkopfpeerings"],
        "verbs": ["get", "list", "watch", "patch"],
    }
    assert one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["port"] == "metrics"
    dashboard = one(docs, "ConfigMap", "inference-capacity-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_applies_with_kubectl(kube: KubeAPI, overlay: str) -> None:
    docs = kustomize_docs(f"overlays/{overlay}")
    output = install(kube, docs)
    assert_installed(kube, docs, output)
    if overlay == "namespace-scoped":
        role = kube.get_json("role", "inference-capacity", "-n", "inference")
        assert role["rules"] == one(docs, "Role")["rules"]
    # The examples go in on top, validated by the served CRD's schema.
    examples = kube.kubectl("apply", "-k", str(MANIFESTS / "examples")).stdout
    assert examples.count(" created") == 6, examples  # 3 InferenceCapacity + 3 Deployments
    names = kube.kubectl("get", "icap", "-n", "default", "-o", "name").stdout.split()
    assert sorted(names) == sorted(
        f"inferencecapacity.capacity.inference.dev/{n}"
        for n in ("llama-8b", "llama-70b-fp8", "deepseek-v2-lite")
    )
