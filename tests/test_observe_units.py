"""observe/: sources, bucket arithmetic, merging and calibration without a Prometheus, plus the
HTTP failure mapping against local stub servers."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference_capacity.observe import (
    BucketHit,
    Client,
    Observation,
    ObservedQuantiles,
    PodPool,
    PromSource,
    calibrate,
    coarseness,
    locate,
    merge_cohorts,
    observe,
    observe_async,
    parse_duration,
    peak_concurrency,
    subquery_step,
)
from inference_capacity.observe.histogram import estimate
from inference_capacity.sizing.workload import Cohort, Quantiles
from tests.promfixtures import SlowServer
from tests.vllm_trace import BUCKETS, build_1_2_5_buckets

# The fixtures; harmless once tests/conftest.py lists the plugin as well.

# ---- source -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,seconds",
    [("90s", 90), ("5m", 300), ("1h30m", 5400), ("7d", 604800), ("1w", 604800), ("500ms", 0.5)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "d", "1.5h", "-1h", "0s", "7 d"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_source_validation_and_select() -> None:
    src = PromSource("http://p:9090", selector='namespace="ml",pod=~"a-.*"')
    assert src.window == "7d" and src.timeout_s == 10.0 and src.window_seconds == 604800
    assert src.select("vllm:x") == 'vllm:x{namespace="ml",pod=~"a-.*"}'
    assert src.select("vllm:x", 'le="1"') == 'vllm:x{namespace="ml",pod=~"a-.*",le="1"}'
    assert PromSource("http://p").select("vllm:x") == "vllm:x"
    for bad in (
        dict(url="p:9090"),
        dict(url="http://p", window="7 days"),
        dict(url="http://p", timeout_s=0),
        dict(url="http://p", selector='{pod="a"}'),
    ):
        with pytest.raises(ValueError):
            PromSource(**bad)  # type: ignore[arg-type]


def test_subquery_step() -> None:
    assert subquery_step(7 * 86400) == 15
    assert subquery_step(3600) == 15
    assert subquery_step(30 * 86400) == math.ceil(30 * 86400 / 40320)
    assert subquery_step(86400, 60) == 60


# ---- histogram arithmetic -----------------------------------------------------------------------

LES = [float(b) for b in build_1_2_5_buckets(32768)] + [math.inf]


def _hist(values: list[int]) -> list[tuple[float, float]]:
    return [(le, float(sum(v <= le for v in values))) for le in LES]


def test_vllm_buckets() -> None:
    assert BUCKETS == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000]
    assert build_1_2_5_buckets(100) == [1, 2, 5, 10, 20, 50, 100]


def test_locate_and_estimate_by_hand() -> None:
    buckets = [(10.0, 0.0), (100.0, 50.0), (1000.0, 90.0), (math.inf, 100.0)]
    hit = locate(buckets, 0.5)
    assert hit is not None and (hit.lo, hit.hi) == (10.0, 100.0)
    assert estimate(buckets, 0.5) == 100.0  # the rank is exactly the bucket's count
    assert estimate(buckets, 0.7) == pytest.approx(100 + 900 * (70 - 50) / 40)
    top = locate(buckets, 0.95)
    assert top is not None and top.in_inf_bucket and top.lo == 1000.0
    assert estimate(buckets, 0.95) == 1000.0
    first = locate([(10.0, 5.0), (math.inf, 5.0)], 0.5)
    assert first is not None and (first.lo, first.hi) == (0.0, 10.0)
    # unordered and non-monotonic input (extrapolation noise) is fixed up like Prometheus does
    messy = [(math.inf, 10.0), (100.0, 9.0), (10.0, 9.5)]
    hit = locate(messy, 0.9)
    assert hit is not None and hit.hi == 10.0


@pytest.mark.parametrize(
    "buckets",
    [[], [(math.inf, 3.0)], [(10.0, 1.0), (20.0, 2.0)], [(10.0, 0.0), (math.inf, 0.0)]],
)
def test_locate_without_a_usable_histogram(buckets: list[tuple[float, float]]) -> None:
    assert locate(buckets, 0.5) is None and estimate(buckets, 0.5) is None


def test_locate_rejects_bad_quantile() -> None:
    with pytest.raises(ValueError):
        locate([(1.0, 1.0), (math.inf, 1.0)], 1.0)


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.integers(1, 32767), min_size=1, max_size=300),
    q=st.sampled_from([0.5, 0.9, 0.95, 0.99]),
)
def test_true_quantile_lies_in_located_bucket(values: list[int], q: float) -> None:
    buckets = _hist(values)
    hit = locate(buckets, q)
    assert hit is not None
    true = sorted(values)[max(0, math.ceil(q * len(values)) - 1)]
    assert hit.lo < true <= hit.hi
    value = estimate(buckets, q)
    assert value is not None and hit.lo <= value <= hit.hi


@given(value=st.floats(1.0, 20000.0))
def test_vllm_layout_is_never_coarse_by_default(value: float) -> None:
    """vLLM's 1-2-5 buckets are at most 150 % of any value inside them: never flagged at 200 %."""
    i = next(i for i, le in enumerate(LES) if value <= le)
    hit = BucketHit(q=0.5, lo=LES[i - 1] if i else 0.0, hi=LES[i], rank=1.0, total=2.0)
    assert coarseness(hit, value, 200.0) is None


