"""Sharding across operator replicas, the pure part: which shard an InferenceCapacity is in,
and what a replica does with the shard Leases it sees. No I/O and no clock here (the clock is
passed in); controller/shards.py does the Lease requests.

**The key.** An InferenceCapacity is in the shard of its *target Deployment*:
``sha256("<namespace>/<spec.targetRef.name>")`` modulo the number of shards (its own name when
it has no target yet). Every InferenceCapacity that claims one Deployment is so in one shard,
and the Deployment's own events go to that shard by the same function: two replicas never write
one Deployment because no Deployment is in two shards, not because they agree on who owns it.
SHA-256, not Python's ``hash()``, which is salted per process (PYTHONHASHSEED) and would put
an object in a different shard in every replica.

**The Leases** (``coordination.k8s.io/v1``, one per shard). The rule is client-go's leader
election (``tools/leaderelection/leaderelection.go``, ``tryAcquireOrRenew``): a Lease is
expired when *this replica* has seen the same version of it for a whole lease duration (its
own monotonic clock, never the holder's ``renewTime``: no clock skew between nodes matters).
A replica

- renews every Lease it holds (every duration / 3);
- acquires its *preferred* shard (its StatefulSet ordinal) when it is free or expired;
- acquires any other shard only once it has been free or expired for a lease duration, so the
  preferred replica gets it first, and a dead replica's shard is taken over;
- never takes a Lease another replica holds and renews;
- asks for its preferred shard back (an annotation on the Lease) when another replica holds it,
  and the holder of a shard that is not its own preferred one releases it when asked, so a
  replica restarted after a takeover gets its shard back.

Two replicas deciding to acquire the same Lease at once cannot both win: the write carries the
``resourceVersion`` it was decided on (an update) or fails with 409 when the Lease exists (a
create), and the API server accepts one of them.

**Fencing.** A replica writes for a shard only while its last successful renewal was sent less
than ``renew deadline`` (2/3 of the lease duration) ago: another replica can acquire the Lease
only after a whole duration of seeing it unchanged, so a write that starts inside the deadline
has a third of the duration to complete before anyone else may write for that shard.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: the annotation a replica sets on its preferred shard's Lease to ask its holder to release it
WANTED_BY = "capacity.inference.dev/wanted-by"
#: a replica's writes for a shard stop this fraction of the lease duration after the renewal
RENEW_DEADLINE_FRACTION = 2 / 3
#: renewals per lease duration
RENEWALS_PER_DURATION = 3


def shard_of(namespace: str, name: str, shards: int) -> int:
    """The shard of ``namespace/name``: the first 8 bytes of its SHA-256, modulo ``shards``."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def shard_key(body: Mapping[str, Any]) -> tuple[str, str]:
    """What an InferenceCapacity is sharded by: its namespace and its target Deployment's name
    (its own name while it has no target)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    target = spec.get("targetRef") if isinstance(spec, Mapping) else None
    name = target.get("name") if isinstance(target, Mapping) else None
    return str(meta.get("namespace") or ""), str(name or meta.get("name") or "")


def lease_name(prefix: str, shard: int) -> str:
    return f"{prefix}-shard-{shard}"


_ORDINAL = re.compile(r"-(\d+)$")


def preferred_shard(index: int | None, hostname: str, shards: int) -> int:
    """A replica's own shard: the configured index, else its StatefulSet ordinal (the pod's
    hostname is ``<statefulset>-<ordinal>``). Neither: an error, not a guess."""
    if index is None:
        m = _ORDINAL.search(hostname)
        if m is None:
            raise ValueError(
                f"INFERENCE_CAPACITY_SHARD_INDEX is not set and the hostname {hostname!r} has "
                "no StatefulSet ordinal (-<n>): say which shard this replica prefers"
            )
        index = int(m.group(1))
    if not 0 <= index < shards:
        raise ValueError(f"shard index {index} is not in 0..{shards - 1}")
    return index


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """What a replica reads of one shard's Lease (``exists`` False: there is none yet)."""

    exists: bool
    holder: str = ""
    version: str = ""
    wanted_by: str = ""


ABSENT = LeaseRecord(exists=False)


def lease_record(obj: Mapping[str, Any] | None) -> LeaseRecord:
    """The record of a Lease as the API server returns it (None: absent)."""
    if obj is None:
        return ABSENT
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    annotations = meta.get("annotations") or {}
    return LeaseRecord(
        exists=True,
        holder=str(spec.get("holderIdentity") or ""),
        version=str(meta.get("resourceVersion") or ""),
        wanted_by=str(annotations.get(WANTED_BY) or ""),
    )


@dataclass(frozen=True, slots=True)
class Observed:
    """A Lease record and when (this replica's monotonic clock) it was first seen as it is."""

    record: LeaseRecord
    since: float


def observe(previous: Observed | None, record: LeaseRecord, now: float) -> Observed:
    """The same version seen again keeps its first sighting; any change starts a new one."""
    if previous is not None and previous.record == record:
        return previous
    return Observed(record, now)


@dataclass(frozen=True, slots=True)
class Step:
    """What a replica does with the Leases this round (shard numbers, ascending)."""

    renew: tuple[int, ...] = ()
    acquire: tuple[int, ...] = ()
    release: tuple[int, ...] = ()
    #: ask the holder of my preferred shard to release it
    want: tuple[int, ...] = ()


def expired(obs: Observed, now: float, duration: float) -> bool:
    """Nobody has renewed it (no new version) for a whole lease duration, as seen here."""
    return now - obs.since >= duration


def decide(
    leases: Mapping[int, Observed], me: str, preferred: int, now: float, duration: float
) -> Step:
    """One round of the rule in the module's docstring, for the Leases as last seen."""
    renew: list[int] = []
    acquire: list[int] = []
    release: list[int] = []
    want: list[int] = []
    for shard in sorted(leases):
        obs = leases[shard]
        rec = obs.record
        if rec.holder == me:
            if shard != preferred and rec.wanted_by and rec.wanted_by != me:
                release.append(shard)
            else:
                renew.append(shard)
        elif shard == preferred:
            if not rec.holder or expired(obs, now, duration):
                acquire.append(shard)
            elif rec.wanted_by != me:
                want.append(shard)
        elif expired(obs, now, duration):
            # free or not renewed for a whole duration: its preferred replica had its chance
            acquire.append(shard)
    return Step(tuple(renew), tuple(acquire), tuple(release), tuple(want))


def valid_until(sent_at: float, duration: float) -> float:
    """Until when a replica writes for a shard whose Lease it renewed with a request sent at
    ``sent_at`` (the request's start: the API server may have stored it any time after)."""
    return sent_at + duration * RENEW_DEADLINE_FRACTION


def renew_period(duration: float) -> float:
    return duration / RENEWALS_PER_DURATION


@dataclass(frozen=True, slots=True)
class ShardSet:
    """The shards a replica holds: shard -> until when its writes for it are fenced in."""

    shards: int
    held: Mapping[int, float]

    def owns(self, shard: int, now: float) -> bool:
        until = self.held.get(shard)
        return until is not None and now < until
