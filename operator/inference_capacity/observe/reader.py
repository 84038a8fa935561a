"""Read a vLLM fleet's workload from Prometheus's HTTP API, asynchronously (``aiohttp``).

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

Failure modes are results, not exceptions (see ``observation``): the operator keeps serving from
the spec and says why. Only programming errors raise.

I/O: ``observe_async`` runs the queries that do not depend on each other concurrently, at most
``_QUERIES_PER_OBSERVATION`` at once, each GET within ``PromSource.timeout_s`` (a timeout is a
fixed message, never bytes the server sent); a shared ``Client`` bounds the requests open over
all observations on its loop. ``observe`` is the same on a loop of its own, for sync callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
import math
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp

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
_QUERIES_PER_OBSERVATION = 4
#: the largest answer read (a vector of a few series per pod is kilobytes; a hostile server's
#: endless body must not fill the operator's memory)
_MAX_RESPONSE_BYTES = 16 << 20

Sample = tuple[dict[str, str], float]


class _Failed(Exception):
    """A failure mode that ends the observation (carried to ``observe``'s return value)."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.message = message


class Client:
    """One HTTP client for many observations, on one event loop: at most ``connections``
    requests open at once over all of them (a request waiting for a slot holds no socket and
    no thread, and its per-request timeout starts when it gets one). Create and use it on the
    loop that runs the observations; ``close`` it there. No cookie jar: one tenant's Prometheus
    cannot set cookies that the operator would send to another's."""

    def __init__(self, connections: int) -> None:
        if connections < 1:
            raise ValueError("connections must be at least 1")
        self.connections = connections
        self._slots = asyncio.Semaphore(connections)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        #: requests open now and the most open at once (for tests and metrics)
        self.open = 0
        self.peak_open = 0

    async def close(self) -> None:
        await self._session.close()

    async def get(
        self, url: str, params: dict[str, str], headers: dict[str, str], tls: Any, timeout_s: float
    ) -> tuple[int, bytes]:
        """(status, body of at most _MAX_RESPONSE_BYTES + 1 bytes) of one GET, within
        ``timeout_s`` from when a connection slot is free; redirects are not followed."""
        async with self._slots:
            self.open += 1
            self.peak_open = max(self.peak_open, self.open)
            try:
                async with asyncio.timeout(timeout_s):
                    async with self._session.get(
                        url,
                        params=params,
                        headers=headers,
                        ssl=tls,
                        allow_redirects=False,
                        timeout=aiohttp.ClientTimeout(total=None),
                    ) as resp:
                        body = bytearray()
                        async for chunk in resp.content.iter_any():
                            body += chunk
                            if len(body) > _MAX_RESPONSE_BYTES:
                                break
                        return resp.status, bytes(body)
            finally:
                self.open -= 1


class _Prom:
    """Instant queries at one time for one observation, failures mapped to reasons; at most
    ``_QUERIES_PER_OBSERVATION`` of its queries in flight at once."""

    def __init__(self, client: Client, source: PromSource, at: float) -> None:
        self._client = client
        self._url = source.url.rstrip("/")
        self._endpoint = f"{self._url}/api/v1/query"
        self._headers = (
            {"Authorization": f"Bearer {source.bearer_token}"} if source.bearer_token else {}
        )
        self._tls = _tls(source)
        self._timeout_s = source.timeout_s
        self._at = at
        self._slots = asyncio.Semaphore(_QUERIES_PER_OBSERVATION)
        self.queries = 0

    async def query(self, promql: str) -> list[Sample]:
        self.queries += 1
        async with self._slots:
            status, body = await self._get(promql)
        if status in (301, 302, 303, 307, 308):
            raise _Failed(
                PROMETHEUS_UNREACHABLE, f"{self._url} answered with a redirect (not followed)"
            )
        if status != 200:
            raise _http_failure(self._url, status)
        if len(body) > _MAX_RESPONSE_BYTES:
            raise _Failed(
                PROMETHEUS_UNREACHABLE,
                f"{self._url} answered with more than {_MAX_RESPONSE_BYTES >> 20} MiB",
            )
        try:
            raw: Any = json.loads(body)
        except ValueError as e:  # 200 but not JSON: a login page…
            raise _Failed(
                PROMETHEUS_UNREACHABLE,
                f"{self._url} did not answer like a Prometheus API (not JSON)",
            ) from e
        try:
            return _samples(raw["data"]["result"])
        except (ValueError, KeyError, TypeError) as e:  # 200 but not a Prometheus API answer
            raise _Failed(
                PROMETHEUS_UNREACHABLE,
                f"{self._url} did not answer like a Prometheus API ({type(e).__name__})",
            ) from e

    async def _get(self, promql: str) -> tuple[int, bytes]:
        """One GET, retried once after 0.1 s on a connection error or a 502/503/504 (more
        would hold a dead endpoint's observation for seconds)."""
        params = {"query": promql, "time": f"{self._at:.3f}"}
        for attempt in range(2):
            last = attempt == 1
            try:
                status, body = await self._client.get(
                    self._endpoint, params, self._headers, self._tls, self._timeout_s
                )
            except aiohttp.ClientSSLError as e:  # certificate or handshake: not retried
                raise _Failed(
                    PROMETHEUS_UNREACHABLE, f"TLS handshake with {self._url} failed: {_short(e)}"
                ) from e
            except TimeoutError as e:
                raise _Failed(
                    PROMETHEUS_UNREACHABLE,
                    f"{self._url} did not answer within {self._timeout_s:g} s (the per-request "
                    "timeout)",
                ) from e
            except (aiohttp.ClientConnectionError, OSError) as e:
                if last:
                    raise _Failed(
                        PROMETHEUS_UNREACHABLE,
                        f"cannot reach Prometheus at {self._url}: {_short(e)}",
                    ) from e
            except aiohttp.ClientError as e:  # a malformed answer, an invalid URL…
                raise _Failed(
                    PROMETHEUS_UNREACHABLE, f"cannot reach Prometheus at {self._url}: {_short(e)}"
                ) from e
            else:
                if last or status not in (502, 503, 504):
                    return status, body
            await asyncio.sleep(0.1)
        raise AssertionError("unreachable")  # the loop returns or raises on its last attempt


def _tls(source: PromSource) -> bool | ssl.SSLContext:
    """What aiohttp verifies TLS with: False, a context trusting the CA bundle, or True (the
    system store)."""
    if source.insecure_skip_verify:
        return False
    if not source.ca_cert_pem:
        return True
    try:
        return ssl.create_default_context(cadata=source.ca_cert_pem)
    except (ssl.SSLError, ValueError) as e:
        raise _Failed(
            PROMETHEUS_UNREACHABLE, f"the CA bundle for {source.url} is not PEM: {_short(e)}"
        ) from e


def _short(e: BaseException) -> str:
    """The kind of a transport failure, never text from the server (a response body, which an
    InferenceCapacity author could point at any URL, must not reach status or Events)."""
    return type(e).__name__


def _phrase(code: int) -> str:
    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return "unknown status"


def _http_failure(url: str, code: int) -> _Failed:
    body = _phrase(code)  # a fixed reason for the status code, not the response body
    if code in (401, 403):
        return _Failed(
            AUTH_REFUSED,
            f"Prometheus at {url} refused the request (HTTP {code}): check the bearer token "
            "Secret and the token's permissions",
        )
    if code in (400, 422):
        return _Failed(QUERY_REJECTED, f"Prometheus rejected the query (HTTP {code}): {body}")
    return _Failed(PROMETHEUS_UNREACHABLE, f"Prometheus at {url} answered HTTP {code}: {body}")


def _samples(raw: Any) -> list[Sample]:
    out: list[Sample] = []
    if not isinstance(raw, list):
        raise TypeError(f"expected a vector result, got {type(raw).__name__}")
    for item in raw:
        labels = {str(k): str(v) for k, v in item["metric"].items()}
        out.append((labels, float(item["value"][1])))
    return out


def _scalar(samples: list[Sample]) -> float | None:
    """The value of a one-element, label-free result; None when empty or NaN."""
    if not samples:
        return None
    value = samples[0][1]
    return None if math.isnan(value) else value


@dataclass(frozen=True, slots=True)
class _Sel:
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


def observe(
    source: PromSource,
    *,
    now: float | None = None,
    min_samples: int = 30,
    step_s: float | None = None,
    max_bucket_width_percent: float = DEFAULT_MAX_BUCKET_WIDTH_PERCENT,
) -> Observation:
    """``observe_async`` on an event loop of its own, for callers without one (the CLI,
    scripts); from a coroutine await ``observe_async`` (this raises ``RuntimeError`` inside a
    running loop)."""
    return asyncio.run(
        observe_async(
            source,
            now=now,
            min_samples=min_samples,
            step_s=step_s,
            max_bucket_width_percent=max_bucket_width_percent,
        )
    )


async def observe_async(
    source: PromSource,
    *,
    now: float | None = None,
    min_samples: int = 30,
    step_s: float | None = None,
    max_bucket_width_percent: float = DEFAULT_MAX_BUCKET_WIDTH_PERCENT,
    client: Client | None = None,
) -> Observation:
    """Observe the fleet ``source`` selects over its window, as of ``now`` (unix seconds,
    default: the current time). Never raises for Prometheus' failure modes: see
    ``Observation.reason``. ``client``: a shared ``Client`` (its bound on open connections);
    None: one of this observation's own, closed at the end."""
    if min_samples < 1:
        raise ValueError("min_samples must be at least 1")
    at = time.time() if now is None else float(now)
    sel = _Sel(source, source.window, f"{subquery_step(source.window_seconds, step_s):g}s")
    own = client is None
    use = Client(_QUERIES_PER_OBSERVATION) if client is None else client
    try:
        prom = _Prom(use, source, at)
        return await _observe(prom, sel, at, min_samples, max_bucket_width_percent)
    except _Failed as f:
        return Observation(ok=False, reason=f.reason, message=f.message, window=sel.window, at=at)
    finally:
        if own:
            await use.close()


@contextlib.asynccontextmanager
async def _together() -> AsyncIterator[asyncio.TaskGroup]:
    """A task group whose first failure cancels the other tasks and is raised as itself (not as
    an ``ExceptionGroup``): a query's ``_Failed`` ends the observation."""
    try:
        async with asyncio.TaskGroup() as tg:
            yield tg
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None


async def _observe(
    prom: _Prom, sel: _Sel, at: float, min_samples: int, max_width_percent: float
) -> Observation:
    w = sel.window
    pod_warnings: list[str] = []
    async with _together() as tg:
        pods_t = tg.create_task(_read_pods(prom, sel, pod_warnings))
        running_t = tg.create_task(prom.query(f"count(last_over_time({sel(RUNNING)}[{w}]))"))
        samples_t = tg.create_task(
            _scalar_query(prom, f"sum(increase({sel(PROMPT_TOKENS + '_count')}[{w}]))")
        )
    pods, running, samples_f = pods_t.result(), running_t.result(), samples_t.result()
    warnings = list(pod_warnings)
    where = f"{{{sel.source.selector}}}" if sel.source.selector else "(no selector)"
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
    samples = round(samples_f or 0.0)
    if samples < min_samples:
        return Observation(
            ok=False,
            reason=INSUFFICIENT_DATA,
            message=(
                f"insufficient data: {samples} samples in {w} (finished requests in "
                f"{PROMPT_TOKENS} for {where}; at least {min_samples} needed)"
            ),
            window=w,
            at=at,
            samples=samples,
            pods=pods,
            warnings=warnings,
        )

    prompt_w: list[str] = []
    output_w: list[str] = []
    async with _together() as tg:
        prompt_t = tg.create_task(_quantiles(prom, sel, PROMPT_TOKENS, max_width_percent, prompt_w))
        output_t = tg.create_task(
            _quantiles(prom, sel, GENERATION_TOKENS, max_width_percent, output_w)
        )
        peak_t = tg.create_task(
            _scalar_query(
                prom,
                f"max_over_time((sum({sel(RUNNING)}) + (sum({sel(WAITING)}) or vector(0)))"
                f"[{w}:{sel.step}])",
            )
        )
        kv_t = tg.create_task(
            _scalar_query(prom, f"max({sel.either('quantile_over_time', KV_USAGE, '0.95')})")
        )
        preempt_t = tg.create_task(_per_hour(prom, sel))
        hits_t = tg.create_task(_scalar_query(prom, f"sum({sel.either('increase', PREFIX_HITS)})"))
        queries_t = tg.create_task(
            _scalar_query(prom, f"sum({sel.either('increase', PREFIX_QUERIES)})")
        )
    prompt, output = prompt_t.result(), output_t.result()
    peak, kv, preempt = peak_t.result(), kv_t.result(), preempt_t.result()
    hits, queries = hits_t.result(), queries_t.result()
    warnings += prompt_w + output_w  # in a fixed order, whichever query finished first
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
    parts = [f"{samples:,} requests in {w} from {len(pods) or 'unknown'} pods"]
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
        samples=samples,
        prompt_tokens=prompt,
        output_tokens=output,
        peak_concurrency=peak,
        kv_usage_p95=kv,
        preemptions_per_hour=preempt,
        prefix_cache_hit_rate=hit_rate,
        pods=pods,
        warnings=warnings,
    )