def test_coarseness() -> None:
    wide = locate([(100.0, 0.0), (10000.0, 10.0), (math.inf, 10.0)], 0.5)
    assert wide is not None
    reason = coarseness(wide, 500.0, 200.0)
    assert reason is not None and "(100, 10000]" in reason
    assert coarseness(wide, 500.0, 5000.0) is None
    inf = locate([(100.0, 0.0), (math.inf, 10.0)], 0.5)
    assert inf is not None
    reason = coarseness(inf, 100.0, 200.0)
    assert reason is not None and "+Inf" in reason


# ---- merge --------------------------------------------------------------------------------------


def _oq(
    p50: float, p95: float, p99: float, coarse: frozenset[str] = frozenset()
) -> ObservedQuantiles:
    return ObservedQuantiles(p50, p95, p99, (0, p50), (0, p95), (0, p99), coarse)


def _obs(
    prompt: ObservedQuantiles | None, output: ObservedQuantiles | None, ok: bool = True
) -> Observation:
    return Observation(
        ok=ok,
        reason="Observed" if ok else "PrometheusUnreachable",
        message="",
        window="7d",
        at=0.0,
        prompt_tokens=prompt,
        output_tokens=output,
        peak_concurrency=120.2 if ok else None,
    )


SPEC = [
    Cohort("chat", 0.7, Quantiles(1000, 2000, 4000), Quantiles(80, 200, 500), 3000),
    Cohort("rag", 0.3, Quantiles(3000, 6000, 8000), Quantiles(300, 600, 900), 0),
]


def test_replace() -> None:
    obs = _obs(_oq(1200.2, 7000.0, 12000.9), _oq(210.0, 800.5, 1500.0))
    (c,) = merge_cohorts(SPEC, obs, "replace")
    assert c.name == "observed" and c.weight == 1.0 and c.shared_prefix == 0
    assert c.prompt == Quantiles(1201, 7000, 12001)
    assert c.output == Quantiles(210, 801, 1500)


def test_replace_coarse_quantile_keeps_the_spec_bound() -> None:
    obs = _obs(_oq(1200.0, 5000.0, 20000.0, frozenset({"p99"})), _oq(10, 20, 30))
    (c,) = merge_cohorts(SPEC, obs, "replace")
    assert c.prompt == Quantiles(1200, 5000, 20000)  # 20000 > spec's 8000: the lower bound wins
    obs = _obs(_oq(100.0, 200.0, 300.0, frozenset({"p95", "p99"})), _oq(10, 20, 30))
    (c,) = merge_cohorts(SPEC, obs, "replace")
    assert c.prompt == Quantiles(100, 6000, 8000)
    (c,) = merge_cohorts([], obs, "replace")
    assert c.prompt == Quantiles(100, 200, 300)


