"""The operator's transport for an observation: Prometheus's HTTP API, asynchronously
(``aiohttp``). The queries, the steps and the parsing of the answers are :mod:`.queries`, shared
with the CLI's synchronous transport (:mod:`.sync_reader`, ``prometheus-api-client``).

Failure modes are results, not exceptions (see ``observation``): the operator keeps serving from
the spec and says why. Only programming errors raise.

I/O: ``observe_async`` runs the queries of one step concurrently, at most
``QUERIES_PER_OBSERVATION`` at once, each GET within ``PromSource.timeout_s`` (a timeout is a
fixed message, never bytes the server sent); a shared ``Client`` bounds the requests open over
all observations on its loop. ``observe`` is the same on a loop of its own, for sync callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from .observation import Observation
from .queries import (
    CACHE_CONFIG,
    DEFAULT_MAX_BUCKET_WIDTH_PERCENT,
    GENERATION_TOKENS,
    KV_USAGE,
    MAX_RESPONSE_BYTES,
    PREEMPTIONS,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROMPT_TOKENS,
    QUERIES_PER_OBSERVATION,
    RETRY_DELAY_S,
    RETRY_STATUSES,
    RUNNING,
    WAITING,
    Answers,
    Batch,
    Failed,
    Sample,
    bad_ca_failure,
    check_head,
    check_size,
    failed,
    not_json_failure,
    result_samples,
    steps,
    subquery_step,
    timeout_failure,
    tls_failure,
    unreachable_failure,
)
from .source import PromSource

__all__ = [
    "CACHE_CONFIG",
    "DEFAULT_MAX_BUCKET_WIDTH_PERCENT",
    "GENERATION_TOKENS",
    "KV_USAGE",
    "PREEMPTIONS",
    "PREFIX_HITS",
    "PREFIX_QUERIES",
    "PROMPT_TOKENS",
    "RUNNING",
    "WAITING",
    "Client",
    "observe",
    "observe_async",
    "subquery_step",
]


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
        """(status, body of at most MAX_RESPONSE_BYTES + 1 bytes) of one GET, within
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
                            if len(body) > MAX_RESPONSE_BYTES:
                                break
                        return resp.status, bytes(body)
            finally:
                self.open -= 1


class _Prom:
    """Instant queries at one time for one observation, failures mapped to ``Failed``; at most
    ``QUERIES_PER_OBSERVATION`` of its queries in flight at once."""

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
        self._slots = asyncio.Semaphore(QUERIES_PER_OBSERVATION)
        self.queries = 0

    async def query(self, promql: str) -> list[Sample]:
        self.queries += 1
        async with self._slots:
            status, body = await self._get(promql)
        check_head(self._url, status)
        check_size(self._url, len(body))
        try:
            raw: Any = json.loads(body)
        except ValueError as e:  # 200 but not JSON: a login page…
            raise not_json_failure(self._url) from e
        return result_samples(self._url, raw)

    async def batch(self, queries: Batch) -> Answers:
        """The answers of one step's queries, asked concurrently; the first failure cancels
        the others and is raised."""
        async with _together() as tg:
            tasks = {name: tg.create_task(self.query(q)) for name, q in queries.items()}
        return {name: t.result() for name, t in tasks.items()}

    async def _get(self, promql: str) -> tuple[int, bytes]:
        """One GET, retried once after RETRY_DELAY_S on a connection error or a 502/503/504
        (more would hold a dead endpoint's observation for seconds)."""
        params = {"query": promql, "time": f"{self._at:.3f}"}
        for attempt in range(2):
            last = attempt == 1
            try:
                status, body = await self._client.get(
                    self._endpoint, params, self._headers, self._tls, self._timeout_s
                )
            except aiohttp.ClientSSLError as e:  # certificate or handshake: not retried
                raise tls_failure(self._url, e) from e
            except TimeoutError as e:
                raise timeout_failure(self._url, self._timeout_s) from e
            except (aiohttp.ClientConnectionError, OSError) as e:
                if last:
                    raise unreachable_failure(self._url, e) from e
            except aiohttp.ClientError as e:  # a malformed answer, an invalid URL…
                raise unreachable_failure(self._url, e) from e
            else:
                if last or status not in RETRY_STATUSES:
                    return status, body
            await asyncio.sleep(RETRY_DELAY_S)
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
        raise bad_ca_failure(source.url, e) from e


def observe(
    source: PromSource,
    *,
    now: float | None = None,
    min_samples: int = 30,
    step_s: float | None = None,
    max_bucket_width_percent: float = DEFAULT_MAX_BUCKET_WIDTH_PERCENT,
) -> Observation:
    """``observe_async`` on an event loop of its own, for callers without one (scripts); from a
    coroutine await ``observe_async`` (this raises ``RuntimeError`` inside a running loop). The
    CLI uses :func:`.sync_reader.observe_sync` (no event loop)."""
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
    at = time.time() if now is None else float(now)
    gen = steps(
        source,
        at,
        min_samples=min_samples,
        step_s=step_s,
        max_bucket_width_percent=max_bucket_width_percent,
    )
    own = client is None
    use = Client(QUERIES_PER_OBSERVATION) if client is None else client
    try:
        prom = _Prom(use, source, at)
        batch = next(gen)
        while True:
            answers = await prom.batch(batch)
            try:
                batch = gen.send(answers)
            except StopIteration as done:
                result: Observation = done.value
                return result
    except Failed as f:
        return failed(source, f, at)
    finally:
        gen.close()
        if own:
            await use.close()


@contextlib.asynccontextmanager
async def _together() -> AsyncIterator[asyncio.TaskGroup]:
    """A task group whose first failure cancels the other tasks and is raised as itself (not as
    an ``ExceptionGroup``): a query's ``Failed`` ends the observation."""
    try:
        async with asyncio.TaskGroup() as tg:
            yield tg
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None
