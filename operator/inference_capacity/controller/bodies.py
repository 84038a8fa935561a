"""Kopf's watch events without ``metadata.managedFields``, which nothing in the operator reads.

Kopf holds the latest raw body of each object it watches for as long as that object's worker
lives: in a drain of 1,000 InferenceCapacities and their Deployments, every one of them at once
(each worker waits for a handler thread). Parsed, an InferenceCapacity as the operator writes it
is about 75 KB of Python objects, 34 KB of them its managedFields; a Deployment 28 KB, 16 KB of
them managedFields (measured: ``benchmarks/reconcile.py --cluster real``, a body read back after
one reconcile, sizes summed with ``sys.getsizeof``). Kopf itself never reads managedFields (its
diff essence keeps only the spec, labels and annotations), and neither does any handler here
(the Deployment cache drops them too, :mod:`.objcache`).

Kopf has no hook for this: :func:`install` wraps Kopf's ``infinite_watch`` (the one function
its watcher, ``kopf/_core/reactor/queueing.py::watcher``, reads every event from) with a
generator that drops the field from each event before Kopf sees it. On a Kopf without that
function nothing is wrapped and the operator says so once (memory only; nothing else changes).

The same wrapper lists again when the API server answers a page of Kopf's first list with
``410 Expired``: the list's ``continue`` token is older than the server keeps (etcd compacts
every 5 minutes by default). Kopf lists again after a watch's 410 but not after a list's. A
list's 410 ended Kopf's watcher, and the operator with it. That happened at 10,000
Deployments on 2 cores (``benchmarks/reconcile.py --sizes 10000 --drain``): the paged list, 500
a page, took 6 min 46 s while the first pages' resources were being handled. The list is made
again after :data:`RELIST_BACKOFF_SECONDS`, doubling up to :data:`RELIST_BACKOFF_MAX_SECONDS`,
as client-go's reflector lists again when its paged list expires. To Kopf, a relisted object
is an event it has seen before, as after every watch's 410.

The same stream feeds the operator's own indices (:func:`feed`; :mod:`.targets`): each event of
a kind a :class:`Feed` wants reaches it before Kopf queues it, each completed list (Kopf's
``LISTED`` bookmark) and each list made again after a 410, per stream (its namespace, or None
for the cluster-wide one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

log = logging.getLogger("inference_capacity.bodies")

#: marks Kopf's function once it is wrapped (so a second install is a no-op)
WRAPPED = "_inference_capacity_trimmed"
#: the wait before listing again after a 410 on the list; doubles per expiry in a row
RELIST_BACKOFF_SECONDS = 1.0
RELIST_BACKOFF_MAX_SECONDS = 30.0


class Feed(Protocol):
    """What an index fed from the watch stream is told (:func:`feed`)."""

    def event(self, raw_event: dict[str, Any], stream: str | None) -> None: ...
    def listed(self, stream: str | None) -> None: ...
    def restarted(self, stream: str | None) -> None: ...


#: (does it want this Kopf resource, the feed)
_feeds: list[tuple[Callable[[Any], bool], Feed]] = []


def feed(wants: Callable[[Any], bool], sink: Feed) -> None:
    """Send the events of every watch stream whose Kopf ``resource`` ``wants`` accepts to
    ``sink`` (idempotent per sink)."""
    if all(s is not sink for _, s in _feeds):
        _feeds.append((wants, sink))


def trim(raw_event: Any) -> None:
    """Drop ``object.metadata.managedFields`` from one watch event, in place."""
    if not isinstance(raw_event, dict):
        return  # Kopf's own bookmarks (LISTED) and anything else pass as they are
    obj = raw_event.get("object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if isinstance(meta, dict):
        meta.pop("managedFields", None)


def expired(exc: BaseException) -> bool:
    """A 410 from the API server (Kopf's ``APIClientError``: a list's ``continue`` token that
    expired)."""
    return getattr(exc, "status", None) == 410


def trimmed(
    original: Callable[..., AsyncGenerator[Any, None]],
    sleep: Callable[[float], Any] = asyncio.sleep,
) -> Callable[..., AsyncGenerator[Any, None]]:
    """``original``'s events, each passed through :func:`trim`, listed again when ``original``
    ends with a 410 (:func:`expired`); closing the wrapper closes the original (Kopf cancels and
    closes its watch streams on every reconnect and at exit)."""

    async def infinite_watch(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        delay = RELIST_BACKOFF_SECONDS
        resource = kwargs.get("resource")
        stream = kwargs.get("namespace")
        sinks = [sink for wants, sink in _feeds if wants(resource)]
        while True:
            try:
                async with contextlib.aclosing(original(*args, **kwargs)) as events:
                    async for raw_event in events:
                        if isinstance(raw_event, dict):
                            trim(raw_event)
                            for sink in sinks:
                                sink.event(raw_event, stream)
                        elif _is_listed(raw_event):
                            delay = RELIST_BACKOFF_SECONDS  # a list completed
                            for sink in sinks:
                                sink.listed(stream)
                        yield raw_event
                return
            except Exception as exc:
                if not expired(exc):
                    raise
                log.warning(
                    "the API server expired a list of the watch %s (410: %s); listing again "
                    "in %.0f s",
                    kwargs.get("resource", "?"),
                    exc,
                    delay,
                )
            for sink in sinks:
                sink.restarted(stream)
            await sleep(delay)
            delay = min(RELIST_BACKOFF_MAX_SECONDS, delay * 2)

    setattr(infinite_watch, WRAPPED, True)
    return infinite_watch


def _is_listed(item: Any) -> bool:
    """Kopf's ``Bookmark.LISTED`` (by its name: the tests' fake streams yield the string)."""
    return bool(getattr(item, "name", item) == "LISTED")


def install() -> bool:
    """Wrap Kopf's watch stream (idempotent). False when this Kopf has no ``infinite_watch``."""
    try:
        from kopf._cogs.clients import watching
    except ImportError:
        original = None
    else:
        original = getattr(watching, "infinite_watch", None)
    if original is None:
        log.warning(
            "this Kopf has no kopf._cogs.clients.watching.infinite_watch: watched bodies keep "
            "their managedFields (more memory per resource, nothing else changes)"
        )
        return False
    if not getattr(original, WRAPPED, False):
        watching.infinite_watch = trimmed(original)
    return True
