"""Bucket arithmetic for Prometheus classic histograms: where a quantile falls, and how wide the
bucket that holds it is.

``histogram_quantile`` interpolates linearly inside the bucket that holds the rank, so the only
thing the data can vouch for is that bucket: the true quantile lies in ``(lo, hi]``. vLLM's
length histograms use a 1-2-5 layout (1, 2, 5, 10, 20, 50, … up to max-model-len), whose widest
bucket is 150 % of any value inside it; a quantile in the ``+Inf`` bucket is known only to be
above the last finite bound. These functions mirror Prometheus' own rules (monotonic fix-up,
rank = q × total, first bucket whose cumulative count reaches the rank) so the bounds describe
the same bucket the server's estimate came from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BucketHit:
    """The bucket that holds quantile ``q``: the true value lies in ``(lo, hi]``."""

    q: float
    lo: float
    hi: float  # math.inf for the +Inf bucket
    rank: float  # q × total, in observations
    total: float  # observations in the histogram

    @property
    def in_inf_bucket(self) -> bool:
        return math.isinf(self.hi)

    def interpolate(self, below: float, inside: float) -> float:
        """Prometheus' linear estimate given the counts below and inside the bucket."""
        if self.in_inf_bucket:
            return self.lo
        if inside <= 0:
            return self.hi
        return self.lo + (self.hi - self.lo) * (self.rank - below) / inside


def cumulative(buckets: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Buckets ``(le, cumulative count)`` sorted by ``le``, made monotonic as Prometheus does
    (a count lower than the one before it, from extrapolation or a scrape race, is raised)."""
    out: list[tuple[float, float]] = []
    running = 0.0
    for le, count in sorted(buckets):
        if math.isnan(count):
            continue
        running = max(running, count)
        out.append((le, running))
    return out


def locate(buckets: Iterable[tuple[float, float]], q: float) -> BucketHit | None:
    """The bucket holding quantile ``q`` (0 < q < 1), or None when the histogram has no
    ``+Inf`` bucket, fewer than two buckets, or no observations (Prometheus returns NaN)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    cum = cumulative(buckets)
    if len(cum) < 2 or not math.isinf(cum[-1][0]) or cum[-1][1] <= 0:
        return None
    total = cum[-1][1]
    rank = q * total
    for i, (le, count) in enumerate(cum):
        if count >= rank:
            if i == 0:
                lo = 0.0 if le > 0 else le
            else:
                lo = cum[i - 1][0]
            return BucketHit(q=q, lo=lo, hi=le, rank=rank, total=total)
    return BucketHit(q=q, lo=cum[-2][0], hi=math.inf, rank=rank, total=total)  # pragma: no cover


def estimate(buckets: Iterable[tuple[float, float]], q: float) -> float | None:
    """The same linear interpolation as PromQL's ``histogram_quantile`` (classic buckets)."""
    cum = cumulative(buckets)
    hit = locate(cum, q)
    if hit is None:
        return None
    for i, (le, count) in enumerate(cum):
        if le == hit.hi:
            below = cum[i - 1][1] if i > 0 else 0.0
            return hit.interpolate(below, count - below)
    return None  # pragma: no cover (locate returns a bucket of cum)


def coarseness(hit: BucketHit, value: float, max_width_percent: float) -> str | None:
    """Why the bucket is too coarse for ``value`` to be trusted, or None when it is fine.

    Too coarse: the ``+Inf`` bucket (the value is only a lower bound), or a bucket wider than
    ``max_width_percent`` of the value (the estimate could be off by more than that)."""
    if hit.in_inf_bucket:
        return f"in the +Inf bucket: only known to be above {hit.lo:g}"
    width = hit.hi - hit.lo
    if value > 0 and width > max_width_percent / 100.0 * value:
        return (
            f"bucket ({hit.lo:g}, {hit.hi:g}] is {width / value:.0%} of the estimate {value:.4g} "
            f"(limit {max_width_percent:g}%)"
        )
    return None
