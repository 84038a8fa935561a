"""observe() against a real Prometheus serving a backfilled, generated vLLM trace (issue #5).

The trace (tests/vllm_trace.py) knows the truth: the lengths it drew, the concurrency at every
scrape, each pod's KV usage, the preemption and prefix-cache totals. Length quantiles can only
be checked to the bucket: the true quantile must lie in the bucket the reader reports, and the
estimate inside it. Everything else Prometheus computes exactly from the samples (up to
``increase``'s extrapolation at a series' end, which the tolerances state).
"""

from __future__ import annotations

import bisect
import math
import re
import time
from typing import TYPE_CHECKING

import pytest

from inference_capacity.observe import (
    Observation,
    PromSource,
    calibrate,
    merge_cohorts,
    observe,
    observe_async,
    peak_concurrency,
)
from inference_capacity.observe.histogram import estimate
from inference_capacity.sizing.workload import Cohort, Quantiles
from tests.vllm_trace import BUCKETS, PodSeries, Trace

# The fixtures; harmless once tests/conftest.py lists the plugin as well.

if TYPE_CHECKING:
    from tests.promfixtures import PromServer, Proxy

pytestmark = pytest.mark.prometheus

LLAMA_SEL = 'namespace="default",pod=~"llama-8b-.*"'
QS = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))


@pytest.fixture(scope="module")
def fleet(prometheus_server: PromServer) -> Observation:
    return observe(
        PromSource(prometheus_server.url, selector=LLAMA_SEL), now=prometheus_server.trace.end
    )


def _llama(trace: Trace) -> list[PodSeries]:
    return trace.select("llama-8b")


def test_fleet_observed(fleet: Observation, vllm_trace: Trace) -> None:
    assert fleet.ok, fleet.message
    assert fleet.reason == "Observed"
    assert fleet.condition().status == "True"
    assert fleet.warnings == []
    assert fleet.window == "7d"
    assert fleet.at == vllm_trace.end
    truth = sum(len(p.prompts) for p in _llama(vllm_trace))
    # the canary ended before `now`: increase() extrapolates its 12 requests by half a scrape
    assert truth <= fleet.samples <= truth + 1


@pytest.mark.parametrize("which", ["prompt", "output"])
@pytest.mark.parametrize("name,q", QS)
def test_quantile_in_reported_bucket(
    fleet: Observation, vllm_trace: Trace, which: str, name: str, q: float
) -> None:
    quants = fleet.prompt_tokens if which == "prompt" else fleet.output_tokens
    assert quants is not None
    true = vllm_trace.true_quantile(_llama(vllm_trace), which, q)
    lo, hi = quants.bounds(name)
    estimate_ = quants.at(name)
    assert lo < true <= hi, f"{which} {name}: true {true} outside ({lo}, {hi}]"
    assert lo <= estimate_ <= hi
    # the bounds are adjacent buckets of vLLM's 1-2-5 layout
    assert hi in BUCKETS and (lo == 0 or lo in BUCKETS)
    assert BUCKETS.index(hi) - (BUCKETS.index(lo) if lo else -1) == 1
    assert name not in quants.coarse
    # the generator's lognormal mixture agrees with what it drew (sanity of the truth itself)
    assert true == pytest.approx(vllm_trace.mixture_quantile("llama-8b", which, q), rel=0.05)


@pytest.mark.parametrize("which", ["prompt", "output"])
def test_estimate_is_prometheus_interpolation(
    fleet: Observation, vllm_trace: Trace, which: str
) -> None:
    """The server's histogram_quantile equals the same interpolation over the exact counts
    (histogram.estimate), up to the canary's extrapolated half scrape."""
    values = vllm_trace.requests(_llama(vllm_trace), which)
    counts = [bisect.bisect_right(values, b) for b in BUCKETS] + [len(values)]
    buckets = list(zip([float(b) for b in BUCKETS] + [math.inf], counts, strict=True))
    quants = fleet.prompt_tokens if which == "prompt" else fleet.output_tokens
    assert quants is not None
    for name, q in QS:
        assert quants.at(name) == pytest.approx(estimate(buckets, q), rel=1e-3)


