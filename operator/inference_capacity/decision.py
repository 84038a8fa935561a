"""The one decision: what happens to a Deployment for a plan (pure: no I/O, no clock, no state).

:func:`decide` takes everything the operator has read — the spec, the resolved inputs, the plan,
the live Deployment, the HPA's minReplicas, whether a PodDisruptionBudget of another owner holds
the resource's name, the replica recommendations remembered so far and the time — and returns a
:class:`Decision`: the conditions and Events, the patch to write or every reason there is none,
the PDB to own and when to look again. The controller performs it; ``inference-capacity plan
FILE -o patch`` prints its patch for the Deployment in the file. The two call this one function,
so what ``plan`` prints is, by construction, what the operator would write.

The rules themselves (hysteresis, stabilization windows, rollout-in-progress) are in
:mod:`inference_capacity.decide`; the patch shape in :mod:`inference_capacity.patching`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .api import InferenceCapacitySpec
from .decide import (
    ANNOTATION_TEMPLATE_CHANGED,
    material_changes,
    rollout_in_progress,
    stabilized_replicas,
    template_hold,
)
from .patching import ANNOTATION_APPLIED, REMOVED, DeploymentChange, build_change
from .planner import Plan, PlanInput, planned
from .resolve import Resolved
from .risks import (
    MemoryStep,
    host_input,
    host_unmodelled,
    memory_resources,
    memory_target_bytes,
)
from .sizing.gpus import container_gpu_request, spare_after_scale_up, spare_gpus
from .units import GiB
from .vocab import ConditionStatus, ConditionType

#: the stabilization windows when spec.policy leaves them null (seconds)
DEFAULT_WINDOW_SECONDS = 300.0
#: replica recommendations remembered per Deployment (the newest kept)
REPLICA_HISTORY_MAX = 256
#: spec fields the operator never sets on the container: a disagreement with the running
#: command line makes the plan wrong for the pods, whatever the policy says
STRUCTURAL_FIELDS = ("spec.hardware.tensorParallel", "spec.hardware.pipelineParallel")

Action = Literal["patch", "none", "refuse", "wait"]


@dataclass(frozen=True, slots=True)
class Condition:
    type: ConditionType
    status: ConditionStatus
    reason: str  # one of vocab.CONDITION_REASONS (a test checks)
    message: str


@dataclass(frozen=True, slots=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str
    #: posted once per (object, reason, message): a repeated refusal is not re-posted
    once: bool = True


@dataclass(frozen=True, slots=True)
class Windows:
    """Stabilization windows (seconds) used when the spec leaves them null."""

    template_s: float = DEFAULT_WINDOW_SECONDS
    replicas_s: float = DEFAULT_WINDOW_SECONDS


@dataclass(frozen=True, slots=True)
class World:
    """What the operator read about the target, besides the plan."""

    #: the live Deployment (with status when read from the API server)
    deployment: Mapping[str, Any]
    #: minReplicas of a HorizontalPodAutoscaler that scales it; None: none does
    hpa_min_replicas: int | None = None
    #: why the PodDisruptionBudget of the resource's name may not be written ("" when it does
    #: not exist or this resource owns it): :func:`foreign_pdb`
    foreign_pdb: str = ""
    #: replica recommendations remembered, (unix seconds, replicas), oldest first
    replica_history: Sequence[tuple[float, int]] = ()
    #: unix seconds
    now: float = 0.0
    #: OOMKilled steps up of the memory request taken so far (the operator's memory; None in
    #: ``plan``, which sees no pods' history)
    memory_step: MemoryStep | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    #: CamelCase: the refusal's reason, or what the action is waiting for ("" when applying or
    #: up to date)
    reason: str = ""
    conditions: tuple[Condition, ...] = ()
    events: tuple[Event, ...] = ()
    #: the strategic-merge patch to write (action "patch"); its metadata carries the applied and
    #: owner annotations and the template-changed time, never a resourceVersion (the caller's
    #: precondition)
    change: DeploymentChange | None = None
    #: what the patch sets, for people: "--max-num-seqs 64→85, replicas 2→3"
    want: str = ""
    #: the flags the change writes and the replicas it sets (status.applied)
    flags: Mapping[str, str] = field(default_factory=dict)
    replicas: int | None = None
    #: minAvailable of the PDB this resource owns; None: no PDB is written
    pdb_min_available: int | None = None
    #: look again (mid-rollout, a held change, no target yet), after ``retry_after`` seconds
    #: when given
    requeue: bool = False
    retry_after: float | None = None
    #: the replica recommendations to remember from now on (empty: replicas not managed)
    replica_history: tuple[tuple[float, int], ...] = ()
    #: changes held back by a stabilization window, for people
    held: tuple[str, ...] = ()
    #: what would be written in mode Enforce (mode Recommend: the same patch, not written)
    recommended: DeploymentChange | None = None
    #: the patch is the operator's first write to this Deployment (it carries no applied
    #: annotation yet): recorded in status.applied and the Applied condition, posted as no Event
    #: (an Event per object on every creation is a request per object for the API server, and
    #: the PDB created with it likewise); later changes, drift corrections included, are Events
    first_write: bool = False

    @property
    def applied_message(self) -> str:
        """The message of the Applied condition this decision writes ("" when none)."""
        return next((c.message for c in self.conditions if c.type == "Applied"), "")

    @property
    def patch(self) -> dict[str, Any]:
        """The patch to write, {} when nothing is."""
        return dict(self.change.patch) if self.change is not None else {}


def iso(now: float) -> str:
    """RFC 3339 UTC with seconds, as Kubernetes writes times."""
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).replace(microsecond=0)
    return stamp.isoformat().replace("+00:00", "Z")


def refusal(
    reason: str, message: str, *, ready_reason: str | None = None, requeue: bool = False
) -> Decision:
    """Nothing is written: Ready and Applied are False with ``reason``, and a Warning Event."""
    return Decision(
        action="refuse",
        reason=reason,
        conditions=(
            Condition("Ready", "False", ready_reason or reason, message),
            Condition("Applied", "False", reason, message),
        ),
        events=(Event("Warning", reason, message),),
        requeue=requeue,
    )


#: the wording of Supported=False (the operator's condition, plan FILE, plan --model)
UNMODELLED = "sets (or leaves at vLLM's default) what the ledger does not model"


def unsupported(resolved: Resolved) -> Decision:
    """The container sets a flag or VLLM_* variable that may move memory and that the ledger
    does not model: every number of a plan would be wrong, so none is made (fail closed)."""
    msg = (
        f"the vLLM container {UNMODELLED}, so no plan is made and nothing is patched: "
        + resolved.unsupported_message()
    )
    refused = refusal("UnsupportedFlag", msg)
    return replace(
        refused,
        conditions=(Condition("Supported", "False", "UnsupportedFlag", msg), *refused.conditions),
    )


SUPPORTED = Condition(
    "Supported",
    "True",
    "Supported",
    "every vLLM flag and VLLM_* variable is modelled or known neutral",
)


def gpus_per_pod(inp: PlanInput) -> int:
    """GPUs one vLLM pod uses: TP × PP × DP."""
    return inp.tp * inp.pp * max(1, inp.engine.data_parallel)


def surge_node_selector(
    deployment: Mapping[str, Any], spec: InferenceCapacitySpec
) -> dict[str, str]:
    """Labels a Node must carry for a surge pod to land on it: the pod template's nodeSelector
    (the scheduler honours it) and the spec's spareGpuNodeSelector on top."""
    pod_spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    return {
        **(pod_spec.get("nodeSelector") or {}),
        **(spec.rollout.spare_gpu_node_selector or {}),
    }