def test_max_and_spec_only() -> None:
    obs = _obs(_oq(1200.0, 1500.0, 9000.0), _oq(50.0, 700.0, 700.0))
    chat, rag = merge_cohorts(SPEC, obs, "max")
    assert chat.prompt == Quantiles(1200, 2000, 9000) and chat.output == Quantiles(80, 700, 700)
    assert rag.prompt == Quantiles(3000, 6000, 9000) and rag.output == Quantiles(300, 700, 900)
    assert chat.shared_prefix == 3000 and chat.weight == 0.7
    assert merge_cohorts(SPEC, obs, "spec-only") == SPEC


@pytest.mark.parametrize("mode", ["replace", "max", "spec-only"])
def test_failed_or_partial_observation_changes_nothing(mode: str) -> None:
    assert merge_cohorts(SPEC, _obs(None, None, ok=False), mode) == SPEC
    assert merge_cohorts(SPEC, _obs(_oq(1, 2, 3), None), mode) == SPEC
    assert merge_cohorts(SPEC, None, mode) == SPEC


def test_bad_mode() -> None:
    with pytest.raises(ValueError):
        merge_cohorts(SPEC, None, "min")
    with pytest.raises(ValueError):
        peak_concurrency(1, 2.0, "min")


def test_peak_concurrency() -> None:
    assert peak_concurrency(300, 412.2, "replace") == 413
    assert peak_concurrency(300, 120.0, "replace") == 120
    assert peak_concurrency(300, 120.0, "max") == 300
    assert peak_concurrency(300, 412.0, "max") == 412
    assert peak_concurrency(None, 41.5, "max") == 42
    assert peak_concurrency(300, 412.0, "spec-only") == 300
    assert peak_concurrency(300, None, "replace") == 300
    assert peak_concurrency(300, math.nan, "max") == 300


_len = st.integers(1, 100_000)


@st.composite
def _quantiles(draw: st.DrawFn) -> Quantiles:
    a, b, c = sorted(draw(st.lists(_len, min_size=3, max_size=3)))
    return Quantiles(a, b, c)


@st.composite
def _observed(draw: st.DrawFn) -> ObservedQuantiles:
    a, b, c = sorted(draw(st.lists(st.floats(0.5, 100_000.0), min_size=3, max_size=3)))
    coarse = draw(st.frozensets(st.sampled_from(["p50", "p95", "p99"])))
    return _oq(a, b, c, coarse)