def test_peak_concurrency_is_the_burst(fleet: Observation, vllm_trace: Trace) -> None:
    peak = vllm_trace.peak_concurrency(_llama(vllm_trace))
    assert fleet.peak_concurrency == peak
    per_pod_max = sum(
        max(r + w for r, w in zip(p.running, p.waiting, strict=True)) for p in _llama(vllm_trace)
    )
    assert peak < per_pod_max or len(_llama(vllm_trace)) == 1  # a sum at one instant


def test_kv_preemptions_prefix(fleet: Observation, vllm_trace: Trace) -> None:
    pods = _llama(vllm_trace)
    # quantile_over_time over exactly the samples: exact up to float rounding
    assert fleet.kv_usage_p95 == pytest.approx(vllm_trace.kv_usage_p95(pods), abs=1e-9)
    # counters: only the canary's end is extrapolated (half a scrape of a tiny counter)
    assert fleet.preemptions_per_hour == pytest.approx(
        vllm_trace.preemptions_per_hour(pods), rel=0.01
    )
    assert fleet.prefix_cache_hit_rate == pytest.approx(vllm_trace.prefix_hit_rate(pods), abs=1e-4)


def test_pool_per_pod_read_exactly(fleet: Observation, vllm_trace: Trace) -> None:
    assert set(fleet.pods) == {p.spec.name for p in _llama(vllm_trace)}
    for p in _llama(vllm_trace):
        pool = fleet.pods[p.spec.name]
        assert pool.num_gpu_blocks == p.spec.num_gpu_blocks
        assert pool.block_size == p.spec.block_size
        assert pool.gpu_memory_utilization == p.spec.gpu_memory_utilization
        assert pool.kv_tokens == p.spec.num_gpu_blocks * p.spec.block_size
        assert pool.labels["enable_prefix_caching"] == "True"
    summary = fleet.pool_summary()
    assert summary is not None and summary.num_gpu_blocks == 27910


def test_legacy_metric_names(prometheus_server: PromServer, vllm_trace: Trace) -> None:
    """A pod exporting vllm:gpu_cache_usage_perc and vllm:num_preemptions is read the same."""
    legacy = [p for p in vllm_trace.pods.values() if p.spec.legacy_names]
    assert len(legacy) == 1
    pod = legacy[0]
    obs = observe(
        PromSource(prometheus_server.url, selector=f'pod="{pod.spec.name}"'), now=vllm_trace.end
    )
    assert obs.ok, obs.message
    assert obs.kv_usage_p95 == pytest.approx(vllm_trace.kv_usage_p95([pod]), abs=1e-9)
    assert obs.preemptions_per_hour == pytest.approx(
        vllm_trace.preemptions_per_hour([pod]), rel=1e-6
    )
    assert obs.samples == len(pod.prompts)


def test_counter_reset_on_restart(prometheus_server: PromServer, vllm_trace: Trace) -> None:
    """A pod restarted in place resets its counters: increase() must count across the reset."""
    pod = next(p for p in vllm_trace.pods.values() if p.spec.restart_at is not None)
    obs = observe(
        PromSource(prometheus_server.url, selector=f'pod="{pod.spec.name}"'), now=vllm_trace.end
    )
    assert obs.ok, obs.message
    assert obs.samples == len(pod.prompts)
    assert obs.preemptions_per_hour == pytest.approx(
        vllm_trace.preemptions_per_hour([pod]), rel=1e-6
    )
    assert obs.peak_concurrency == vllm_trace.peak_concurrency([pod])


