"""One reconciliation of an InferenceCapacity: read the world, plan with the core, decide, write.

Kubernetes I/O goes through :mod:`.k8s`; every number comes from the core (``resolve`` →
``make_plan``); the safety rules come from :mod:`inference_capacity.decide`. A reconcile is
idempotent: with nothing material changed it writes nothing but (unchanged) status.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..api import API_VERSION, KIND, InferenceCapacity, ManifestError
from ..decide import (
    ANNOTATION_TEMPLATE_CHANGED,
    material_changes,
    rollout_in_progress,
    set_condition,
    stabilized_replicas,
    template_hold,
)
from ..engines.vllm_args import VllmArgsError
from ..patching import REMOVED, build_change
from ..planner import Plan, make_plan
from ..report import (
    latency_status,
    ledger_json,
    recommendation_json,
    sizing_status,
    startup_json,
)
from ..resolve import ResolveError, resolve
from ..sizing.gpus import container_gpu_request, spare_after_scale_up, spare_gpus
from . import k8s, metrics, models, observing

log = logging.getLogger("inference_capacity.reconcile")
Emit = Callable[[str, str, str], None]  # (type Normal|Warning, reason, message)

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()
_last_event: dict[tuple[str, str], str] = {}

#: spec flags that the operator never sets: a disagreement here makes the plan wrong for the pods
_STRUCTURAL = ("spec.hardware.tensorParallel", "spec.hardware.pipelineParallel")


def _lock_for(key: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


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

    def cond(self, type_: str, status: str, reason: str, message: str) -> None:
        self.conditions = set_condition(
            self.conditions, type_, status, reason, message, self.gen, self.now
        )

    def event(self, type_: str, reason: str, message: str, once: bool = True) -> None:
        key = (self.uid or self.name, reason)
        if once and _last_event.get(key) == message:
            return
        _last_event[key] = message
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
        self.status["conditions"] = self.conditions
        self.status["observedGeneration"] = self.gen
        return self.outcome


def _refuse(ctx: _Ctx, reason: str, message: str, *, ready_reason: str | None = None) -> Outcome:
    ctx.cond("Ready", "False", ready_reason or reason, message)
    ctx.cond("Applied", "False", reason, message)
    ctx.event("Warning", reason, message)
    metrics.PATCHES_REFUSED.labels(ctx.ns, ctx.name, reason).inc()
    ctx.outcome.reason = reason
    return ctx.finish()


#: Node/Pod listings are shared by all reconciles for this many seconds: every Deployment event
#: reconciles, and listing every Pod of a large cluster each time would be the dominant cost
NODES_TTL_SECONDS = float(os.environ.get("INFERENCE_CAPACITY_NODES_TTL_SECONDS", "10"))
_nodes_cache: list[Any] = [0.0, None]
_nodes_lock = threading.Lock()


def _nodes_and_pods() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    with _nodes_lock:
        at, value = _nodes_cache
        if value is not None and time.monotonic() - at < NODES_TTL_SECONDS:
            return value  # type: ignore[no-any-return]
        value = k8s.list_nodes_and_pods()
        _nodes_cache[:] = [time.monotonic(), value]
        return value


def _spare(
    inp_gpu: Any, gpus_per_replica: int, resource: str, selector: Mapping[str, str] | None
) -> tuple[int | None, str]:
    listed = _nodes_and_pods()
    if listed is None:
        return None, "spare GPUs unknown (Nodes not readable)"
    nodes, pods = listed
    if selector:
        nodes = [
            n
            for n in nodes
            if all(
                (n.get("metadata", {}).get("labels") or {}).get(k) == v for k, v in selector.items()
            )
        ]
    return spare_gpus(nodes, pods, resource, inp_gpu, gpus_per_replica)


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
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    with _lock_for(key), metrics.RECONCILE_SECONDS.time():
        metrics.RECONCILES.labels(meta.get("namespace", ""), meta.get("name", "")).inc()
        ctx = _Ctx(body, emit)
        try:
            return _reconcile(ctx, body, None if claims is None else list(claims))
        except (ValueError, ArithmeticError, RecursionError) as exc:
            # bad input that slipped past the bounds: a condition, never a crash loop
            return _refuse(ctx, "InvalidInput", f"{type(exc).__name__}: {exc}"[:900])


def _reconcile(ctx: _Ctx, body: Mapping[str, Any], claims: list[Claim] | None) -> Outcome:
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
    dep = k8s.get_deployment(ctx.ns, target)
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
    ctx.cond("ModelResolved", "True", model.reason, model.message)
    ctx.status["model"] = models.model_status(spec, model.source)
    hpa_min = k8s.hpa_min_replicas(ctx.ns, target)
    try:
        resolved = resolve(spec, dep, cms, hpa_min_replicas=hpa_min, model_source=model.source)
        if not resolved.supported:
            # fail closed: a flag or VLLM_* variable that may move memory and that the ledger
            # does not model would make every number of the plan wrong; the Deployment is left
            # as it is
            msg = (
                "the vLLM container sets what the ledger does not model, so no plan is made "
                "and nothing is patched: " + resolved.unsupported_message()
            )
            ctx.cond("Supported", "False", "UnsupportedFlag", msg)
            return _refuse(ctx, "UnsupportedFlag", msg)
        ctx.cond(
            "Supported",
            "True",
            "Supported",
            "every vLLM flag and VLLM_* variable is modelled or known neutral",
        )
        inp = resolved.plan_input
        spare, spare_msg = (None, "strategy not managed")
        gpus_per_pod = inp.tp * inp.pp * max(1, inp.engine.data_parallel)
        if spec.rollout.manage_strategy:
            # the scheduler places surge pods only on Nodes matching the pod template's
            # nodeSelector, so only those Nodes' free GPUs count (and the spec's selector on top)
            pod_spec = ((dep.get("spec") or {}).get("template") or {}).get("spec") or {}
            selector = {
                **(pod_spec.get("nodeSelector") or {}),
                **(spec.rollout.spare_gpu_node_selector or {}),
            }
            spare, spare_msg = _spare(
                inp.gpu,
                gpus_per_pod,
                spec.hardware.gpu_resource_name,
                selector,
            )
        inp = replace(inp, rollout=replace(inp.rollout, spare_gpus=spare))
        observed = observing.observe_and_merge(
            spec, ctx.ns, ctx.uid or ctx.name, inp, resolved.running_flags
        )
        if observed is not None:
            inp = observed.plan_input
            if observed.observation.reason == "Pending":
                # the first query runs in the background: plan nothing yet (applying from the
                # spec now and from the observation a moment later would roll out twice)
                msg = observed.observation.message
                ctx.cond("Observed", "Unknown", "Pending", msg)
                ctx.cond("Ready", "False", "ObservationPending", msg)
                ctx.outcome.requeue = True
                ctx.outcome.retry_after = 2.0
                ctx.outcome.reason = "waiting for the first Prometheus observation"
                return ctx.finish()
        plan = make_plan(inp)
        # replicas the plan adds take free GPUs before any surge pod does: without this, the
        # first plan counts GPUs its own new pods are about to fill, and the next reconcile
        # (once the scheduler placed them) finds fewer spare GPUs and changes maxSurge again
        adding = _replicas_to_add(dep, plan.recommendation.rollout.replicas, spec, hpa_min)
        if spare is not None and adding:
            spare, taken = spare_after_scale_up(spare, adding, gpus_per_pod)
            spare_msg += f"; {taken} of them go to the {adding} replicas being added"
            inp = replace(inp, rollout=replace(inp.rollout, spare_gpus=spare))
            plan = make_plan(inp)
    except VllmArgsError as exc:
        return _refuse(ctx, exc.reason, f"spec.targetRef.container: {exc}")
    except ResolveError as exc:
        if exc.field.startswith("spec.model"):
            ctx.cond("ModelResolved", "False", exc.reason, str(exc))
        return _refuse(ctx, exc.reason, str(exc))
    except (ValueError, ArithmeticError, RecursionError) as exc:
        return _refuse(ctx, "InvalidInput", f"{type(exc).__name__}: {exc}"[:900])
    _fill_status(ctx, icap, resolved.engine_version, resolved.engine_version_source, plan)
    if observed is not None:
        _observed_status(ctx, observed)
    rec = plan.recommendation
    ro = rec.rollout
    metrics.publish_plan(ctx.ns, ctx.name, plan)
    if plan.fits:
        ctx.cond("Fits", "True", "Fits", plan.message)
    else:
        ctx.cond("Fits", "False", plan.reason, plan.message)
    ctx.cond("RolloutSafe", "True" if ro.safe else "False", ro.reason, f"{ro.message}; {spare_msg}")
    version_note = ""
    if resolved.engine_version_source == "default":
        version_note = (
            f"; engine version assumed {resolved.engine_version} (no "
            "spec.engine.version and no version in the image tag)"
        )
    flags = rec.flags(
        max_model_len=spec.policy.set_max_model_len,
        batched_tokens=spec.policy.set_max_num_batched_tokens,
        kv_cache_dtype=spec.policy.set_kv_cache_dtype,
        kv_cache_memory=spec.policy.use_kv_cache_memory_bytes,
    )
    remove = rec.removed_flags(kv_cache_memory=spec.policy.use_kv_cache_memory_bytes)
    running = resolved.running_flags
    # TP/PP given in the spec and absent from the command line: the operator sets them too,
    # when the container has the GPUs for them (it never changes resources itself)
    for flag, value, spec_value in (
        ("tensor-parallel-size", inp.tp, spec.hardware.tensor_parallel),
        ("pipeline-parallel-size", inp.pp, spec.hardware.pipeline_parallel),
    ):
        if spec_value is not None and flag not in running and value > 1:
            flags[flag] = str(value)
    gpus = _container_gpus(dep, resolved.container_index or 0, spec.hardware.gpu_resource_name)
    dp = max(1, inp.engine.data_parallel)
    if gpus is not None and gpus < inp.tp * inp.pp * dp:
        return _refuse(
            ctx,
            "InsufficientGpusPerPod",
            f"spec.hardware.tensorParallel: TP {inp.tp} × PP {inp.pp}"
            + (f" × DP {dp}" if dp > 1 else "")
            + f" needs {inp.tp * inp.pp * dp} {spec.hardware.gpu_resource_name} per pod; the "
            f"container asks for {gpus}",
        )
    changes = material_changes(running, flags, spec.policy.hysteresis_percent)
    changes.update({k: (running[k], REMOVED) for k in remove if k in running})
    replicas = ro.replicas if spec.rollout.manage_replicas and hpa_min is None else None
    held: list[str] = []
    enforce = spec.mode == "Enforce"
    if replicas is not None and enforce:
        window = _window(spec.policy.replica_stabilization_window_seconds, REPLICA_WINDOW_ENV)
        want_replicas = replicas
        replicas = _stable_replicas(ctx.ns, target, replicas, dep, window)
        if replicas != want_replicas:
            held.append(
                f"replicas {want_replicas} (held at {replicas}: replicas go down only to the "
                f"highest count recommended in the last {window:g} s)"
            )
    template_window = _window(spec.policy.stabilization_window_seconds, TEMPLATE_WINDOW_ENV)
    hold_s = (
        template_hold(changes, _template_changed_at(dep), time.time(), template_window)
        if enforce
        else None
    )
    if hold_s is not None:
        held.append(
            "flag changes "
            + ", ".join(f"--{k} {v[0] or '(unset)'}→{v[1]}" for k, v in changes.items())
            + f" (stabilization window: the pod template changed less than "
            f"{template_window:g} s ago; applied in {hold_s:.0f} s as the last desired state)"
        )
        changes = {}
        flags = {k: v for k, v in running.items() if k in flags}
    strategy = (
        {"maxSurge": ro.max_surge, "maxUnavailable": ro.max_unavailable}
        if spec.rollout.manage_strategy and ro.safe
        else None
    )
    if not plan.fits:
        return _refuse(ctx, "NotFits", f"{plan.reason}: {plan.message}", ready_reason=plan.reason)
    conflicts = [c for c in resolved.conflicts]
    blocking = [
        c
        for c in conflicts
        if c.startswith(_STRUCTURAL)
        or not (
            (c.startswith("spec.workload.maxModelLen") and spec.policy.set_max_model_len)
            or (c.startswith("spec.model.kvCacheDtype") and spec.policy.set_kv_cache_dtype)
            or (
                c.startswith("spec.engine.maxNumBatchedTokens")
                and spec.policy.set_max_num_batched_tokens
            )
            # the operator always writes the pool flags: the spec's pool replaces the running one
            or c.startswith("spec.engine.kvCacheMemoryBytes")
        )
    ]
    if blocking:
        return _refuse(ctx, "SpecConflict", "; ".join(blocking))
    # the PDB: only in Enforce mode, only with managed replicas, only one this resource owns
    keep_pdb = (
        spec.mode == "Enforce"
        and spec.rollout.manage_pod_disruption_budget
        and spec.rollout.manage_replicas
        and hpa_min is None
    )
    if keep_pdb:
        foreign = _foreign_pdb(ctx)
        if foreign:
            return _refuse(ctx, "PodDisruptionBudgetConflict", foreign)
    dep_spec = dep.get("spec", {})
    rep_change = replicas is not None and dep_spec.get("replicas") != replicas
    cur_strategy = (dep_spec.get("strategy") or {}).get("rollingUpdate")
    strat_change = strategy is not None and (
        _norm_strategy(cur_strategy) != strategy
        or (dep_spec.get("strategy") or {}).get("type", "RollingUpdate") != "RollingUpdate"
    )
    if held:
        # retried when the window ends (and by the refresh timer), from the spec as it is then
        ctx.outcome.retry_after = hold_s
        ctx.outcome.requeue = hold_s is not None
        ctx.outcome.reason = "stabilization window"
    if not changes and not rep_change and not strat_change:
        if held:
            msg = "waiting to apply " + "; ".join(held)
            ctx.cond("Applied", "False", "StabilizationWindow", msg)
            ctx.cond("Ready", "True", "Ready", plan.message + version_note)
            ctx.event("Normal", "StabilizationWindow", msg)
            if keep_pdb:
                _pdb(ctx, dep, ro.pdb_min_available, dep_spec.get("replicas", 1))
            return ctx.finish()
        if keep_pdb:
            _pdb(ctx, dep, ro.pdb_min_available, dep_spec.get("replicas", 1))
        ctx.cond(
            "Applied",
            "True",
            "UpToDate",
            "the Deployment already runs the recommended flags"
            + (
                " (within hysteresis)" if any(running.get(k) != v for k, v in flags.items()) else ""
            ),
        )
        ctx.cond("Ready", "True", "Ready", plan.message + version_note)
        return ctx.finish()
    want = ", ".join(f"--{k} {v[0] or '(unset)'}→{v[1]}" for k, v in changes.items())
    if rep_change:
        want += f"{', ' if want else ''}replicas {dep_spec.get('replicas')}→{replicas}"
    if strat_change:
        want += (
            f"{', ' if want else ''}maxSurge/maxUnavailable → {ro.max_surge}/{ro.max_unavailable}"
        )
    if spec.mode == "Recommend":
        msg = f"mode Recommend: would set {want}"
        ctx.cond("Applied", "False", "RecommendOnly", msg)
        ctx.cond("Ready", "True", "Ready", plan.message + version_note)
        ctx.event("Normal", "Recommendation", msg)
        return ctx.finish()
    if not ro.safe:
        return _refuse(
            ctx,
            "NoSafeRollout",
            f"not applying ({want}): {ro.message}",
            ready_reason="NoSafeRollout",
        )
    busy = rollout_in_progress(dep)
    if busy:
        ctx.cond("Applied", "False", "RolloutInProgress", f"waiting to apply {want}: {busy}")
        ctx.cond("Ready", "False", "RolloutInProgress", busy)
        ctx.outcome.requeue = True
        return ctx.finish()
    now_replicas = _apply(
        ctx, dep, resolved.container_index or 0, flags, running, replicas, strategy, want, remove
    )
    if keep_pdb:
        _pdb(ctx, dep, ro.pdb_min_available, now_replicas)
    if held:
        ctx.cond(
            "Applied",
            "False",
            "StabilizationWindow",
            f"set {want}; waiting to apply " + "; ".join(held),
        )
    ctx.cond("Ready", "True", "Ready", plan.message + version_note)
    return ctx.finish()


def _replicas_to_add(dep: Mapping[str, Any], planned: int, spec: Any, hpa_min: int | None) -> int:
    """Pods the Deployment will create to reach the planned replicas (none when the operator
    does not manage replicas). Counted from ``spec.replicas``: the Deployment's pods already
    running hold their GPUs in the spare count."""
    if not spec.rollout.manage_replicas or hpa_min is not None:
        return 0
    current = (dep.get("spec") or {}).get("replicas")
    current = 1 if current is None else int(current)
    return max(0, planned - current)


def _container_gpus(dep: Mapping[str, Any], index: int, resource: str) -> int | None:
    containers = dep.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    return container_gpu_request(containers[index], resource) if index < len(containers) else None


def _norm_strategy(cur: Any) -> dict[str, Any] | None:
    if not isinstance(cur, Mapping):
        return None
    out = {}
    for k in ("maxSurge", "maxUnavailable"):
        v = cur.get(k)
        try:
            out[k] = int(v) if v is not None else v
        except (TypeError, ValueError):
            out[k] = v
    return out


def _apply(
    ctx: _Ctx,
    dep: Mapping[str, Any],
    index: int,
    flags: Mapping[str, str],
    running: Mapping[str, str],
    replicas: int | None,
    strategy: Mapping[str, Any] | None,
    want: str,
    remove: tuple[str, ...] = (),
) -> Any:
    """Patch the Deployment with optimistic concurrency: the patch carries the resourceVersion
    it was computed from, so a concurrent edit makes it fail (409) instead of being overwritten;
    then the Deployment is read again and the patch recomputed."""
    target = dep["metadata"]["name"]
    for attempt in range(4):
        change = build_change(
            dep,
            index,
            flags,
            running,
            replicas,
            strategy,
            owner=f"{ctx.ns}/{ctx.name}",
            remove=remove,
        )
        if change.empty:
            ctx.cond("Applied", "True", "UpToDate", "nothing to change")
            return dep.get("spec", {}).get("replicas", 1)
        patch = json.loads(json.dumps(change.patch))
        patch.setdefault("metadata", {})["resourceVersion"] = dep["metadata"]["resourceVersion"]
        if change.changed_flags:
            # the pod template changes: the stabilization window starts now
            patch["metadata"].setdefault("annotations", {})[ANNOTATION_TEMPLATE_CHANGED] = ctx.now
        try:
            patched = k8s.patch_deployment(ctx.ns, target, patch)
            deployment_changed(ctx.ns, target, patched.get("metadata", {}).get("generation"))
        except Exception as exc:
            if k8s.is_status(exc, 409) and attempt < 3:
                log.info(
                    "conflict patching %s/%s (attempt %d); re-reading", ctx.ns, target, attempt + 1
                )
                fresh = k8s.get_deployment(ctx.ns, target)
                if fresh is None:
                    raise
                dep = fresh
                containers = dep["spec"]["template"]["spec"]["containers"]
                from ..engines.vllm_args import read_flags

                running = read_flags(containers[index])
                continue
            raise
        metrics.PATCHES_APPLIED.labels(ctx.ns, ctx.name).inc()
        msg = f"set {want} on deployment/{target} (hash {change.applied_hash})"
        ctx.cond("Applied", "True", "Applied", msg)
        ctx.status["applied"] = {
            "flags": dict(flags),
            "replicas": replicas,
            "at": ctx.now,
            "hash": change.applied_hash,
        }
        ctx.outcome.patched = True
        ctx.event("Normal", "Applied", msg, once=False)
        return patched.get("spec", {}).get("replicas", 1)
    raise RuntimeError("unreachable")


TEMPLATE_WINDOW_ENV = "INFERENCE_CAPACITY_STABILIZATION_SECONDS"
REPLICA_WINDOW_ENV = "INFERENCE_CAPACITY_REPLICA_STABILIZATION_SECONDS"
#: the stabilization windows when spec.policy leaves them null (seconds)
DEFAULT_WINDOW_SECONDS = 300.0
#: replica recommendations per Deployment, (unix seconds, replicas), newest last
_replica_history: dict[tuple[str, str], list[tuple[float, int]]] = {}
_REPLICA_HISTORY_MAX = 256


def _window(spec_value: int | None, env: str) -> float:
    if spec_value is not None:
        return float(spec_value)
    try:
        return max(0.0, float(os.environ.get(env, DEFAULT_WINDOW_SECONDS)))
    except ValueError:
        return DEFAULT_WINDOW_SECONDS


def _template_changed_at(dep: Mapping[str, Any]) -> float | None:
    raw = (dep.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_TEMPLATE_CHANGED)
    if not raw:
        return None
    try:
        return dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _stable_replicas(
    ns: str, target: str, desired: int, dep: Mapping[str, Any], window: float
) -> int:
    current = dep.get("spec", {}).get("replicas", 1)
    if not isinstance(current, int):
        current = None
    now = time.time()
    with _generations_lock:
        hist = _replica_history.setdefault((ns, target), [])
        if not hist and current is not None:
            # no memory (a restart): the running count counts as recommended just now
            hist.append((now, current))
        hist.append((now, desired))
        del hist[: max(0, len(hist) - _REPLICA_HISTORY_MAX)]
        hist[:] = [(t, r) for t, r in hist if now - t < max(window, 1.0)]
        return stabilized_replicas(hist, desired, current, now, window)


#: the PDB last written (or found) per InferenceCapacity uid: skip the round trip when unchanged
#: for a minute (then read again, so a PDB deleted by hand comes back)
_pdb_seen: dict[str, tuple[int, str, float]] = {}
PDB_RECHECK_SECONDS = 60.0
#: the Deployment generation last handled, per namespace/name
_generations: dict[tuple[str, str], int] = {}
_generations_lock = threading.Lock()


def deployment_changed(namespace: str, name: str, generation: int | None) -> bool:
    """Record ``generation`` as handled; True when it is new (the spec changed since)."""
    if generation is None:
        return True
    with _generations_lock:
        if _generations.get((namespace, name)) == generation:
            return False
        _generations[(namespace, name)] = generation
        return True


def pdb_min_available(planned: int, replicas: Any) -> int:
    """minAvailable for the replicas the Deployment really has: the plan's N_min, but never so
    high that no pod may be evicted (a 1-replica Deployment with minAvailable 4 blocks every
    node drain)."""
    have = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1
    return max(0, min(planned, have - 1))


def _foreign_pdb(ctx: _Ctx) -> str:
    """Why the PDB of this resource's name may not be written ("" when it may): it exists and
    is not owned by this InferenceCapacity."""
    seen = _pdb_seen.get(ctx.uid or ctx.name)
    if seen and time.monotonic() - seen[2] < PDB_RECHECK_SECONDS:
        return ""  # written (so owned) by this resource a moment ago
    cur = k8s.get_pdb(ctx.ns, ctx.name)
    if cur is None:
        return ""
    owners = cur.get("metadata", {}).get("ownerReferences") or []
    if any(o.get("uid") == ctx.uid and o.get("kind") == KIND for o in owners):
        return ""
    held = ", ".join(f"{o.get('kind')}/{o.get('name')}" for o in owners) or "no owner"
    return (
        f"poddisruptionbudget/{ctx.name} exists and is not owned by this InferenceCapacity "
        f"({held}); it is left as it is and nothing is applied. Delete or rename it, or set "
        "spec.rollout.managePodDisruptionBudget: false"
    )


def _pdb(ctx: _Ctx, dep: Mapping[str, Any], planned: int, replicas: Any) -> None:
    min_available = pdb_min_available(planned, replicas)
    body = _pdb_body(ctx, dep, min_available)
    selector = json.dumps(body["spec"]["selector"], sort_keys=True)
    seen = _pdb_seen.get(ctx.uid or ctx.name)
    now = time.monotonic()
    if seen and seen[:2] == (min_available, selector) and now - seen[2] < PDB_RECHECK_SECONDS:
        return
    try:
        what = k8s.upsert_pdb(ctx.ns, body, ctx.uid)
    except k8s.ForeignObject as exc:
        ctx.cond("Applied", "False", "PodDisruptionBudgetConflict", str(exc))
        ctx.event("Warning", "PodDisruptionBudgetConflict", str(exc))
        return
    _pdb_seen[ctx.uid or ctx.name] = (min_available, selector, now)
    if what != "unchanged":
        ctx.event(
            "Normal",
            f"PodDisruptionBudget{what.capitalize()}",
            f"poddisruptionbudget/{ctx.name} minAvailable={min_available} ({what})",
            once=False,
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
            metrics.OBSERVED_BLOCKS.labels(ctx.ns, ctx.name).set(blocks)


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