def spare_for_target(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    deployment: Mapping[str, Any],
    spec: InferenceCapacitySpec,
    inp: PlanInput,
) -> tuple[int, str]:
    """Spare GPUs a surge pod of this Deployment could use (and why), from Nodes and Pods."""
    selector = surge_node_selector(deployment, spec)
    matching = [
        n
        for n in nodes
        if all((n.get("metadata", {}).get("labels") or {}).get(k) == v for k, v in selector.items())
    ]
    return spare_gpus(matching, pods, spec.hardware.gpu_resource_name, inp.gpu, gpus_per_pod(inp))


def hpa_min_replicas_by_target(hpas: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Deployment name -> minReplicas (1 when unset, as the API defaults it) of the
    HorizontalPodAutoscalers given (plain dicts, camelCase, as the API server sends them)."""
    out: dict[str, int] = {}
    for h in hpas:
        spec = h.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        if ref.get("kind") == "Deployment" and ref.get("name"):
            out[str(ref["name"])] = int(spec.get("minReplicas") or 1)
    return out


def manages_replicas(spec: InferenceCapacitySpec, hpa_min_replicas: int | None) -> bool:
    """The operator sets spec.replicas: the policy says so and no HPA scales the Deployment."""
    return spec.rollout.manage_replicas and hpa_min_replicas is None


def replicas_to_add(
    deployment: Mapping[str, Any],
    planned: int,
    spec: InferenceCapacitySpec,
    hpa_min_replicas: int | None,
) -> int:
    """Pods the Deployment will create to reach the planned replicas (none when the operator
    does not manage replicas). Counted from ``spec.replicas``: the Deployment's pods already
    running hold their GPUs in the spare count."""
    if not manages_replicas(spec, hpa_min_replicas):
        return 0
    current = (deployment.get("spec") or {}).get("replicas")
    current = 1 if current is None else int(current)
    return max(0, planned - current)


def plan_for_target(
    inp: PlanInput,
    spec: InferenceCapacitySpec,
    deployment: Mapping[str, Any],
    hpa_min_replicas: int | None,
    spare: int | None,
    spare_message: str,
) -> tuple[Plan, str]:
    """The plan for this Deployment with ``spare`` GPUs for surge pods, and the spare-GPU
    explanation.

    Replicas the plan adds take free GPUs before any surge pod does: without this, the first
    plan counts GPUs its own new pods are about to fill, and the next reconcile (once the
    scheduler placed them) finds fewer spare GPUs and changes maxSurge again."""
    inp = replace(inp, rollout=replace(inp.rollout, spare_gpus=spare))
    plan = planned(inp)
    adding = replicas_to_add(
        deployment, plan.recommendation.rollout.replicas, spec, hpa_min_replicas
    )
    if spare is not None and adding:
        spare, taken = spare_after_scale_up(spare, adding, gpus_per_pod(inp))
        spare_message += f"; {taken} of them go to the {adding} replicas being added"
        plan = planned(replace(inp, rollout=replace(inp.rollout, spare_gpus=spare)))
    return plan, spare_message


def foreign_pdb(pdb: Mapping[str, Any] | None, name: str, uid: str, kind: str) -> str:
    """Why the PodDisruptionBudget ``name`` may not be written ("" when it may): it exists and
    is not owned by this resource (``uid``)."""
    if pdb is None:
        return ""
    owners = (pdb.get("metadata") or {}).get("ownerReferences") or []
    if any(o.get("uid") == uid and o.get("kind") == kind for o in owners):
        return ""
    held = ", ".join(f"{o.get('kind')}/{o.get('name')}" for o in owners) or "no owner"
    return (
        f"poddisruptionbudget/{name} exists and is not owned by this InferenceCapacity "
        f"({held}); it is left as it is and nothing is applied. Delete or rename it, or set "
        "spec.rollout.managePodDisruptionBudget: false"
    )


def owns_pdb(spec: InferenceCapacitySpec, hpa_min_replicas: int | None) -> bool:
    """A PDB is written only in mode Enforce, only with managed replicas and no HPA."""
    return (
        spec.mode == "Enforce"
        and spec.rollout.manage_pod_disruption_budget
        and manages_replicas(spec, hpa_min_replicas)
    )


def pdb_min_available(planned: int, replicas: Any) -> int:
    """minAvailable for the replicas the Deployment really has: the plan's N_min, but never so
    high that no pod may be evicted (a 1-replica Deployment with minAvailable 4 blocks every
    node drain)."""
    have = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1
    return max(0, min(planned, have - 1))


def template_changed_at(deployment: Mapping[str, Any]) -> float | None:
    """When the operator last changed the pod template (its annotation), unix seconds."""
    raw = ((deployment.get("metadata") or {}).get("annotations") or {}).get(
        ANNOTATION_TEMPLATE_CHANGED
    )
    if not raw:
        return None
    try:
        return dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


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


def _window(spec_value: int | None, default: float) -> float:
    return float(spec_value) if spec_value is not None else default


def _history(
    history: Sequence[tuple[float, int]],
    desired: int,
    current: int | None,
    now: float,
    window: float,
) -> tuple[tuple[float, int], ...]:
    """The remembered recommendations with this one added, trimmed to the window."""
    hist = list(history)
    if not hist and current is not None:
        # no memory (a restart, or the CLI): the running count counts as recommended just now
        hist.append((now, current))
    hist.append((now, desired))
    del hist[: max(0, len(hist) - REPLICA_HISTORY_MAX)]
    return tuple((t, r) for t, r in hist if now - t < max(window, 1.0))


def _arrows(changes: Mapping[str, tuple[str | None, str]]) -> str:
    return ", ".join(f"--{k} {v[0] or '(unset)'}→{v[1]}" for k, v in changes.items())


def blocking_conflicts(resolved: Resolved, spec: InferenceCapacitySpec) -> list[str]:
    """The spec/container disagreements the operator will not resolve by writing the spec's
    value: TP/PP always; the others unless the policy lets the operator set that flag."""
    return [
        c
        for c in resolved.conflicts
        if c.startswith(STRUCTURAL_FIELDS)
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


def plan_conditions(plan: Plan, spare_message: str) -> list[Condition]:
    """Supported, Fits and RolloutSafe: what the plan says, whatever is then decided."""
    ro = plan.recommendation.rollout
    return [
        SUPPORTED,
        Condition("Fits", "True", "Fits", plan.message)
        if plan.fits
        else Condition("Fits", "False", plan.reason, plan.message),
        Condition(
            "RolloutSafe",
            "True" if ro.safe else "False",
            ro.reason,
            f"{ro.message}; {spare_message}" if spare_message else ro.message,
        ),
    ]


def ready_condition(plan: Plan, resolved: Resolved) -> Condition:
    """Ready=True with the plan's message (and the engine version when it was assumed)."""
    note = ""
    if resolved.engine_version_source == "default":
        note = (
            f"; engine version assumed {resolved.engine_version} (no "
            "spec.engine.version and no version in the image tag)"
        )
    return Condition("Ready", "True", "Ready", plan.message + note)


def desired_flags(
    spec: InferenceCapacitySpec, plan: Plan, running: Mapping[str, str]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """The flags the operator wants on the container, and those it removes. TP/PP given in the
    spec and absent from the command line are set too (the container's GPUs are checked by
    :func:`gpu_shortfall`; the operator never changes resources itself)."""
    rec, policy, inp = plan.recommendation, spec.policy, plan.input
    flags = rec.flags(
        max_model_len=policy.set_max_model_len,
        batched_tokens=policy.set_max_num_batched_tokens,
        kv_cache_dtype=policy.set_kv_cache_dtype,
        kv_cache_memory=policy.use_kv_cache_memory_bytes,
    )
    for flag, value, spec_value in (
        ("tensor-parallel-size", inp.tp, spec.hardware.tensor_parallel),
        ("pipeline-parallel-size", inp.pp, spec.hardware.pipeline_parallel),
    ):
        if spec_value is not None and flag not in running and value > 1:
            flags[flag] = str(value)
    return flags, rec.removed_flags(kv_cache_memory=policy.use_kv_cache_memory_bytes)


def gpu_shortfall(
    deployment: Mapping[str, Any], index: int, spec: InferenceCapacitySpec, inp: PlanInput
) -> str:
    """Why the container cannot run the plan's parallelism ("" when it can): it asks for fewer
    GPUs than TP × PP × DP."""
    containers = ((deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get(
        "containers"
    ) or []
    resource = spec.hardware.gpu_resource_name
    gpus = container_gpu_request(containers[index], resource) if index < len(containers) else None
    need = gpus_per_pod(inp)
    if gpus is None or gpus >= need:
        return ""
    dp = max(1, inp.engine.data_parallel)
    return (
        f"spec.hardware.tensorParallel: TP {inp.tp} × PP {inp.pp}"
        + (f" × DP {dp}" if dp > 1 else "")
        + f" needs {need} {resource} per pod; the container asks for {gpus}"
    )


@dataclass(frozen=True, slots=True)
class _Stable:
    """The changes and replicas once the stabilization windows have had their say."""

    changes: dict[str, tuple[str | None, str]]
    replicas: int | None
    held: tuple[str, ...]
    hold_s: float | None
    history: tuple[tuple[float, int], ...]


def _stabilize(
    spec: InferenceCapacitySpec,
    changes: dict[str, tuple[str | None, str]],
    replicas: int | None,
    world: World,
    windows: Windows,
) -> _Stable:
    """Enforce mode: replicas go down only to the highest count recommended within the replica
    window; a pod-template change waits for the template window (but a safety lowering)."""
    if spec.mode != "Enforce":
        return _Stable(changes, replicas, (), None, ())
    policy, dep = spec.policy, world.deployment
    held: list[str] = []
    history: tuple[tuple[float, int], ...] = ()
    if replicas is not None:
        window = _window(policy.replica_stabilization_window_seconds, windows.replicas_s)
        current = (dep.get("spec") or {}).get("replicas", 1)
        current = current if isinstance(current, int) and not isinstance(current, bool) else None
        history = _history(world.replica_history, replicas, current, world.now, window)
        stable = stabilized_replicas(history, replicas, current, world.now, window)
        if stable != replicas:
            held.append(
                f"replicas {replicas} (held at {stable}: replicas go down only to the "
                f"highest count recommended in the last {window:g} s)"
            )
        replicas = stable
    template_window = _window(policy.stabilization_window_seconds, windows.template_s)
    hold_s = template_hold(changes, template_changed_at(dep), world.now, template_window)
    if hold_s is not None:
        held.append(
            f"flag changes {_arrows(changes)} (stabilization window: the pod template changed "
            f"less than {template_window:g} s ago; applied in {hold_s:.0f} s as the last desired "
            "state)"
        )
        changes = {}
    return _Stable(changes, replicas, tuple(held), hold_s, history)


def memory_change(
    spec: InferenceCapacitySpec, plan: Plan, world: World, index: int, running: Mapping[str, str]
) -> tuple[dict[str, Any], str] | None:
    """spec.policy.setMemoryRequest: the ``resources`` patch that raises the vLLM container's
    memory request to the load-time host peak (:func:`risks.memory_target_bytes`, raised by the
    OOMKilled steps), and what it says for people; None when off or already covered (a request
    is never lowered). ValueError: the container's memory is not a quantity."""
    if not spec.policy.set_memory_request:
        return None
    containers = ((world.deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get(
        "containers"
    ) or []
    if index >= len(containers):
        return None
    container = containers[index]
    target = memory_target_bytes(plan, host_input(container, running), world.memory_step)
    got = memory_resources(container, target)
    if got is None:
        return None
    res, (old, new) = got
    was = "(unset)" if old is None else f"{old / GiB:.2f}Gi"
    text = f"resources.requests.memory {was}→{res['requests']['memory']}"
    if "limits" in res:
        text += " (limit raised to it)"
    return res, text


#: the memory request to write: (the container's resources, "memory request 1Gi→2Gi")
_Memory = tuple[dict[str, Any], str]


def _early_refusal(
    spec: InferenceCapacitySpec, plan: Plan, world: World, index: int, running: Mapping[str, str]
) -> tuple[str, str] | None:
    """(reason, message) of a refusal before any change is weighed: too few GPUs per pod, or a
    host-memory flag the memory request cannot model."""
    short = gpu_shortfall(world.deployment, index, spec, plan.input)
    if short:
        return "InsufficientGpusPerPod", short
    unmodelled = host_unmodelled(running) if spec.policy.set_memory_request else []
    if unmodelled:
        return (
            "UnsupportedFlag",
            "spec.policy.setMemoryRequest: the host-memory estimate does not model "
            + "; ".join(unmodelled)
            + "; no memory request is written (turn the policy off or drop the flag)",
        )
    return None


def _hold_memory(
    spec: InferenceCapacitySpec,
    st: _Stable,
    mem: _Memory | None,
    world: World,
    windows: Windows,
) -> tuple[_Stable, _Memory | None]:
    """A memory request is a pod-template change: the template window holds it as it holds the
    flags (but the step up after an OOMKilled start, a safety raise with a window of its own)."""
    if mem is None or spec.mode != "Enforce" or world.memory_step is not None:
        return st, mem
    window = _window(spec.policy.stabilization_window_seconds, windows.template_s)
    mem_hold = st.hold_s
    if mem_hold is None:
        mem_hold = template_hold(
            {"resources.requests.memory": ("", mem[1])},
            template_changed_at(world.deployment),
            world.now,
            window,
        )
    if mem_hold is None:
        return st, mem
    if st.hold_s is None:
        held = (
            *st.held,
            f"{mem[1]} (stabilization window: the pod template changed less than "
            f"{window:g} s ago; applied in {mem_hold:.0f} s)",
        )
        st = replace(st, hold_s=mem_hold, held=held)
    return st, None


@dataclass(frozen=True, slots=True)
class _Wanted:
    """What the Deployment would be changed to, once hysteresis and windows have had their say."""

    flags: dict[str, str]
    remove: tuple[str, ...]
    replicas: int | None
    strategy: dict[str, Any] | None
    mem: _Memory | None
    current_replicas: Any
    rep_change: bool
    strat_change: bool

    @property
    def empty(self) -> bool:
        return not self.rep_change and not self.strat_change and self.mem is None


def _wanted(
    spec: InferenceCapacitySpec,
    plan: Plan,
    dep: Mapping[str, Any],
    st: _Stable,
    desired: Mapping[str, str],
    remove: tuple[str, ...],
    running: Mapping[str, str],
    mem: _Memory | None,
) -> _Wanted:
    ro = plan.recommendation.rollout
    # a change within the hysteresis (or held) is not written: the running value stays
    flags = {
        k: (v if k in st.changes else running.get(k, v))
        for k, v in desired.items()
        if k in running or k in st.changes
    }
    strategy = (
        {"maxSurge": ro.max_surge, "maxUnavailable": ro.max_unavailable}
        if spec.rollout.manage_strategy and ro.safe
        else None
    )
    dep_spec = dep.get("spec") or {}
    cur_strategy = (dep_spec.get("strategy") or {}).get("rollingUpdate")
    return _Wanted(
        flags=flags,
        remove=tuple(k for k in remove if k in st.changes),
        replicas=st.replicas,
        strategy=strategy,
        mem=mem,
        current_replicas=dep_spec.get("replicas", 1),
        rep_change=st.replicas is not None and dep_spec.get("replicas") != st.replicas,
        strat_change=strategy is not None
        and (
            _norm_strategy(cur_strategy) != strategy
            or (dep_spec.get("strategy") or {}).get("type", "RollingUpdate") != "RollingUpdate"
        ),
    )


def _want_text(
    changes: Mapping[str, tuple[str | None, str]], w: _Wanted, dep: Mapping[str, Any], plan: Plan
) -> str:
    """What the patch sets, for people: "--max-num-seqs 64→85, replicas 2→3"."""
    ro = plan.recommendation.rollout
    want = _arrows(changes)
    if w.mem is not None:
        want += f"{', ' if want else ''}{w.mem[1]}"
    if w.rep_change:
        current = (dep.get("spec") or {}).get("replicas")
        want += f"{', ' if want else ''}replicas {current}→{w.replicas}"
    if w.strat_change:
        want += (
            f"{', ' if want else ''}maxSurge/maxUnavailable → {ro.max_surge}/{ro.max_unavailable}"
        )
    return want


def _unchanged(
    base: Decision,
    conds: Sequence[Condition],
    ready: Condition,
    desired: Mapping[str, str],
    running: Mapping[str, str],
    pdb_now: int | None,
) -> Decision:
    """Nothing to write: held by a window, or already running the recommended flags."""
    if base.held:
        msg = "waiting to apply " + "; ".join(base.held)
        return replace(
            base,
            conditions=(*conds, Condition("Applied", "False", "StabilizationWindow", msg), ready),
            events=(Event("Normal", "StabilizationWindow", msg),),
            pdb_min_available=pdb_now,
        )
    within = any(running.get(k) != v for k, v in desired.items())
    msg = "the Deployment already runs the recommended flags" + (
        " (within hysteresis)" if within else ""
    )
    return replace(
        base,
        conditions=(*conds, Condition("Applied", "True", "UpToDate", msg), ready),
        pdb_min_available=pdb_now,
    )


def _deliver(
    spec: InferenceCapacitySpec,
    plan: Plan,
    dep: Mapping[str, Any],
    base: Decision,
    conds: Sequence[Condition],
    ready: Condition,
    change: DeploymentChange,
    want: str,
    w: _Wanted,
    pdb_min: Any,
) -> Decision:
    """The change, by mode and rollout: recommended only (mode Recommend), refused (no safe
    rollout), waiting (a rollout in progress), nothing after all, or the patch."""
    ro = plan.recommendation.rollout
    if spec.mode == "Recommend":
        msg = f"mode Recommend: would set {want}"
        return replace(
            base,
            reason="RecommendOnly",
            conditions=(*conds, Condition("Applied", "False", "RecommendOnly", msg), ready),
            events=(Event("Normal", "Recommendation", msg),),
            want=want,
            recommended=change,
        )
    if not ro.safe:
        r = refusal(
            "NoSafeRollout", f"not applying ({want}): {ro.message}", ready_reason="NoSafeRollout"
        )
        r = replace(r, conditions=(*conds, *r.conditions))
        return replace(r, want=want, recommended=change)
    busy = rollout_in_progress(dep)
    if busy:
        return replace(
            base,
            action="wait",
            reason="RolloutInProgress",
            conditions=(
                *conds,
                Condition(
                    "Applied", "False", "RolloutInProgress", f"waiting to apply {want}: {busy}"
                ),
                Condition("Ready", "False", "RolloutInProgress", busy),
            ),
            requeue=True,
            retry_after=None,
            want=want,
            recommended=change,
        )
    if change.empty:
        return replace(
            base,
            conditions=(
                *conds,
                Condition("Applied", "True", "UpToDate", "nothing to change"),
                ready,
            ),
            pdb_min_available=pdb_min(w.current_replicas),
        )
    target = (dep.get("metadata") or {}).get("name", spec.target_ref.name)
    msg = f"set {want} on deployment/{target} (hash {change.applied_hash})"
    after = [Condition("Applied", "True", "Applied", msg)]
    if base.held:
        waiting = f"set {want}; waiting to apply " + "; ".join(base.held)
        after.append(Condition("Applied", "False", "StabilizationWindow", waiting))
    first = ANNOTATION_APPLIED not in ((dep.get("metadata") or {}).get("annotations") or {})
    return replace(
        base,
        action="patch",
        conditions=(*conds, *after, ready),
        events=() if first else (Event("Normal", "Applied", msg, once=False),),
        first_write=first,
        change=change,
        recommended=change,
        want=want,
        flags=w.flags,
        replicas=w.replicas,
        pdb_min_available=pdb_min(w.replicas if w.replicas is not None else w.current_replicas),
    )


def decide(
    spec: InferenceCapacitySpec,
    owner: str,
    resolved: Resolved,
    plan: Plan,
    world: World,
    *,
    spare_message: str = "",
    windows: Windows = Windows(),
) -> Decision:
    """What to do to ``world.deployment`` for ``plan`` (see the module docstring).

    ``owner``: "namespace/name" of the InferenceCapacity (written in the owner annotation).
    In order: the GPUs per pod, the material changes (hysteresis), the stabilization windows,
    then the refusals (does not fit, spec conflicts, a foreign PDB), nothing to change, mode
    Recommend, no safe rollout, a rollout in progress, and finally the patch."""
    dep = world.deployment
    ro = plan.recommendation.rollout
    conds = plan_conditions(plan, spare_message)
    ready = ready_condition(plan, resolved)

    def refuse(reason: str, message: str, ready_reason: str | None = None) -> Decision:
        r = refusal(reason, message, ready_reason=ready_reason)
        return replace(r, conditions=(*conds, *r.conditions))

    running = resolved.running_flags
    desired, remove = desired_flags(spec, plan, running)
    index = resolved.container_index or 0
    early = _early_refusal(spec, plan, world, index, running)
    if early is not None:
        return refuse(*early)
    changes = material_changes(running, desired, spec.policy.hysteresis_percent)
    changes.update({k: (running[k], REMOVED) for k in remove if k in running})
    planned = ro.replicas if manages_replicas(spec, world.hpa_min_replicas) else None
    try:
        mem = memory_change(spec, plan, world, index, running)
    except ValueError as exc:
        return refuse("InvalidInput", f"spec.policy.setMemoryRequest: {exc}")
    st, mem = _hold_memory(
        spec, _stabilize(spec, changes, planned, world, windows), mem, world, windows
    )
    w = _wanted(spec, plan, dep, st, desired, remove, running, mem)
    if not plan.fits:
        return refuse("NotFits", f"{plan.reason}: {plan.message}", ready_reason=plan.reason)
    blocking = blocking_conflicts(resolved, spec)
    if blocking:
        return refuse("SpecConflict", "; ".join(blocking))
    keep_pdb = owns_pdb(spec, world.hpa_min_replicas)
    if keep_pdb and world.foreign_pdb:
        return refuse("PodDisruptionBudgetConflict", world.foreign_pdb)

    def pdb(replicas_after: Any) -> int | None:
        return pdb_min_available(ro.pdb_min_available, replicas_after) if keep_pdb else None

    base = Decision(
        action="none",
        requeue=bool(st.held) and st.hold_s is not None,
        retry_after=st.hold_s if st.held else None,
        reason="StabilizationWindow" if st.held else "",
        replica_history=st.history,
        held=st.held,
    )
    if not st.changes and w.empty:
        return _unchanged(base, conds, ready, desired, running, pdb(w.current_replicas))
    change = build_change(
        dep,
        index,
        w.flags,
        running,
        w.replicas,
        w.strategy,
        owner=owner,
        remove=w.remove,
        resources=mem[0] if mem is not None else None,
    )
    if (change.changed_flags or change.resources) and change.patch:
        # the pod template changes: the stabilization window starts now
        change.patch.setdefault("metadata", {}).setdefault("annotations", {})[
            ANNOTATION_TEMPLATE_CHANGED
        ] = iso(world.now)
    want = _want_text(st.changes, w, dep, plan)
    return _deliver(spec, plan, dep, base, conds, ready, change, want, w, pdb)
