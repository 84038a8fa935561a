"""The periodic refresh of every InferenceCapacity, from one task of the operator's own.

A Kopf timer per resource kept, for as long as the resource exists, the latest full body Kopf
saw (status with its ledger, managedFields: the largest part of the operator's memory at 1,000
resources on a real API server), one asyncio task each, and a finalizer (a patch on every
creation and deletion, and a deletion held while a refresh ran). Here one loop knows only
``(namespace, name) -> when next``; a refresh reads the resource (one GET, the "no-op resync")
and reconciles it on the refresh threads; the status is written only when it changed.

Peering: Kopf pauses its handlers on a replica that is not the leader, and would have paused
this replica's timers. The loop applies Kopf's own rule (``kopf/_core/engines/peering.py``,
``process_peering_event``) to the peering object: a replica refreshes only when no live peer
other than itself has a priority above or equal to its own. A peering object it cannot read
means "not leading" (fail closed: a standby never writes).
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import getpass
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import Any

from .metrics import REFRESHES

log = logging.getLogger("inference_capacity.refresher")

Key = tuple[str, str]


def _own_id() -> str:
    """This replica's peering identity, given to Kopf (``kopf.run(identity=...)``) so that the
    leader check knows its own entry: the pod's name where the chart sets ``POD_ID``, as Kopf
    itself does, else user@host with the start time and a random part."""
    pod = os.environ.get("POD_ID")
    if pod:
        return pod
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "uid" + str(os.getuid())
    now = dt.datetime.now(dt.UTC).strftime("%Y%m%d%H%M%S")
    return f"{user}@{socket.gethostname()}/{now}/{secrets.token_hex(3)}"


IDENTITY = _own_id()
#: the line logged per refresh (as Kopf logged "Timer ... succeeded" per timer run)
REFRESHED = "Refreshed."


def _parse_time(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def leading_from_peers(
    peers: Mapping[str, Any], identity: str, priority: int, now: dt.datetime
) -> bool:
    """Kopf's pause rule (``process_peering_event``) for this replica: True when it is among
    the peers and no live peer other than itself has a priority above or equal to its own
    (equal priorities pause every replica, as Kopf does). A peer is dead once
    ``lastseen + lifetime`` has passed (``Peer.is_dead``)."""
    if identity not in peers:
        return False  # Kopf has not registered this replica yet: it holds its handlers too
    for peer_id, info in peers.items():
        if peer_id == identity or not isinstance(info, Mapping):
            continue
        # as Kopf's Peer: no lastseen is "seen now"; an unreadable one counts as alive too
        # (fail closed: a replica in doubt stands by)
        seen = _parse_time(info.get("lastseen")) or now
        lifetime = info.get("lifetime", 60)
        if isinstance(lifetime, int | float) and seen + dt.timedelta(seconds=lifetime) <= now:
            continue  # dead
        other = info.get("priority", 0)
        if isinstance(other, int) and other >= priority:
            return False
    return True


class Leadership:
    """Whether this replica leads, per peering scope, read at most every ``ttl`` seconds."""

    def __init__(
        self,
        read_peers: Callable[[str | None], Mapping[str, Any] | None],
        identity: str,
        priority: int,
        clusterwide: bool,
        ttl: float = 2.0,
    ) -> None:
        self._read = read_peers
        self.identity = identity
        self.priority = priority
        self._clusterwide = clusterwide
        self._ttl = ttl
        self._seen: dict[str | None, tuple[float, bool]] = {}
        self._lock = threading.Lock()

    def leads(self, namespace: str) -> bool:
        scope = None if self._clusterwide else namespace
        now = time.monotonic()
        with self._lock:
            hit = self._seen.get(scope)
            if hit is not None and now - hit[0] < self._ttl:
                return hit[1]
        try:
            peers = self._read(scope)
        except Exception as exc:  # noqa: BLE001 - any failure: not leading (fail closed)
            log.warning("peering object not readable (%s): refreshes wait", exc)
            peers = None
        leads = peers is not None and leading_from_peers(
            peers, self.identity, self.priority, dt.datetime.now(dt.UTC)
        )
        with self._lock:
            self._seen[scope] = (now, leads)
        return leads


class Refresher:
    """Every known InferenceCapacity refreshed ``interval`` seconds after it was handled, and
    every ``interval`` seconds after that; one refresh of a resource in flight at a time."""

    def __init__(
        self,
        interval: float,
        pool: Executor,
        refresh: Callable[[str, str], float | None],
        leads: Callable[[str], bool],
    ) -> None:
        self.interval = interval
        self._pool = pool
        self._refresh = refresh
        self._leads = leads
        self._due: dict[Key, float] = {}
        self._running: set[Key] = set()
        self._lock = threading.Lock()
        self._task: asyncio.Task[None] | None = None
        self._context: contextvars.Context | None = None

    def capture_context(self) -> None:
        """Keep the context of a Kopf resource handler (called from one): ``kopf.event`` reads
        Kopf's event queue from a context variable that Kopf sets for its resource handlers
        only, not for the startup activities that start this loop."""
        if self._context is None:
            self._context = contextvars.copy_context()

    def set_leadership(self, leadership: Leadership) -> None:
        self._leads = leadership.leads

    def schedule(self, key: Key) -> None:
        """A resource Kopf has handled: refreshed ``interval`` from now, unless already due."""
        with self._lock:
            self._due.setdefault(key, time.monotonic() + self.interval)

    def schedule_now(self, key: Key) -> None:
        """Refreshed at the next tick (a shard taken over)."""
        with self._lock:
            self._due[key] = time.monotonic()

    def forget(self, key: Key) -> None:
        with self._lock:
            self._due.pop(key, None)

    def __len__(self) -> int:
        return len(self._due)

    def _take_due(self, now: float) -> list[Key]:
        with self._lock:
            keys = [k for k, t in self._due.items() if t <= now and k not in self._running]
            self._running.update(keys)
            return keys

    def _one(self, key: Key) -> None:
        """Refresh one resource (on a refresh thread); reschedule it while it exists."""
        delay: float | None = self.interval
        try:
            if self._leads(key[0]):
                delay = self._refresh(*key)
                if delay is not None:
                    REFRESHES.inc()
                    log.info("[%s/%s] %s", key[0], key[1], REFRESHED)
        except Exception:  # noqa: BLE001 - logged; the next interval tries again
            log.exception("refresh of %s/%s failed; retried in %g s", *key, self.interval)
        finally:
            with self._lock:
                self._running.discard(key)
                if delay is None:
                    self._due.pop(key, None)  # gone
                elif key in self._due:  # not forgotten (deleted) meanwhile
                    self._due[key] = time.monotonic() + delay

    async def run(self, tick: float = 0.5) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(tick, self.interval))
            for key in self._take_due(time.monotonic()):
                base = self._context
                context = base.copy() if base is not None else contextvars.copy_context()
                loop.run_in_executor(self._pool, context.run, self._one, key)

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name="refresher")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
