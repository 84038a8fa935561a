"""Workload cohorts, token budget, max-num-seqs, replicas and rollout headroom."""

from .rollout import RolloutPlan, plan_rollout
from .workload import Cohort, Quantiles, SeqSizing, Workload, size_max_num_seqs

__all__ = [
    "Cohort",
    "Quantiles",
    "RolloutPlan",
    "SeqSizing",
    "Workload",
    "plan_rollout",
    "size_max_num_seqs",
]
