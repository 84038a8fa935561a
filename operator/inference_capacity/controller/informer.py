"""Watch-fed caches of what reconciles read cluster-wide: the Nodes and Pods that spare-GPU
counting reads, the PodDisruptionBudgets and HorizontalPodAutoscalers that the decision checks.

A reconcile used to list every Node and every non-terminated Pod of the cluster (shared for
``nodes_ttl_seconds``). On a cluster with thousands of Pods each listing cost the API server a
full serialisation and the operator a transient ~100 MB of parsed JSON, several times a minute.
An :class:`Informer` lists once, page by page (bounded memory), keeps only what
:mod:`inference_capacity.sizing` counts of each object (``k8s.slim_node`` / ``k8s.slim_pod``),
and then follows a watch from the list's resourceVersion — as client-go's informers do: a
reconcile reads memory, and the API server sees one long-running request per kind.

Fail closed: until the first complete list, and whenever RBAC forbids the list (a
namespace-scoped install without ``rbac.spareGpuCounting``), :meth:`Informer.snapshot` returns
None and the caller falls back to what it did before (a direct listing, or "spare GPUs
unknown"). A watch that ends is resumed from the last resourceVersion seen; ``410 Gone`` (the
version is too old) relists.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kubernetes.client import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger("inference_capacity.informer")

#: objects per page of an initial list, the informers' and Kopf's (the API server's chunking:
#: bounded memory per page)
PAGE_SIZE = 500
#: a failed list or watch is tried again after this long, doubling up to BACKOFF_MAX_SECONDS
BACKOFF_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 30.0

#: ``list_fn(**kwargs)``: a kubernetes-client list method (``CoreV1Api.list_node``, ...)
ListFn = Callable[..., Any]
Slim = Callable[[Mapping[str, Any]], dict[str, Any]]


class Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


class Informer:
    """One kind's watch-fed cache: ``start`` it once; ``snapshot`` is what a listing would give
    (the slim objects), or None while it is not known."""

    def __init__(
        self,
        kind: str,
        list_fn: ListFn,
        slim: Slim,
        *,
        field_selector: str | None = None,
        watch_timeout: int = 300,
        page_size: int = PAGE_SIZE,
    ) -> None:
        self.kind = kind
        self._list_fn = list_fn
        self._slim = slim
        self._selector = field_selector
        self._watch_timeout = watch_timeout
        self._page_size = page_size
        self._items: dict[str, dict[str, Any]] = {}
        #: the list :meth:`snapshot` hands out, made once per change (None: to be made)
        self._view: list[dict[str, Any]] | None = None
        self._lock = threading.Lock()
        self._synced = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: set once the first list has ended, listed or refused
        self.tried = threading.Event()
        #: how many complete lists were made (the first, then one per 410 or failed watch)
        self.lists = 0

    # --- the consumer side -------------------------------------------------------------------

    def snapshot(self) -> list[dict[str, Any]] | None:
        """The cached objects (each as ``slim`` made it), or None before the first complete
        list, and while the list is forbidden. The same list until the cache changes (each
        reconcile reads it; copying thousands of Pods per reconcile was O(fleet²)): read it,
        never change it."""
        with self._lock:
            if not self._synced:
                return None
            if self._view is None:
                self._view = list(self._items.values())
            return self._view

    def any(self, predicate: Callable[[Mapping[str, Any]], bool]) -> bool | None:
        """Whether a cached object satisfies ``predicate`` (read in place, nothing copied);
        None when not known, as for :meth:`snapshot`."""
        with self._lock:
            if not self._synced:
                return None
            return any(predicate(obj) for obj in self._items.values())

    def lookup(self, namespace: str, name: str) -> tuple[bool, dict[str, Any] | None]:
        """(known, the cached object or None): known is False before the first complete list
        and while the list is forbidden (then the caller reads the API)."""
        with self._lock:
            if not self._synced:
                return False, None
            return True, self._items.get(f"{namespace}/{name}")

    def select(self, predicate: Callable[[Mapping[str, Any]], bool]) -> list[dict[str, Any]] | None:
        """The cached objects satisfying ``predicate``; None when not known."""
        with self._lock:
            if not self._synced:
                return None
            return [obj for obj in self._items.values() if predicate(obj)]

    def synced(self) -> bool:
        with self._lock:
            return self._synced

    # --- the thread --------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _kwargs(self) -> dict[str, Any]:
        return {"field_selector": self._selector} if self._selector else {}

    def _run(self) -> None:
        backoff = BACKOFF_SECONDS
        while not self._stop.is_set():
            try:
                version = self._list()
                backoff = BACKOFF_SECONDS
                while not self._stop.is_set():
                    version = self._watch(version)
            except Gone:
                log.info("%s watch: resourceVersion too old (410); listing again", self.kind)
                continue
            except ApiException as exc:
                if exc.status in (401, 403, 404):
                    with self._lock:  # forbidden: not known (never "none")
                        self._synced = False
                        self._items, self._view = {}, None
                    (log.debug if self.tried.is_set() else log.warning)(
                        "%s cannot be listed (%s %s): spare GPUs are not counted from them",
                        self.kind,
                        exc.status,
                        exc.reason,
                    )
                    backoff = BACKOFF_MAX_SECONDS
                else:
                    log.warning("%s list/watch failed (%s); retrying", self.kind, exc.status)
            except Exception as exc:  # connection dropped, bad chunk: list again after a pause
                log.warning("%s list/watch failed: %s; retrying", self.kind, exc)
            self.tried.set()
            self._stop.wait(backoff)
            backoff = min(BACKOFF_MAX_SECONDS, backoff * 2)

    def _list(self) -> str:
        """List page by page into a new map, then swap it in; returns the list's
        resourceVersion (where the watch starts)."""
        items: dict[str, dict[str, Any]] = {}
        token: str | None = None
        while True:
            kwargs = self._kwargs()
            if token:
                kwargs["_continue"] = token
            raw = self._list_fn(limit=self._page_size, _preload_content=False, **kwargs)
            page = json.loads(raw.data)
            for obj in page.get("items") or []:
                items[_key(obj)] = self._slim(obj)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                version = str(meta.get("resourceVersion") or "")
                break
        with self._lock:
            self._items, self._view = items, None
            self._synced = True
        self.lists += 1
        self.tried.set()
        return version

    def _events(self, version: str) -> Iterator[dict[str, Any]]:
        resp = self._list_fn(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout,
            _preload_content=False,
            _request_timeout=(10, self._watch_timeout + 30),
            **self._kwargs(),
        )
        try:
            for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]
                if self._stop.is_set():
                    return
                yield json.loads(line)
        finally:
            resp.release_conn()

    def _watch(self, version: str) -> str:
        """Follow one watch request to its end; returns the last resourceVersion seen."""
        for event in self._events(version):
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise Gone()
                raise RuntimeError(f"watch error: {obj.get('message') or obj}")
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                version = str(rv)
            if kind == "BOOKMARK":
                continue
            with self._lock:
                if kind == "DELETED":
                    self._items.pop(_key(obj), None)
                elif kind in ("ADDED", "MODIFIED"):
                    self._items[_key(obj)] = self._slim(obj)
                self._view = None
        return version


def wait_tried(informers: list[Informer], timeout: float) -> bool:
    """Wait (at most ``timeout`` seconds) until every informer's first list has ended, listed or
    refused; whether all are synced."""
    deadline = time.monotonic() + timeout
    for informer in informers:
        informer.tried.wait(max(0.0, deadline - time.monotonic()))
    return all(i.synced() for i in informers)
