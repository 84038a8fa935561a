"""Replicas and rolling-update headroom (README "Install the CRD and run the operator").

``N_min = ceil(peak / per-replica concurrency)`` replicas hold the peak; ``N = N_min + recovery``
survive a pod failure. During a rolling update capacity is ``(N − maxUnavailable) × per-replica``
plus surge pods only where spare GPUs of the right product exist. So ``maxUnavailable = N − N_min``
and ``maxSurge = spare GPUs // GPUs per replica`` (bounded by N); when both are 0 the rollout
would deadlock (Kubernetes rejects 0/0) or drop below peak, and the plan says so with numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from .workload import replicas_for_peak


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    replicas: int
    min_replicas_for_peak: int
    max_surge: int
    max_unavailable: int
    pdb_min_available: int
    safe: bool
    reason: str  # CamelCase condition reason
    message: str
    fits_max_replicas: bool


def plan_rollout(
    peak_concurrency: int | None,
    per_replica: int,
    recovery_replicas: int,
    min_replicas: int,
    max_replicas: int,
    gpus_per_replica: int,
    spare_gpus: int | None,
    hpa_min_replicas: int | None = None,
) -> RolloutPlan:
    """Choose replicas, maxSurge, maxUnavailable and the PDB for a Deployment."""
    if per_replica <= 0:
        return RolloutPlan(
            0,
            0,
            0,
            0,
            0,
            False,
            "NoCapacity",
            "a replica admits no sequence: nothing to size",
            False,
        )
    if peak_concurrency is None:
        n_min = max(min_replicas, 1)
        peak_msg = "no peakConcurrency given"
    else:
        n_min = max(1, replicas_for_peak(peak_concurrency, per_replica))
        peak_msg = (
            f"peak {peak_concurrency} / {per_replica} per replica = {n_min} replicas for the peak"
        )
    n = max(n_min + recovery_replicas, min_replicas)
    if hpa_min_replicas is not None:
        n = max(n, hpa_min_replicas)
    fits = n <= max_replicas
    if not fits:
        return RolloutPlan(
            n,
            n_min,
            0,
            0,
            n_min,
            False,
            "ExceedsMaxReplicas",
            f"{peak_msg}; with {recovery_replicas} for recovery that is {n}, above "
            f"maxReplicas {max_replicas}",
            False,
        )
    surge = 0
    spare_msg = "spare GPUs unknown (no Node data)"
    if spare_gpus is not None:
        surge = min(spare_gpus // max(1, gpus_per_replica), n)
        spare_msg = f"{spare_gpus} spare GPUs, {gpus_per_replica} per replica → maxSurge {surge}"
    unavailable = n - n_min
    if surge == 0 and unavailable == 0:
        return RolloutPlan(
            n,
            n_min,
            0,
            0,
            n_min,
            False,
            "NoRolloutHeadroom",
            f"{peak_msg}; {spare_msg}; no replica above peak (N = {n} = N_min): "
            "a rolling update would deadlock or drop below peak. Add spare GPUs "
            "or recoveryReplicas.",
            True,
        )
    return RolloutPlan(
        n,
        n_min,
        surge,
        unavailable,
        n_min,
        True,
        "RolloutHeadroom",
        f"{peak_msg}; N = {n}; {spare_msg}; maxUnavailable {unavailable} "
        f"keeps {n - unavailable} × {per_replica} ≥ peak",
        True,
    )
