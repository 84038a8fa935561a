"""The PromQL of an observation and the parsing of Prometheus' answers: pure functions shared
by both transports (issue 25) — the operator's async one (:mod:`.reader`, aiohttp) and the
CLI's synchronous one (:mod:`.sync_reader`, ``prometheus-api-client``).

Every statistic is one instant query evaluated at ``now`` over ``[window]``:

- length quantiles: ``histogram_quantile(q, sum by (le) (increase(<metric>_bucket{sel}[w])))``
  for ``vllm:request_prompt_tokens`` and ``vllm:request_generation_tokens``, plus the bucket
  counts themselves so each estimate carries the bucket that bounds it;
- peak concurrency: ``max_over_time((sum(running) + sum(waiting))[w:step])``, a subquery, so
  the peak is of the fleet-wide sum at one instant, not a sum of per-pod peaks;
- KV usage: the hottest pod's ``quantile_over_time(0.95, …)`` of ``vllm:kv_cache_usage_perc``
  (older vLLM: ``vllm:gpu_cache_usage_perc``; ``or`` keeps one per pod);
- preemptions: ``increase`` of ``vllm:num_preemptions_total`` (older: ``vllm:num_preemptions``)
  divided by the span between the fleet's first and last sample in the window;
- prefix-cache hit rate: ``increase`` of ``vllm:prefix_cache_hits_total`` over
  ``vllm:prefix_cache_queries_total`` (0.8-era V1: ``vllm:gpu_prefix_cache_*``);
- the pool: the labels of ``vllm:cache_config_info`` per pod.

The observation is :func:`steps`, a generator that yields batches of named queries (the queries
of one batch do not depend on each other) and receives their answers; a transport runs each
batch (concurrently or one by one) and sends the answers back, and the generator returns the
``Observation``. So both transports ask the same queries in the same steps and build the same
observation from the same answers; only the HTTP differs. A query's failure is a ``Failed``
(its reason and a fixed message, never bytes the server sent); the transports turn it into an
``Observation`` that is not ``ok`` with :func:`failed`.
"""

from __future__ import annotations

import http
import math
import socket
import ssl
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from . import histogram
from .observation import (
    AUTH_REFUSED,
    BUCKETS_TOO_COARSE,
    INSUFFICIENT_DATA,
    NO_SERIES,
    OBSERVED,
    PROMETHEUS_UNREACHABLE,
    QUANTILES,
    QUERY_REJECTED,
    Observation,
    ObservedQuantiles,
    PodPool,
    Reason,
)
from .source import PromSource

PROMPT_TOKENS = "vllm:request_prompt_tokens"
GENERATION_TOKENS = "vllm:request_generation_tokens"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # newest first
PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
CACHE_CONFIG = "vllm:cache_config_info"

DEFAULT_MAX_BUCKET_WIDTH_PERCENT = 200.0  # vLLM's 1-2-5 buckets are at most 150 % wide
_MAX_SUBQUERY_STEPS = 40_320  # 7d at 15s
#: queries of one observation in flight at once (an observation makes up to 18)
QUERIES_PER_OBSERVATION = 4
#: the largest answer read (a vector of a few series per pod is kilobytes; a hostile server's
#: endless body must not fill the reader's memory)
MAX_RESPONSE_BYTES = 16 << 20
#: statuses a GET is retried once on (after RETRY_DELAY_S), as connection errors are
RETRY_STATUSES = (502, 503, 504)
RETRY_DELAY_S = 0.1
REDIRECT_STATUSES = (301, 302, 303, 307, 308)

Sample = tuple[dict[str, str], float]
Batch = dict[str, str]
Answers = dict[str, list[Sample]]