async def _scalar_query(prom: _Prom, promql: str) -> float | None:
    return _scalar(await prom.query(promql))


async def _quantiles(
    prom: _Prom, sel: _Sel, metric: str, max_width_percent: float, warnings: list[str]
) -> ObservedQuantiles | None:
    inner = f"sum by (le) (increase({sel(metric + '_bucket')}[{sel.window}]))"
    async with _together() as tg:
        rows_t = tg.create_task(prom.query(inner))
        estimate_ts = [
            tg.create_task(_scalar_query(prom, f"histogram_quantile({q}, {inner})"))
            for _, q in QUANTILES
        ]
    rows = rows_t.result()
    estimates = [t.result() for t in estimate_ts]
    buckets: list[tuple[float, float]] = []
    for labels, count in rows:
        try:
            buckets.append((float(labels["le"]), count))
        except (KeyError, ValueError):
            continue
    values: dict[str, float] = {}
    bounds: dict[str, tuple[float, float]] = {}
    coarse: set[str] = set()
    for (name, q), value in zip(QUANTILES, estimates, strict=True):
        hit = histogram.locate(buckets, q)
        if hit is None or value is None:
            warnings.append(f"{metric}: no usable histogram in {sel.window}")
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


async def _per_hour(prom: _Prom, sel: _Sel) -> float | None:
    # The hours the fleet was observed: from the first to the last subquery instant at which any
    # counter series is visible. Exact to the step at the start; at the end, a series that
    # vanished without a staleness marker stays visible for the lookback delta (5m), so a fleet
    # that stopped before `now` may read up to 5m long. (timestamp() would be exact, but costs
    # ~10x more per step.)
    present = " or ".join(f"count({sel(m)})" for m in PREEMPTIONS)
    instants = f"(({present}) * 0 + time())[{sel.window}:{sel.step}]"
    async with _together() as tg:
        total_t = tg.create_task(_scalar_query(prom, f"sum({sel.either('increase', PREEMPTIONS)})"))
        span_t = tg.create_task(
            _scalar_query(prom, f"max_over_time({instants}) - min_over_time({instants})")
        )
    total, span = total_t.result(), span_t.result()
    if total is None:
        return None
    if total == 0:
        return 0.0
    if span is None or span <= 0:
        return None
    return total / (span / 3600.0)


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


async def _read_pods(prom: _Prom, sel: _Sel, warnings: list[str]) -> dict[str, PodPool]:
    rows = await prom.query(f"last_over_time({sel(CACHE_CONFIG)}[{sel.window}])")
    if not rows:
        return {}
    latest: dict[tuple[tuple[str, str], ...], float] = {}
    if len({_engine_key(labels) for labels, _ in rows}) < len(rows):
        # The same engine with several configs in the window (restarted with new flags): keep
        # the one seen last.
        warnings.append(f"{CACHE_CONFIG}: an engine reported several configs; using the last")
        for labels, ts in await prom.query(
            f"max_over_time(timestamp({sel(CACHE_CONFIG)})[{sel.window}:{sel.step}])"
        ):
            latest[_config_key(labels)] = ts
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
