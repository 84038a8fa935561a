"""One truth in two places: the Helm chart and the kustomize tree must grant the same RBAC rules
and install the same objects. Both are rendered by the real tools and compared.

The rules live in ``charts/inference-capacity/templates/_rbac_rules.tpl`` and in
``manifests/base/rbac.yaml`` + ``manifests/overlays/namespace-scoped/`` +
``manifests/components/peering``; when you change one, change the other (this test says where).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.test_packaging import (
    NAMESPACE,
    Doc,
    chart_crd_docs,
    chart_docs,
    kustomize_docs,
    one,
)

pytest.importorskip("helm_python")

# (chart values, kustomize overlay) pairs that describe the same install.
PAIRS: list[tuple[dict[str, Any], str]] = [
    ({}, "cluster-wide"),
    ({"watchNamespaces": ["inference"]}, "namespace-scoped"),
    (
        {"replicaCount": 2, "serviceMonitor": {"enabled": True}, "dashboard": {"enabled": True}},
        "cluster-wide-ha",
    ),
]
IDS = [overlay for _, overlay in PAIRS]


@pytest.mark.parametrize(("values", "overlay"), PAIRS, ids=IDS)
def test_cluster_role_rules_are_identical(values: dict[str, Any], overlay: str) -> None:
    chart = one(chart_docs(values), "ClusterRole")["rules"]
    kustomize = one(kustomize_docs(f"overlays/{overlay}"), "ClusterRole")["rules"]
    assert kustomize == chart, (
        f"ClusterRole rules differ between the chart ({values}) and manifests/overlays/{overlay}:"
        f"\nchart:     {json.dumps(chart)}\nkustomize: {json.dumps(kustomize)}"
    )


@pytest.mark.parametrize(("values", "overlay"), PAIRS, ids=IDS)
def test_role_rules_and_bindings_are_identical(values: dict[str, Any], overlay: str) -> None:
    chart, kustomize = chart_docs(values), kustomize_docs(f"overlays/{overlay}")
    for kind in ("Role", "RoleBinding", "ClusterRoleBinding"):
        c = sorted((d for d in chart if d["kind"] == kind), key=_key)
        k = sorted((d for d in kustomize if d["kind"] == kind), key=_key)
        assert [_key(d) for d in c] == [_key(d) for d in k], kind
        for cd, kd in zip(c, k, strict=True):
            for field in ("rules", "roleRef", "subjects"):
                assert cd.get(field) == kd.get(field), f"{kind} {_key(cd)} {field}"


@pytest.mark.parametrize(("values", "overlay"), PAIRS, ids=IDS)
def test_chart_and_kustomize_install_the_same_objects(
    values: dict[str, Any],
    overlay: str,
) -> None:
    """Everything but labels is equal: the chart (templates + crds/ + the release namespace, as
    `helm install --create-namespace` makes it) against the overlay."""
    chart = [
        *chart_docs(values),
        *chart_crd_docs(),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    ]
    kustomize = kustomize_docs(f"overlays/{overlay}")
    c = {_key(d): _normalize(d) for d in chart}
    k = {_key(d): _normalize(d) for d in kustomize}
    assert sorted(c) == sorted(k)
    for key in c:
        assert c[key] == k[key], f"{key} differs between the chart and overlays/{overlay}"


def test_labels_select_the_operator_pods_in_both() -> None:
    for docs in (chart_docs(), kustomize_docs("overlays/cluster-wide")):
        deployment = one(docs, "Deployment")
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        assert one(docs, "Service")["spec"]["selector"].items() <= pod_labels.items()
        assert pod_labels["app.kubernetes.io/name"] == "inference-capacity"


def _key(doc: Doc) -> tuple[str, str, str]:
    meta = doc["metadata"]
    return doc["kind"], meta.get("namespace", ""), meta["name"]


def _normalize(doc: Doc) -> Doc:
    """Drop what legitimately differs: labels (Helm's chart/managed-by), comments' artefacts."""
    out = copy.deepcopy(doc)
    out["metadata"].pop("labels", None)
    template = out.get("spec", {}).get("template")
    if isinstance(template, dict):
        template.get("metadata", {}).pop("labels", None)
    if out["kind"] == "ConfigMap":  # a file in kustomize, `|-` in the chart: compare as JSON
        out["data"] = {
            k: json.loads(v) if k.endswith(".json") else v for k, v in out["data"].items()
        }
    return out
