"""The operator's own Prometheus metrics (served on ``--metrics-port``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

if TYPE_CHECKING:
    from ..planner import Plan

_L = ("namespace", "name")

RECONCILES = Counter("inference_capacity_reconciles_total", "Reconciles run", _L)
RECONCILE_SECONDS = Histogram("inference_capacity_reconcile_seconds", "Reconcile latency")
PATCHES_APPLIED = Counter(
    "inference_capacity_patches_applied_total", "Deployment patches applied", _L
)
PATCHES_REFUSED = Counter(
    "inference_capacity_patches_refused_total",
    "Patches refused (bad input, does not fit, conflict, ...)",
    (*_L, "reason"),
)
MAX_CONCURRENCY = Gauge(
    "inference_capacity_per_pod_max_concurrency",
    "Sequences one replica admits (recommended --max-num-seqs)",
    _L,
)
DESIRED_REPLICAS = Gauge("inference_capacity_desired_replicas", "Replicas recommended", _L)
KV_TOKENS = Gauge("inference_capacity_kv_cache_tokens", "Predicted KV cache capacity (tokens)", _L)
PREDICTED_BLOCKS = Gauge(
    "inference_capacity_predicted_num_gpu_blocks", "Predicted vLLM num_gpu_blocks", _L
)
OBSERVED_BLOCKS = Gauge(
    "inference_capacity_observed_num_gpu_blocks", "num_gpu_blocks vLLM reports (Prometheus)", _L
)
KV_TOKENS_BY_SOURCE = Gauge(
    "inference_capacity_kv_tokens",
    "KV-cache tokens of one pod: what vLLM printed at startup (observed) and the prediction for "
    "its flags (predicted)",
    (*_L, "source"),
)
PREDICTION_ERROR = Gauge(
    "inference_capacity_prediction_error_percent",
    "(predicted - observed) / observed x 100 per startup term (vLLM's own startup lines)",
    (*_L, "term"),
)
API_THROTTLE_SECONDS = Counter(
    "inference_capacity_api_throttle_seconds_total",
    "Seconds the operator's Kubernetes requests waited for the client-side rate limit "
    "(INFERENCE_CAPACITY_API_QPS / _API_BURST)",
)
API_RETRIES = Counter(
    "inference_capacity_api_retries_total",
    "Kubernetes requests sent again after a 429 (or a 5xx with Retry-After), by that status",
    ("code",),
)
EVENTS_DROPPED = Counter(
    "inference_capacity_events_dropped_total",
    "Events not posted: past an object's Event rate limit (state.EVENT_BURST / EVENT_QPS)",
    ("reason",),
)
LEDGER_BYTES = Gauge(
    "inference_capacity_ledger_bytes", "Ledger item bytes per rank", (*_L, "rank", "item")
)


def publish_plan(namespace: str, name: str, plan: Plan) -> None:
    MAX_CONCURRENCY.labels(namespace, name).set(plan.recommendation.per_replica_concurrency)
    DESIRED_REPLICAS.labels(namespace, name).set(plan.recommendation.rollout.replicas)
    KV_TOKENS.labels(namespace, name).set(plan.prediction.kv_cache_tokens)
    PREDICTED_BLOCKS.labels(namespace, name).set(plan.prediction.num_gpu_blocks)
    for rl in plan.ledger:
        for item in rl.items:
            LEDGER_BYTES.labels(namespace, name, str(rl.rank), item.name).set(item.bytes)


def forget(namespace: str, name: str) -> None:
    """Drop the per-resource series of a deleted InferenceCapacity."""
    per_resource = (
        RECONCILES,
        PATCHES_APPLIED,
        MAX_CONCURRENCY,
        DESIRED_REPLICAS,
        KV_TOKENS,
        PREDICTED_BLOCKS,
        OBSERVED_BLOCKS,
    )
    for g in per_resource:
        try:
            g.remove(namespace, name)
        except KeyError:
            pass
    for labelled in (LEDGER_BYTES, KV_TOKENS_BY_SOURCE, PREDICTION_ERROR, PATCHES_REFUSED):
        for labels in list(labelled._metrics):  # noqa: SLF001 - prometheus_client has no API
            if labels[0] == namespace and labels[1] == name:
                labelled.remove(*labels)
