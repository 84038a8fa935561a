"""The CLI's transport for an observation: synchronous, through ``prometheus-api-client``
(``PrometheusConnect.custom_query``, its ``retry`` and ``auth`` options). The queries, the steps
and the parsing of the answers are :mod:`.queries`, shared with the operator's async transport
(:mod:`.reader`), so ``plan FILE --observe`` builds the observation the operator builds from the
same answers, with the same failure messages.

The same bounds as the operator's path, on a ``requests`` session of our own:

- one GET per query within ``PromSource.timeout_s``: ``requests``' connect and read timeouts,
  and a deadline on the body measured from when the request was sent (checked between chunks);
- an answer of more than ``MAX_RESPONSE_BYTES`` is refused after reading that many bytes;
- redirects are never followed (the first redirect answer ends the observation, before any
  request is made to where it points) and ``max_redirects`` is 0 besides;
- retried once on a connection error or a 502/503/504 (urllib3 ``Retry``), never on a timeout;
- no cookies kept, and ``trust_env`` off: no proxy from the environment, no ``.netrc``
  credentials; the bearer token is ``PromSource.bearer_token`` only (the CLI takes it from an
  explicitly named file or environment variable);
- TLS: the system store, ``PromSource.ca_cert_pem`` (a temporary file for ``requests``), or no
  verification when ``insecure_skip_verify``.

Queries run one after another (a command waits for its answer anyway); the first failure ends
the observation, as on the operator's path.
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import requests
import urllib3
from prometheus_api_client.exceptions import PrometheusApiClientException
from prometheus_api_client.prometheus_connect import PrometheusConnect

from .observation import PROMETHEUS_UNREACHABLE, Observation
from .queries import (
    DEFAULT_MAX_BUCKET_WIDTH_PERCENT,
    MAX_RESPONSE_BYTES,
    RETRY_DELAY_S,
    RETRY_STATUSES,
    Failed,
    Sample,
    bad_ca_failure,
    check_head,
    check_size,
    failed,
    not_json_failure,
    not_prometheus_failure,
    redirect_failure,
    result_samples,
    steps,
    timeout_failure,
    tls_failure,
    unreachable_failure,
)
from .source import PromSource

_CHUNK = 64 << 10


class _Once(urllib3.Retry):
    """One retry, after RETRY_DELAY_S (urllib3's own backoff does not wait before the first)."""

    def get_backoff_time(self) -> float:
        return RETRY_DELAY_S if self.history else 0.0


def retry() -> urllib3.Retry:
    """PrometheusConnect's ``retry`` option: once on a connection error or a 502/503/504, not on
    a read error (a timeout), never a redirect; the last answer is returned, not raised."""
    return _Once(
        total=1,
        connect=1,
        read=0,
        status=1,
        other=0,
        redirect=0,
        status_forcelist=RETRY_STATUSES,
        allowed_methods=frozenset({"GET"}),
        raise_on_status=False,
        raise_on_redirect=False,
        respect_retry_after_header=False,
    )


class Bearer(requests.auth.AuthBase):
    """PrometheusConnect's ``auth`` option: ``Authorization: Bearer <token>``."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        r.headers["Authorization"] = f"Bearer {self._token}"
        return r


def _bounded_read(url: str, timeout_s: float) -> Any:
    """A response hook that refuses a redirect or a status other than 200, and reads the body
    itself within the deadline and the size cap (before ``requests`` would read all of it)."""

    def hook(r: requests.Response, *args: Any, **kwargs: Any) -> requests.Response:
        try:
            check_head(url, r.status_code)
            deadline = time.monotonic() + max(0.0, timeout_s - r.elapsed.total_seconds())
            body = bytearray()
            while chunk := r.raw.read1(_CHUNK, decode_content=True):
                body += chunk
                check_size(url, len(body))
                if time.monotonic() > deadline:
                    raise timeout_failure(url, timeout_s)
        except urllib3.exceptions.ReadTimeoutError as e:
            raise timeout_failure(url, timeout_s) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise unreachable_failure(url, e) from e
        finally:
            r.close()
        r._content = bytes(body)  # read: requests (and PrometheusConnect) use these bytes
        r._content_consumed = True  # type: ignore[attr-defined]
        return r

    return hook


class _NoCookies(http.cookiejar.DefaultCookiePolicy):
    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


@contextlib.contextmanager
def _session(source: PromSource, url: str) -> Iterator[requests.Session]:
    session = requests.Session()
    session.trust_env = False
    session.max_redirects = 0
    session.cookies.set_policy(_NoCookies())
    session.hooks["response"].append(_bounded_read(url, source.timeout_s))
    ca_file: str | None = None
    try:
        if source.insecure_skip_verify:
            session.verify = False
        elif source.ca_cert_pem:
            import ssl

            try:
                ssl.create_default_context(cadata=source.ca_cert_pem)
            except (ssl.SSLError, ValueError) as e:
                raise bad_ca_failure(source.url, e) from e
            fd, ca_file = tempfile.mkstemp(prefix="inference-capacity-ca-", suffix=".pem")
            with os.fdopen(fd, "w") as f:
                f.write(source.ca_cert_pem)
            session.verify = ca_file
        yield session
    finally:
        session.close()
        if ca_file is not None:
            os.unlink(ca_file)


def _timed_out(e: BaseException) -> bool:
    todo: list[BaseException] = [e]
    seen: set[int] = set()
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, urllib3.exceptions.NewConnectionError):
            return False  # urllib3 derives it from ConnectTimeoutError: a refusal, not a timeout
        if isinstance(x, urllib3.exceptions.TimeoutError | TimeoutError):
            return True
        todo += [a for a in getattr(x, "args", ()) if isinstance(a, BaseException)]
        reason = getattr(x, "reason", None)
        if isinstance(reason, BaseException):
            todo.append(reason)
    return False


class _Prom:
    """Instant queries at one time through ``PrometheusConnect``, failures mapped to
    ``Failed`` with the operator's messages."""

    def __init__(self, source: PromSource, session: requests.Session, at: float) -> None:
        self._url = source.url.rstrip("/")
        self._timeout_s = source.timeout_s
        self._at = at
        self.client = PrometheusConnect(
            url=self._url,
            disable_ssl=source.insecure_skip_verify,
            retry=retry(),
            # requests takes an AuthBase where the stub says tuple
            auth=Bearer(source.bearer_token) if source.bearer_token else None,  # type: ignore[arg-type]
            session=session,
            timeout=source.timeout_s,  # type: ignore[arg-type]  # requests takes a float
        )
        self.queries = 0

    def query(self, promql: str) -> list[Sample]:
        self.queries += 1
        result = self.call(lambda c: c.custom_query(promql, params={"time": f"{self._at:.3f}"}))
        return result_samples(self._url, {"data": {"result": result}})

    def call(self, ask: Callable[[PrometheusConnect], Any]) -> Any:
        """``ask(client)``'s answer, its failures mapped to the operator's messages."""
        url = self._url
        try:
            return ask(self.client)
        except Failed:
            raise
        except requests.exceptions.JSONDecodeError as e:  # 200 but not JSON: a login page…
            raise not_json_failure(url) from e
        except requests.exceptions.SSLError as e:
            raise tls_failure(url, e) from e
        except requests.exceptions.Timeout as e:
            raise timeout_failure(url, self._timeout_s) from e
        except requests.exceptions.TooManyRedirects as e:
            raise redirect_failure(url) from e
        except requests.exceptions.RequestException as e:
            if _timed_out(e):  # a read timeout: urllib3 wraps it in MaxRetryError (read=0)
                raise timeout_failure(url, self._timeout_s) from e
            raise unreachable_failure(url, e) from e
        except PrometheusApiClientException as e:  # a status the hook let through: none
            raise Failed(
                PROMETHEUS_UNREACHABLE, f"Prometheus at {url} answered an unexpected status"
            ) from e
        except ValueError as e:  # 200 but not JSON
            raise not_json_failure(url) from e
        except (KeyError, TypeError) as e:  # JSON but not a Prometheus API answer
            raise not_prometheus_failure(url, e) from e

    def batch(self, queries: Mapping[str, str]) -> dict[str, list[Sample]]:
        return {name: self.query(q) for name, q in queries.items()}


def observe_sync(
    source: PromSource,
    *,
    now: float | None = None,
    min_samples: int = 30,
    step_s: float | None = None,
    max_bucket_width_percent: float = DEFAULT_MAX_BUCKET_WIDTH_PERCENT,
) -> Observation:
    """What ``reader.observe_async`` returns for the same answers, over ``prometheus-api-client``
    without an event loop. Never raises for Prometheus' failure modes (``Observation.reason``)."""
    at = time.time() if now is None else float(now)
    gen = steps(
        source,
        at,
        min_samples=min_samples,
        step_s=step_s,
        max_bucket_width_percent=max_bucket_width_percent,
    )
    url = source.url.rstrip("/")
    try:
        with _session(source, url) as session:
            prom = _Prom(source, session, at)
            batch = next(gen)
            while True:
                answers = prom.batch(batch)
                try:
                    batch = gen.send(answers)
                except StopIteration as done:
                    result: Observation = done.value
                    return result
    except Failed as f:
        return failed(source, f, at)
    finally:
        gen.close()


def peak_time_sync(source: PromSource, at: float, step_s: float | None = None) -> float | None:
    """When the fleet-wide concurrency peaked in the window (unix seconds; None: no series),
    from ``PrometheusConnect.custom_query_range`` over the same transport and bounds (raises
    ``Failed``). The range is sampled at ``range_step`` (at most 10,000 points), so it may
    miss a peak between two points that the instant subquery saw."""
    import datetime as dt

    from .queries import concurrency_range, matrix_points, range_step, selection, subquery_step

    sel = selection(source, step_s)
    step = range_step(source.window_seconds, subquery_step(source.window_seconds, step_s))
    url = source.url.rstrip("/")
    start = dt.datetime.fromtimestamp(at - source.window_seconds, dt.UTC)
    end = dt.datetime.fromtimestamp(at, dt.UTC)
    with _session(source, url) as session:
        prom = _Prom(source, session, at)
        raw = prom.call(
            lambda c: c.custom_query_range(concurrency_range(sel), start, end, f"{step:g}s")
        )
    try:
        points = matrix_points(raw)
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise not_prometheus_failure(url, e) from e
    if not points:
        return None
    return max(points, key=lambda p: (p[1], -p[0]))[0]


def query_sync(source: PromSource, promql: str, at: float) -> list[Sample]:
    """One instant query over the same transport and bounds (raises ``Failed``)."""
    with _session(source, source.url.rstrip("/")) as session:
        return _Prom(source, session, at).query(promql)


__all__ = ["MAX_RESPONSE_BYTES", "Bearer", "observe_sync", "peak_time_sync", "query_sync", "retry"]
