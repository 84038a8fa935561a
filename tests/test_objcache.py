"""The table of the latest Deployment versions (controller/objcache.py) that reconciles read
instead of the API."""

from __future__ import annotations

import threading
from typing import Any

from inference_capacity.controller.objcache import LatestSeen


def _dep(rv: str, replicas: int = 1, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "d", "resourceVersion": rv, **meta},
        "spec": {"replicas": replicas},
    }


def test_keeps_the_newest_version_and_ignores_an_older_event() -> None:
    t = LatestSeen(limit=10)
    assert t.get("ns", "d") is None
    t.observe(_dep("10", replicas=1))
    t.observe(_dep("12", replicas=3))  # e.g. the operator's own patch response
    t.observe(_dep("11", replicas=2))  # the watch event of an earlier version, late
    got = t.get("ns", "d")
    assert got is not None and got["spec"]["replicas"] == 3
    got["spec"]["replicas"] = 99  # a copy: the caller cannot change the table
    assert t.get("ns", "d") == _dep("12", replicas=3)
    t.drop("ns", "d")
    assert t.get("ns", "d") is None


def test_drops_what_nothing_reads() -> None:
    t = LatestSeen(limit=10)
    last_applied = "kubectl.kubernetes.io/last-applied-configuration"
    t.observe(
        _dep(
            "5", managedFields=[{"manager": "kubectl"}], annotations={last_applied: "{}", "a": "b"}
        )
    )
    meta = (t.get("ns", "d") or {})["metadata"]
    assert "managedFields" not in meta
    assert meta["annotations"] == {"a": "b"}


def test_bounded() -> None:
    t = LatestSeen(limit=2)
    for name in ("a", "b", "c"):
        t.observe({"metadata": {"namespace": "ns", "name": name, "resourceVersion": "1"}})
    assert t.get("ns", "a") is None and t.get("ns", "c") is not None


def test_newer_than_waits_for_the_watch_and_gives_up_after_the_timeout() -> None:
    t = LatestSeen(limit=10)
    t.observe(_dep("20"))
    # nothing newer comes: None after the timeout (the caller reads the API)
    assert t.newer_than("ns", "d", "20", timeout=0.05) is None
    # a newer version already held: at once
    t.observe(_dep("21", replicas=4))
    got = t.newer_than("ns", "d", "20", timeout=0.0)
    assert got is not None and got["spec"]["replicas"] == 4
    # one that arrives while waiting (another thread, as Kopf's loop observes events)
    result: list[dict[str, Any] | None] = []
    waiter = threading.Thread(target=lambda: result.append(t.newer_than("ns", "d", "21", 60.0)))
    waiter.start()
    t.observe(_dep("21", replicas=5))  # the same version again: not newer, still waiting
    t.observe(_dep("23", replicas=6))
    waiter.join(60)
    assert not waiter.is_alive()
    assert result and result[0] is not None and result[0]["spec"]["replicas"] == 6
    # an opaque resourceVersion: no ordering, so no wait
    assert t.newer_than("ns", "d", "not-a-number", timeout=60.0) is None
