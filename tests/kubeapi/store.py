"""The object store: one global resourceVersion, an append-only event log, and watchers."""

from __future__ import annotations

import asyncio
import bisect
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .resources import StorageKey

ObjKey = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


@dataclass
class LogEntry:
    rv: int
    key: StorageKey
    namespace: str
    name: str
    type: str  # ADDED, MODIFIED, DELETED
    object: dict[str, Any]
    old: dict[str, Any] | None = None


CLOSE = object()  # sentinel: end the watch stream


@dataclass(eq=False)
class Watcher:
    key: StorageKey
    namespace: str | None
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)


class Store:
    def __init__(self) -> None:
        self.rv = 0
        self.objects: dict[StorageKey, dict[ObjKey, dict[str, Any]]] = {}
        self.log: list[LogEntry] = []
        self._log_rvs: list[int] = []
        #: watches and lists asking for a resourceVersion below this are answered 410 Expired
        self.expired_before = 0
        self.watchers: set[Watcher] = set()
        self.listeners: list[Callable[[LogEntry], None]] = []
        self.before_commit: list[Callable[[StorageKey, str, dict[str, Any]], None]] = []

    # -- reads

    def bucket(self, key: StorageKey) -> dict[ObjKey, dict[str, Any]]:
        return self.objects.setdefault(key, {})

    def get(self, key: StorageKey, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get(key, {}).get((namespace, name))

    def items(self, key: StorageKey, namespace: str | None = None) -> list[dict[str, Any]]:
        bucket = self.objects.get(key, {})
        keys = sorted(k for k in bucket if namespace is None or k[0] == namespace)
        return [bucket[k] for k in keys]

    def all_objects(self) -> Iterator[tuple[StorageKey, dict[str, Any]]]:
        for key, bucket in list(self.objects.items()):
            for obj in list(bucket.values()):
                yield key, obj

    def snapshot_at(
        self, key: StorageKey, rv: int, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """The objects as they were at ``rv``, rebuilt from the event log."""
        state: dict[ObjKey, dict[str, Any]] = {}
        for entry in self.log:
            if entry.rv > rv:
                break
            if entry.key != key or (namespace is not None and entry.namespace != namespace):
                continue
            if entry.type == "DELETED":
                state.pop((entry.namespace, entry.name), None)
            else:
                state[(entry.namespace, entry.name)] = entry.object
        return [state[k] for k in sorted(state)]

    def entries_after(self, rv: int) -> list[LogEntry]:
        start = bisect.bisect_right(self._log_rvs, rv)
        return self.log[start:]

    # -- writes

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def commit(
        self, key: StorageKey, event: str, obj: dict[str, Any], old: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Persist one change with a new resourceVersion and emit exactly one event."""
        meta = obj["metadata"]
        namespace = meta.get("namespace", "")
        name = meta["name"]
        rv = self.next_rv()
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(rv)
        for hook in list(self.before_commit):
            hook(key, event, stored)
        bucket = self.bucket(key)
        if event == "DELETED":
            bucket.pop((namespace, name), None)
        else:
            bucket[(namespace, name)] = stored
        entry = LogEntry(rv, key, namespace, name, event, stored, old)
        self.log.append(entry)
        self._log_rvs.append(rv)
        for watcher in list(self.watchers):
            if watcher.key == key and watcher.namespace in (None, namespace):
                watcher.queue.put_nowait(entry)
        for listener in list(self.listeners):
            listener(entry)
        return stored

    def purge(self, key: StorageKey) -> None:
        self.objects.pop(key, None)

    # -- watchers

    def add_watcher(self, key: StorageKey, namespace: str | None) -> Watcher:
        watcher = Watcher(key, namespace)
        self.watchers.add(watcher)
        return watcher

    def remove_watcher(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)

    def close_watchers(self, key: StorageKey | None = None) -> int:
        count = 0
        for watcher in list(self.watchers):
            if key is None or watcher.key == key:
                watcher.queue.put_nowait(CLOSE)
                count += 1
        return count

    def expire(self) -> int:
        """Make every resourceVersion seen so far too old (the next watch resume gets 410)."""
        self.expired_before = self.next_rv()
        return self.expired_before
