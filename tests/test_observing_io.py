"""controller/observing.py's Prometheus I/O without a cluster: observations run as tasks on the
operator's I/O loop, at most one in flight per resource, cancelled when the resource goes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from inference_capacity.controller import observing
from inference_capacity.observe import PromSource
from tests.promfixtures import SlowServer


@pytest.fixture
def io() -> Iterator[None]:
    yield
    observing.shutdown()


def _wait(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert check()


def test_a_second_reconcile_does_not_start_a_second_observation(
    io: None, slow_stub: Callable[..., SlowServer]
) -> None:
    srv = slow_stub(3.0)
    src = PromSource(srv.url)
    # the first reconcile starts the observation and waits OBSERVE_WAIT_SECONDS (0.5) for it
    assert observing._observe_cached("uid-a", src, refresh_s=60) is None
    _wait(lambda: srv.open == 3)  # its first three queries, at the server
    # the second (and third) reconcile of the same resource only look
    assert observing._observe_cached("uid-a", src, refresh_s=60) is None
    assert observing._observe_cached("uid-a", src, refresh_s=60) is None
    assert observing.inflight() == 1
    time.sleep(0.3)
    assert srv.total == 3  # no second observation's queries
    # another resource gets its own
    assert observing._observe_cached("uid-b", src, refresh_s=60) is None
    assert observing.inflight() == 2
    _wait(lambda: srv.total == 6)


def test_a_new_source_cancels_the_old_observation_and_forget_cancels(
    io: None, slow_stub: Callable[..., SlowServer]
) -> None:
    old, new = slow_stub(30.0), slow_stub(30.0)
    assert observing._observe_cached("uid-c", PromSource(old.url), refresh_s=60) is None
    _wait(lambda: old.open == 3)
    # the spec now points elsewhere: still one observation in flight for the resource
    assert observing._observe_cached("uid-c", PromSource(new.url), refresh_s=60) is None
    assert observing.inflight() == 1
    _wait(lambda: old.open == 0)  # its requests were cancelled, not left for 30 s
    _wait(lambda: new.open == 3)
    observing.forget("uid-c")  # the resource is deleted
    assert observing.inflight() == 0
    _wait(lambda: new.open == 0)


def test_the_observation_lands_in_the_cache(io: None, slow_stub: Callable[..., SlowServer]) -> None:
    srv = slow_stub(0.1)
    src = PromSource(srv.url)
    obs = observing._observe_cached("uid-d", src, refresh_s=60)  # done within the 0.5 s wait
    assert obs is not None and obs.reason == "NoSeries"
    assert observing._observe_cached("uid-d", src, refresh_s=60) is obs  # fresh: no query
    assert srv.total == 3


def test_one_io_loop_for_prometheus_and_the_hub_stopped_at_shutdown(
    io: None, slow_stub: Callable[..., SlowServer]
) -> None:
    """controller/ioloop.py: an observation and a Hub resolution run on the same loop thread
    (operator-io); shutdown cancels what is in flight, stops that thread, and the next use
    starts a fresh loop."""
    import asyncio
    import threading

    from inference_capacity.controller import ioloop, models

    def io_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == ioloop.THREAD_NAME]

    srv = slow_stub(30.0)
    assert observing._observe_cached("uid-e", PromSource(srv.url), refresh_s=60) is None
    loops: list[object] = []

    async def work(client: object) -> None:
        loops.append(ioloop.current())
        await asyncio.sleep(30)

    fut = models._submit(("ns-io", "m", None, ""), work)
    _wait(lambda: bool(loops))
    assert loops == [ioloop.get()] and len(io_threads()) == 1
    first = io_threads()[0]
    observing.shutdown()
    _wait(lambda: fut.cancelled() and srv.open == 0 and not first.is_alive())
    assert models.in_flight() == {} and observing.inflight() == 0
    assert io_threads() == []
    # a later use starts a fresh loop
    obs = observing._observe_cached("uid-f", PromSource(slow_stub(0.1).url), refresh_s=60)
    assert obs is not None and obs.reason == "NoSeries"
    assert len(io_threads()) == 1 and io_threads()[0] is not first
