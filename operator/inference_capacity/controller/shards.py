"""The shard Leases of this replica: one thread reads the Leases every lease duration / 3,
applies the rule of :mod:`.sharding` and writes what it decided (create, or update with the
``resourceVersion`` it read: 409 means another replica won). The rest of the operator asks
:func:`owns_body` / :func:`owns_key` (Kopf's ``when=`` filters, the refresher), and every write
to an InferenceCapacity, a Deployment or a PDB passes :func:`fence` (through
``k8s.field_manager``): it raises :class:`NotOwned` unless the shard of the object being
reconciled (:func:`writing_for`) is held and inside its renew deadline.

With one shard (the default) nothing here runs: every object is owned, nothing is fenced.
Sharding and Kopf peering do not combine (settings.validate refuses it): the shard Leases are
the coordination, each replica runs Kopf standalone.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import datetime as dt
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .. import settings as settings_mod
from . import k8s
from .sharding import (
    WANTED_BY,
    LeaseRecord,
    Observed,
    ShardSet,
    decide,
    lease_name,
    lease_record,
    observe,
    preferred_shard,
    renew_period,
    shard_key,
    shard_of,
    valid_until,
)

log = logging.getLogger("inference_capacity.shards")


class NotOwned(Exception):
    """A write for a shard this replica does not hold (or no longer: fenced)."""


def _micro_time(now: dt.datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ShardLeases:
    """This replica's view of the shard Leases and the shards it holds."""

    def __init__(
        self,
        shards: int,
        preferred: int,
        identity: str,
        namespace: str,
        prefix: str,
        duration: float,
        on_gained: Callable[[frozenset[int]], None] = lambda _s: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.shards = shards
        self.preferred = preferred
        self.identity = identity
        self.namespace = namespace
        self.prefix = prefix
        self.duration = duration
        self._on_gained = on_gained
        self._clock = clock
        self._observed: dict[int, Observed] = {}
        self._objects: dict[int, dict[str, Any] | None] = {}
        self._held: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- what the rest of the operator asks ---------------------------------------------------
    def snapshot(self) -> ShardSet:
        with self._lock:
            return ShardSet(self.shards, dict(self._held))

    def owns(self, shard: int) -> bool:
        return self.snapshot().owns(shard, self._clock())

    def held(self) -> list[int]:
        now = self._clock()
        snap = self.snapshot()
        return [s for s in sorted(snap.held) if snap.owns(s, now)]

    # --- one round ----------------------------------------------------------------------------
    def _read(self) -> None:
        now = self._clock()
        for shard in range(self.shards):
            obj = k8s.get_lease(self.namespace, lease_name(self.prefix, shard))
            with self._lock:
                self._objects[shard] = obj
                self._observed[shard] = observe(self._observed.get(shard), lease_record(obj), now)

    def _body(
        self, shard: int, holder: str | None, acquire: bool, wanted_by: str | None
    ) -> dict[str, Any]:
        """The Lease to write: the one read (its resourceVersion included), with ``holder``
        ("": released; None: the spec as it is, only the annotation changes); ``wanted_by``
        None keeps the request annotation as it is, "" removes it."""
        wall = _micro_time(dt.datetime.now(dt.UTC))
        obj = copy.deepcopy(self._objects.get(shard)) or {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": lease_name(self.prefix, shard), "namespace": self.namespace},
            "spec": {},
        }
        meta = obj.setdefault("metadata", {})
        meta.pop("managedFields", None)
        annotations = dict(meta.get("annotations") or {})
        if wanted_by == "":
            annotations.pop(WANTED_BY, None)
        elif wanted_by is not None:
            annotations[WANTED_BY] = wanted_by
        meta["annotations"] = annotations
        spec = obj.setdefault("spec", {})
        if holder is None:
            return dict(obj)
        previous = spec.get("holderIdentity") or ""
        spec["holderIdentity"] = holder or None
        spec["leaseDurationSeconds"] = max(1, round(self.duration))
        spec["renewTime"] = wall if holder else None
        if acquire:
            spec["acquireTime"] = wall
            # as client-go counts them: every acquisition by a new holder of an existing Lease
            created = self._objects.get(shard) is None
            transitions = int(spec.get("leaseTransitions") or 0)
            spec["leaseTransitions"] = 0 if created else transitions + (previous != holder)
        return dict(obj)

    def _write(self, shard: int, body: dict[str, Any]) -> bool:
        """Create or update; False when another replica wrote first (409)."""
        try:
            if self._objects.get(shard) is None:
                new = k8s.create_lease(self.namespace, body)
            else:
                new = k8s.replace_lease(self.namespace, body)
        except Exception as exc:
            if k8s.is_status(exc, 409):
                log.info("shard %d: another replica wrote its Lease first", shard)
                return False
            raise
        with self._lock:
            self._objects[shard] = new
            self._observed[shard] = Observed(lease_record(new), self._clock())
        return True

    def round(self) -> frozenset[int]:
        """Read the Leases, decide, write; returns the shards gained this round."""
        self._read()
        with self._lock:
            observed = dict(self._observed)
        step = decide(observed, self.identity, self.preferred, self._clock(), self.duration)
        before = set(self.held())
        for shard in step.renew + step.acquire:
            sent = self._clock()
            acquire = shard in step.acquire
            # an acquisition clears any request for it: the requester had a whole duration
            # while it was free or unrenewed (a stale request would make it bounce forever)
            body = self._body(shard, self.identity, acquire, "" if acquire else None)
            if self._write(shard, body):
                with self._lock:
                    self._held[shard] = valid_until(sent, self.duration)
                if acquire:
                    log.info("shard %d: acquired (Lease %s)", shard, lease_name(self.prefix, shard))
            else:
                self._drop(shard)
        for shard in step.release:
            log.info("shard %d: asked for by the replica that prefers it", shard)
            self._release(shard)
        for shard in step.want:
            holder = observed[shard].record.holder
            log.info("shard %d: held by %s; asking for it back", shard, holder)
            self._write(shard, self._body(shard, None, False, self.identity))
        # a Lease another replica now holds is not ours, whatever our deadline says
        with self._lock:
            now_seen = dict(self._observed)
        for shard, obs in now_seen.items():
            if obs.record.holder != self.identity:
                self._drop(shard)
        gained = frozenset(set(self.held()) - before)
        if gained:
            self._on_gained(gained)
        return gained

    def _drop(self, shard: int, quietly: bool = False) -> None:
        with self._lock:
            if self._held.pop(shard, None) is not None and not quietly:
                log.warning("shard %d: no longer held; its writes stop", shard)

    def _release(self, shard: int) -> None:
        """Stop writing for it, then hand its Lease back (holder empty)."""
        self._drop(shard, quietly=True)
        self._write(shard, self._body(shard, "", False, None))
        log.info("shard %d: released", shard)

    # --- the thread ---------------------------------------------------------------------------
    def _loop(self) -> None:
        period = renew_period(self.duration)
        while not self._stop.wait(period):
            try:
                self.round()
            except Exception as exc:  # noqa: BLE001 - logged; held shards expire by deadline
                log.warning("shard Leases: %s", k8s.describe_error(exc))

    def start(self) -> None:
        """One round now (the preferred shard is held before Kopf handles anything), then the
        thread."""
        try:
            self.round()
        except Exception as exc:  # noqa: BLE001 - the thread tries again
            log.warning("shard Leases, first round: %s", k8s.describe_error(exc))
        self._thread = threading.Thread(target=self._loop, name="shard-leases", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop renewing; with ``release``, hand every held Lease back (a clean shutdown: the
        replica that prefers it, or after a lease duration any replica, takes it at once)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if release:
            for shard in list(self._held):
                try:
                    self._release(shard)
                except Exception as exc:  # noqa: BLE001 - it expires by itself
                    log.warning("shard %d: release failed: %s", shard, k8s.describe_error(exc))


#: this process's Leases; None: one shard (sharding off)
_leases: ShardLeases | None = None
#: the shard of the object the current reconcile writes (set by :func:`writing_for`)
_writing: contextvars.ContextVar[int | None] = contextvars.ContextVar("shard", default=None)


def enabled() -> bool:
    return _leases is not None


def shards() -> int:
    return _leases.shards if _leases is not None else 1


def owns_key(namespace: str, name: str) -> bool:
    """Whether this replica holds the shard of ``namespace/name`` (a target Deployment)."""
    leases = _leases
    return leases is None or leases.owns(shard_of(namespace, name, leases.shards))


def owns_body(body: Mapping[str, Any]) -> bool:
    """Whether this replica holds the shard of an InferenceCapacity (by its target)."""
    return owns_key(*shard_key(body))


@contextlib.contextmanager
def writing_for(body: Mapping[str, Any]) -> Iterator[None]:
    """Writes inside are fenced by ``body``'s shard."""
    leases = _leases
    token = _writing.set(shard_of(*shard_key(body), leases.shards) if leases else None)
    try:
        yield
    finally:
        _writing.reset(token)


def fence() -> None:
    """Raise :class:`NotOwned` unless this replica may write for the current object's shard."""
    leases = _leases
    if leases is None:
        return
    shard = _writing.get()
    if shard is None:
        raise NotOwned("a write outside a reconcile of a known shard (a bug): refused")
    if not leases.owns(shard):
        raise NotOwned(f"shard {shard} is not held by this replica (any more): write refused")


def placement(ours: settings_mod.Settings) -> tuple[int, str]:
    """This replica's preferred shard and the Leases' namespace; ValueError (one line naming
    the setting) when either is missing. ``run`` checks it before Kopf starts."""
    preferred = preferred_shard(ours.shard_index, socket.gethostname(), ours.shards)
    namespace = ours.shard_lease_namespace or os.environ.get("POD_NAMESPACE", "")
    if not namespace:
        raise ValueError(
            "INFERENCE_CAPACITY_SHARD_LEASE_NAMESPACE (or POD_NAMESPACE) must name the "
            "namespace of the shard Leases"
        )
    return preferred, namespace


def configure(identity: str, on_gained: Callable[[frozenset[int]], None]) -> ShardLeases | None:
    """From the settings: the Leases of this replica, started; None with one shard."""
    global _leases
    ours = settings_mod.current()
    if ours.shards <= 1:
        return None
    preferred, namespace = placement(ours)
    leases = ShardLeases(
        ours.shards,
        preferred,
        identity,
        namespace,
        ours.shard_lease_prefix,
        ours.shard_lease_seconds,
        on_gained,
    )
    _leases = leases
    k8s.set_writer(f"{k8s.FIELD_MANAGER}-replica-{preferred}", fence)
    log.info(
        "sharding: %d shards, this replica prefers shard %d; Leases %s-shard-* in %s, %g s",
        ours.shards,
        preferred,
        ours.shard_lease_prefix,
        namespace,
        ours.shard_lease_seconds,
    )
    leases.start()
    return leases


def stop() -> None:
    global _leases
    leases = _leases
    if leases is not None:
        leases.stop(release=True)


__all__ = [
    "LeaseRecord",
    "NotOwned",
    "ShardLeases",
    "configure",
    "enabled",
    "fence",
    "owns_body",
    "owns_key",
    "stop",
    "writing_for",
]