class Failed(Exception):
    """A failure mode that ends the observation (carried to its return value)."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.message = message


# ---- answers: status, size, body -> samples, or a Failed with a fixed message ---------------


def short(e: BaseException) -> str:
    """The kind of a transport failure in words both transports give alike (aiohttp and
    requests wrap the same ``OSError``s in classes of their own), never text from the server (a
    response body, which an InferenceCapacity author could point at any URL, must not reach
    status or Events)."""
    seen: set[int] = set()
    todo: list[BaseException] = [e]
    while todo:
        x = todo.pop(0)
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, ssl.SSLCertVerificationError):
            return "certificate not trusted"
        if isinstance(x, ssl.SSLError):
            return "TLS error"
        if isinstance(x, ConnectionRefusedError):
            return "connection refused"
        if isinstance(x, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
            return "connection closed"
        if isinstance(x, socket.gaierror):
            return "host not found"
        # the causes: __cause__/__context__, aiohttp's os_error / certificate_error, urllib3's
        # reason, and the exceptions wrapped in args (requests, urllib3)
        for nxt in (
            x.__cause__,
            x.__context__,
            getattr(x, "os_error", None),
            getattr(x, "certificate_error", None),
            getattr(x, "reason", None),
            *(a for a in getattr(x, "args", ()) if isinstance(a, BaseException)),
        ):
            if isinstance(nxt, BaseException):
                todo.append(nxt)
    return "connection failed"


def _phrase(code: int) -> str:
    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return "unknown status"


def http_failure(url: str, code: int) -> Failed:
    body = _phrase(code)  # a fixed reason for the status code, not the response body
    if code in (401, 403):
        return Failed(
            AUTH_REFUSED,
            f"Prometheus at {url} refused the request (HTTP {code}): check the bearer token "
            "Secret and the token's permissions",
        )
    if code in (400, 422):
        return Failed(QUERY_REJECTED, f"Prometheus rejected the query (HTTP {code}): {body}")
    return Failed(PROMETHEUS_UNREACHABLE, f"Prometheus at {url} answered HTTP {code}: {body}")


def redirect_failure(url: str) -> Failed:
    return Failed(PROMETHEUS_UNREACHABLE, f"{url} answered with a redirect (not followed)")


def too_large_failure(url: str) -> Failed:
    return Failed(
        PROMETHEUS_UNREACHABLE, f"{url} answered with more than {MAX_RESPONSE_BYTES >> 20} MiB"
    )


def timeout_failure(url: str, timeout_s: float) -> Failed:
    return Failed(
        PROMETHEUS_UNREACHABLE,
        f"{url} did not answer within {timeout_s:g} s (the per-request timeout)",
    )


def unreachable_failure(url: str, e: BaseException) -> Failed:
    return Failed(PROMETHEUS_UNREACHABLE, f"cannot reach Prometheus at {url}: {short(e)}")


def tls_failure(url: str, e: BaseException) -> Failed:
    return Failed(PROMETHEUS_UNREACHABLE, f"TLS handshake with {url} failed: {short(e)}")


def bad_ca_failure(url: str, e: BaseException) -> Failed:
    return Failed(PROMETHEUS_UNREACHABLE, f"the CA bundle for {url} is not PEM: {short(e)}")


def not_json_failure(url: str) -> Failed:
    return Failed(PROMETHEUS_UNREACHABLE, f"{url} did not answer like a Prometheus API (not JSON)")


def not_prometheus_failure(url: str, e: BaseException) -> Failed:
    return Failed(
        PROMETHEUS_UNREACHABLE, f"{url} did not answer like a Prometheus API ({short(e)})"
    )


def check_head(url: str, status: int) -> None:
    """A redirect (never followed) or a status other than 200 ends the observation."""
    if status in REDIRECT_STATUSES:
        raise redirect_failure(url)
    if status != 200:
        raise http_failure(url, status)


def check_size(url: str, size: int) -> None:
    if size > MAX_RESPONSE_BYTES:
        raise too_large_failure(url)


def result_samples(url: str, raw: Any) -> list[Sample]:
    """The samples of a decoded ``/api/v1/query`` answer (``{"data": {"result": [...]}}``)."""
    try:
        return samples(raw["data"]["result"])
    except (ValueError, KeyError, TypeError) as e:  # 200 but not a Prometheus API answer
        raise not_prometheus_failure(url, e) from e


def samples(raw: Any) -> list[Sample]:
    """``(labels, value)`` of each element of an instant vector's ``result``."""
    out: list[Sample] = []
    if not isinstance(raw, list):
        raise TypeError(f"expected a vector result, got {type(raw).__name__}")
    for item in raw:
        labels = {str(k): str(v) for k, v in item["metric"].items()}
        out.append((labels, float(item["value"][1])))
    return out


