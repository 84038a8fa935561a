"""Kopf handlers. Importing this module registers them (``kopf run -m
inference_capacity.controller.handlers`` or ``inference-capacity run``).

- create / update / resume of an InferenceCapacity: reconcile it, and refresh it every
  ``REFRESH_SECONDS`` from the operator's own loop (controller/refresher: no Kopf timer, so no
  finalizer and no full body kept per resource);
- events of Deployments that an InferenceCapacity targets (drift, new image, replicas edited by
  hand): reconcile the InferenceCapacities that target them;
- delete: nothing to undo on the Deployment (it keeps running as it is); the PDB goes away with
  its owner reference; the per-resource metrics are dropped.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import random
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import kopf

from .. import settings as settings_mod
from ..api import GROUP, VERSION
from ..api.crd import apply_schema_defaults, carries_default, status_schema
from . import bodies, informer, k8s, metrics, objcache, observing, shards, startup, state
from . import session as _session  # noqa: F401  (registers Kopf's login: a bounded pool)
from .diffbase import LEGACY_PREFIX, BoundedDiffBaseStorage, handled_by_kopf, progress_storage
from .reconcile import Outcome, reconcile
from .refresher import IDENTITY, Leadership, Refresher
from .sharding import shard_of
from .targets import TargetIndex
from .targets import index as _index

PLURAL = k8s.PLURAL
#: read when the module is imported (``run`` configures the settings before): Kopf's decorators
#: take the timer interval at registration
REFRESH_SECONDS = settings_mod.current().refresh_seconds
log = logging.getLogger("inference_capacity.handlers")
#: how long a handler waits for the first complete list of the InferenceCapacities (the
#: targets index) before Kopf retries it
INDEX_WAIT_SECONDS = 60.0


def _is_icap(resource: Any) -> bool:
    return getattr(resource, "group", None) == GROUP and getattr(resource, "plural", None) == PLURAL


# the targets index is fed from Kopf's InferenceCapacity watch stream (controller/targets)
bodies.feed(_is_icap, _index)


PREFIX = LEGACY_PREFIX


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    prefix = PREFIX
    # Kopf's state in the status (diffbase): a handling writes the status once, with the
    # reconcile's result and Kopf's state together, and no metadata patch
    settings.persistence.progress_storage = progress_storage(shards.owns_body)
    # bounded: Kopf's copy of a large inline config would exceed the API server's 256 KiB
    # for annotations (earlier versions kept it in one) and its object size (see diffbase)
    settings.persistence.diffbase_storage = BoundedDiffBaseStorage(shards.owns_body)
    settings.persistence.finalizer = f"{prefix}/finalizer"
    # Kopf posts its object log records at this level or above as Events: at INFO that is a
    # "Handler ... succeeded" Event per refresh per resource (200 resources: 200 Event objects a
    # minute for the apiserver to store, for nobody). The operator's own Events (kopf.event in
    # _emitter) are posted whatever this level; Kopf's warnings and errors still are.
    settings.posting.level = logging.WARNING
    ours = settings_mod.current()
    settings.watching.server_timeout = ours.watch_timeout
    settings.watching.reconnect_backoff = 1.0
    # Kopf's first list of each kind in pages (its default is one response for everything:
    # 10,000 Deployments, managedFields included, parsed and held at once at every start)
    settings.watching.chunk_size = informer.PAGE_SIZE
    settings.networking.error_backoffs = [0.5, 1, 2, 5]
    settings.execution.max_workers = ours.workers
    # Kopf peering: the replica with the highest priority works, the others stand by; equal
    # priorities would pause them all, so each replica draws its own unless one is given
    prio = ours.peering_priority
    settings.peering.priority = prio if prio is not None else random.randint(1, 2**31 - 1)
    # how long a dead leader's peering entry counts: the standby takes over after it (Kopf's
    # default is 60 s)
    settings.peering.lifetime = ours.peering_lifetime
    # SIGTERM: Kopf exits gracefully, and kills itself when that takes longer than this (Kopf's
    # default is 10 minutes; the chart sets it below the pod's terminationGracePeriodSeconds)
    settings.process.ultimate_exiting_timeout = ours.exit_timeout_seconds
    # the refreshes run on the leader only (Kopf's own pause rule on its peering object)
    if not (ours.standalone or ours.peering is None):
        refresher.set_leadership(
            Leadership(_read_peers, IDENTITY, settings.peering.priority, not ours.namespaces)
        )
    # the targets index is complete when every watched namespace has been listed once
    _index.expect(ours.namespaces)
    # with shards: this replica's Leases (its preferred shard is held before Kopf handles
    # anything); settings.validate refused shards with peering
    shards.configure(IDENTITY, _gained)
    # Nodes and Pods for spare-GPU counting from watch-fed caches, not a listing per reconcile
    k8s.start_informers()


@kopf.on.cleanup()
def stop_background_work(**_: Any) -> None:
    """At shutdown: Prometheus observations are cancelled, queued refreshes dropped."""
    observing.shutdown()
    k8s.stop_informers()
    shards.stop()
    refresher.stop()
    _refresh_pool.shutdown(wait=False, cancel_futures=True)


def _emitter(body: Mapping[str, Any]) -> Any:
    def emit(type_: str, reason: str, message: str) -> None:
        kopf.event(cast(Any, dict(body)), type=type_, reason=reason, message=message[:1000])

    return emit


def _without_nulls(value: Any) -> Any:
    """A merge patch deletes null keys, so the stored status never has them: compare without."""
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


@functools.cache
def _defaulted_status_fields() -> Mapping[str, Any]:
    """The status fields whose schema carries a ``default`` (the API server fills them in), by
    name: only these are defaulted before a comparison (the ledger and the rest are not walked
    on every reconcile)."""
    props: Mapping[str, Any] = status_schema()["properties"]
    return {k: v for k, v in props.items() if carries_default(v)}


def _as_stored(key: str, value: Any) -> Any:
    """A status field as the API server stores it once written: null keys gone (merge patch),
    the schema's defaults filled in (``observed.samples`` is 0 where nothing was observed)."""
    schema = _defaulted_status_fields().get(key)
    bare = _without_nulls(value)
    return bare if schema is None else apply_schema_defaults(bare, schema)


