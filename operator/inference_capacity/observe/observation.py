"""What one look at Prometheus found: plain values the controller copies into
``status.observed`` and the ``Observed`` condition.

An ``Observation`` is always returned, never raised: ``ok`` says whether its workload numbers
may be used for sizing, ``reason``/``message`` say why not (Prometheus unreachable, auth
refused, no series, too little data) in the words a condition needs. When ``ok`` is False the
workload numbers are None (fail closed: nothing downstream can size from half a measurement),
but ``pods`` is still filled when ``vllm:cache_config_info`` was readable, so calibration can
run on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from ..vocab import ObservationReason

Reason = ObservationReason
OBSERVED: Final = "Observed"
BUCKETS_TOO_COARSE: Final = "BucketsTooCoarse"
PROMETHEUS_UNREACHABLE: Final = "PrometheusUnreachable"
AUTH_REFUSED: Final = "AuthRefused"
QUERY_REJECTED: Final = "QueryRejected"  # Prometheus answered 400/422: a malformed selector
NO_SERIES: Final = "NoSeries"
INSUFFICIENT_DATA: Final = "InsufficientData"
#: the URL is outside the operator's --prometheus-allowed-url-prefix list (nothing was sent)
PROMETHEUS_NOT_ALLOWED: Final = "PrometheusNotAllowed"
#: the bearer-token Secret lacks the opt-in label (it was not used, nothing was sent)
TOKEN_SECRET_NOT_ALLOWED: Final = "TokenSecretNotAllowed"
#: the first query of this source is still running (in the background; nothing waits on it)
PENDING: Final = "Pending"

QuantileName = Literal["p50", "p95", "p99"]
QUANTILES: Final[tuple[tuple[QuantileName, float], ...]] = (
    ("p50", 0.50),
    ("p95", 0.95),
    ("p99", 0.99),
)


@dataclass(frozen=True, slots=True)
class Condition:
    """A Kubernetes status condition, before timestamps and observedGeneration are added."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ObservedQuantiles:
    """Length quantiles (tokens) read from a histogram, with the bucket each one fell in.

    ``pXX`` is Prometheus' interpolated estimate; the true value lies in ``pXX_bounds``
    ``(lo, hi]`` (``hi`` is ``math.inf`` for the +Inf bucket, where the estimate is only a lower
    bound). ``coarse`` names the quantiles whose bucket was too wide to trust (see
    ``histogram.coarseness``)."""

    p50: float
    p95: float
    p99: float
    p50_bounds: tuple[float, float]
    p95_bounds: tuple[float, float]
    p99_bounds: tuple[float, float]
    coarse: frozenset[str] = frozenset()

    def at(self, q: str) -> float:
        if q not in ("p50", "p95", "p99"):
            raise ValueError(f"quantile must be p50, p95 or p99, got {q!r}")
        value: float = getattr(self, q)
        return value

    def bounds(self, q: str) -> tuple[float, float]:
        self.at(q)
        value: tuple[float, float] = getattr(self, f"{q}_bounds")
        return value


@dataclass(frozen=True, slots=True)
class PodPool:
    """One vLLM engine's real KV pool, from the labels of ``vllm:cache_config_info``.

    A field is None when the label is absent or not a number (vLLM reports ``None`` before the
    profile run)."""

    num_gpu_blocks: int | None
    block_size: int | None
    gpu_memory_utilization: float | None
    labels: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def kv_tokens(self) -> int | None:
        if self.num_gpu_blocks is None or self.block_size is None:
            return None
        return self.num_gpu_blocks * self.block_size


@dataclass(frozen=True, slots=True)
class Observation:
    """The fleet's workload over ``window`` as of ``at`` (unix seconds).

    samples: finished requests in the window (increase of ``vllm:request_prompt_tokens_count``),
        the population the length quantiles are drawn from.
    prompt_tokens / output_tokens: length quantiles (tokens), or None.
    peak_concurrency: max over the window of the fleet-wide sum of running + waiting requests.
    kv_usage_p95: the hottest pod's 95th percentile of KV-cache usage over time (fraction 0–1).
    preemptions_per_hour: fleet-wide preemptions divided by the hours the fleet was observed.
    prefix_cache_hit_rate: prefix-cache hit tokens / queried tokens, fleet-wide (0–1).
    pods: per engine (keyed by ``pod``, else ``instance``): the pool vLLM allocated.
    warnings: what the caller should know but that does not void the observation (one entry per
        coarse quantile, a missing metric, …).
    """

    ok: bool
    reason: Reason
    message: str
    window: str
    at: float
    samples: int = 0
    prompt_tokens: ObservedQuantiles | None = None
    output_tokens: ObservedQuantiles | None = None
    peak_concurrency: float | None = None
    kv_usage_p95: float | None = None
    preemptions_per_hour: float | None = None
    prefix_cache_hit_rate: float | None = None
    pods: dict[str, PodPool] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def condition(self) -> Condition:
        """The ``Observed`` condition: True when the workload numbers can be used (possibly with
        coarse quantiles, reason ``BucketsTooCoarse``), False with the failure's reason."""
        return Condition(
            type="Observed",
            status="True" if self.ok else "False",
            reason=self.reason,
            message=self.message,
        )

    def pool_summary(self) -> PodPool | None:
        """The pool shared by every pod, or the smallest one when they differ (the tightest
        replica bounds the fleet); None without pool data."""
        known = [p for p in self.pods.values() if p.num_gpu_blocks is not None]
        if not known:
            return None
        return min(known, key=lambda p: p.num_gpu_blocks or 0)
