"""``helm install``, ``helm upgrade`` and ``helm uninstall`` of the chart by the real Helm engine
(``helm-python-sdk``: Helm's Go library, server-side apply) against the real kube-apiserver; the
operator installed that way reconciles an example.

The chart's operator pod lands on a kwok node, where nothing runs it; the operator process runs
here instead, authenticated as the ServiceAccount the release created (a TokenRequest token), so
it has exactly the permissions ``helm install`` granted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.operator_harness import Cluster, Operator, load_example
from tests.realk8s.fixtures import RealKubeAPI, wait_for
from tests.test_packaging import CHART

helm = pytest.importorskip("helm_python")

RELEASE = "icap-helm"
NS = "icap-helm-system"


def _release_objects(api: RealKubeAPI, fullname: str) -> dict[str, bool]:
    def exists(*what: str) -> bool:
        return api.kubectl("get", *what, check=False).returncode == 0

    return {
        "clusterrole": exists("clusterrole", fullname),
        "clusterrolebinding": exists("clusterrolebinding", fullname),
        "serviceaccount": exists("serviceaccount", fullname, "-n", NS),
        "deployment": exists("deployment", fullname, "-n", NS),
    }


def test_install_upgrade_uninstall_and_the_installed_operator_reconciles(
    real_kube: RealKubeAPI, tmp_path: Path
) -> None:
    api = real_kube
    cfg = helm.Config(kubeconfig_path=str(api.kubeconfig), namespace=NS)
    operator: Operator | None = None
    ns = "helm-example"
    try:
        rel = cfg.install(
            str(CHART), RELEASE, None, namespace=NS, create_namespace=True, wait="watcher",
            timeout=120,
        )  # fmt: skip
        assert rel["status"] == "deployed", rel
        assert int(rel["revision"]) == 1
        dep_name = next(
            d.split("name: ", 1)[1].split("\n", 1)[0]
            for d in rel["manifest"].split("\n---")
            if "kind: Deployment" in d
        )
        fullname = dep_name.strip()
        assert all(_release_objects(api, fullname).values()), _release_objects(api, fullname)
        # Helm 4 applies server-side: its fields are owned through an Apply operation
        dep = api.get_json("deployment", fullname, "-n", NS, "--show-managed-fields")
        ops = {(m["manager"], m["operation"]) for m in dep["metadata"]["managedFields"]}
        assert any(op == "Apply" for _, op in ops), ops
        # the release's Deployment is available (its pod on a kwok node)
        api.kubectl(
            "wait", "--for=condition=Available", f"deployment/{fullname}", "-n", NS,
            "--timeout=60s",
        )  # fmt: skip

        # the operator, as the release's ServiceAccount, reconciles an example
        kubeconfig = api.serviceaccount_kubeconfig(NS, fullname)
        env = {**api.env, "KUBECONFIG": str(kubeconfig)}
        start = len(api.requests)
        operator = Operator(api, tmp_path / "operator.log", env=env).start()
        c = Cluster(api, operator)
        api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        api.cluster.wait_default_serviceaccount(ns)
        api.apply(*load_example("llama-3.1-8b-h100.yaml", ns))
        c.wait_args(ns, "llama-8b", lambda a: "--max-num-seqs" in a, timeout=60)
        c.wait_condition(ns, "llama-8b", "Applied", "True", timeout=30)
        forbidden = [r for r in api.requests.records()[start:] if r.rbac_denied]
        assert not forbidden, forbidden

        # upgrade: two replicas turn Kopf peering on, which needs one more grant
        rel2 = cfg.upgrade(
            str(CHART), RELEASE, {"replicaCount": 2}, namespace=NS, wait="watcher", timeout=120
        )
        assert int(rel2["revision"]) == 2 and rel2["status"] == "deployed", rel2
        role = api.get_json("clusterrole", fullname)
        assert any("clusterkopfpeerings" in r.get("resources", []) for r in role["rules"])
        assert api.get_json("deployment", fullname, "-n", NS)["spec"]["replicas"] == 2
        history = cfg.history(RELEASE)
        assert sorted(int(h["revision"]) for h in history) == [1, 2]

        # uninstall: every release object goes; the CRDs stay (Helm never deletes crds/)
        cfg.uninstall(RELEASE, wait="watcher", timeout=120)
        wait_for(
            lambda: not any(_release_objects(api, fullname).values()),
            timeout=60,
            message="release objects deleted",
        )
        api.kubectl("get", "crd", "inferencecapacities.capacity.inference.dev")
    finally:
        if operator is not None:
            operator.stop()
        cfg.uninstall(RELEASE, ignore_not_found=True)
        api.delete_namespaces([ns, NS], wait=True)
        cfg.close()
