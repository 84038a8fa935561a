"""Workload cohorts, token budget, max-num-seqs, the length-distribution simulation, latency,
replicas and rollout headroom, and the GPUs a pod asks for."""

from .distribution import (
    DEFAULT_PREEMPTION_TARGET,
    MAX_REQUESTS,
    PATHS,
    Z95,
    Z99,
    DistributionSizing,
    LogNormal,
    MixSizing,
    Simulations,
    size_by_distribution,
)
from .gpus import container_gpu_request, spare_after_scale_up, spare_gpus
from .latency import Arrivals, BatchLatency, LatencyModel, LatencyPoint, build_latency_model
from .rollout import RolloutPlan, plan_rollout
from .workload import (
    Cohort,
    Quantiles,
    SeqSizing,
    Workload,
    replicas_for_peak,
    size_max_num_seqs,
)

__all__ = [
    "DEFAULT_PREEMPTION_TARGET",
    "MAX_REQUESTS",
    "PATHS",
    "Z95",
    "Z99",
    "Arrivals",
    "BatchLatency",
    "Cohort",
    "DistributionSizing",
    "LatencyModel",
    "LatencyPoint",
    "LogNormal",
    "MixSizing",
    "Quantiles",
    "RolloutPlan",
    "SeqSizing",
    "Workload",
    "build_latency_model",
    "container_gpu_request",
    "plan_rollout",
    "replicas_for_peak",
    "Simulations",
    "size_by_distribution",
    "size_max_num_seqs",
    "spare_after_scale_up",
    "spare_gpus",
]
