"""The operator's own Prometheus metrics (served on ``--metrics-port``).

The per-InferenceCapacity series are not prometheus_client children (one ``Gauge``/``Counter``
object with its own lock and value per series: ~17 ledger items, 4 gauges and 2 counters per
resource, ~15 KB each, 15 MB at 1,000 resources under tracemalloc in the reconcile benchmark's
drain). :class:`PerResource` keeps one compact row per resource and writes the series from it
when Prometheus scrapes (prometheus_client's custom-collector interface); the process-wide
metrics stay ordinary ones.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ..planner import Plan

_L = ("namespace", "name")

RECONCILE_SECONDS = Histogram("inference_capacity_reconcile_seconds", "Reconcile latency")
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
API_REQUESTS = Counter(
    "inference_capacity_api_requests_total",
    "Kubernetes API requests the operator sent (each retry one more), by client (kopf: Kopf's "
    "own session; operator: the official client), verb and resource[/subresource] as the "
    "kube-apiserver names them (controller/apirequest.py)",
    ("client", "verb", "resource"),
)
REFRESHES = Counter(
    "inference_capacity_refreshes_total",
    "Periodic refreshes that ran (controller/refresher.py: the resource read, reconciled, its "
    "status written only when it changed); with the API request counter, the requests a no-op "
    "resync costs",
)
EVENTS_DROPPED = Counter(
    "inference_capacity_events_dropped_total",
    "Events not posted: past an object's Event rate limit (state.EVENT_BURST / EVENT_QPS)",
    ("reason",),
)


@dataclass(slots=True)
class _Row:
    """One resource's series."""

    reconciles: int = 0
    patches_applied: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    max_concurrency: float | None = None
    desired_replicas: float | None = None
    kv_tokens: float | None = None
    predicted_blocks: float | None = None
    observed_blocks: float | None = None
    #: (rank, item, bytes) of the plan's ledger
    ledger: tuple[tuple[int, str, int], ...] = ()
    kv_by_source: dict[str, float] = field(default_factory=dict)
    prediction_error: dict[str, float] = field(default_factory=dict)


#: (extra label values, value) of one series of a resource
_Samples = list[tuple[tuple[str, ...], float]]


def _one(v: float | None) -> _Samples:
    return [((), v)] if v is not None else []


#: (family, help, the labels after namespace and name, the row's series of that family)
_Specs = tuple[tuple[str, str, tuple[str, ...], Callable[[_Row], _Samples]], ...]
_GAUGES: _Specs = (
    (
        "inference_capacity_per_pod_max_concurrency",
        "Sequences one replica admits (recommended --max-num-seqs)",
        (),
        lambda r: _one(r.max_concurrency),
    ),
    (
        "inference_capacity_desired_replicas",
        "Replicas recommended",
        (),
        lambda r: _one(r.desired_replicas),
    ),
    (
        "inference_capacity_kv_cache_tokens",
        "Predicted KV cache capacity (tokens)",
        (),
        lambda r: _one(r.kv_tokens),
    ),
    (
        "inference_capacity_predicted_num_gpu_blocks",
        "Predicted vLLM num_gpu_blocks",
        (),
        lambda r: _one(r.predicted_blocks),
    ),
    (
        "inference_capacity_observed_num_gpu_blocks",
        "num_gpu_blocks vLLM reports (Prometheus)",
        (),
        lambda r: _one(r.observed_blocks),
    ),
    (
        "inference_capacity_kv_tokens",
        "KV-cache tokens of one pod: what vLLM printed at startup (observed) and the prediction "
        "for its flags (predicted)",
        ("source",),
        lambda r: [((k,), v) for k, v in r.kv_by_source.items()],
    ),
    (
        "inference_capacity_prediction_error_percent",
        "(predicted - observed) / observed x 100 per startup term (vLLM's own startup lines)",
        ("term",),
        lambda r: [((k,), v) for k, v in r.prediction_error.items()],
    ),
    (
        "inference_capacity_ledger_bytes",
        "Ledger item bytes per rank",
        ("rank", "item"),
        lambda r: [((str(rank), item), float(b)) for rank, item, b in r.ledger],
    ),
)
_COUNTERS: _Specs = (
    (
        "inference_capacity_reconciles",
        "Reconciles run",
        (),
        lambda r: _one(float(r.reconciles) if r.reconciles else None),
    ),
    (
        "inference_capacity_patches_applied",
        "Deployment patches applied",
        (),
        lambda r: _one(float(r.patches_applied) if r.patches_applied else None),
    ),
    (
        "inference_capacity_patches_refused",
        "Patches refused (bad input, does not fit, conflict, ...)",
        ("reason",),
        lambda r: [((k,), float(v)) for k, v in r.refused.items()],
    ),
)