def matrix_points(raw: Any) -> list[tuple[float, float]]:
    """``(time, value)`` of a one-series range-query ``result`` (empty: no series)."""
    if not isinstance(raw, list):
        raise TypeError(f"expected a matrix result, got {type(raw).__name__}")
    if not raw:
        return []
    return [(float(t), float(v)) for t, v in raw[0]["values"]]


#: the most points a range query returns (Prometheus refuses more than 11,000)
MAX_RANGE_POINTS = 10_000


def concurrency_range(sel: Sel) -> str:
    """The fleet-wide running + waiting, for a range query (when the peak was)."""
    return f"sum({sel(RUNNING)}) + (sum({sel(WAITING)}) or vector(0))"


def range_step(window_s: float, step_s: float) -> float:
    return max(step_s, math.ceil(window_s / MAX_RANGE_POINTS))


def scalar(rows: list[Sample]) -> float | None:
    """The value of a one-element, label-free result; None when empty or NaN."""
    if not rows:
        return None
    value = rows[0][1]
    return None if math.isnan(value) else value


def failed(source: PromSource, f: Failed, at: float) -> Observation:
    return Observation(ok=False, reason=f.reason, message=f.message, window=source.window, at=at)


# ---- the queries ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sel:
    source: PromSource
    window: str
    step: str

    def __call__(self, metric: str, extra: str = "") -> str:
        return self.source.select(metric, extra)

    def either(self, fn: str, metrics: tuple[str, ...], arg: str = "") -> str:
        """``fn(arg m1{sel}[w]) or fn(arg m2{sel}[w]) …``: per series, the newest name wins."""
        prefix = f"{arg}, " if arg else ""
        return " or ".join(f"{fn}({prefix}{self(m)}[{self.window}])" for m in metrics)


def subquery_step(window_s: float, step_s: float | None = None) -> float:
    """Subquery resolution: 15 s (a common scrape interval), coarsened for long windows so one
    query evaluates at most 40,320 instants (7d at 15s). A burst shorter than the step may be
    missed; pass ``step_s`` to choose."""
    if step_s is not None:
        if step_s <= 0:
            raise ValueError("step_s must be positive")
        return step_s
    return max(15.0, math.ceil(window_s / _MAX_SUBQUERY_STEPS))


def selection(source: PromSource, step_s: float | None = None) -> Sel:
    return Sel(source, source.window, f"{subquery_step(source.window_seconds, step_s):g}s")


def _histogram_rows(sel: Sel, metric: str) -> str:
    return f"sum by (le) (increase({sel(metric + '_bucket')}[{sel.window}]))"


def _span_instants(sel: Sel) -> str:
    # The hours the fleet was observed: from the first to the last subquery instant at which any
    # counter series is visible. Exact to the step at the start; at the end, a series that
    # vanished without a staleness marker stays visible for the lookback delta (5m), so a fleet
    # that stopped before `now` may read up to 5m long. (timestamp() would be exact, but costs
    # ~10x more per step.)
    present = " or ".join(f"count({sel(m)})" for m in PREEMPTIONS)
    return f"(({present}) * 0 + time())[{sel.window}:{sel.step}]"


def first_batch(sel: Sel) -> Batch:
    """What is there: the pods' pools, the engines running, the finished requests."""
    w = sel.window
    return {
        "pods": f"last_over_time({sel(CACHE_CONFIG)}[{w}])",
        "running": f"count(last_over_time({sel(RUNNING)}[{w}]))",
        "samples": f"sum(increase({sel(PROMPT_TOKENS + '_count')}[{w}]))",
    }


def latest_config_query(sel: Sel) -> str:
    return f"max_over_time(timestamp({sel(CACHE_CONFIG)})[{sel.window}:{sel.step}])"


def statistics_batch(sel: Sel) -> Batch:
    """The workload's statistics (asked once there are enough samples)."""
    w = sel.window
    out: Batch = {}
    for key, metric in (("prompt", PROMPT_TOKENS), ("output", GENERATION_TOKENS)):
        rows = _histogram_rows(sel, metric)
        out[f"{key}.rows"] = rows
        for name, q in QUANTILES:
            out[f"{key}.{name}"] = f"histogram_quantile({q}, {rows})"
    out["peak"] = (
        f"max_over_time((sum({sel(RUNNING)}) + (sum({sel(WAITING)}) or vector(0)))[{w}:{sel.step}])"
    )
    out["kv"] = f"max({sel.either('quantile_over_time', KV_USAGE, '0.95')})"
    out["preemptions"] = f"sum({sel.either('increase', PREEMPTIONS)})"
    instants = _span_instants(sel)
    out["span"] = f"max_over_time({instants}) - min_over_time({instants})"
    out["hits"] = f"sum({sel.either('increase', PREFIX_HITS)})"
    out["queries"] = f"sum({sel.either('increase', PREFIX_QUERIES)})"
    return out


