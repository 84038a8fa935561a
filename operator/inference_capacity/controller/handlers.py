"""Kopf handlers. Importing this module registers them (``kopf run -m
inference_capacity.controller.handlers`` or ``inference-capacity run``).

- create / update / resume of an InferenceCapacity, and a refresh timer: reconcile it;
- events of Deployments that an InferenceCapacity targets (drift, new image, replicas edited by
  hand): reconcile the InferenceCapacities that target them;
- delete: nothing to undo on the Deployment (it keeps running as it is); the PDB goes away with
  its owner reference; the per-resource metrics are dropped.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Mapping
from typing import Any, cast

import kopf

from ..api.models import GROUP, VERSION
from . import k8s, metrics, observing
from . import reconcile as reconcile_mod
from .reconcile import Outcome, reconcile

PLURAL = k8s.PLURAL
REFRESH_SECONDS = float(os.environ.get("INFERENCE_CAPACITY_REFRESH_SECONDS", "60"))
RETRY_DELAY = float(os.environ.get("INFERENCE_CAPACITY_RETRY_SECONDS", "5"))
log = logging.getLogger("inference_capacity.handlers")


PREFIX = "capacity.inference.dev"
DIFFBASE_ANNOTATION = f"{PREFIX}/last-handled-configuration"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    prefix = PREFIX
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=prefix, key=DIFFBASE_ANNOTATION.split("/", 1)[1]
    )
    settings.persistence.finalizer = f"{prefix}/finalizer"
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = int(
        os.environ.get("INFERENCE_CAPACITY_WATCH_TIMEOUT", "300")
    )
    settings.watching.reconnect_backoff = 1.0
    settings.networking.error_backoffs = [0.5, 1, 2, 5]
    settings.execution.max_workers = int(os.environ.get("INFERENCE_CAPACITY_WORKERS", "8"))
    # Kopf peering: the replica with the highest priority works, the others stand by; equal
    # priorities would pause them all, so each replica draws its own unless one is given
    prio = os.environ.get("INFERENCE_CAPACITY_PEERING_PRIORITY")
    settings.peering.priority = int(prio) if prio else random.randint(1, 2**31 - 1)
    # how long a dead leader's peering entry counts: the standby takes over after it (Kopf's
    # default is 60 s)
    settings.peering.lifetime = int(os.environ.get("INFERENCE_CAPACITY_PEERING_LIFETIME", "60"))


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


def _status_changed(body: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    old = body.get("status") or {}
    return any(_without_nulls(old.get(k)) != _without_nulls(v) for k, v in new.items())


def run_reconcile(body: Mapping[str, Any], patch: kopf.Patch | None = None) -> Outcome:
    """Reconcile and write the status; transient API errors become Kopf retries.

    In the InferenceCapacity's own handlers the status goes into Kopf's ``patch``, so Kopf
    writes it with its own bookkeeping (one write, one event, no re-processing of a half-way
    state); elsewhere it is patched directly."""
    meta = body["metadata"]
    try:
        out = reconcile(body, _emitter(body))
        if _status_changed(body, out.status):
            if patch is not None and not out.requeue:
                patch.status.update(out.status)
            else:
                k8s.patch_icap_status(meta["namespace"], meta["name"], out.status)
    except kopf.PermanentError:
        raise
    except Exception as exc:
        if k8s.transient(exc):
            raise kopf.TemporaryError(
                f"transient API error on {meta.get('namespace')}/{meta.get('name')}, retrying in "
                f"{RETRY_DELAY:g} s: {k8s.describe_error(exc)}",
                delay=RETRY_DELAY,
            ) from exc
        raise
    return out


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
@kopf.on.resume(GROUP, VERSION, PLURAL)
def icap_changed(body: kopf.Body, patch: kopf.Patch, retry: int, **_: Any) -> None:
    out = run_reconcile(body, patch)
    if out.requeue:
        # mid-rollout or no target yet: try again, backing off up to a minute
        raise kopf.TemporaryError(
            f"waiting: {out.reason or 'the target is mid-rollout'}",
            delay=min(60.0, RETRY_DELAY * 2 ** min(retry, 6)),
        )


@kopf.timer(GROUP, VERSION, PLURAL, interval=REFRESH_SECONDS, initial_delay=REFRESH_SECONDS)
def icap_refresh(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    run_reconcile(body, patch)


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def icap_deleted(namespace: str, name: str, uid: str, **_: Any) -> None:
    metrics.forget(namespace, name)
    observing.forget(uid or name)
    log.info(
        "InferenceCapacity %s/%s deleted; its Deployment keeps running as it is", namespace, name
    )


@kopf.index(GROUP, VERSION, PLURAL)
def icap_targets(
    namespace: str, name: str, spec: kopf.Spec, **_: Any
) -> dict[tuple[str, str], str]:
    target = (spec.get("targetRef") or {}).get("name")
    return {(namespace, str(target)): name} if target else {}


@kopf.on.event("apps", "v1", "deployments")
def deployment_event(
    event: kopf.RawEvent,
    namespace: str,
    name: str,
    icap_targets: kopf.Index[tuple[str, str], str],
    **_: Any,
) -> None:
    names = list(icap_targets.get((namespace, name), []))
    if not names:
        return
    gen = (event.get("object") or {}).get("metadata", {}).get("generation")
    if event.get("type") != "DELETED" and not reconcile_mod.deployment_changed(
        namespace, name, gen
    ):
        # a status-only update (the Deployment controller's rollout progress), or the patch
        # the operator just wrote: nothing in the spec to re-check. Waiting rollouts are
        # retried by the InferenceCapacity handler and the refresh timer.
        return
    for icap_name in names:
        body = k8s.get_icap(namespace, icap_name)
        if body is None or body.get("metadata", {}).get("deletionTimestamp"):
            continue
        if DIFFBASE_ANNOTATION not in (body.get("metadata", {}).get("annotations") or {}):
            # Kopf has not finished handling this InferenceCapacity's creation: its own handler
            # reads the Deployment (and retries until it exists). Writing its status from here
            # now would make Kopf see an unhandled object again and re-run the creation.
            continue
        try:
            run_reconcile(body)
        except kopf.TemporaryError as exc:
            log.warning(
                "reconcile of %s/%s after a Deployment event failed; the next event "
                "or the refresh timer retries: %s",
                namespace,
                icap_name,
                exc,
            )