def test_calibration_against_observed_pools(fleet: Observation) -> None:
    within = calibrate(28000, fleet.pods, threshold_percent=5.0)
    per_pod = {
        "llama-8b-6d5f8-a1": (28000 - 27910) / 27910 * 100,
        "llama-8b-6d5f8-b2": (28000 - 27910) / 27910 * 100,
        "llama-8b-6d5f8-c3": (28000 - 27910) / 27910 * 100,
        "llama-8b-canary-x9": (28000 - 28730) / 28730 * 100,
    }
    assert within.reason == "Calibrated" and within.ok and not within.drift
    assert within.per_pod == pytest.approx(per_pod)
    assert within.error_percent == pytest.approx(sum(per_pod.values()) / 4)
    assert within.condition().status == "True"

    drift = calibrate(30000, fleet.pods, threshold_percent=5.0)
    assert drift.reason == "PredictionDrift" and drift.drift and not drift.ok
    assert drift.error_percent == pytest.approx(
        sum((30000 - b) / b * 100 for b in (27910, 27910, 27910, 28730)) / 4
    )
    assert "llama-8b-6d5f8-a1" in drift.message and "+7.49%" in drift.message
    assert drift.condition().status == "False"


def test_merge_from_a_real_observation(fleet: Observation) -> None:
    spec = [Cohort("chat", 1.0, Quantiles(500, 1000, 2000), Quantiles(50, 100, 200), 300)]
    assert fleet.prompt_tokens is not None and fleet.output_tokens is not None
    (obs_cohort,) = merge_cohorts(spec, fleet, "replace")
    assert obs_cohort.prompt.p95 == math.ceil(fleet.prompt_tokens.p95)
    assert obs_cohort.output.p99 == math.ceil(fleet.output_tokens.p99)
    (raised,) = merge_cohorts(spec, fleet, "max")
    assert raised.prompt.p50 == math.ceil(fleet.prompt_tokens.p50) and raised.shared_prefix == 300
    assert merge_cohorts(spec, fleet, "spec-only") == spec
    assert peak_concurrency(300, fleet.peak_concurrency, "max") == fleet.peak_concurrency


# ---- failure modes ----------------------------------------------------------------------------


def test_unreachable_is_quick(closed_port_url: str) -> None:
    t0 = time.monotonic()
    obs = observe(PromSource(closed_port_url, timeout_s=1.0))
    assert time.monotonic() - t0 < 3.0
    assert not obs.ok and obs.reason == "PrometheusUnreachable"
    assert closed_port_url in obs.message
    assert obs.condition().status == "False"
    assert obs.prompt_tokens is None and obs.peak_concurrency is None


def test_auth_refused_without_token(bearer_proxy: Proxy, vllm_trace: Trace) -> None:
    obs = observe(PromSource(bearer_proxy.url, selector=LLAMA_SEL), now=vllm_trace.end)
    assert not obs.ok and obs.reason == "AuthRefused"
    assert "401" in obs.message
    wrong = observe(
        PromSource(bearer_proxy.url, selector=LLAMA_SEL, bearer_token="nope"), now=vllm_trace.end
    )
    assert wrong.reason == "AuthRefused"


def test_auth_with_token_works(bearer_proxy: Proxy, fleet: Observation, vllm_trace: Trace) -> None:
    obs = observe(
        PromSource(bearer_proxy.url, selector=LLAMA_SEL, bearer_token=bearer_proxy.token),
        now=vllm_trace.end,
    )
    assert obs.ok, obs.message
    assert obs.prompt_tokens == fleet.prompt_tokens
    assert obs.peak_concurrency == fleet.peak_concurrency


def test_no_series(prometheus_url: str, vllm_trace: Trace) -> None:
    obs = observe(PromSource(prometheus_url, selector='pod="does-not-exist"'), now=vllm_trace.end)
    assert not obs.ok and obs.reason == "NoSeries"
    assert 'pod="does-not-exist"' in obs.message
    assert obs.pods == {}


def test_no_series_outside_the_window(prometheus_url: str, vllm_trace: Trace) -> None:
    """The trace is a week old a week from now: nothing in the window."""
    obs = observe(PromSource(prometheus_url, selector=LLAMA_SEL), now=vllm_trace.end + 8 * 86400)
    assert obs.reason == "NoSeries"