def _status_changed(body: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether writing ``new`` would change the stored status (a no-op refresh writes nothing:
    one GET and no PATCH)."""
    old = body.get("status") or {}
    return any(_without_nulls(old.get(k)) != _as_stored(k, v) for k, v in new.items())


def _claims(body: Mapping[str, Any], targets: TargetIndex | None) -> list[tuple[str, str]] | None:
    """(creationTimestamp, name) of every InferenceCapacity targeting this one's Deployment."""
    if targets is None:
        return None
    meta = body.get("metadata", {})
    target = (body.get("spec") or {}).get("targetRef") or {}
    if not isinstance(target, Mapping) or not target.get("name"):
        return []
    return list(targets.get((str(meta.get("namespace")), str(target["name"])), []))


def run_reconcile(
    body: Mapping[str, Any], patch: kopf.Patch | None = None, targets: TargetIndex | None = None
) -> Outcome:
    """Reconcile and write the status; transient API errors become Kopf retries.

    In the InferenceCapacity's own handlers the status goes into Kopf's ``patch``, so Kopf
    writes it with its own bookkeeping (one write, one event, no re-processing of a half-way
    state); elsewhere it is patched directly."""
    meta = body["metadata"]
    try:
        with shards.writing_for(body):
            out = reconcile(body, _emitter(body), _claims(body, targets))
            if _status_changed(body, out.status):
                if patch is not None and not out.requeue:
                    # Kopf writes it when the handler returns: fenced here, just before
                    shards.fence()
                    patch.status.update(out.status)
                else:
                    k8s.patch_icap_status(meta["namespace"], meta["name"], out.status)
    except kopf.PermanentError:
        raise
    except shards.NotOwned as exc:
        # the shard's Lease was lost mid-reconcile: the replica that holds it now reconciles
        raise kopf.TemporaryError(
            f"{meta.get('namespace')}/{meta.get('name')}: {exc}",
            delay=settings_mod.current().retry_seconds,
        ) from exc
    except Exception as exc:
        if k8s.transient(exc):
            RETRY_DELAY = settings_mod.current().retry_seconds
            raise kopf.TemporaryError(
                f"transient API error on {meta.get('namespace')}/{meta.get('name')}, retrying in "
                f"{RETRY_DELAY:g} s: {k8s.describe_error(exc)}",
                delay=RETRY_DELAY,
            ) from exc
        raise
    return out


def _owned(body: kopf.Body, **_: Any) -> bool:
    """Kopf's filter of the InferenceCapacity handlers: with shards, those of a held shard only
    (the diff base and progress storages do not write the others: diffbase.py)."""
    return shards.owns_body(body)


@kopf.on.create(GROUP, VERSION, PLURAL, when=_owned)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec", when=_owned)
@kopf.on.resume(GROUP, VERSION, PLURAL, when=_owned)
def icap_changed(body: kopf.Body, patch: kopf.Patch, retry: int, **_: Any) -> None:
    refresher.capture_context()
    meta = body.get("metadata") or {}
    key = (str(meta.get("namespace")), str(meta.get("name")))
    if not _index.wait_ready(INDEX_WAIT_SECONDS):
        # who else claims its Deployment is not known before the first list ends
        raise kopf.TemporaryError(
            "waiting for the first list of the InferenceCapacities (the targets index)",
            delay=settings_mod.current().retry_seconds,
        )
    out = run_reconcile(body, patch, _index)
    state.handled.set(key, True)
    refresher.schedule(key)
    if out.requeue:
        # mid-rollout or no target yet: try again, backing off up to a minute; a change held
        # by the stabilization window: when the window ends
        delay = min(60.0, settings_mod.current().retry_seconds * 2 ** min(retry, 6))
        if out.retry_after is not None:
            delay = out.retry_after + 0.5
        raise kopf.TemporaryError(
            f"waiting: {out.reason or 'the target is mid-rollout'}", delay=delay
        )


#: The refresh threads. Kopf runs every sync handler in one FIFO pool of ``workers`` threads;
#: 200 resources seen at once (a restart, a bulk apply) refresh at once a minute later, and an
#: edit made then would wait behind that wave. Refreshes run here instead, so the pool serves
#: creations, edits and Deployment events only.
_refresh_pool = ThreadPoolExecutor(
    max_workers=max(1, settings_mod.current().refresh_workers), thread_name_prefix="refresh"
)


def refresh_one(namespace: str, name: str) -> float | None:
    """One refresh (on a refresh thread): read the resource, reconcile it, write its status
    when it changed. Returns the seconds to the next refresh, None when the resource is gone."""
    body = k8s.get_icap(namespace, name)
    if body is None or body.get("metadata", {}).get("deletionTimestamp"):
        return None
    if not shards.owns_body(body):
        # another replica's shard (its target moved, or the shard was lost): forgotten here;
        # a takeover of the shard schedules it again
        return None
    if not handled_by_kopf(body):
        if shards.enabled() and not state.handled.get((namespace, name)):
            _wake_kopf(body)
        # Kopf is still handling its creation (and retries it itself)
        return settings_mod.current().retry_seconds
    try:
        if not _index.ready():
            # the claims on its Deployment are not all known yet: not before the first list
            return settings_mod.current().retry_seconds
        run_reconcile(body, None, _index)
    except kopf.TemporaryError as exc:
        log.warning("refresh of %s/%s: %s", namespace, name, exc)
        return float(exc.delay or settings_mod.current().retry_seconds)
    return REFRESH_SECONDS


def _wake_kopf(body: Mapping[str, Any]) -> None:
    """A shard taken over holds an InferenceCapacity whose creation the dead replica had not
    finished: Kopf here skipped its events then (not owned) and waits for the next one. One
    status write (Kopf's own touch field) is that event; Kopf then handles its creation here."""
    meta = body["metadata"]
    now = dt.datetime.now(dt.UTC).isoformat()
    with shards.writing_for(body):
        k8s.patch_icap_status(meta["namespace"], meta["name"], {"kopf": {"dummy": now}})


#: the loop Kopf runs on (a shard's takeover is scheduled there)
_loops: list[asyncio.AbstractEventLoop] = []


def _gained(gained: frozenset[int]) -> None:
    """Shards this replica has just acquired (on the Lease thread): every InferenceCapacity
    the targets index knows in them is refreshed now (the dead replica's work, taken over)."""
    if _loops:
        _loops[0].call_soon_threadsafe(_refresh_shards, gained)


def _refresh_shards(gained: frozenset[int]) -> None:
    n = shards.shards()
    keys = [
        (ns, claim[1])
        for (ns, target), claims in _index.items()
        if shard_of(ns, target, n) in gained
        for claim in claims
    ]
    for key in keys:
        refresher.schedule_now(key)
    log.info(
        "shards %s taken over: %d InferenceCapacities to refresh now", sorted(gained), len(keys)
    )


def _read_peers(namespace: str | None) -> Mapping[str, Any] | None:
    """The peers in Kopf's peering object (its status), None when it does not exist."""
    name = settings_mod.current().peering or ""
    return k8s.get_peering_status(name, namespace)


refresher = Refresher(REFRESH_SECONDS, _refresh_pool, refresh_one, lambda _ns: True)


@kopf.on.startup()
async def start_refresher(**_: Any) -> None:
    _loops.append(asyncio.get_running_loop())
    refresher.start()


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def icap_deleted(namespace: str, name: str, uid: str, spec: kopf.Spec, **_: Any) -> None:
    forget(namespace, name, uid, (spec.get("targetRef") or {}).get("name"))


def forget(namespace: str, name: str, uid: str, target: str | None) -> None:
    """Drop everything remembered about a deleted InferenceCapacity (and its target's replica
    history: a new resource for that Deployment starts from what runs)."""
    metrics.forget(namespace, name)
    refresher.forget((namespace, name))
    observing.forget(uid or name)
    startup.forget(uid or name)
    state.forget_resource(namespace, name, uid)
    if target:
        state.forget_deployment(namespace, str(target))
    log.info(
        "InferenceCapacity %s/%s deleted; its Deployment keeps running as it is", namespace, name
    )


def _deployment_needs_a_look(event: kopf.RawEvent, namespace: str, name: str, **_: Any) -> bool:
    """Kopf's filter for Deployment events, evaluated on its loop before any handler runs: an
    event of a Deployment no InferenceCapacity targets, or a status-only update of one (the
    rollout progress the Deployment controller writes, several per rollout), is dropped there,
    never queued for a handler thread with its body (at 1,000 Deployments those queued bodies
    were the operator's peak memory)."""
    if not shards.owns_key(namespace, name):
        return False  # another replica's shard
    obj = event.get("object") or {}
    # every (owned) Deployment's latest version, for reconciles to read instead of the API
    if event.get("type") == "DELETED":
        objcache.deployments.drop(namespace, name)
    else:
        objcache.deployments.observe(obj)
    claims = _index.get((namespace, name))
    if not claims:
        return False
    if event.get("type") == "DELETED":
        return True
    if not any(state.handled.get((namespace, claim[1])) for claim in claims):
        # no InferenceCapacity of it handled yet: its own handler reads the Deployment when it
        # runs (after a restart, 1,000 Deployment events would each take a handler thread for
        # nothing); the reconcile records the generation it read (state.note_generation)
        return False
    gen = obj.get("metadata", {}).get("generation")
    return state.deployment_may_have_changed(namespace, name, gen)


@kopf.on.event("apps", "v1", "deployments", when=_deployment_needs_a_look)
def deployment_event(event: kopf.RawEvent, namespace: str, name: str, **_: Any) -> None:
    names = [claim[1] for claim in _index.get((namespace, name), ())]
    if not names:
        return
    gen = (event.get("object") or {}).get("metadata", {}).get("generation")
    if event.get("type") == "DELETED":
        state.forget_deployment(namespace, name)
    elif not state.deployment_changed(namespace, name, gen):
        # a status-only update (the Deployment controller's rollout progress), or the patch
        # the operator just wrote: nothing in the spec to re-check. Waiting rollouts are
        # retried by the InferenceCapacity handler and the refresh timer.
        return
    for icap_name in names:
        if not state.handled.get((namespace, icap_name)):
            # Kopf's own handler has not run for it (yet): it reads the Deployment itself
            continue
        body = k8s.get_icap(namespace, icap_name)
        if body is None or body.get("metadata", {}).get("deletionTimestamp"):
            continue
        if not handled_by_kopf(body):
            # Kopf has not finished handling this InferenceCapacity's creation: its own handler
            # reads the Deployment (and retries until it exists). Writing its status from here
            # now would make Kopf see an unhandled object again and re-run the creation.
            continue
        try:
            run_reconcile(body, None, _index)
        except kopf.TemporaryError as exc:
            log.warning(
                "reconcile of %s/%s after a Deployment event failed; the next event "
                "or the refresh timer retries: %s",
                namespace,
                icap_name,
                exc,
            )
