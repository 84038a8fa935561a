"""Which InferenceCapacities target which Deployment: the operator's own index, fed from the
InferenceCapacity events of Kopf's watch stream (:mod:`.bodies`), not a Kopf index.

A reconcile needs every claim on its Deployment (the oldest InferenceCapacity owns it:
``reconcile.owner_of``), and Deployment events are dropped early unless a resource targets
them. That was a ``@kopf.index``. Kopf holds every object's handling until all its indices are
ready, with one toggle per object of the first list in one ``ToggleSet`` whose
``asyncio.Condition`` wakes every waiting worker at each toggle (``kopf/_cogs/aiokits/
aiotoggles.py``; ``kopf/_core/reactor/processing.py`` waits there before any handler):
O(objects × workers) wake-ups. At 1,000 resources that was a few CPU-seconds; at 10,000
InferenceCapacities and Deployments (20,000 waiting workers) Kopf's loop was at 93 % of a core
17 minutes after the start, still in its first lists (``benchmarks/reconcile.py --sizes
10000``). With no Kopf index Kopf makes no toggles at all.

This index is fed where the events pass anyway (no second list or watch): an event of an
InferenceCapacity updates it before Kopf queues the event for its worker, so a handler always
finds its own resource here. The same barrier is kept, once: a handler waits for
:meth:`TargetIndex.wait_ready` — the first complete list of every watched namespace — on one
``threading.Event`` (one wake-up per waiting thread). A list made again (after a watch's 410, or
a list's: :mod:`.bodies`) replaces what its stream knew: a resource deleted while the watch was
down is dropped when that list ends, as an informer's relist does.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

#: (namespace, Deployment name)
Key = tuple[str, str]
#: (creationTimestamp, InferenceCapacity name): what ``reconcile.owner_of`` orders by
Claim = tuple[str, str]
#: the watch stream of one namespace (its name), or of the whole cluster (None)
Stream = str | None


def claim_of(obj: Mapping[str, Any]) -> tuple[Key, Claim] | None:
    """The index entry of one InferenceCapacity body: None when it targets nothing."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    target = spec.get("targetRef") if isinstance(spec, Mapping) else None
    name = target.get("name") if isinstance(target, Mapping) else None
    if not name:
        return None
    key = (str(meta.get("namespace") or ""), str(name))
    return key, (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))


class TargetIndex:
    """Thread-safe: fed on Kopf's loop, read by handler threads and the refresher."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, tuple[Key, Claim, Stream]] = {}
        self._by_key: dict[Key, dict[str, Claim]] = {}
        #: uids seen in the list each stream is making now (since its last LISTED)
        self._listing: dict[Stream, set[str]] = {}
        self._expected: frozenset[Stream] = frozenset({None})
        self._listed: set[Stream] = set()
        self._ready = threading.Event()

    # -- set-up -------------------------------------------------------------------------------

    def expect(self, namespaces: Iterable[str]) -> None:
        """The streams Kopf will open: one per namespace given, else one cluster-wide. A
        namespace pattern (Kopf's globs: ``*``, ``?``, ``[``, ``!``) names no stream we can
        count: then the first complete list of any stream makes the index ready."""
        names = tuple(namespaces)
        with self._lock:
            if any(ch in ns for ns in names for ch in "*?[!"):
                self._expected = frozenset()
            else:
                self._expected = frozenset(names) if names else frozenset({None})
            self._update_ready()

    # -- feeding (Kopf's loop) ----------------------------------------------------------------

    def event(self, raw_event: Mapping[str, Any], stream: Stream = None) -> None:
        """One event of the stream: ``type`` None (Kopf's mark of an object of a list), ADDED,
        MODIFIED or DELETED."""
        obj = raw_event.get("object")
        if not isinstance(obj, Mapping):
            return
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        if not uid:
            return
        kind = raw_event.get("type")
        with self._lock:
            if kind is None:
                self._listing.setdefault(stream, set()).add(uid)
            if kind == "DELETED":
                self._drop(uid)
                return
            entry = claim_of(obj)
            if entry is None:
                self._drop(uid)
            else:
                self._put(uid, entry[0], entry[1], stream)

    def listed(self, stream: Stream = None) -> None:
        """The stream's list is complete (Kopf's ``Bookmark.LISTED``): what it did not list is
        gone."""
        with self._lock:
            seen = self._listing.pop(stream, set())
            stale = [uid for uid, (_, _, s) in self._by_uid.items() if s == stream]
            for uid in stale:
                if uid not in seen:
                    self._drop(uid)
            self._listed.add(stream)
            self._update_ready()

    def restarted(self, stream: Stream = None) -> None:
        """The stream's list failed part-way and is made again from the start."""
        with self._lock:
            self._listing.pop(stream, None)

    # -- reading ------------------------------------------------------------------------------

    def get(self, key: Key, default: Any = None) -> Any:
        """The claims on one Deployment (a tuple), or ``default`` when none."""
        with self._lock:
            claims = self._by_key.get(key)
            return tuple(claims.values()) if claims else default

    def items(self) -> list[tuple[Key, tuple[Claim, ...]]]:
        with self._lock:
            return [(key, tuple(claims.values())) for key, claims in self._by_key.items()]

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_uid)

    def ready(self) -> bool:
        return self._ready.is_set()

    def wait_ready(self, timeout: float) -> bool:
        """Wait (a handler thread) for the first complete list of every watched stream."""
        return self._ready.wait(timeout)

    # -- inside the lock ----------------------------------------------------------------------

    def _update_ready(self) -> None:
        done = self._expected <= self._listed if self._expected else bool(self._listed)
        if done:
            self._ready.set()

    def _put(self, uid: str, key: Key, claim: Claim, stream: Stream) -> None:
        old = self._by_uid.get(uid)
        if old is not None and old[0] != key:
            self._unlink(uid, old[0])
        self._by_uid[uid] = (key, claim, stream)
        self._by_key.setdefault(key, {})[uid] = claim

    def _drop(self, uid: str) -> None:
        old = self._by_uid.pop(uid, None)
        if old is not None:
            self._unlink(uid, old[0])

    def _unlink(self, uid: str, key: Key) -> None:
        claims = self._by_key.get(key)
        if claims is not None:
            claims.pop(uid, None)
            if not claims:
                del self._by_key[key]


#: the operator's one index (fed by :mod:`.bodies`, read by the handlers)
index = TargetIndex()
