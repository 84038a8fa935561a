"""Two operator processes as two shards on the real control plane (the chart's StatefulSet with
``shards: 2``, its RBAC): each InferenceCapacity is reconciled by the replica holding its
shard's Lease and by no other; after ``kill -9`` of one, the other takes its Lease over and
reconciles its shard; restarted, the dead one gets its shard back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inference_capacity.controller.refresher import REFRESHED
from inference_capacity.controller.sharding import WANTED_BY, shard_of
from tests.operator_harness import Cluster, Operator, apply_crd, load_example
from tests.realk8s.fixtures import OPERATOR_NAMESPACE, RealKubeAPI, wait_for

SHARDS = 2
RELEASE = "icap-shards"
PREFIX = f"{RELEASE}-inference-capacity"  # the chart's full name for this release
VALUES = {"shards": SHARDS}
GMU = "--max-num-seqs"
MANAGER = "inference-capacity-replica-{}"
#: generous: each bound here is a timeout, never a measurement
TIMEOUT = 120


def _operator(api: RealKubeAPI, log: Path, index: int) -> Operator:
    return Operator(
        api,
        log,
        extra_env={
            "INFERENCE_CAPACITY_SHARDS": str(SHARDS),
            "INFERENCE_CAPACITY_SHARD_INDEX": str(index),
            "INFERENCE_CAPACITY_SHARD_LEASE_SECONDS": "6",
            "INFERENCE_CAPACITY_SHARD_LEASE_PREFIX": PREFIX,
            "POD_NAMESPACE": OPERATOR_NAMESPACE,
            "POD_ID": f"replica-{index}",
        },
        rbac_values=VALUES,
        release=RELEASE,
    )


def _names(ns: str, per_shard: int) -> dict[int, list[str]]:
    """Deployment names, ``per_shard`` in each shard (the shard function decides)."""
    out: dict[int, list[str]] = {s: [] for s in range(SHARDS)}
    i = 0
    while any(len(v) < per_shard for v in out.values()):
        name = f"llama-{i}"
        s = shard_of(ns, name, SHARDS)
        if len(out[s]) < per_shard:
            out[s].append(name)
        i += 1
    return out


def _pair(ns: str, name: str) -> list[dict[str, Any]]:
    icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
    icap["metadata"]["name"] = name
    icap["spec"]["targetRef"]["name"] = name
    dep["metadata"]["name"] = name
    # its own pods (one PDB per Deployment's pods)
    dep["metadata"]["labels"] = dep["spec"]["selector"]["matchLabels"] = {"app": name}
    dep["spec"]["template"]["metadata"]["labels"] = {"app": name}
    return [icap, dep]


def _managers(c: Cluster, ns: str, name: str) -> set[str]:
    meta = c.api.get_json("deployment", name, "-n", ns, "--show-managed-fields")["metadata"]
    return {m.get("manager", "") for m in meta.get("managedFields") or []}


def _holder(api: RealKubeAPI, shard: int) -> str:
    r = api.kubectl(
        "get", "lease", f"{PREFIX}-shard-{shard}", "-n", OPERATOR_NAMESPACE, "-o", "json",
        check=False,
    )  # fmt: skip
    if r.returncode != 0:
        return ""
    holder: str = (json.loads(r.stdout).get("spec") or {}).get("holderIdentity") or ""
    return holder


def test_each_shard_by_one_replica_and_a_killed_ones_shard_taken_over(
    real_kube: RealKubeAPI, tmp_path: Path
) -> None:
    api = real_kube
    apply_crd(api)
    requests_from = len(api.requests)
    ops = [_operator(api, tmp_path / f"replica-{i}.log", i).start() for i in range(SHARDS)]
    c = Cluster(api, ops[0])
    restarted: Operator | None = None
    try:
        for i in range(SHARDS):
            wait_for(
                lambda i=i: _holder(api, i) == f"replica-{i}",
                timeout=TIMEOUT,
                message=f"replica {i} holds its shard's Lease",
            )
        ns = c.namespace("shards")
        names = _names(ns, 3)
        for shard_names in names.values():
            for name in shard_names:
                api.apply(*_pair(ns, name))
        for shard, shard_names in names.items():
            c.operator = ops[shard]
            for name in shard_names:
                c.wait_args(ns, name, lambda a: GMU in a, timeout=TIMEOUT)
        # every Deployment was written by the replica of its shard, and by no other
        for shard, shard_names in names.items():
            for name in shard_names:
                managers = _managers(c, ns, name)
                assert MANAGER.format(shard) in managers, (name, managers)
                assert MANAGER.format(1 - shard) not in managers, (name, managers)
                assert f"[{ns}/{name}] Handler 'icap_changed' succeeded" in ops[shard].log()
                assert f"[{ns}/{name}]" not in ops[1 - shard].log()
        # kill -9 replica 1: replica 0 takes its Lease over and reconciles its shard
        ops[1].kill()
        wait_for(
            lambda: _holder(api, 1) == "replica-0",
            timeout=TIMEOUT,
            message="replica 0 took shard 1's Lease over",
        )
        c.operator = ops[0]
        for name in names[1]:
            wait_for(
                lambda name=name: f"[{ns}/{name}] {REFRESHED}" in ops[0].log(),
                timeout=TIMEOUT,
                message=f"replica 0 refreshed {name} of shard 1",
            )
        # an edit of a shard-1 resource is applied by replica 0 now
        edited = names[1][0]
        c.patch_icap(
            ns,
            edited,
            {"spec": {"model": {"kvCacheDtype": "fp8"}, "policy": {"setKvCacheDtype": True}}},
        )
        c.wait_args(ns, edited, lambda a: "--kv-cache-dtype" in a, timeout=TIMEOUT)
        assert MANAGER.format(0) in _managers(c, ns, edited)
        # replica 1 restarted: it asks for its shard back, and replica 0 hands it over
        restarted = _operator(api, tmp_path / "replica-1-restarted.log", 1).start()
        wait_for(
            lambda: _holder(api, 1) == "replica-1",
            timeout=TIMEOUT,
            message="the restarted replica 1 holds shard 1 again",
        )
        ops[0].assert_alive()
        lease = api.get_json("lease", f"{PREFIX}-shard-1", "-n", OPERATOR_NAMESPACE)
        assert WANTED_BY not in (lease["metadata"].get("annotations") or {})
        # replica 1 -> replica 0 (takeover) -> replica 1 (handback)
        assert lease["spec"]["leaseTransitions"] == 2
        # the chart's Role for shards: 2 granted every Lease request (the apiserver enforced it)
        records = api.requests.records()[requests_from:]
        assert not [f"{r.method} {r.path}" for r in records if r.rbac_denied]
        lease_verbs = {r.verb for r in records if r.resource == "leases"}
        assert lease_verbs == {"get", "create", "update"}, lease_verbs
    finally:
        api.delete_namespaces(c.namespaces)
        for op in ops:
            op.stop()
        if restarted is not None:
            restarted.stop()
        api.kubectl(
            "delete", "lease", *(f"{PREFIX}-shard-{i}" for i in range(SHARDS)),
            "-n", OPERATOR_NAMESPACE, "--ignore-not-found", check=False,
        )  # fmt: skip
