"""What the operator remembers between reconciles, per object, and forgets on deletion.

- per InferenceCapacity (by uid): the lock that serialises its reconciles, the last message of
  each Event reason (a repeated refusal is not re-posted), the PDB it last wrote;
- per Deployment (by namespace/name): the generation last handled (status-only updates are
  skipped) and the replica recommendations of the stabilization window.

Every table is bounded (least recently used out first), so objects deleted while the operator
was down, or Deployments never deleted, cannot grow it without end; :func:`forget_resource`
and :func:`forget_deployment` clear an object's entries when it goes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from .throttle import TokenBucket

K = TypeVar("K")
V = TypeVar("V")

#: entries per table: far above the objects one operator watches, small in memory
MAX_ENTRIES = 20_000


class Bounded(Generic[K, V]):
    """A thread-safe dict that keeps the ``limit`` most recently used entries."""

    def __init__(self, limit: int = MAX_ENTRIES) -> None:
        self._data: OrderedDict[K, V] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def _put(self, key: K, value: V) -> None:
        """Store (lock held), newest last, the least recently used out past the limit."""
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self._limit:
            self._data.popitem(last=False)

    def set(self, key: K, value: V) -> None:
        with self._lock:
            self._put(key, value)

    def setdefault(self, key: K, make: Callable[[], V]) -> V:
        with self._lock:
            value = self._data.get(key)
            if value is None:
                value = make()
            self._put(key, value)
            return value

    def pop(self, key: K) -> None:
        with self._lock:
            self._data.pop(key, None)

    def pop_where(self, keep: Callable[[K], bool]) -> None:
        with self._lock:
            for key in [k for k in self._data if not keep(k)]:
                del self._data[key]

    def __len__(self) -> int:
        return len(self._data)


#: per InferenceCapacity (uid, or name when the body has none)
locks: Bounded[str, threading.Lock] = Bounded()
last_events: Bounded[tuple[str, str], str] = Bounded()
#: (minAvailable, selector JSON, monotonic time written)
pdb_seen: Bounded[str, tuple[int, str, float]] = Bounded()
#: per Deployment (namespace, name)
generations: Bounded[tuple[str, str], int] = Bounded()
replica_history: Bounded[tuple[str, str], tuple[tuple[float, int], ...]] = Bounded()

#: (namespace, name) of the InferenceCapacities whose creation (or resume) Kopf has handled:
#: a Deployment event reconciles only those (the others are still in Kopf's own handler)
handled: Bounded[tuple[str, str], bool] = Bounded()

#: Events per object: a burst of 25, then one per 5 minutes, as client-go's recorder allows
#: (``k8s.io/client-go/tools/record/events_cache.go``: ``defaultSpamBurst = 25``,
#: ``defaultSpamQPS = 1. / 300.``, EventSourceObjectSpamFilter); past it an Event is dropped
#: (the status conditions carry the same facts)
EVENT_BURST = 25
EVENT_QPS = 1.0 / 300.0
event_budgets: Bounded[str, TokenBucket] = Bounded()

_TABLES = (locks, last_events, pdb_seen, generations, replica_history, handled, event_budgets)


@contextmanager
def serialised(key: str) -> Iterator[None]:
    """Hold the lock of one InferenceCapacity."""
    lock = locks.setdefault(key, threading.Lock)
    with lock:
        yield


def event_is_new(obj: str, reason: str, message: str) -> bool:
    """True when ``message`` differs from the last one posted for (obj, reason); records it."""
    if last_events.get((obj, reason)) == message:
        return False
    last_events.set((obj, reason), message)
    return True


def event_allowed(obj: str) -> bool:
    """Whether the object's Event budget has room for one more (and takes it)."""
    return event_budgets.setdefault(obj, lambda: TokenBucket(EVENT_QPS, EVENT_BURST)).try_take()


def deployment_may_have_changed(namespace: str, name: str, generation: int | None) -> bool:
    """True when ``generation`` is newer than the one handled (the spec changed since), or not
    known. An older one is a late event (the creation's, seen after the patch)."""
    if generation is None:
        return True
    known = generations.get((namespace, name))
    return known is None or generation > known


def deployment_changed(namespace: str, name: str, generation: int | None) -> bool:
    """:func:`deployment_may_have_changed`, and ``generation`` recorded as handled."""
    if not deployment_may_have_changed(namespace, name, generation):
        return False
    if generation is not None:
        generations.set((namespace, name), generation)
    return True


def note_generation(namespace: str, name: str, generation: int | None) -> None:
    """A reconcile evaluated this generation of the Deployment: a later event of it (or of an
    older one) is a status-only update, not a change to look at."""
    if isinstance(generation, int) and deployment_may_have_changed(namespace, name, generation):
        generations.set((namespace, name), generation)


def set_generation(namespace: str, name: str, generation: int) -> None:
    """Record the generation the operator's own write gave (or, the write failed, had)."""
    generations.set((namespace, name), generation)


def forget_resource(namespace: str, name: str, uid: str) -> None:
    """An InferenceCapacity is gone: drop its lock, Event memory and PDB memory."""
    keys = {uid, name, f"{namespace}/{name}"} - {""}
    locks.pop_where(lambda k: k not in keys)
    handled.pop_where(lambda k: k != (namespace, name))
    last_events.pop_where(lambda k: k[0] not in keys)
    event_budgets.pop_where(lambda k: k not in keys)
    pdb_seen.pop_where(lambda k: k not in keys)


def forget_deployment(namespace: str, name: str) -> None:
    """A Deployment is gone, or no InferenceCapacity targets it any more."""
    generations.pop_where(lambda k: k != (namespace, name))
    replica_history.pop_where(lambda k: k != (namespace, name))


def retained() -> int:
    """Entries held across every table (a test checks deletions leave none)."""
    return sum(len(t) for t in _TABLES)
