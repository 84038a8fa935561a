"""One reconciliation of an InferenceCapacity: read the world, plan with the core, decide, write.

Kubernetes I/O goes through :mod:`.k8s`; what it reads goes into a
:class:`~inference_capacity.evaluate.Snapshot`, and every number and every choice comes from the
core's one glue, the same ``plan FILE`` calls (:func:`~inference_capacity.evaluate.read`, then
:func:`~inference_capacity.evaluate.evaluate`: ``resolve`` → ``make_plan`` → ``decide``). A
reconcile is idempotent: with nothing material changed it writes nothing but (unchanged) status.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .. import decision, evaluate, risks, settings
from ..api import API_VERSION, KIND, InferenceCapacity, ManifestError, status_document
from ..decide import set_condition
from ..engines.vllm_args import VllmArgsError, read_flags
from ..planner import Plan, PlanInput
from ..report import (
    latency_status,
    ledger_json,
    recommendation_json,
    sizing_status,
    startup_json,
)
from ..resolve import Resolved, ResolveError
from . import k8s, metrics, models, objcache, observing, startup, state

log = logging.getLogger("inference_capacity.reconcile")
Emit = Callable[[str, str, str], None]  # (type Normal|Warning, reason, message)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass
class Outcome:
    status: dict[str, Any]
    patched: bool = False
    requeue: bool = False
    reason: str = ""
    #: seconds until a held change may be written (stabilization window); None: nothing held
    retry_after: float | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)


class _Ctx:
    def __init__(self, body: Mapping[str, Any], emit: Emit) -> None:
        meta = body.get("metadata", {})
        self.body = body
        self.ns: str = meta.get("namespace", "default")
        self.name: str = meta["name"]
        self.uid: str = meta.get("uid", "")
        self.gen: int | None = meta.get("generation")
        self.now = now_iso()
        old = body.get("status") or {}
        self.conditions: list[dict[str, Any]] = [dict(c) for c in old.get("conditions", [])]
        self.status: dict[str, Any] = {}
        self.outcome = Outcome(self.status)
        self._emit = emit
        #: conditions set last (a failed vLLM start: Ready=False)
        self.overrides: list[tuple[str, str, str, str]] = []
        #: the PDB as read by this reconcile (None: not found), so it is read once
        self.pdb: k8s.Read = k8s.NOT_READ

    def cond(self, type_: str, status: str, reason: str, message: str) -> None:
        self.conditions = set_condition(
            self.conditions, type_, status, reason, message, self.gen, self.now
        )

    def event(self, type_: str, reason: str, message: str, once: bool = True) -> None:
        if not state.event_is_new(self.uid or self.name, reason, message) and once:
            return
        if not state.event_allowed(self.uid or self.name):
            metrics.EVENTS_DROPPED.labels(reason).inc()
            log.debug("%s/%s: Event %s dropped (rate limit)", self.ns, self.name, reason)
            return
        self.outcome.events.append((type_, reason, message))
        try:
            self._emit(type_, reason, message)
        except Exception as exc:  # events are best effort; never fail a reconcile on them
            log.warning(
                "InferenceCapacity %s/%s: could not post event %s: %s",
                self.ns,
                self.name,
                reason,
                exc,
            )

    def finish(self) -> Outcome:
        for c in self.overrides:  # what vLLM's own log says wins over the plan's Ready
            self.cond(*c)
        self.status["conditions"] = self.conditions
        self.status["observedGeneration"] = self.gen
        # written through the status models the CRD is generated from: what is written and
        # what the CRD says cannot drift (a key they lack is a bug, raised, never written)
        self.outcome.status = status_document(self.status)
        return self.outcome


def _refuse(ctx: _Ctx, reason: str, message: str) -> Outcome:
    """A refusal before a plan exists (bad spec, no target, model not resolved)."""
    return _perform(ctx, decision.refusal(reason, message), None, None)


#: Node/Pod listings are shared by all reconciles for ``settings.nodes_ttl_seconds``: every
#: Deployment event reconciles, and listing every Pod of a large cluster each time would be the
#: dominant cost
_nodes_cache: list[Any] = [0.0, None]
_nodes_lock = threading.Lock()


def _nodes_and_pods() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    cached = k8s.cached_nodes_and_pods()  # the watch-fed caches, once they have synced
    if cached is not None:
        return cached
    with _nodes_lock:
        at, value = _nodes_cache
        ttl = settings.current().nodes_ttl_seconds
        if value is not None and time.monotonic() - at < ttl:
            return value  # type: ignore[no-any-return]
        value = k8s.list_nodes_and_pods()
        _nodes_cache[:] = [time.monotonic(), value]
        return value


def _pdb_body(ctx: _Ctx, dep: Mapping[str, Any], min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": ctx.name,
            "namespace": ctx.ns,
            "labels": {"app.kubernetes.io/managed-by": "inference-capacity"},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": ctx.name,
                    "uid": ctx.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "minAvailable": min_available,
            "selector": dep.get("spec", {}).get("selector", {}),
        },
    }


#: (creationTimestamp, name) of an InferenceCapacity: the oldest owns a contested Deployment
Claim = tuple[str, str]


def owner_of(claims: Iterable[Claim]) -> Claim | None:
    """The claim that owns a Deployment: the oldest creationTimestamp, then the smallest name
    (RFC 3339 UTC timestamps of one API server sort as text)."""
    return min(claims, default=None)


def reconcile(
    body: Mapping[str, Any], emit: Emit, claims: Iterable[Claim] | None = None
) -> Outcome:
    """Reconcile one InferenceCapacity (serialised per object). ``claims``: every
    InferenceCapacity of the namespace that targets the same Deployment (this one included);
    only the oldest acts, the others are refused with ``TargetConflict``."""
    meta = body.get("metadata", {})
    key = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
    with state.serialised(key), metrics.RECONCILE_SECONDS.time():
        metrics.PER_RESOURCE.count(meta.get("namespace", ""), meta.get("name", ""), "reconciles")
        ctx = _Ctx(body, emit)
        try:
            return _reconcile(ctx, body, None if claims is None else list(claims))
        except (ValueError, ArithmeticError, RecursionError) as exc:
            # bad input that slipped past the bounds: a condition, never a crash loop
            return _refuse(ctx, "InvalidInput", f"{type(exc).__name__}: {exc}"[:900])


def _reconcile(ctx: _Ctx, body: Mapping[str, Any], claims: list[Claim] | None) -> Outcome:
    """Read the world, plan, :func:`~inference_capacity.decision.decide`, perform the decision."""
    try:
        icap = InferenceCapacity.from_manifest(dict(body), ignore_status=True)
    except ManifestError as exc:
        return _refuse(ctx, "InvalidSpec", str(exc))
    except RecursionError:
        return _refuse(ctx, "InvalidSpec", "spec: nested too deeply")
    spec = icap.spec
    target = spec.target_ref.name
    if claims is not None:
        mine = (str(body.get("metadata", {}).get("creationTimestamp") or ""), ctx.name)
        owner = owner_of([*claims, mine])
        if owner is not None and owner != mine:
            return _refuse(
                ctx,
                "TargetConflict",
                f"spec.targetRef.name: deployment/{target} is managed by InferenceCapacity "
                f"{ctx.ns}/{owner[1]} (the oldest that targets it); this one writes nothing "
                "while that one exists",
            )
    dep = objcache.read_deployment(ctx.ns, target)
    if dep is not None:
        state.note_generation(ctx.ns, target, (dep.get("metadata") or {}).get("generation"))
    if dep is None:
        # retried by the InferenceCapacity's handler (with backoff) until the Deployment exists,
        # and reconciled again by the Deployment's creation event
        ctx.outcome.requeue = True
        return _refuse(
            ctx, "TargetNotFound", f"spec.targetRef.name: Deployment {ctx.ns}/{target} not found"
        )
    cms = {}
    if spec.model.config_map_ref is not None:
        cms = k8s.get_config_maps(ctx.ns, [spec.model.config_map_ref.name])
    model = models.resolve_spec_model(ctx.ns, spec)
    if not model.ok:
        ctx.cond("ModelResolved", "False", model.reason, model.message)
        ctx.outcome.requeue = model.retry
        return _refuse(ctx, model.reason, model.message)
    drafts, refused = models.resolve_draft_model(ctx.ns, spec, dep)
    if refused is not None:
        ctx.cond("ModelResolved", "False", refused.reason, refused.message)
        ctx.outcome.requeue = refused.retry
        return _refuse(ctx, refused.reason, refused.message)
    ctx.cond("ModelResolved", "True", model.reason, model.message)
    ctx.status["model"] = models.model_status(spec, model.source)
    snapshot = evaluate.Snapshot(
        deployment=dep,
        config_maps=cms,
        model_source=model.source,
        draft_sources=drafts,
        hpa_min_replicas=k8s.hpa_min_replicas(ctx.ns, target),
    )
    try:
        resolved = evaluate.read(spec, snapshot)
        if not resolved.supported:
            return _perform(ctx, decision.unsupported(resolved), dep, spec)
        ctx.cond(*_fields(decision.SUPPORTED))
        adj = _startup_adjust(ctx, spec, dep, resolved) if spec.policy.observe_startup else None
        if adj is not None:
            resolved = replace(resolved, plan_input=adj[1].plan_input)
        mem_step = adj[1].memory_step if adj is not None else None
        snapshot = replace(snapshot, memory_step=mem_step)
        planned = _plan(ctx, spec, snapshot, resolved)
    except VllmArgsError as exc:
        return _refuse(ctx, exc.reason, f"spec.targetRef.container: {exc}")
    except ResolveError as exc:
        if exc.field.startswith("spec.model"):
            ctx.cond("ModelResolved", "False", exc.reason, str(exc))
        return _refuse(ctx, exc.reason, str(exc))
    except (ValueError, ArithmeticError, RecursionError) as exc:
        return _refuse(ctx, "InvalidInput", f"{type(exc).__name__}: {exc}"[:900])
    if planned is None:
        return ctx.finish()  # waiting for the first observation
    ev, inp, observed = planned
    assert ev.plan is not None  # supported
    plan = ev.plan
    _fill_status(ctx, icap, resolved.engine_version, resolved.engine_version_source, plan)
    if observed is not None:
        _observed_status(ctx, observed)
    _risks_status(ctx, dep, resolved, plan)
    if adj is not None:
        _startup_status(ctx, spec, *adj)
    metrics.publish_plan(ctx.ns, ctx.name, plan)
    return _decide_and_write(ctx, spec, snapshot, ev, inp)


def _plan(
    ctx: _Ctx, spec: Any, snapshot: evaluate.Snapshot, resolved: Resolved
) -> tuple[evaluate.Evaluation, PlanInput, observing.Observed | None] | None:
    """The Prometheus observation merged into the inputs, then planned and decided
    (:func:`_evaluate`). None while the first observation is pending: planning from the spec
    now and from the observation a moment later would roll out twice."""
    inp = resolved.plan_input
    observed = observing.observe_and_merge(
        spec, ctx.ns, ctx.uid or ctx.name, inp, resolved.running_flags
    )
    if observed is not None:
        inp = observed.plan_input
        if observed.observation.reason == "Pending":
            msg = observed.observation.message
            ctx.cond("Observed", "Unknown", "Pending", msg)
            ctx.cond("Ready", "False", "ObservationPending", msg)
            ctx.outcome.requeue = True
            ctx.outcome.retry_after = 2.0
            ctx.outcome.reason = "waiting for the first Prometheus observation"
            return None
    return _evaluate(ctx, spec, snapshot, resolved, inp), inp, observed


def _evaluate(
    ctx: _Ctx, spec: Any, snapshot: evaluate.Snapshot, resolved: Resolved, inp: PlanInput
) -> evaluate.Evaluation:
    """:func:`~inference_capacity.evaluate.evaluate` on ``snapshot`` with the rest of the world
    read: the (shared, briefly cached) Node/Pod listing, the PDB's owner, the replica history,
    the time."""
    dep = snapshot.deployment
    assert dep is not None
    nodes: Any = None
    pods: Any = ()
    if spec.rollout.manage_strategy:
        listed = _nodes_and_pods()
        if listed is not None:
            nodes, pods = listed
    world = _world(ctx, spec, dep, snapshot.hpa_min_replicas)
    seen = replace(
        snapshot,
        nodes=nodes,
        pods=pods,
        nodes_unknown="spare GPUs unknown (Nodes not readable)",
        foreign_pdb=world.foreign_pdb,
        replica_history=world.replica_history,
        now=world.now,
    )
    return evaluate.evaluate(
        spec,
        seen,
        owner=f"{ctx.ns}/{ctx.name}",
        windows=_windows(),
        resolved=resolved,
        plan_input=inp,
    )


def _decide_and_write(
    ctx: _Ctx,
    spec: Any,
    snapshot: evaluate.Snapshot,
    ev: evaluate.Evaluation,
    inp: PlanInput,
) -> Outcome:
    """Write the patch the decision gives with optimistic concurrency: the patch carries the
    resourceVersion it was decided on, so a concurrent edit makes it fail (409) instead of being
    overwritten; then the Deployment is read again and evaluated again."""
    target = spec.target_ref.name
    resolved = ev.resolved
    dep = snapshot.deployment
    assert dep is not None
    for attempt in range(4):
        chosen = ev.decision
        assert chosen is not None  # a Deployment and a plan
        if chosen.action != "patch" or chosen.change is None:
            return _perform(ctx, chosen, dep, spec)
        patch = json.loads(json.dumps(chosen.change.patch))
        patch.setdefault("metadata", {})["resourceVersion"] = dep["metadata"]["resourceVersion"]
        # the watch event of this very patch can arrive before the patch call returns: its
        # generation (one more, the template changes) is recorded first, so that event is
        # not taken for someone else's change (a second reconcile, a GET and a status write)
        generation = dep["metadata"].get("generation")
        if isinstance(generation, int):
            state.set_generation(ctx.ns, target, generation + 1)
        try:
            patched = k8s.patch_deployment(ctx.ns, target, patch)
        except Exception as exc:
            if isinstance(generation, int):
                state.set_generation(ctx.ns, target, generation)
            if not (k8s.is_status(exc, 409) and attempt < 3):
                raise
            log.info(
                "conflict patching %s/%s (attempt %d); re-reading", ctx.ns, target, attempt + 1
            )
            # the newer version from the watch when it comes within a moment, else the API
            fresh = objcache.deployments.newer_than(
                ctx.ns, target, dep["metadata"]["resourceVersion"], objcache.CONFLICT_WAIT_SECONDS
            )
            if fresh is None:
                fresh = k8s.get_deployment(ctx.ns, target)
                if fresh is None:
                    raise
                objcache.deployments.observe(fresh)
            dep = fresh
            containers = dep["spec"]["template"]["spec"]["containers"]
            running = read_flags(containers[resolved.container_index or 0])
            resolved = replace(resolved, running_flags=running)
            snapshot = replace(snapshot, deployment=dep)
            ev = _evaluate(ctx, spec, snapshot, resolved, inp)
            continue
        objcache.deployments.observe(patched)
        written = patched.get("metadata", {}).get("generation")
        if isinstance(written, int):
            state.set_generation(ctx.ns, target, written)
        metrics.PER_RESOURCE.count(ctx.ns, ctx.name, "patches_applied")
        ctx.status["applied"] = {
            "flags": dict(chosen.flags),
            "replicas": chosen.replicas,
            "at": ctx.now,
            "hash": chosen.change.applied_hash,
        }
        ctx.outcome.patched = True
        return _perform(ctx, chosen, patched, spec)
    raise RuntimeError("unreachable")


def _fields(c: decision.Condition) -> tuple[str, str, str, str]:
    return c.type, c.status, c.reason, c.message


def _windows() -> decision.Windows:
    s = settings.current()
    return decision.Windows(s.stabilization_seconds, s.replica_stabilization_seconds)


def _world(ctx: _Ctx, spec: Any, dep: Mapping[str, Any], hpa_min: int | None) -> decision.World:
    foreign = ""
    if decision.owns_pdb(spec, hpa_min):
        if _pdb_written_recently(ctx) is None:
            # not written (so owned) by this resource a moment ago: read it
            ctx.pdb = k8s.read_pdb(ctx.ns, ctx.name)
            foreign = decision.foreign_pdb(ctx.pdb, ctx.name, ctx.uid, KIND)
    return decision.World(
        deployment=dep,
        hpa_min_replicas=hpa_min,
        foreign_pdb=foreign,
        replica_history=state.replica_history.get((ctx.ns, spec.target_ref.name)) or (),
        now=time.time(),
    )


def _perform(
    ctx: _Ctx, chosen: decision.Decision, dep: Mapping[str, Any] | None, spec: Any
) -> Outcome:
    """Do what the decision says (but the patch, written by the caller): conditions, Events,
    the PDB, the memory of replica recommendations, when to look again."""
    for c in chosen.conditions:
        ctx.cond(c.type, c.status, c.reason, c.message)
    pdb_note = None
    if chosen.pdb_min_available is not None and dep is not None:
        try:
            pdb_note = _pdb(ctx, dep, chosen.pdb_min_available)
        except Exception:
            for e in chosen.events:  # a failed PDB write loses no Event of the decision
                ctx.event(e.type, e.reason, e.message, once=e.once)
            raise
    for e in chosen.events:
        message = e.message
        if pdb_note is not None and e.reason == "Applied":
            # one Event for the change and the PDB it brought, not two (Events per object)
            message, pdb_note = f"{message}; {pdb_note[1]}", None
        ctx.event(e.type, e.reason, message, once=e.once)
    if pdb_note is not None and not chosen.first_write:
        # a PDB created with the first write to the Deployment is recorded as that write is
        # (status, conditions), not as an Event of its own
        ctx.event("Normal", pdb_note[0], pdb_note[1], once=False)
    if chosen.action == "refuse":
        metrics.PER_RESOURCE.count(ctx.ns, ctx.name, "refused", chosen.reason)
    if chosen.replica_history:
        state.replica_history.set((ctx.ns, spec.target_ref.name), chosen.replica_history)
    if chosen.requeue:
        ctx.outcome.requeue = True
    if chosen.retry_after is not None:
        ctx.outcome.retry_after = chosen.retry_after
    if chosen.action == "refuse":
        ctx.outcome.reason = chosen.reason
    elif chosen.held:
        ctx.outcome.reason = "stabilization window"
    return ctx.finish()


#: the PDB last written (or found) per InferenceCapacity is trusted for this long before it is
#: read again (so a PDB deleted by hand comes back)
PDB_RECHECK_SECONDS = 60.0


def _pdb_written_recently(ctx: _Ctx) -> tuple[int, str] | None:
    """(minAvailable, selector JSON) of the PDB this resource wrote less than
    PDB_RECHECK_SECONDS ago, else None (then it is read again: one deleted by hand comes back)."""
    seen = state.pdb_seen.get(ctx.uid or ctx.name)
    if seen and time.monotonic() - seen[2] < PDB_RECHECK_SECONDS:
        return seen[0], seen[1]
    return None


def _pdb(ctx: _Ctx, dep: Mapping[str, Any], min_available: int) -> tuple[str, str] | None:
    """Write the PDB when it differs; the (reason, message) of the Event that says so, if it
    was created or changed."""
    body = _pdb_body(ctx, dep, min_available)
    selector = json.dumps(body["spec"]["selector"], sort_keys=True)
    if _pdb_written_recently(ctx) == (min_available, selector):
        return None
    try:
        what = k8s.upsert_pdb(ctx.ns, body, ctx.uid, ctx.pdb)
    except k8s.ForeignObject as exc:
        ctx.cond("Applied", "False", "PodDisruptionBudgetConflict", str(exc))
        ctx.event("Warning", "PodDisruptionBudgetConflict", str(exc))
        return None
    state.pdb_seen.set(ctx.uid or ctx.name, (min_available, selector, time.monotonic()))
    if what == "unchanged":
        return None
    return (
        f"PodDisruptionBudget{what.capitalize()}",
        f"poddisruptionbudget/{ctx.name} minAvailable={min_available} ({what})",
    )


def _observed_status(ctx: _Ctx, observed: observing.Observed) -> None:
    obs = observed.observation
    ctx.status["observed"] = observed.status
    msg = obs.message
    if not obs.ok:
        msg += "; sizing from the spec's workload"
    ctx.cond("Observed", "True" if obs.ok else "False", obs.reason, msg)
    if not obs.ok:
        ctx.event("Warning", f"Observe{obs.reason}", msg)
    cal = observed.calibration
    if cal is not None:
        c = cal.condition()
        ctx.cond("Calibrated", c.status, c.reason, c.message)
        if cal.drift:
            ctx.event("Warning", "PredictionDrift", c.message)
        blocks = observed.status.get("numGpuBlocks")
        if blocks is not None:
            metrics.PER_RESOURCE.update(ctx.ns, ctx.name, observed_blocks=float(blocks))


def _startup_adjust(
    ctx: _Ctx, spec: Any, dep: Mapping[str, Any], resolved: Resolved
) -> tuple[list[dict[str, Any]], startup.Adjustment] | None:
    """What the target's vLLM printed at startup (pods/log), one pod per template hash, and the
    plan input after it (a step back after a failed start, calibrateFromObserved)."""
    entries = startup.observe(
        ctx.uid or ctx.name, ctx.ns, dep, spec.target_ref.container, resolved.plan_input
    )
    if entries is None:
        return None
    policy = spec.policy
    window = policy.stabilization_window_seconds
    adj = startup.adjust(
        ctx.uid or ctx.name,
        resolved.plan_input,
        entries,
        enforce=spec.mode == "Enforce",
        window_s=float(settings.current().stabilization_seconds if window is None else window),
        hysteresis_percent=policy.hysteresis_percent,
        calibrate=policy.calibrate_from_observed,
        host=(
            startup.host_input(dep, resolved.container_index or 0, resolved.running_flags)
            if policy.set_memory_request
            else None
        ),
    )
    return entries, adj


def _startup_status(
    ctx: _Ctx, spec: Any, entries: list[dict[str, Any]], adj: startup.Adjustment
) -> None:
    """status.observed.startup against the prediction for each pod's flags, PredictionDrift and
    one Event; a failed start of the newest template: Ready=False naming the failure."""
    observed = {**(ctx.status.get("observed") or {}), "startup": entries}
    if adj.status is not None:
        observed["adjustment"] = adj.status
    ctx.status["observed"] = observed
    if adj.failed is not None:
        kind, message = adj.failed
        ctx.overrides.append(("Ready", "False", f"StartupFailed{kind}", message))
        ctx.event("Warning", "StartupFailed", message)
    status, reason, message = startup.drift(entries, spec.policy.prediction_drift_percent)
    ctx.cond("PredictionDrift", status, reason, message)
    if status == "True":
        ctx.event("Warning", "PredictionDrift", message)
    startup.publish(ctx.ns, ctx.name, entries)


def _fill_status(ctx: _Ctx, icap: InferenceCapacity, version: str, source: str, plan: Plan) -> None:
    s = ctx.status
    s["engineVersion"] = version
    s["engineVersionSource"] = source
    s["summary"] = {
        "model": plan.input.model.name,
        "gpu": plan.input.gpu.name,
        "tensorParallel": plan.input.tp,
        "pipelineParallel": plan.input.pp,
    }
    s["ledger"] = ledger_json(plan)
    s["vllmStartup"] = startup_json(plan)
    s["recommendation"] = recommendation_json(plan)
    s["sizing"] = sizing_status(plan)
    s["latency"] = latency_status(plan)


def _risks_status(ctx: _Ctx, dep: Mapping[str, Any], resolved: Resolved, plan: Plan) -> None:
    """status.risks: the six OOM kinds, host memory against the vLLM container's resources."""
    host = startup.host_input(dep, resolved.container_index or 0, resolved.running_flags)
    ctx.status["risks"] = [
        {
            "kind": r.kind,
            "resource": r.resource,
            "marginBytes": r.margin_bytes,
            "atRisk": r.at_risk,
            "flag": r.flag,
            "detail": r.detail[:1000],
        }
        for r in risks.assess(plan, host)
    ]
