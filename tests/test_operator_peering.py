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
    ops = [
        Operator(
            api,
            tmp_path / f"op{i}.log",
            run_args=("--peering", "icap-ha", "--priority", str(p)),
            extra_env={"INFERENCE_CAPACITY_PEERING_LIFETIME": "15"},
        ).start()
        for i, p in enumerate((100, 200))
    ]
    c = Cluster(api, ops[1])
    try:
        # both replicas have announced themselves (Kopf writes each peer into the status);
        # before that, a replica that sees no peer works alone, as it should
        wait_for(
            lambda: len(api.get_json("clusterkopfpeering", "icap-ha").get("status") or {}) >= 2,
            timeout=30,
            message="both peers registered",
        )
        wait_for(
            lambda: "Pausing operations" in ops[0].log() or "pausing" in ops[0].log().lower(),
            timeout=30,
            message="the lower-priority replica paused",
        )
        ns = c.namespace("ha")
        icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
        api.apply(icap, dep)
        c.wait_args(ns, "llama-8b", lambda a: "--max-num-seqs" in a, timeout=40)
        # the lower-priority replica stood by: it never reconciled
        wait_for(
            lambda: "Handler 'icap_changed' succeeded" in ops[1].log(),
            timeout=10,
            message="the leader's log",
        )
        assert "Handler 'icap_changed' succeeded" not in ops[0].log()
        # the leader dies; the standby takes over once the leader's peering entry expires
        ops[1].kill()
        ns2 = c.namespace("ha")
        icap2, dep2 = load_example("llama-3.1-8b-h100.yaml", ns2)
        api.apply(icap2, dep2)
        c.operator = ops[0]
        c.wait_args(ns2, "llama-8b", lambda a: "--max-num-seqs" in a, timeout=60)
        ops[0].assert_alive()
    finally:
        for op in ops:
            op.stop()
