"""Several operator replicas with Kopf peering: one works, the others stand by, and a standby
takes over when the leader dies (the chart runs replicas > 1 this way)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kubeapi.fixtures import KubeAPI, wait_for
from tests.kubeapi.server import KubeAPIServer
from tests.operator_harness import CRD, ROOT, Cluster, Operator, load_example

PEERING_CRDS = ROOT / "charts" / "inference-capacity" / "crds" / "kopf-peerings.kopf.dev.yaml"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[KubeAPI]:
    server = KubeAPIServer(bookmark_interval=30.0)
    server.start()
    try:
        yield KubeAPI(server, tmp_path)
    finally:
        server.stop()


def test_one_replica_works_and_a_standby_takes_over(api: KubeAPI, tmp_path: Path) -> None:
    api.kubectl("apply", "-f", str(CRD))
    api.kubectl("apply", "-f", str(PEERING_CRDS))
    wait_for(
        lambda: api.kubectl("get", "clusterkopfpeerings", check=False).returncode == 0, timeout=10
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
        # the standby stood by: it never reconciled
        assert "Handler 'icap_changed' succeeded" not in standby.log()
        # the leader dies; the standby takes over once the leader's peering entry expires
        leader.kill()
        ns2 = c.namespace("ha")
        icap2, dep2 = load_example("llama-3.1-8b-h100.yaml", ns2)
        api.apply(icap2, dep2)
        c.operator = standby
        c.wait_args(ns2, "llama-8b", lambda a: "--max-num-seqs" in a, timeout=60)
        standby.assert_alive()
    finally:
        leader.stop()
        if standby is not None:
            standby.stop()
