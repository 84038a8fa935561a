"""The operator's own targets index (controller/targets.py), fed from Kopf's InferenceCapacity
watch stream (controller/bodies.feed) instead of a ``@kopf.index``: Kopf's index barrier woke
every waiting worker at each object's toggle (O(n²); issue 22 at 10,000 resources)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator
from typing import Any

from inference_capacity.controller import bodies
from inference_capacity.controller.targets import TargetIndex, claim_of


def icap(name: str, target: str | None, uid: str, ns: str = "ns", t: str = "T1") -> dict[str, Any]:
    spec: dict[str, Any] = {"targetRef": {"name": target}} if target else {}
    return {
        "metadata": {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": t},
        "spec": spec,
    }


def ev(kind: str | None, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def test_claim_of_reads_namespace_target_time_and_name() -> None:
    assert claim_of(icap("a", "dep", "u1")) == (("ns", "dep"), ("T1", "a"))
    assert claim_of(icap("a", None, "u1")) is None
    assert claim_of({"metadata": {}, "spec": {"targetRef": "x"}}) is None


def test_events_add_move_and_drop_claims() -> None:
    idx = TargetIndex()
    idx.event(ev("ADDED", icap("a", "dep", "u1")))
    idx.event(ev("ADDED", icap("b", "dep", "u2", t="T2")))
    assert sorted(idx.get(("ns", "dep"))) == [("T1", "a"), ("T2", "b")]
    # b moves to another Deployment: gone from the first
    idx.event(ev("MODIFIED", icap("b", "other", "u2", t="T2")))
    assert idx.get(("ns", "dep")) == (("T1", "a"),)
    assert idx.get(("ns", "other")) == (("T2", "b"),)
    # a loses its target, b is deleted: nothing left
    idx.event(ev("MODIFIED", icap("a", None, "u1")))
    idx.event(ev("DELETED", icap("b", "other", "u2", t="T2")))
    assert idx.get(("ns", "dep")) is None and idx.get(("ns", "other"), ()) == ()
    assert idx.items() == [] and len(idx) == 0


def test_ready_after_every_expected_stream_listed() -> None:
    idx = TargetIndex()
    idx.expect(["a", "b"])
    idx.event(ev(None, icap("x", "dep", "u1", ns="a")), "a")
    idx.listed("a")
    assert not idx.ready() and not idx.wait_ready(0.01)
    idx.listed("b")  # an empty namespace
    assert idx.ready()
    cluster = TargetIndex()
    cluster.expect([])
    cluster.listed(None)
    assert cluster.ready()
    pattern = TargetIndex()
    pattern.expect(["team-*"])  # Kopf resolves globs itself: the first list is enough
    pattern.listed("team-1")
    assert pattern.ready()


def test_a_waiting_thread_is_woken_by_the_last_list() -> None:
    idx = TargetIndex()
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(idx.wait_ready(30)))
    t.start()
    idx.listed(None)
    t.join(30)
    assert got == [True]


def test_a_list_made_again_drops_what_it_no_longer_lists() -> None:
    idx = TargetIndex()
    for uid, name in (("u1", "a"), ("u2", "b")):
        idx.event(ev(None, icap(name, f"dep-{name}", uid)))
    idx.listed(None)
    other_ns = TargetIndex()  # a stream's relist never drops another stream's entries
    assert len(idx) == 2
    # the watch broke; b was deleted meanwhile; the relist brings a only
    idx.event(ev(None, icap("a", "dep-a", "u1")))
    idx.listed(None)
    assert idx.get(("ns", "dep-a")) == (("T1", "a"),)
    assert idx.get(("ns", "dep-b")) is None
    # per stream: a relist of namespace "x" keeps namespace "y"'s entries
    other_ns.event(ev(None, icap("a", "d", "u1", ns="x")), "x")
    other_ns.event(ev(None, icap("b", "d", "u2", ns="y")), "y")
    other_ns.listed("x")
    other_ns.listed("y")
    other_ns.listed("x")  # x relisted empty
    assert other_ns.get(("x", "d")) is None
    assert other_ns.get(("y", "d")) == (("T1", "b"),)


def test_a_failed_list_started_again_forgets_its_partial_pages() -> None:
    idx = TargetIndex()
    idx.event(ev(None, icap("a", "dep", "u1")))
    idx.listed(None)
    idx.event(ev(None, icap("a", "dep", "u1")))  # first page of a relist, then 410
    idx.restarted(None)
    idx.listed(None)  # the relist made again lists nothing: a is gone
    assert idx.get(("ns", "dep")) is None


def test_the_watch_wrapper_feeds_events_lists_and_restarts() -> None:
    class Sink:
        def __init__(self) -> None:
            self.calls: list[tuple[str, Any]] = []

        def event(self, raw_event: dict[str, Any], stream: str | None) -> None:
            assert "managedFields" not in raw_event["object"]["metadata"]  # trimmed first
            self.calls.append(("event", raw_event["type"]))

        def listed(self, stream: str | None) -> None:
            self.calls.append(("listed", stream))

        def restarted(self, stream: str | None) -> None:
            self.calls.append(("restarted", stream))

    class Expired(Exception):
        status = 410

    attempts: list[int] = []

    async def original(**_: Any) -> AsyncGenerator[Any, None]:
        attempts.append(1)
        obj = icap("a", "dep", "u1")
        obj["metadata"]["managedFields"] = [{}]
        yield ev(None, obj)
        if len(attempts) == 1:
            raise Expired("continue token expired")
        yield "LISTED"
        yield ev("MODIFIED", obj)

    wanted, ignored = Sink(), Sink()
    saved = list(bodies._feeds)
    try:
        bodies.feed(lambda r: r == "icaps", wanted)
        bodies.feed(lambda r: r == "icaps", wanted)  # idempotent
        bodies.feed(lambda r: r == "pods", ignored)

        async def no_sleep(_: float) -> None:
            return None

        async def run() -> list[Any]:
            gen = bodies.trimmed(original, sleep=no_sleep)(resource="icaps", namespace="ns")
            return [e async for e in gen]

        out = asyncio.run(run())
    finally:
        bodies._feeds[:] = saved
    assert len(out) == 4  # events reach Kopf as before
    assert wanted.calls == [
        ("event", None),
        ("restarted", "ns"),
        ("event", None),
        ("listed", "ns"),
        ("event", "MODIFIED"),
    ]
    assert ignored.calls == []