_cohorts = st.lists(
    st.builds(
        Cohort,
        name=st.sampled_from(["chat", "rag", "agent"]),
        weight=st.floats(0.01, 1.0),
        prompt=_quantiles(),
        output=_quantiles(),
        shared_prefix=st.integers(0, 5000),
    ),
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(spec=_cohorts, prompt=_observed(), output=_observed())
def test_max_never_lowers_and_covers_observed(
    spec: list[Cohort], prompt: ObservedQuantiles, output: ObservedQuantiles
) -> None:
    merged = merge_cohorts(spec, _obs(prompt, output), "max")
    assert len(merged) == len(spec)
    for before, after in zip(spec, merged, strict=True):
        assert (after.name, after.weight, after.shared_prefix) == (
            before.name,
            before.weight,
            before.shared_prefix,
        )
        for q in ("p50", "p95", "p99"):
            assert after.prompt.at(q) >= before.prompt.at(q)
            assert after.output.at(q) >= before.output.at(q)
            assert after.prompt.at(q) >= prompt.at(q)
            assert after.output.at(q) >= output.at(q)
        assert after.prompt.p50 <= after.prompt.p95 <= after.prompt.p99


@settings(max_examples=60, deadline=None)
@given(spec=_cohorts, prompt=_observed(), output=_observed())
def test_spec_only_is_identity(
    spec: list[Cohort], prompt: ObservedQuantiles, output: ObservedQuantiles
) -> None:
    assert merge_cohorts(spec, _obs(prompt, output), "spec-only") == spec


@settings(max_examples=60, deadline=None)
@given(spec=_cohorts, prompt=_observed(), output=_observed())
def test_replace_is_one_monotone_cohort_at_least_observed(
    spec: list[Cohort], prompt: ObservedQuantiles, output: ObservedQuantiles
) -> None:
    (c,) = merge_cohorts(spec, _obs(prompt, output), "replace")
    assert c.prompt.p50 <= c.prompt.p95 <= c.prompt.p99
    for q in ("p50", "p95", "p99"):
        assert c.prompt.at(q) >= prompt.at(q) and c.output.at(q) >= output.at(q)
        if not prompt.coarse:
            assert c.prompt.at(q) == math.ceil(prompt.at(q))


# ---- calibration --------------------------------------------------------------------------------


def _pods(**blocks: int | None) -> dict[str, PodPool]:
    return {name: PodPool(b, 16, 0.9) for name, b in blocks.items()}


def test_calibrated_within_threshold() -> None:
    cal = calibrate(10100, _pods(a=10000, b=10000))
    assert cal.ok and cal.reason == "Calibrated" and not cal.drift
    assert cal.error_percent == pytest.approx(1.0)
    assert cal.per_pod == {"a": pytest.approx(1.0), "b": pytest.approx(1.0)}
    assert cal.condition().status == "True" and cal.condition().type == "Calibrated"


def test_drift_in_one_pod_is_not_averaged_away() -> None:
    cal = calibrate(10000, _pods(a=10000, b=10000, c=10000, d=9000), threshold_percent=5.0)
    assert cal.drift and cal.reason == "PredictionDrift" and not cal.ok
    assert cal.error_percent == pytest.approx((10000 / 9000 - 1) * 100 / 4)
    assert cal.error_percent < 5.0
    assert "d has 9,000" in cal.message and "not adjusted" in cal.message
    assert cal.condition().status == "False"


def test_negative_error_and_per_pod_predictions() -> None:
    cal = calibrate({"a": 9000, "b": 20000}, _pods(a=10000, b=20000, c=5), threshold_percent=5)
    assert cal.per_pod == {"a": pytest.approx(-10.0), "b": pytest.approx(0.0)}
    assert cal.drift and cal.error_percent == pytest.approx(-5.0)


def test_no_pool_data() -> None:
    cal = calibrate(100, _pods(a=None))
    assert not cal.ok and cal.reason == "NoPoolData" and cal.error_percent is None
    assert cal.condition().status == "Unknown"
    assert calibrate(100, {}).reason == "NoPoolData"
    with pytest.raises(ValueError):
        calibrate(100, {}, threshold_percent=-1)


# ---- HTTP failure mapping, against stubs --------------------------------------------------------

Stub = Callable[[int, bytes], str]


@pytest.mark.parametrize(
    "status,reason",
    [
        (401, "AuthRefused"),
        (403, "AuthRefused"),
        (400, "QueryRejected"),
        (422, "QueryRejected"),
        (500, "PrometheusUnreachable"),
        (503, "PrometheusUnreachable"),
    ],
)
def test_http_status_mapping(http_stub: Stub, status: int, reason: str) -> None:
    body = b'{"status":"error","errorType":"bad_data","error":"parse error"}'
    obs = observe(PromSource(http_stub(status, body), timeout_s=2))
    assert not obs.ok and obs.reason == reason, obs.message
    assert str(status) in obs.message or reason == "PrometheusUnreachable"


def test_not_a_prometheus(http_stub: Stub) -> None:
    obs = observe(PromSource(http_stub(200, b"<html>login</html>"), timeout_s=2))
    assert obs.reason == "PrometheusUnreachable" and "Prometheus API" in obs.message


def test_unreachable_without_prometheus(closed_port_url: str) -> None:
    obs = observe(PromSource(closed_port_url, timeout_s=1))
    assert obs.reason == "PrometheusUnreachable" and obs.at > 0


def test_min_samples_validated() -> None:
    with pytest.raises(ValueError):
        observe(PromSource("http://127.0.0.1:1"), min_samples=0)


def test_pod_pool_parsing_is_tolerant() -> None:
    from inference_capacity.observe.queries import _float, _int

    assert _int("27910") == 27910 and _int("None") is None and _int(None) is None
    assert _float("0.9") == 0.9 and _float("nan") is None and _float("x") is None


# ---- async I/O: per-request timeout, one client's bound, no thread per request -----------------


def test_per_request_timeout_is_a_fixed_message(slow_stub: Callable[..., SlowServer]) -> None:
    """A server that sends half a body and then stalls past the 0.5 s timeout: the reason is
    PrometheusUnreachable and the message is fixed text, none of the bytes it sent."""
    srv = slow_stub(5.0, head=b'{"status":"success","data":"SECRET-FROM-THE-SERVER')
    obs = observe(PromSource(srv.url, timeout_s=0.5))
    assert not obs.ok and obs.reason == "PrometheusUnreachable"
    # the old reader (requests) said "... timed out: ReadTimeout" after the retry
    assert obs.message == f"{srv.url} did not answer within 0.5 s (the per-request timeout)"
    assert "SECRET" not in obs.message


def _threads_but_the_stubs() -> set[str]:
    """Threads of this process, less the stub servers' request threads."""
    return {t.name for t in threading.enumerate() if "process_request" not in t.name}


async def test_observations_share_one_client_and_no_thread_waits(
    slow_stub: Callable[..., SlowServer],
) -> None:
    """Ten observations of a 2-second Prometheus on one loop: all their first queries (3 each:
    pools, running, samples) are open at once, and no thread of this process waits on them."""
    srv = slow_stub(2.0)
    client = Client(connections=64)
    before = _threads_but_the_stubs()
    tasks = [
        asyncio.create_task(observe_async(PromSource(srv.url), client=client)) for _ in range(10)
    ]
    for _ in range(100):
        if srv.open == 30:
            break
        await asyncio.sleep(0.05)
    during = _threads_but_the_stubs()
    results = await asyncio.gather(*tasks)
    await client.close()
    assert srv.peak == 30 and client.peak_open == 30
    assert during == before  # the old reader held a pool thread per observation
    # an empty vector everywhere: no series, after the first three queries of each
    assert {o.reason for o in results} == {"NoSeries"} and srv.total == 30


async def test_one_client_bounds_open_connections(slow_stub: Callable[..., SlowServer]) -> None:
    """The same 30 queries through a client of 6 connections: never more than 6 open at the
    server; the rest wait for a slot (without their timeout running: none times out at 1 s
    although the last ones finish after 5 rounds of 0.3 s)."""
    srv = slow_stub(0.3)
    client = Client(connections=6)
    results = await asyncio.gather(
        *(observe_async(PromSource(srv.url, timeout_s=1.0), client=client) for _ in range(10))
    )
    await client.close()
    assert srv.peak == 6 and client.peak_open == 6 and srv.total == 30
    assert {o.reason for o in results} == {"NoSeries"}


def test_a_redirect_is_not_followed(http_stub: Stub) -> None:
    """The admin allowed this URL, not where it points (the stub's 302 has no Location: the
    reader must not even try)."""
    obs = observe(PromSource(http_stub(302, b""), timeout_s=2))
    assert obs.reason == "PrometheusUnreachable" and "redirect (not followed)" in obs.message


def test_an_endless_answer_is_cut_at_16_mib(http_stub: Stub) -> None:
    """17 MiB of JSON-looking bytes: refused after reading 16 MiB + 1 (reader's
    _MAX_RESPONSE_BYTES = 16 << 20), not parsed."""
    url = http_stub(200, b"[" + b" " * (17 << 20) + b"]")
    obs = observe(PromSource(url, timeout_s=10))
    assert obs.reason == "PrometheusUnreachable"
    assert obs.message == f"{url} answered with more than 16 MiB"
