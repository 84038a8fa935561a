"""The operator's own refresh loop (controller/refresher.py): Kopf's peering pause rule
(``kopf/_core/engines/peering.py::process_peering_event``, kopf 1.45) applied to the peering
object's status, and the schedule (one refresh per resource in flight, forgotten on deletion)."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client import REGISTRY

from inference_capacity.controller.refresher import Leadership, Refresher, leading_from_peers


def refreshes_total() -> float:
    """``inference_capacity_refreshes_total`` as the operator's metrics endpoint serves it."""
    return REGISTRY.get_sample_value("inference_capacity_refreshes_total") or 0.0


NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)


def peer(priority: int, seconds_ago: float = 1, lifetime: int = 60) -> dict[str, Any]:
    seen = NOW - dt.timedelta(seconds=seconds_ago)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


def test_the_highest_live_priority_leads_and_the_others_stand_by() -> None:
    peers = {"a": peer(200), "b": peer(100)}
    assert leading_from_peers(peers, "a", 200, NOW)
    assert not leading_from_peers(peers, "b", 100, NOW)


def test_equal_priorities_pause_every_replica_as_kopf_does() -> None:
    peers = {"a": peer(5), "b": peer(5)}
    assert not leading_from_peers(peers, "a", 5, NOW)
    assert not leading_from_peers(peers, "b", 5, NOW)


def test_a_dead_leader_no_longer_holds_the_standby() -> None:
    # lastseen + lifetime passed: Peer.is_dead
    peers = {"a": peer(200, seconds_ago=16, lifetime=15), "b": peer(100)}
    assert leading_from_peers(peers, "b", 100, NOW)
    peers["a"] = peer(200, seconds_ago=14, lifetime=15)
    assert not leading_from_peers(peers, "b", 100, NOW)


def test_a_replica_kopf_has_not_registered_does_not_lead() -> None:
    assert not leading_from_peers({"a": peer(1)}, "b", 100, NOW)
    assert leading_from_peers({"b": peer(100)}, "b", 100, NOW)


def test_an_unreadable_peering_object_means_not_leading() -> None:
    def boom(_scope: str | None) -> dict[str, Any]:
        raise RuntimeError("403 forbidden")

    assert not Leadership(boom, "b", 100, clusterwide=True).leads("ns")
    assert not Leadership(lambda _s: None, "b", 100, clusterwide=True).leads("ns")


def test_leadership_is_read_per_namespace_when_namespaced() -> None:
    scopes: list[str | None] = []

    def read(scope: str | None) -> dict[str, Any]:
        scopes.append(scope)
        return {"me": peer(1)}

    lead = Leadership(read, "me", 1, clusterwide=False, ttl=60)
    assert lead.leads("x") and lead.leads("y") and lead.leads("x")
    assert scopes == ["x", "y"]  # cached within the ttl, one read per scope
    whole = Leadership(read, "me", 1, clusterwide=True, ttl=60)
    assert whole.leads("x") and whole.leads("y")
    assert scopes[2:] == [None]


def test_refreshes_run_when_due_one_at_a_time_and_stop_when_forgotten() -> None:
    calls: list[tuple[str, str]] = []
    gate = threading.Event()

    def refresh(ns: str, name: str) -> float | None:
        calls.append((ns, name))
        gate.wait(5)
        return 0.05

    pool = ThreadPoolExecutor(2)
    r = Refresher(0.05, pool, refresh, lambda _ns: True)
    before = refreshes_total()

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(r.run(tick=0.01))
        r.schedule(("ns", "a"))
        await asyncio.sleep(0.3)
        # the first refresh is still running (the gate is shut): never a second one beside it
        assert calls == [("ns", "a")]
        gate.set()
        await asyncio.sleep(0.3)
        assert len(calls) >= 2
        r.forget(("ns", "a"))
        await asyncio.sleep(0.1)
        seen = len(calls)
        await asyncio.sleep(0.3)
        assert len(calls) == seen and len(r) == 0
        # every refresh that ran is counted (the benchmark's requests per no-op resync)
        assert refreshes_total() - before == seen
        task.cancel()

    asyncio.run(main())
    pool.shutdown()


def test_a_standby_never_refreshes_and_a_gone_resource_is_dropped() -> None:
    calls: list[str] = []
    pool = ThreadPoolExecutor(1)
    before = refreshes_total()
    standby = Refresher(0.02, pool, lambda ns, n: calls.append(n) or 0.02, lambda _ns: False)
    gone = Refresher(0.02, pool, lambda ns, n: calls.append(n) and None, lambda _ns: True)

    async def main() -> None:
        t1 = asyncio.get_running_loop().create_task(standby.run(tick=0.01))
        t2 = asyncio.get_running_loop().create_task(gone.run(tick=0.01))
        standby.schedule(("ns", "s"))
        gone.schedule(("ns", "g"))
        await asyncio.sleep(0.4)
        t1.cancel()
        t2.cancel()

    asyncio.run(main())
    pool.shutdown()
    assert calls == ["g"]  # the standby's resource stayed scheduled, never refreshed
    assert len(standby) == 1 and len(gone) == 0
    assert refreshes_total() == before  # neither a standby's nor a gone resource's counts
