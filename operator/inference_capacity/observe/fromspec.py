"""``spec.workload.fromPrometheus`` to an observation and back into the plan: the rules the
operator (controller/observing.py) and ``plan FILE --observe`` (cli/observe.py) share, so the two
size a resource alike from the same answers (issue 25). No Kubernetes here: the caller resolves
the bearer token and the CA bundle (the operator from a labelled Secret and a ConfigMap, the CLI
from a file or an environment variable it is given explicitly)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..sizing import Workload
from .merge import merge_cohorts, peak_concurrency
from .observation import PROMETHEUS_NOT_ALLOWED, Observation, Reason
from .source import PromSource, url_allowed


class NotAllowed(Exception):
    """Nothing is sent: the URL is not allowed, or the token cannot be had as the spec says."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason


def check_url(url: str, prefixes: tuple[str, ...], whose: str, none_why: str, how: str) -> None:
    """Refuse a URL outside the allowed prefixes (none allowed: every URL is refused)."""
    if url_allowed(url, prefixes):
        return
    raise NotAllowed(
        PROMETHEUS_NOT_ALLOWED,
        f"spec.workload.fromPrometheus.url: not in {whose} allowed Prometheus URL prefixes ("
        + (", ".join(prefixes) if prefixes else f"none: {none_why}")
        + f"); nothing was sent. {how}",
    )


def default_selector(spec: Any, namespace: str) -> str:
    """The target's pods when ``fromPrometheus.selector`` is empty."""
    fp = spec.workload.from_prometheus
    return fp.selector or f'namespace="{namespace}",pod=~"{spec.target_ref.name}-.*"'


def source(
    spec: Any, namespace: str, token: str | None = None, ca_pem: str | None = None
) -> PromSource:
    fp = spec.workload.from_prometheus
    assert fp is not None
    return PromSource(
        url=fp.url,
        window=fp.window,
        selector=default_selector(spec, namespace),
        bearer_token=token,
        insecure_skip_verify=fp.insecure_skip_verify,
        ca_cert_pem=ca_pem,
    )


def fold(workload: Workload | None, obs: Observation, mode: str) -> Workload | None:
    """The plan's workload with the observed one merged in as ``fromPrometheus.mode`` says (an
    observation that is not ``ok``, or ``spec-only``: unchanged). The caller puts it back into
    its ``PlanInput`` (the planner is a layer above ``observe``)."""
    if not obs.ok or mode == "spec-only":
        return workload
    base = workload or Workload(cohorts=())
    cohorts = tuple(merge_cohorts(base.cohorts, obs, mode))
    peak = peak_concurrency(base.peak_concurrency, obs.peak_concurrency, mode)
    return replace(base, cohorts=cohorts, peak_concurrency=peak)
