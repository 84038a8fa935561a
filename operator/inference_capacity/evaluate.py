"""Read once, decide once: the glue between what was read from the world and the decision, the one
that ``plan FILE`` (``cli/manifest.py``) and the operator (``controller/reconcile.py``) both call.

A :class:`Snapshot` is a pure record of what the caller read (the Deployment, its ConfigMaps,
the resolved model, the HPA, the Nodes and Pods, the PodDisruptionBudget's owner, the replica
history, the time); :func:`read` turns spec + snapshot into the plan's inputs (``resolve``), and
:func:`evaluate` plans for the target (spare GPUs for surge pods) and decides. The Kubernetes
I/O (and Prometheus, and the pods' startup logs) stays in the adapters: they give what they read
in the snapshot, and an observation merged into the inputs between the two steps as
``plan_input``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .api import InferenceCapacitySpec
from .decision import (
    Decision,
    Windows,
    World,
    decide,
    plan_for_target,
    spare_for_target,
    unsupported,
)
from .model.source import ResolvedModel
from .planner import Plan, PlanInput, planned
from .resolve import DraftSources, Resolved, resolve
from .risks import MemoryStep

#: why the spare GPUs are not counted when the strategy is the user's
STRATEGY_NOT_MANAGED = "strategy not managed"
#: the stabilization windows when the caller gives none (decision's defaults)
DEFAULT_WINDOWS = Windows()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What was read from the world for one InferenceCapacity (no I/O happens past this)."""

    #: the target Deployment (with status when read from the API server); None: not found, or
    #: not in ``plan``'s input (then only the flags are planned)
    deployment: Mapping[str, Any] | None
    #: ConfigMaps by name, their ``data`` (spec.model.configMapRef)
    config_maps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: spec.model.name already resolved (the operator's, with its token and deadline); None:
    #: resolved by :func:`read` (catalog, Hub, local path)
    model_source: ResolvedModel | None = None
    #: the ``--speculative-config`` drafters already resolved; None: resolved by :func:`read`
    draft_sources: DraftSources | None = None
    #: minReplicas of a HorizontalPodAutoscaler that scales the Deployment; None: none does
    hpa_min_replicas: int | None = None
    #: the Nodes listed (None: not read, :attr:`nodes_unknown` says why) and the Pods
    nodes: Sequence[Mapping[str, Any]] | None = None
    pods: Sequence[Mapping[str, Any]] = ()
    nodes_unknown: str = "spare GPUs unknown (Nodes not read)"
    #: why the PodDisruptionBudget of the resource's name may not be written ("" when it may)
    foreign_pdb: str = ""
    #: replica recommendations remembered, (unix seconds, replicas), oldest first
    replica_history: Sequence[tuple[float, int]] = ()
    #: unix seconds
    now: float = 0.0
    #: OOMKilled steps up of the memory request so far (the operator's memory; None in ``plan``)
    memory_step: MemoryStep | None = None


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The inputs read, the plan made and what to do about the Deployment."""

    resolved: Resolved
    #: None when the container is not supported (no plan is made)
    plan: Plan | None
    #: the spare-GPU explanation (the RolloutSafe condition's)
    spare_message: str = ""
    #: None when there is no Deployment to decide about (``plan`` without one)
    decision: Decision | None = None


def read(spec: InferenceCapacitySpec, snapshot: Snapshot) -> Resolved:
    """The plan's inputs from the spec and the snapshot's Deployment, ConfigMaps and model."""
    return resolve(
        spec,
        snapshot.deployment,
        snapshot.config_maps,
        hpa_min_replicas=snapshot.hpa_min_replicas,
        model_source=snapshot.model_source,
        draft_sources=snapshot.draft_sources,
    )


def spare(
    spec: InferenceCapacitySpec, snapshot: Snapshot, inp: PlanInput
) -> tuple[int | None, str]:
    """Spare GPUs a surge pod could use, and why (None: not counted)."""
    if not spec.rollout.manage_strategy:
        return None, STRATEGY_NOT_MANAGED
    if snapshot.nodes is None or snapshot.deployment is None:
        return None, snapshot.nodes_unknown
    return spare_for_target(snapshot.nodes, snapshot.pods, snapshot.deployment, spec, inp)


def evaluate(
    spec: InferenceCapacitySpec,
    snapshot: Snapshot,
    *,
    owner: str = "",
    windows: Windows = DEFAULT_WINDOWS,
    resolved: Resolved | None = None,
    plan_input: PlanInput | None = None,
) -> Evaluation:
    """Read (unless ``resolved`` is given: the caller's :func:`read` of this snapshot), plan for
    the target and decide. ``plan_input``: the inputs after an observation the caller merged in
    (Prometheus, the startup log); ``owner``: "namespace/name" of the InferenceCapacity."""
    if resolved is None:
        resolved = read(spec, snapshot)
    if not resolved.supported:
        return Evaluation(resolved, None, decision=unsupported(resolved))
    inp = resolved.plan_input if plan_input is None else plan_input
    dep = snapshot.deployment
    if dep is None:
        return Evaluation(resolved, planned(inp))
    surge, message = spare(spec, snapshot, inp)
    plan, message = plan_for_target(inp, spec, dep, snapshot.hpa_min_replicas, surge, message)
    world = World(
        deployment=dep,
        hpa_min_replicas=snapshot.hpa_min_replicas,
        foreign_pdb=snapshot.foreign_pdb,
        replica_history=snapshot.replica_history,
        now=snapshot.now,
        memory_step=snapshot.memory_step,
    )
    chosen = decide(spec, owner, resolved, plan, world, spare_message=message, windows=windows)
    return Evaluation(resolved, plan, message, chosen)