def test_insufficient_data_brief_pod(prometheus_url: str, vllm_trace: Trace) -> None:
    canary = next(p for p in vllm_trace.pods.values() if p.spec.fixed_requests is not None)
    assert len(canary.prompts) == 12
    obs = observe(
        PromSource(prometheus_url, selector=f'pod="{canary.spec.name}"'), now=vllm_trace.end
    )
    assert not obs.ok and obs.reason == "InsufficientData"
    match = re.match(r"insufficient data: (\d+) samples in 7d", obs.message)
    assert match, obs.message
    assert int(match.group(1)) == obs.samples and obs.samples in (12, 13)
    assert obs.condition().status == "False"
    assert obs.prompt_tokens is None  # fail closed: nothing to size from
    assert obs.pods[canary.spec.name].num_gpu_blocks == canary.spec.num_gpu_blocks


def test_insufficient_data_short_window(prometheus_url: str, vllm_trace: Trace) -> None:
    """A 2m window that holds only the canary's last minutes."""
    canary = next(p for p in vllm_trace.pods.values() if p.spec.fixed_requests is not None)
    obs = observe(
        PromSource(prometheus_url, window="2m", selector=f'pod="{canary.spec.name}"'),
        now=canary.times[-1],
        min_samples=30,
    )
    assert obs.reason == "InsufficientData"
    assert re.match(r"insufficient data: \d+ samples in 2m", obs.message), obs.message
    assert obs.samples < 12


def test_buckets_too_coarse(prometheus_url: str, vllm_trace: Trace) -> None:
    """Long-context prompts: p95 and p99 beyond the last finite bucket (20000)."""
    pods = vllm_trace.select("longctx")
    obs = observe(PromSource(prometheus_url, selector='pod=~"longctx-.*"'), now=vllm_trace.end)
    assert obs.ok and obs.reason == "BucketsTooCoarse"
    assert obs.condition().status == "True"
    assert obs.prompt_tokens is not None and obs.output_tokens is not None
    assert obs.prompt_tokens.coarse == {"p95", "p99"}
    assert obs.output_tokens.coarse == frozenset()
    for name, q in QS:
        true = vllm_trace.true_quantile(pods, "prompt", q)
        lo, hi = obs.prompt_tokens.bounds(name)
        assert lo < true <= hi
    assert obs.prompt_tokens.p99_bounds == (20000.0, math.inf)
    assert obs.prompt_tokens.p99 == 20000.0  # a lower bound only
    assert sum("+Inf" in w for w in obs.warnings) == 2
    assert "p95" in obs.message and "p99" in obs.message
    # replace mode does not trust the lower bound alone
    spec = [Cohort("docs", 1.0, Quantiles(8000, 24000, 30000), Quantiles(100, 400, 800))]
    (merged,) = merge_cohorts(spec, obs, "replace")
    assert merged.prompt.p95 == 24000 and merged.prompt.p99 == 30000
    assert merged.prompt.p50 == math.ceil(obs.prompt_tokens.p50)


def test_query_rejected(prometheus_url: str) -> None:
    obs = observe(PromSource(prometheus_url, selector='pod=~"("'))
    assert not obs.ok and obs.reason == "QueryRejected"
    assert "400" in obs.message


def test_tls_with_ca(tls_proxy: Proxy, fleet: Observation, vllm_trace: Trace) -> None:
    src = PromSource(tls_proxy.url, selector=LLAMA_SEL, ca_cert_pem=tls_proxy.ca_pem)
    obs = observe(src, now=vllm_trace.end)
    assert obs.ok, obs.message
    assert obs.peak_concurrency == fleet.peak_concurrency


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_tls_untrusted_and_skip_verify(tls_proxy: Proxy, vllm_trace: Trace) -> None:
    refused = observe(PromSource(tls_proxy.url, selector=LLAMA_SEL), now=vllm_trace.end)
    assert refused.reason == "PrometheusUnreachable"
    assert "TLS" in refused.message
    skipped = observe(
        PromSource(tls_proxy.url, selector=LLAMA_SEL, insecure_skip_verify=True),
        now=vllm_trace.end,
    )
    assert skipped.ok, skipped.message


async def test_observe_async(prometheus_url: str, fleet: Observation, vllm_trace: Trace) -> None:
    obs = await observe_async(PromSource(prometheus_url, selector=LLAMA_SEL), now=vllm_trace.end)
    assert obs == fleet