def all_queries(sel: Sel) -> list[str]:
    """Every query an observation may ask (for tests and docs)."""
    return [*first_batch(sel).values(), latest_config_query(sel), *statistics_batch(sel).values()]


# ---- the observation, step by step -----------------------------------------------------------

Steps = Generator[Batch, Answers, Observation]


def steps(
    source: PromSource,
    at: float,
    *,
    min_samples: int = 30,
    step_s: float | None = None,
    max_bucket_width_percent: float = DEFAULT_MAX_BUCKET_WIDTH_PERCENT,
) -> Steps:
    """The observation of ``source`` at ``at``: yields batches of ``{name: promql}``, receives
    ``{name: samples}`` for each, returns the ``Observation``."""
    if min_samples < 1:
        raise ValueError("min_samples must be at least 1")
    sel = selection(source, step_s)
    w = sel.window
    first = yield first_batch(sel)
    warnings: list[str] = []
    latest: list[Sample] = []
    if _several_configs(first["pods"]):
        # The same engine with several configs in the window (restarted with new flags): keep
        # the one seen last.
        warnings.append(f"{CACHE_CONFIG}: an engine reported several configs; using the last")
        latest = (yield {"latest": latest_config_query(sel)})["latest"]
    pods = read_pods(first["pods"], latest)
    running = first["running"]
    samples_f = scalar(first["samples"])
    where = f"{{{source.selector}}}" if source.selector else "(no selector)"
    if not pods and not running and samples_f is None:
        return Observation(
            ok=False,
            reason=NO_SERIES,
            message=(
                f"no vLLM series match {where} in {w} (looked for {RUNNING}, "
                f"{PROMPT_TOKENS}_count and {CACHE_CONFIG})"
            ),
            window=w,
            at=at,
            pods=pods,
        )
    n = round(samples_f or 0.0)
    if n < min_samples:
        return Observation(
            ok=False,
            reason=INSUFFICIENT_DATA,
            message=(
                f"insufficient data: {n} samples in {w} (finished requests in "
                f"{PROMPT_TOKENS} for {where}; at least {min_samples} needed)"
            ),
            window=w,
            at=at,
            samples=n,
            pods=pods,
            warnings=warnings,
        )
    answers = yield statistics_batch(sel)
    return assemble(answers, sel, at, n, pods, warnings, max_bucket_width_percent)


def assemble(
    answers: Answers,
    sel: Sel,
    at: float,
    samples_n: int,
    pods: dict[str, PodPool],
    warnings: list[str],
    max_width_percent: float,
) -> Observation:
    """The observation from the statistics batch's answers."""
    w = sel.window
    warnings = list(warnings)
    prompt = quantiles(answers, "prompt", PROMPT_TOKENS, w, max_width_percent, warnings)
    output = quantiles(answers, "output", GENERATION_TOKENS, w, max_width_percent, warnings)
    peak, kv = scalar(answers["peak"]), scalar(answers["kv"])
    preempt = per_hour(scalar(answers["preemptions"]), scalar(answers["span"]))
    hits, queries = scalar(answers["hits"]), scalar(answers["queries"])
    hit_rate = hits / queries if hits is not None and queries else None
    for name, value in (
        ("peak concurrency", peak),
        ("KV-cache usage", kv),
        ("preemptions", preempt),
        ("prefix-cache hit rate", hit_rate),
    ):
        if value is None:
            warnings.append(f"no data for {name} in {w}")
    coarse = [
        f"{label} {q}"
        for label, quants in (("prompt", prompt), ("output", output))
        if quants is not None
        for q in sorted(quants.coarse)
    ]
    reason: Reason = BUCKETS_TOO_COARSE if coarse else OBSERVED
    parts = [f"{samples_n:,} requests in {w} from {len(pods) or 'unknown'} pods"]
    if prompt is not None:
        parts.append(f"prompt p95 {prompt.p95:,.0f}")
    if output is not None:
        parts.append(f"output p95 {output.p95:,.0f}")
    if peak is not None:
        parts.append(f"peak concurrency {peak:,.0f}")
    message = "; ".join(parts)
    if coarse:
        message += f"; buckets too coarse for {', '.join(coarse)} (see warnings)"
    return Observation(
        ok=True,
        reason=reason,
        message=message,
        window=w,
        at=at,
        samples=samples_n,
        prompt_tokens=prompt,
        output_tokens=output,
        peak_concurrency=peak,
        kv_usage_p95=kv,
        preemptions_per_hour=preempt,
        prefix_cache_hit_rate=hit_rate,
        pods=pods,
        warnings=warnings,
    )


