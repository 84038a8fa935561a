"""The operator's I/O loop: one asyncio event loop in one daemon thread (``operator-io``) that
runs every outbound request the operator makes for a resource — Prometheus queries
(:mod:`.observing`) and Hub fetches (:mod:`.models`).

A reconcile is a sync Kopf handler in Kopf's executor: it hands a coroutine to this loop
(:func:`submit`, i.e. ``run_coroutine_threadsafe``) and waits a bounded time for its future.
While a request waits on a slow server it holds no thread, only a socket; any number of slow
servers cost sockets and memory, not workers. Kopf's own loop is not used: an answer parsed
there (a large Prometheus vector, a large safetensors header) would stall its watch streams
and the dispatch of every handler; on a loop of its own a hostile server delays only the
requests to it.

Each user of the loop keeps its long-lived objects (an HTTP client) here as a named resource,
made on the loop at first use and closed by :func:`shutdown` (Kopf's cleanup). The loop starts
at the first :func:`submit` and a later :func:`submit` after a shutdown starts a fresh one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")
_lock = threading.Lock()

#: the name of the loop's thread (tests count threads by name)
THREAD_NAME = "operator-io"


class IoLoop:
    """One event loop in one daemon thread, and the resources made on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=THREAD_NAME, daemon=True)
        self.thread.start()
        #: name -> (the object, the coroutine function that closes it); touched on the loop only
        self._resources: dict[str, tuple[Any, Callable[[Any], Awaitable[None]]]] = {}

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def resource(
        self,
        name: str,
        make: Callable[[], T],
        close: Callable[[T], Awaitable[None]],
    ) -> T:
        """The loop's ``name`` resource, made by ``make()`` at first use. Call it on the loop
        (from a coroutine submitted here): the objects are bound to this loop."""
        got = self._resources.get(name)
        if got is None:
            obj = make()
            self._resources[name] = (obj, close)
            return obj
        out: T = got[0]
        return out

    def stop(self) -> None:
        """Cancel every task on the loop, close the resources, stop the loop."""

        async def close() -> None:
            me = asyncio.current_task()
            for task in asyncio.all_tasks():
                if task is not me:
                    task.cancel()
            for obj, closer in list(self._resources.values()):
                try:
                    await closer(obj)
                except Exception:  # noqa: BLE001 - shutting down: the others still close
                    pass
            self._resources.clear()

        try:
            asyncio.run_coroutine_threadsafe(close(), self.loop).result(timeout=2)
        except Exception:  # noqa: BLE001 - shutting down: the process exits next
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        with _lock:
            _by_loop.pop(self.loop, None)


_loop: IoLoop | None = None
#: every loop not yet stopped (one, but for a shutdown racing a coroutine still on the old one)
_by_loop: dict[asyncio.AbstractEventLoop, IoLoop] = {}


def get() -> IoLoop:
    """The operator's I/O loop, started at first use."""
    global _loop
    with _lock:
        if _loop is None:
            _loop = IoLoop()
            _by_loop[_loop.loop] = _loop
        return _loop


def current() -> IoLoop:
    """The running I/O loop, from a coroutine on it (its resources are this loop's)."""
    with _lock:
        loop = _by_loop.get(asyncio.get_running_loop())
    if loop is None:
        raise RuntimeError("not on the operator's I/O loop")
    return loop


def submit(coro: Coroutine[Any, Any, T]) -> Future[T]:
    """Run ``coro`` on the operator's I/O loop; its future, for a bounded wait."""
    return get().submit(coro)


def running() -> bool:
    with _lock:
        return _loop is not None


def shutdown() -> None:
    """Cancel what is in flight, close the clients and stop the loop (operator shutdown)."""
    global _loop
    with _lock:
        loop, _loop = _loop, None
    if loop is not None:
        loop.stop()
