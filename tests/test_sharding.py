"""The pure part of sharding (controller/sharding.py): the stable hash and the Lease rule, with
the clock passed in. The Lease requests and the operators are tested on the real control plane
in tests/test_operator_sharding.py."""

from __future__ import annotations

import collections
import subprocess
import sys

import pytest

from inference_capacity.controller.sharding import (
    ABSENT,
    WANTED_BY,
    LeaseRecord,
    Observed,
    ShardSet,
    decide,
    expired,
    lease_record,
    observe,
    preferred_shard,
    renew_period,
    shard_key,
    shard_of,
    valid_until,
)
from inference_capacity.settings import Settings

D = 15.0  # lease duration


def test_shard_of_is_sha256_and_the_same_in_every_process() -> None:
    # Python's hash() of a str differs per PYTHONHASHSEED; the shard must not
    code = (
        "from inference_capacity.controller.sharding import shard_of;"
        "print([shard_of('ns', f'd{i}', 7) for i in range(50)])"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PYTHONPATH": ":".join(sys.path)},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert outs == {str([shard_of("ns", f"d{i}", 7) for i in range(50)]) + "\n"}


def test_shard_of_pinned_values() -> None:
    import hashlib

    digest = hashlib.sha256(b"team-a/llama-8b").digest()
    assert shard_of("team-a", "llama-8b", 4) == int.from_bytes(digest[:8], "big") % 4
    assert shard_of("a", "b", 1) == 0
    # namespace and name are not interchangeable
    assert {shard_of("x", f"y{i}", 1000) for i in range(20)} != {
        shard_of(f"y{i}", "x", 1000) for i in range(20)
    }
    with pytest.raises(ValueError, match="shards must be >= 1"):
        shard_of("a", "b", 0)


@pytest.mark.parametrize("shards", [2, 4, 16])
def test_shard_of_is_uniform(shards: int) -> None:
    n = 10_000
    counts = collections.Counter(shard_of(f"ns-{i % 37}", f"dep-{i}", shards) for i in range(n))
    assert set(counts) == set(range(shards))
    expected = n / shards
    # chi-square with shards-1 degrees of freedom: far below the 0.1 % tail (e.g. 37.7 at 15)
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 3 * shards + 10, counts


def test_the_shard_key_is_the_target_deployment() -> None:
    body = {
        "metadata": {"namespace": "team-a", "name": "icap-1"},
        "spec": {"targetRef": {"kind": "Deployment", "name": "llama"}},
    }
    assert shard_key(body) == ("team-a", "llama")
    # two InferenceCapacities claiming one Deployment are in one shard
    other = {"metadata": {"namespace": "team-a", "name": "icap-2"}, "spec": body["spec"]}
    assert shard_of(*shard_key(body), 8) == shard_of(*shard_key(other), 8)
    # no target yet: its own name
    assert shard_key({"metadata": {"namespace": "n", "name": "x"}, "spec": {}}) == ("n", "x")


def test_preferred_shard_from_the_index_or_the_statefulset_ordinal() -> None:
    assert preferred_shard(2, "anything", 4) == 2
    assert preferred_shard(None, "icap-inference-capacity-3", 4) == 3
    with pytest.raises(ValueError, match="no StatefulSet ordinal"):
        preferred_shard(None, "laptop", 4)
    with pytest.raises(ValueError, match="not in 0..3"):
        preferred_shard(None, "icap-7", 4)


def test_lease_record_reads_holder_version_and_request() -> None:
    assert lease_record(None) == ABSENT
    obj = {
        "metadata": {"resourceVersion": "42", "annotations": {WANTED_BY: "b"}},
        "spec": {"holderIdentity": "a"},
    }
    assert lease_record(obj) == LeaseRecord(True, "a", "42", "b")
    assert lease_record({"metadata": {}, "spec": {}}) == LeaseRecord(True, "", "", "")


def held(holder: str, version: str = "1", since: float = 0.0, wanted: str = "") -> Observed:
    return Observed(LeaseRecord(True, holder, version, wanted), since)


def test_observe_keeps_the_first_sighting_of_a_version() -> None:
    first = observe(None, LeaseRecord(True, "a", "1"), 10.0)
    again = observe(first, LeaseRecord(True, "a", "1"), 20.0)
    assert again.since == 10.0
    renewed = observe(again, LeaseRecord(True, "a", "2"), 21.0)
    assert renewed.since == 21.0
    assert not expired(renewed, 21.0 + D - 0.1, D)
    assert expired(renewed, 21.0 + D, D)


def test_my_preferred_shard_is_acquired_when_free_at_once() -> None:
    leases = {0: Observed(ABSENT, 100.0), 1: Observed(ABSENT, 100.0)}
    step = decide(leases, "me", 0, 100.0, D)
    assert step.acquire == (0,)  # shard 1 waits a duration for its own replica
    # a released Lease (holder empty) of my preferred shard too
    assert decide({0: held("", since=100.0)}, "me", 0, 100.0, D).acquire == (0,)


def test_another_replicas_free_shard_only_after_a_duration() -> None:
    leases = {1: Observed(ABSENT, 100.0)}
    assert decide(leases, "me", 0, 100.0 + D - 0.01, D).acquire == ()
    assert decide(leases, "me", 0, 100.0 + D, D).acquire == (1,)


def test_a_valid_lease_of_another_is_never_taken() -> None:
    # renewed (a new version seen) within the duration: held, whatever the shard
    for shard in (0, 1):
        step = decide({shard: held("other", since=100.0)}, "me", 0, 100.0 + D - 0.01, D)
        assert step.acquire == ()


def test_an_expired_lease_of_a_dead_replica_is_taken_over() -> None:
    dead = {1: held("dead", since=100.0)}
    assert decide(dead, "me", 0, 100.0 + D, D).acquire == (1,)


def test_my_own_leases_are_renewed() -> None:
    step = decide({0: held("me"), 3: held("me")}, "me", 0, 1000.0, D)
    assert step.renew == (0, 3) and step.acquire == () and step.release == ()


def test_my_preferred_shard_held_by_another_is_asked_for_once() -> None:
    leases = {0: held("other", since=100.0)}
    assert decide(leases, "me", 0, 101.0, D).want == (0,)
    asked = {0: held("other", version="2", since=101.0, wanted="me")}
    assert decide(asked, "me", 0, 102.0, D).want == ()


def test_a_shard_asked_for_by_its_replica_is_released_but_never_my_own() -> None:
    asked = {1: held("me", wanted="replica-1"), 0: held("me", wanted="intruder")}
    step = decide(asked, "me", 0, 1000.0, D)
    assert step.release == (1,)
    assert step.renew == (0,)


def test_fencing_stops_writes_before_anyone_may_take_over() -> None:
    sent = 100.0
    until = valid_until(sent, D)
    s = ShardSet(4, {2: until})
    assert s.owns(2, sent + 1)
    assert not s.owns(1, sent + 1)
    assert not s.owns(2, until)
    # another replica that saw the renewal (no earlier than it was sent) takes over no earlier
    # than sent + D: a third of the duration later than the last write may start
    assert until <= sent + D - D / 3 + 1e-9
    assert renew_period(D) == D / 3


def test_settings_refuse_shards_with_peering_and_bad_indices() -> None:
    s = Settings(shards=4)
    with pytest.raises(ValueError, match="drop --peering"):
        s.replace(peering="icap")
    with pytest.raises(ValueError, match="not below"):
        s.replace(shard_index=4)
    with pytest.raises(ValueError, match=">= 3 s"):
        s.replace(shard_lease_seconds=1)
    env = Settings.from_env(
        {
            "INFERENCE_CAPACITY_SHARDS": "4",
            "INFERENCE_CAPACITY_SHARD_INDEX": "1",
            "INFERENCE_CAPACITY_SHARD_LEASE_PREFIX": "rel-inference-capacity",
        }
    )
    assert (env.shards, env.shard_index, env.shard_lease_prefix) == (
        4,
        1,
        "rel-inference-capacity",
    )


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--peering", "icap"], {}, "drop --peering"),
        (["--standalone"], {"INFERENCE_CAPACITY_SHARD_LEASE_NAMESPACE": "x"}, "no StatefulSet"),
        (["--standalone"], {"INFERENCE_CAPACITY_SHARD_INDEX": "0"}, "namespace of the shard"),
    ],
)
def test_run_refuses_to_start_sharded_without_what_it_needs(
    args: list[str], env: dict[str, str], message: str
) -> None:
    """One line and exit status 2 before any cluster is contacted: never a guessed shard."""
    import os

    base = {k: v for k, v in os.environ.items() if k != "POD_NAMESPACE"}
    out = subprocess.run(
        [sys.executable, "-m", "inference_capacity.cli", "run", *args],
        capture_output=True,
        text=True,
        env={**base, "INFERENCE_CAPACITY_SHARDS": "2", "PYTHONPATH": ":".join(sys.path), **env},
        timeout=120,
    )
    assert out.returncode != 0
    assert message in out.stderr, out.stderr
