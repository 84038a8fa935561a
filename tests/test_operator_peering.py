"""Several operator replicas with Kopf peering: one works, the others stand by, and a standby
takes over when the leader dies (the chart runs replicas > 1 this way)."""

from __future__ import annotations

from pathlib import Path

from inference_capacity.controller.refresher import REFRESHED
from tests.operator_harness import ROOT, Cluster, Operator, apply_crd, load_example
from tests.realk8s.fixtures import RealKubeAPI, wait_for

PEERING_CRDS = ROOT / "charts" / "inference-capacity" / "crds" / "kopf-peerings.kopf.dev.yaml"
#: the chart with two replicas: Kopf peering on, so its ClusterRole grants clusterkopfpeerings
HA = {"replicaCount": 2}


def test_one_replica_works_and_a_standby_takes_over(real_kube: RealKubeAPI, tmp_path: Path) -> None:
    api = real_kube
    apply_crd(api)
    api.kubectl("apply", "-f", str(PEERING_CRDS))
    api.kubectl(
        "wait", "--for=condition=Established", "crd/clusterkopfpeerings.kopf.dev", "--timeout=60s"
    )
    api.apply(
        {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": "icap-ha"}}
    )

    def peers() -> int:
        return len(api.get_json("clusterkopfpeering", "icap-ha").get("status") or {})

    env = {"INFERENCE_CAPACITY_PEERING_LIFETIME": "15"}
    # the leader (priority 200) first; the standby (100) starts after it and finds it, so it
    # starts paused (Kopf holds resource handling until it knows its peers)
    leader = Operator(
        api,
        tmp_path / "leader.log",
        extra_env=env,
        run_args=("--peering", "icap-ha", "--priority", "200"),
        rbac_values=HA,
        release="icap-ha",
    ).start()
    standby: Operator | None = None
    c = Cluster(api, leader)
    try:
        wait_for(lambda: peers() >= 1, timeout=30, message="the leader registered")
        standby = Operator(
            api,
            tmp_path / "standby.log",
            extra_env=env,
            run_args=("--peering", "icap-ha", "--priority", "100"),
            rbac_values=HA,
            release="icap-ha",
        ).start()
        wait_for(lambda: peers() >= 2, timeout=30, message="the standby registered")
        ns = c.namespace("ha")
        icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
        api.apply(icap, dep)
        c.wait_args(ns, "llama-8b", lambda a: "--max-num-seqs" in a, timeout=40)
        wait_for(
            lambda: "Handler 'icap_changed' succeeded" in leader.log(),
            timeout=10,
            message="the leader's log",
        )
        # the leader refreshes (the operator's own loop, every 2 s in the tests) ...
        wait_for(lambda: REFRESHED in leader.log(), timeout=30, message="the leader's refreshes")
        # ... the standby stood by: it never reconciled, nor refreshed (Kopf's pause rule on
        # the peering object: a live peer of higher priority)
        assert "Handler 'icap_changed' succeeded" not in standby.log()
        assert REFRESHED not in standby.log()
        # the leader dies; the standby takes over once the leader's peering entry expires
        leader.kill()
        ns2 = c.namespace("ha")
        icap2, dep2 = load_example("llama-3.1-8b-h100.yaml", ns2)
        api.apply(icap2, dep2)
        c.operator = standby
        c.wait_args(ns2, "llama-8b", lambda a: "--max-num-seqs" in a, timeout=60)
        # and refreshes once the dead leader's entry has expired
        wait_for(lambda: REFRESHED in standby.log(), timeout=60, message="the standby refreshes")
        standby.assert_alive()
    finally:
        api.delete_namespaces(c.namespaces)
        leader.stop()
        if standby is not None:
            standby.stop()
