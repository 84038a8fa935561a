"""Observe a vLLM fleet through Prometheus and compare it with the ledger (issue #5).

``observe(PromSource(...))`` reads length quantiles, peak concurrency, KV usage, preemptions,
prefix-cache hits and the real KV pool; ``merge_cohorts`` / ``peak_concurrency`` fold the
observation into the spec's workload; ``calibrate`` compares predicted and real KV blocks. No
Kubernetes here: the controller resolves Secrets and ConfigMaps and writes status.
"""

from ..vocab import CalibrationReason
from . import fromspec
from .calibration import Calibration, calibrate
from .histogram import BucketHit, coarseness, locate
from .merge import OBSERVED_COHORT, MergeMode, merge_cohorts, peak_concurrency
from .observation import (
    Condition,
    Observation,
    ObservedQuantiles,
    PodPool,
    Reason,
)
from .reader import Client, observe, observe_async, subquery_step
from .source import PromSource, parse_duration, url_allowed

__all__ = [
    "OBSERVED_COHORT",
    "BucketHit",
    "Calibration",
    "Client",
    "CalibrationReason",
    "Condition",
    "MergeMode",
    "Observation",
    "ObservedQuantiles",
    "PodPool",
    "PromSource",
    "url_allowed",
    "Reason",
    "calibrate",
    "fromspec",
    "coarseness",
    "locate",
    "merge_cohorts",
    "observe",
    "observe_async",
    "parse_duration",
    "peak_concurrency",
    "subquery_step",
]