def per_resource_labels() -> dict[str, tuple[str, ...]]:
    """Each per-resource family as Prometheus shows it (counters with ``_total``), with its
    label names."""
    out = {n: (*_L, *extra) for n, _, extra, _ in _GAUGES}
    out.update({f"{n}_total": (*_L, *extra) for n, _, extra, _ in _COUNTERS})
    return out


class PerResource(Collector):
    """The per-InferenceCapacity series: one :class:`_Row` per resource, written as metric
    families at each scrape."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], _Row] = {}
        self._lock = threading.Lock()

    def update(self, namespace: str, name: str, **values: object) -> None:
        """Set fields of the resource's row (created on first use)."""
        with self._lock:
            row = self._rows.setdefault((namespace, name), _Row())
            for k, v in values.items():
                setattr(row, k, v)

    def count(self, namespace: str, name: str, what: str, reason: str | None = None) -> None:
        """Increment a counter of the resource: ``reconciles``, ``patches_applied`` or
        ``refused`` (by ``reason``)."""
        with self._lock:
            row = self._rows.setdefault((namespace, name), _Row())
            if what == "refused":
                key = reason or ""
                row.refused[key] = row.refused.get(key, 0) + 1
            elif what == "reconciles":
                row.reconciles += 1
            elif what == "patches_applied":
                row.patches_applied += 1
            else:
                raise ValueError(f"unknown counter {what!r}")

    def set_in(self, namespace: str, name: str, table: str, key: str, value: float) -> None:
        """One entry of a labelled gauge of the resource: ``kv_by_source`` or
        ``prediction_error``."""
        with self._lock:
            row = self._rows.setdefault((namespace, name), _Row())
            getattr(row, table)[key] = value

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._rows.pop((namespace, name), None)

    def collect(self) -> Iterator[Metric]:
        kinds: tuple[tuple[type[GaugeMetricFamily | CounterMetricFamily], _Specs], ...] = (
            (GaugeMetricFamily, _GAUGES),
            (CounterMetricFamily, _COUNTERS),
        )
        with self._lock:
            # the samples are read under the lock (rows change while Prometheus scrapes)
            rows = [
                (key, [[series(row) for *_, series in specs] for _, specs in kinds])
                for key, row in self._rows.items()
            ]
        for which, (kind, specs) in enumerate(kinds):
            for i, (family, doc, extra, _) in enumerate(specs):
                metric = kind(family, doc, labels=[*_L, *extra])
                for (ns, name), samples in rows:
                    for labels, value in samples[which][i]:
                        metric.add_metric([ns, name, *labels], value)
                yield metric


PER_RESOURCE = PerResource()
REGISTRY.register(PER_RESOURCE)


def publish_plan(namespace: str, name: str, plan: Plan) -> None:
    PER_RESOURCE.update(
        namespace,
        name,
        max_concurrency=float(plan.recommendation.per_replica_concurrency),
        desired_replicas=float(plan.recommendation.rollout.replicas),
        kv_tokens=float(plan.prediction.kv_cache_tokens),
        predicted_blocks=float(plan.prediction.num_gpu_blocks),
        ledger=tuple(
            (rl.rank, sys.intern(item.name), item.bytes) for rl in plan.ledger for item in rl.items
        ),
    )


def forget(namespace: str, name: str) -> None:
    """Drop the per-resource series of a deleted InferenceCapacity."""
    PER_RESOURCE.forget(namespace, name)
