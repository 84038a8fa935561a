"""Combine the observed workload with the spec's, as ``fromPrometheus.mode`` says.

- ``spec-only``: the spec is used unchanged (observations are published and calibrate, but do
  not size anything).
- ``replace``: one cohort built from the observed quantiles replaces the spec's cohorts, and the
  observed peak replaces the spec's.
- ``max``: every spec cohort's quantiles are raised to at least the observed ones (a floor, never
  a cut), and the peak is the larger of the two.

An observation that is not ``ok`` changes nothing: the operator keeps serving from the spec.
Observed lengths are real-valued estimates and are rounded up to whole tokens. A quantile whose
bucket is too coarse (``ObservedQuantiles.coarse``) is only a lower bound (the +Inf bucket) or a
wide guess; ``replace`` therefore keeps the larger of it and the spec's largest value at that
quantile rather than trusting it alone. Shared prefixes are not measured per request, so the
observed cohort has none (every prompt token is counted as private: conservative).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace as dc_replace
from typing import Literal

from ..sizing import Cohort, Quantiles
from .observation import Observation, ObservedQuantiles

MergeMode = Literal["replace", "max", "spec-only"]
OBSERVED_COHORT = "observed"
_NAMES = ("p50", "p95", "p99")


def _check(mode: str) -> None:
    if mode not in ("replace", "max", "spec-only"):
        raise ValueError(f"mode must be replace, max or spec-only, got {mode!r}")


def _usable(observed: Observation | None) -> bool:
    return (
        observed is not None
        and observed.ok
        and observed.prompt_tokens is not None
        and observed.output_tokens is not None
    )


def _tokens(value: float) -> int:
    return max(0, math.ceil(value - 1e-9))


def _monotone(p50: int, p95: int, p99: int) -> Quantiles:
    p95 = max(p95, p50)
    return Quantiles(p50=p50, p95=p95, p99=max(p99, p95))


def _raise_to(spec: Quantiles, observed: ObservedQuantiles) -> Quantiles:
    return _monotone(*(max(spec.at(q), _tokens(observed.at(q))) for q in _NAMES))


def _observed_quantiles(observed: ObservedQuantiles, spec: Sequence[Quantiles]) -> Quantiles:
    values = []
    for q in _NAMES:
        v = _tokens(observed.at(q))
        if q in observed.coarse and spec:
            v = max(v, max(s.at(q) for s in spec))
        values.append(v)
    return _monotone(*values)


def merge_cohorts(
    spec_cohorts: Sequence[Cohort], observed: Observation | None, mode: MergeMode | str
) -> list[Cohort]:
    """The cohorts to size from (see the module docstring)."""
    _check(mode)
    cohorts = list(spec_cohorts)
    if mode == "spec-only" or not _usable(observed):
        return cohorts
    assert observed is not None and observed.prompt_tokens is not None
    assert observed.output_tokens is not None
    if mode == "max":
        return [
            dc_replace(
                c,
                prompt=_raise_to(c.prompt, observed.prompt_tokens),
                output=_raise_to(c.output, observed.output_tokens),
            )
            for c in cohorts
        ]
    return [
        Cohort(
            name=OBSERVED_COHORT,
            weight=1.0,
            prompt=_observed_quantiles(observed.prompt_tokens, [c.prompt for c in cohorts]),
            output=_observed_quantiles(observed.output_tokens, [c.output for c in cohorts]),
            shared_prefix=0,
        )
    ]


def peak_concurrency(
    spec_peak: int | None, observed_peak: float | None, mode: MergeMode | str
) -> int | None:
    """The fleet-wide concurrency to hold: the spec's (``spec-only``, or nothing observed), the
    observed one (``replace``), or the larger (``max``). Pass ``observed_peak`` only from an
    ``ok`` observation."""
    _check(mode)
    if mode == "spec-only" or observed_peak is None or math.isnan(observed_peak):
        return spec_peak
    seen = _tokens(observed_peak)
    if mode == "replace" or spec_peak is None:
        return seen
    return max(spec_peak, seen)
