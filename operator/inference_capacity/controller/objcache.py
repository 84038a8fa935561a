"""The latest version seen of each Deployment, so that a reconcile reads memory, not the API.

Kopf already watches every Deployment (the Deployment handler's filter sees each event on
Kopf's loop, :func:`..handlers._deployment_needs_a_look`); that filter hands each version to
:meth:`LatestSeen.observe`, as a controller-runtime informer's store would hold it. A reconcile
reads the target from here and reads the API only on a miss (a Deployment Kopf has not shown
yet, or one pushed out of the bounded table); the operator's own patch responses go in too.

Safe when stale: every Deployment patch carries the ``resourceVersion`` it was decided on, so a
decision made on an old version fails with 409 and is made again on a fresh GET
(reconcile._decide_and_write); a change that arrives later arrives as an event, which
reconciles again.

Each version is kept as compact JSON (a few KB) without ``managedFields`` and kubectl's
last-applied annotation, which nothing here reads: at 10,000 Deployments about 30 MB.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any

from . import k8s
from .state import MAX_ENTRIES, Bounded

#: annotations never read by the operator, often the largest part of a Deployment
DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})

Key = tuple[str, str]

#: how long a reconcile whose patch met a newer version (409) waits for the watch to bring that
#: version before it reads the API: on a fresh Deployment the controller's first status write
#: is usually the conflict, and its event is a moment away. Short: in a drain of 1,000 the watch
#: lagged, 220 of 260 conflicts waited a whole second (a handler thread each) and read anyway
CONFLICT_WAIT_SECONDS = 0.25


def _version(obj: Mapping[str, Any]) -> int | None:
    """The resourceVersion as an integer (etcd's revision, which every API server in use sends;
    opaque by contract, so a non-integer one is treated as unordered)."""
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(rv))
    except ValueError:
        return None


def compact(obj: Mapping[str, Any]) -> bytes:
    """``obj`` as compact JSON, without managedFields and the dropped annotations."""
    meta = dict(obj.get("metadata") or {})
    meta.pop("managedFields", None)
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping) and DROPPED_ANNOTATIONS & set(annotations):
        meta["annotations"] = {k: v for k, v in annotations.items() if k not in DROPPED_ANNOTATIONS}
    return json.dumps({**obj, "metadata": meta}, separators=(",", ":")).encode()


class LatestSeen:
    """(namespace, name) → the newest version observed (by resourceVersion), bounded."""

    def __init__(self, limit: int = MAX_ENTRIES) -> None:
        self._items: Bounded[Key, tuple[int | None, bytes]] = Bounded(limit)
        self._changed = threading.Condition()

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> Key | None:
        meta = obj.get("metadata") or {}
        ns, name = meta.get("namespace"), meta.get("name")
        return (str(ns), str(name)) if ns and name else None

    def observe(self, obj: Mapping[str, Any]) -> None:
        """Keep ``obj`` unless a newer version is already held."""
        key = self._key(obj)
        if key is None:
            return
        version, data = _version(obj), compact(obj)
        with self._changed:
            held = self._items.get(key)
            if held is not None and held[0] is not None and version is not None:
                if version < held[0]:
                    return  # an event older than a patch response already held
            self._items.set(key, (version, data))
            self._changed.notify_all()

    def newer_than(
        self, namespace: str, name: str, resource_version: Any, timeout: float
    ) -> dict[str, Any] | None:
        """A version newer than ``resource_version`` as soon as one is held (waiting at most
        ``timeout`` seconds for the watch to bring it); None: none came (read the API)."""
        try:
            floor = int(str(resource_version))
        except ValueError:
            return None
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                held = self._items.get((namespace, name))
                if held is not None and held[0] is not None and held[0] > floor:
                    out: dict[str, Any] = json.loads(held[1])
                    return out
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._changed.wait(remaining)

    def drop(self, namespace: str, name: str) -> None:
        self._items.pop((namespace, name))

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A fresh copy of the newest version held, or None (not held: read the API)."""
        held = self._items.get((namespace, name))
        if held is None:
            return None
        out: dict[str, Any] = json.loads(held[1])
        return out


#: the operator's one table of Deployments
deployments = LatestSeen()


def read_deployment(namespace: str, name: str) -> dict[str, Any] | None:
    """The Deployment from the table, or (not held) from the API, then held."""
    dep = deployments.get(namespace, name)
    if dep is None:
        dep = k8s.get_deployment(namespace, name)
        if dep is not None:
            deployments.observe(dep)
    return dep