def quantiles(
    answers: Answers,
    key: str,
    metric: str,
    window: str,
    max_width_percent: float,
    warnings: list[str],
) -> ObservedQuantiles | None:
    """P50/P95/P99 of one histogram: the server's estimates and the buckets that bound them."""
    buckets: list[tuple[float, float]] = []
    for labels, count in answers[f"{key}.rows"]:
        try:
            buckets.append((float(labels["le"]), count))
        except (KeyError, ValueError):
            continue
    values: dict[str, float] = {}
    bounds: dict[str, tuple[float, float]] = {}
    coarse: set[str] = set()
    for name, q in QUANTILES:
        value = scalar(answers[f"{key}.{name}"])
        hit = histogram.locate(buckets, q)
        if hit is None or value is None:
            warnings.append(f"{metric}: no usable histogram in {window}")
            return None
        values[name] = value
        bounds[name] = (hit.lo, hit.hi)
        why = histogram.coarseness(hit, value, max_width_percent)
        if why is not None:
            coarse.add(name)
            warnings.append(f"{BUCKETS_TOO_COARSE}: {metric} {name} = {value:g} is {why}")
    return ObservedQuantiles(
        p50=values["p50"],
        p95=values["p95"],
        p99=values["p99"],
        p50_bounds=bounds["p50"],
        p95_bounds=bounds["p95"],
        p99_bounds=bounds["p99"],
        coarse=frozenset(coarse),
    )


def per_hour(total: float | None, span_s: float | None) -> float | None:
    if total is None:
        return None
    if total == 0:
        return 0.0
    if span_s is None or span_s <= 0:
        return None
    return total / (span_s / 3600.0)


def _int(text: str | None) -> int | None:
    try:
        return int(float(text)) if text is not None else None
    except ValueError:
        return None


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return None if value is None or math.isnan(value) else value


def _several_configs(rows: list[Sample]) -> bool:
    return len({_engine_key(labels) for labels, _ in rows}) < len(rows)


def read_pods(rows: list[Sample], latest_rows: list[Sample]) -> dict[str, PodPool]:
    """Each engine's pool from ``vllm:cache_config_info`` (the config seen last when it
    reported several: ``latest_rows`` are their last timestamps)."""
    latest = {_config_key(labels): ts for labels, ts in latest_rows}
    engines_per_pod: dict[str, set[str]] = {}
    chosen: dict[tuple[str, str], tuple[float, dict[str, str]]] = {}
    for labels, _ in rows:
        key = _engine_key(labels)
        engines_per_pod.setdefault(key[0], set()).add(key[1])
        seen = latest.get(_config_key(labels), 0.0)
        if key not in chosen or seen > chosen[key][0]:
            chosen[key] = (seen, labels)
    pods: dict[str, PodPool] = {}
    for (pod, engine), (_, labels) in sorted(chosen.items()):
        name = pod if len(engines_per_pod[pod]) == 1 else f"{pod}/engine={engine}"
        pods[name] = PodPool(
            num_gpu_blocks=_int(labels.get("num_gpu_blocks")),
            block_size=_int(labels.get("block_size")),
            gpu_memory_utilization=_float(labels.get("gpu_memory_utilization")),
            labels=labels,
        )
    return pods


def _engine_key(labels: dict[str, str]) -> tuple[str, str]:
    pod = labels.get("pod") or labels.get("instance") or "unknown"
    return pod, labels.get("engine", "")


def _config_key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))
