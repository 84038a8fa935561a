"""The operator's manners toward the API server (controller/throttle.py, controller/k8s.py):
the token bucket's arithmetic on an injected clock, Retry-After parsing, which statuses are
retried, the settings that configure them, and the operator's REST client against a small
HTTP server on a real socket (the waits it would sleep are recorded instead)."""

from __future__ import annotations

import email.utils
import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException
from prometheus_client import REGISTRY
from urllib3.util.retry import Retry

from inference_capacity import settings
from inference_capacity.controller import k8s
from inference_capacity.controller.throttle import (
    BACKOFF_BASE_SECONDS,
    RetryPolicy,
    TokenBucket,
    retry_after_seconds,
)

# --- the token bucket -----------------------------------------------------------------------


class FakeClock:
    """A monotonic clock that moves only when told (or when the bucket sleeps on it)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_full_bucket_sends_its_burst_at_once_then_one_per_interval() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=2.0, burst=3, clock=clock, sleep=clock.sleep)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    # empty: each next token is 1/qps behind the one reserved before it
    assert [bucket.reserve() for _ in range(3)] == [0.5, 1.0, 1.5]
    clock.now += 1.5  # the three reservations are now due; the bucket is at zero
    assert bucket.reserve() == 0.5


def test_refill_stops_at_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10.0, burst=4, clock=clock, sleep=clock.sleep)
    for _ in range(4):
        bucket.reserve()
    clock.now += 3600.0  # an hour idle saves up 4 tokens, not 36,000
    assert [bucket.reserve() for _ in range(5)] == [0.0, 0.0, 0.0, 0.0, 0.1]


def test_acquire_sleeps_the_reserved_wait_and_returns_it() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=4.0, burst=1, clock=clock, sleep=clock.sleep)
    assert bucket.acquire() == 0.0
    assert bucket.acquire() == 0.25
    assert clock.slept == [0.25]  # nothing slept for a token that was there


def test_the_long_run_rate_is_qps_after_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=50.0, burst=20, clock=clock, sleep=clock.sleep)
    start = clock.now
    for _ in range(520):
        bucket.acquire()
    assert clock.now - start == pytest.approx(500 / 50.0)


def test_concurrent_callers_each_get_their_own_slot() -> None:
    """Threads reserving at the same instant: no two get the same slot, none is skipped."""
    clock = FakeClock()
    bucket = TokenBucket(qps=100.0, burst=5, clock=clock, sleep=clock.sleep)
    waits: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(25):
            w = bucket.reserve()
            with lock:
                waits.append(w)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(waits) == pytest.approx([0.0] * 5 + [k / 100.0 for k in range(1, 196)])


@pytest.mark.parametrize(("qps", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_a_bucket_that_would_never_send_is_refused(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="qps|burst"):
        TokenBucket(qps, burst)


# --- Retry-After ----------------------------------------------------------------------------

DATE = "Wed, 21 Oct 2015 07:28:00 GMT"
DATE_EPOCH = email.utils.parsedate_to_datetime(DATE).timestamp()


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "5"}, 5.0),
        ({"Retry-After": " 7 "}, 7.0),
        ({"Retry-After": "0"}, 0.0),
        ({"retry-after": "3"}, 3.0),  # a plain mapping in another case
        ({"RETRY-AFTER": "3"}, 3.0),
        ({"Retry-After": "86400"}, 86400.0),  # capped by the policy, not here
        ({"Retry-After": DATE}, 30.0),  # 30 s after "now" below
        ({"Retry-After": "Wed, 21 Oct 2015 07:27:00 GMT"}, 0.0),  # in the past
        ({}, None),
        (None, None),
        ({"Retry-After": ""}, None),
        ({"Retry-After": "-1"}, None),
        ({"Retry-After": "1.5"}, None),
        ({"Retry-After": "+5"}, None),
        ({"Retry-After": "10s"}, None),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "\u0663"}, None),  # a digit, but not an ASCII one
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:00"}, None),  # no zone: not an HTTP-date
        ({"Retry-After": "Wed, 99 Foo 2015 07:28:00 GMT"}, None),
        ({"Content-Type": "application/json"}, None),
    ],
)
def test_retry_after_seconds(headers: dict[str, str] | None, expected: float | None) -> None:
    assert retry_after_seconds(headers, now=DATE_EPOCH - 30.0) == expected


def test_retry_after_reads_urllib3_headers() -> None:
    from urllib3 import HTTPHeaderDict

    assert retry_after_seconds(HTTPHeaderDict({"retry-after": "2"})) == 2.0


# --- which responses are retried ------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "headers", "done", "expected"),
    [
        (429, {"Retry-After": "3"}, 0, 3.0),
        (429, {"Retry-After": "0"}, 0, 0.0),
        (429, {}, 0, BACKOFF_BASE_SECONDS),
        (429, {}, 1, BACKOFF_BASE_SECONDS * 2),
        (429, {}, 3, BACKOFF_BASE_SECONDS * 8),
        (429, {}, 9, 60.0),  # 256 s of backoff, capped
        (429, {"Retry-After": "3600"}, 0, 60.0),  # capped
        (429, {"Retry-After": "3"}, 10, None),  # the limit reached
        (503, {"Retry-After": "2"}, 0, 2.0),
        (500, {"Retry-After": "1"}, 0, 1.0),
        (503, {}, 0, None),  # a 5xx without Retry-After: not retried here
        (500, {}, 0, None),
        (404, {"Retry-After": "1"}, 0, None),
        (409, {}, 0, None),
        (200, {"Retry-After": "1"}, 0, None),
    ],
)
def test_retry_policy(
    status: int, headers: dict[str, str], done: int, expected: float | None
) -> None:
    policy = RetryPolicy(max_retries=10, max_wait_seconds=60.0)
    assert policy.wait(status, headers, done) == expected


def test_no_retries_means_none() -> None:
    assert RetryPolicy(max_retries=0).wait(429, {"Retry-After": "1"}, 0) is None


# --- the settings ---------------------------------------------------------------------------


def test_api_settings_defaults_and_environment() -> None:
    s = settings.Settings()
    assert (s.api_qps, s.api_burst, s.api_retries, s.api_retry_after_max_seconds) == (
        100.0,
        200,
        10,
        60.0,
    )
    s = settings.Settings.from_env(
        {
            "INFERENCE_CAPACITY_API_QPS": "20.5",
            "INFERENCE_CAPACITY_API_BURST": "40",
            "INFERENCE_CAPACITY_API_RETRIES": "0",
            "INFERENCE_CAPACITY_API_RETRY_AFTER_MAX_SECONDS": "5",
        }
    )
    assert (s.api_qps, s.api_burst, s.api_retries, s.api_retry_after_max_seconds) == (
        20.5,
        40,
        0,
        5.0,
    )


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        (
            "INFERENCE_CAPACITY_API_QPS",
            "0",
            "INFERENCE_CAPACITY_API_QPS must be a finite number > 0",
        ),
        ("INFERENCE_CAPACITY_API_QPS", "-3", "INFERENCE_CAPACITY_API_QPS must be >= 0"),
        ("INFERENCE_CAPACITY_API_QPS", "inf", "INFERENCE_CAPACITY_API_QPS must be a finite"),
        ("INFERENCE_CAPACITY_API_QPS", "fast", "INFERENCE_CAPACITY_API_QPS must be a number"),
        ("INFERENCE_CAPACITY_API_BURST", "0", "INFERENCE_CAPACITY_API_BURST must be a finite"),
        ("INFERENCE_CAPACITY_API_BURST", "1.5", "INFERENCE_CAPACITY_API_BURST must be an integer"),
        ("INFERENCE_CAPACITY_API_RETRIES", "-1", "INFERENCE_CAPACITY_API_RETRIES must be >= 0"),
        (
            "INFERENCE_CAPACITY_API_RETRY_AFTER_MAX_SECONDS",
            "nan",
            "INFERENCE_CAPACITY_API_RETRY_AFTER_MAX_SECONDS must be a finite number > 0",
        ),
    ],
)
def test_bad_api_settings_name_the_variable(name: str, raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings.Settings.from_env({name: raw})


# --- the operator's REST client against a real socket -----------------------------------------


#: a /version answer with every field VersionInfo requires
VERSION = {
    "major": "1", "minor": "37", "gitVersion": "v1.37.2", "gitCommit": "0" * 40,
    "gitTreeState": "clean", "buildDate": "2026-11-01T00:00:00Z", "goVersion": "go1.25",
    "compiler": "gc", "platform": "linux/amd64",
}  # fmt: skip


@dataclass
class Script:
    """What the test server answers, in order (the last one repeats), and what it was asked."""

    answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    seen: list[tuple[str, str, bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, str]]:
        with self.lock:
            self.seen.append((method, path, body))
            i = min(len(self.seen), len(self.answers)) - 1
            return self.answers[i]


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a drained 429 leaves the connection usable

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, headers = script.next(self.command, self.path, body)
            if status == 200:
                payload = json.dumps({**VERSION, "kind": "PodList", "apiVersion": "v1",
                                      "metadata": {}, "items": []}).encode()  # fmt: skip
            else:
                payload = json.dumps(
                    {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                     "message": "too many requests, please try again later"}
                ).encode()  # fmt: skip
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PATCH = _answer

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    finally:
        httpd.shutdown()
        httpd.server_close()


def _client(
    url: str, retries: int = 3, max_wait: float = 60.0, bucket: TokenBucket | None = None
) -> tuple[client.ApiClient, list[float]]:
    """The operator's client (k8s.new_api_client) for the test server; its retry sleeps are
    recorded, not slept."""
    cfg = client.Configuration(host=url)
    api = k8s.new_api_client(cfg, bucket or TokenBucket(1000.0, 1000))
    rest_client = api.rest_client
    assert isinstance(rest_client, k8s.CivilRESTClient)
    slept: list[float] = []
    rest_client.policy = RetryPolicy(max_retries=retries, max_wait_seconds=max_wait)
    rest_client._sleep = slept.append
    return api, slept


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def test_a_429_with_retry_after_is_sent_again_after_that_wait(
    server: tuple[str, Script],
) -> None:
    url, script = server
    script.answers = [(429, {"Retry-After": "3"}), (429, {"Retry-After": "1"}), (200, {})]
    api, slept = _client(url)
    before = _sample("inference_capacity_api_retries_total", {"code": "429"})
    version = client.VersionApi(api).get_code()
    assert version.git_version == "v1.37.2"
    assert slept == [3.0, 1.0]
    assert [m for m, _, _ in script.seen] == ["GET"] * 3
    assert _sample("inference_capacity_api_retries_total", {"code": "429"}) == before + 2


def test_a_write_is_retried_with_the_same_body(server: tuple[str, Script]) -> None:
    url, script = server
    script.answers = [(429, {"Retry-After": "2"}), (200, {})]
    api, slept = _client(url)
    client.CoreV1Api(api).patch_namespaced_config_map(
        "cm", "ns", {"data": {"k": "v"}}, _content_type="application/merge-patch+json"
    )
    assert slept == [2.0]
    assert [(m, p) for m, p, _ in script.seen] == [
        ("PATCH", "/api/v1/namespaces/ns/configmaps/cm")
    ] * 2
    assert script.seen[0][2] == script.seen[1][2] == b'{"data": {"k": "v"}}'


def test_it_gives_up_after_the_limit_with_the_api_exception(server: tuple[str, Script]) -> None:
    url, script = server
    script.answers = [(429, {"Retry-After": "5"})]
    api, slept = _client(url, retries=2)
    with pytest.raises(ApiException) as raised:
        client.CoreV1Api(api).list_namespaced_pod("ns")
    assert raised.value.status == 429
    assert "too many requests" in (raised.value.body or "")
    assert len(script.seen) == 3  # the request and two retries
    assert slept == [5.0, 5.0]


def test_a_429_without_retry_after_backs_off_exponentially_capped(
    server: tuple[str, Script],
) -> None:
    url, script = server
    script.answers = [(429, {})]
    api, slept = _client(url, retries=4, max_wait=1.5)
    with pytest.raises(ApiException):
        client.VersionApi(api).get_code()
    assert slept == [0.5, 1.0, 1.5, 1.5]
    assert len(script.seen) == 5


def test_a_5xx_is_retried_only_when_the_server_said_when(server: tuple[str, Script]) -> None:
    url, script = server
    script.answers = [(503, {"Retry-After": "1"}), (200, {})]
    api, slept = _client(url)
    client.VersionApi(api).get_code()
    assert slept == [1.0] and len(script.seen) == 2

    script.seen.clear()
    script.answers = [(503, {})]
    with pytest.raises(ApiException) as raised:
        client.VersionApi(api).get_code()
    assert raised.value.status == 503 and len(script.seen) == 1


def test_urllib3_does_not_retry_statuses_underneath(server: tuple[str, Script]) -> None:
    """urllib3's default Retry would send a GET answered 429 with Retry-After again by itself
    (three times); with no retries in the policy the server must see one request."""
    url, script = server
    script.answers = [(429, {"Retry-After": "0"})]
    api, slept = _client(url, retries=0)
    with pytest.raises(ApiException):
        client.VersionApi(api).get_code()
    assert len(script.seen) == 1 and slept == []
    assert Retry.DEFAULT.is_retry("GET", 429, has_retry_after=True)  # what was switched off


def test_every_request_takes_a_token(server: tuple[str, Script]) -> None:
    url, script = server
    script.answers = [(200, {})]
    clock = FakeClock()
    bucket = TokenBucket(qps=10.0, burst=2, clock=clock, sleep=clock.sleep)
    api, _ = _client(url, bucket=bucket)
    before = _sample("inference_capacity_api_throttle_seconds_total")
    for _ in range(4):
        client.VersionApi(api).get_code()
    # a streaming read (_preload_content=False) takes one too
    raw = client.CoreV1Api(api).list_namespaced_pod("ns", watch=True, _preload_content=False)
    raw.release_conn()
    assert clock.slept == pytest.approx([0.1, 0.1, 0.1])
    assert len(script.seen) == 5
    assert _sample("inference_capacity_api_throttle_seconds_total") == pytest.approx(before + 0.3)


def test_the_shared_client_and_preflight_use_the_civil_client() -> None:
    api = k8s.new_api_client(client.Configuration(host="http://127.0.0.1:9"))
    assert isinstance(api.rest_client, k8s.CivilRESTClient)
    assert api.rest_client.bucket is k8s.shared_bucket()
    policy = api.rest_client.policy
    s = settings.current()
    assert (policy.max_retries, policy.max_wait_seconds) == (
        s.api_retries,
        s.api_retry_after_max_seconds,
    )
