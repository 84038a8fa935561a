"""The CLI's synchronous transport (observe/sync_reader.py, prometheus-api-client) against the
real Prometheus of tests/promfixtures.py and local stubs (issue 25).

Both transports run the same steps of observe/queries.py; so for every source the observation
over prometheus-api-client must equal the operator's async one: the numbers, the reason, the
message (failure modes included). The bounds are checked on the sync path itself: a slow server,
an answer over the size cap, a redirect (not followed: the target never sees a request, the token
never leaves), a body that never reaches a message.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from inference_capacity.observe import Observation, PromSource, observe
from inference_capacity.observe.queries import MAX_RESPONSE_BYTES
from inference_capacity.observe.sync_reader import _Prom, observe_sync

if TYPE_CHECKING:
    from tests.promfixtures import PromServer, Proxy, SlowServer

pytestmark = pytest.mark.prometheus

LLAMA_SEL = 'namespace="default",pod=~"llama-8b-.*"'


def _both(source: PromSource, **kw: Any) -> tuple[Observation, Observation]:
    return observe_sync(source, **kw), observe(source, **kw)


@pytest.mark.parametrize(
    "selector,window",
    [
        (LLAMA_SEL, "7d"),  # the fleet: Observed
        ('pod=~"longctx-.*"', "7d"),  # BucketsTooCoarse
        ('pod="llama-8b-6d5f8-c3"', "7d"),  # the legacy names
        ('pod="llama-8b-canary-x9"', "7d"),  # InsufficientData
        ('pod="does-not-exist"', "7d"),  # NoSeries
        ('pod=~"("', "7d"),  # QueryRejected (HTTP 400)
        (LLAMA_SEL, "1h"),  # a window that holds the trace's last hour only
    ],
)
def test_the_sync_transport_observes_what_the_async_one_does(
    prometheus_server: PromServer, selector: str, window: str
) -> None:
    src = PromSource(prometheus_server.url, selector=selector, window=window)
    sync, async_ = _both(src, now=prometheus_server.trace.end)
    assert sync == async_


def test_a_fleet_observation_is_ok(prometheus_server: PromServer) -> None:
    obs = observe_sync(
        PromSource(prometheus_server.url, selector=LLAMA_SEL), now=prometheus_server.trace.end
    )
    assert obs.ok and obs.reason == "Observed", obs.message
    assert obs.prompt_tokens is not None and obs.peak_concurrency is not None


def test_it_is_prometheus_api_client_that_asks(prometheus_server: PromServer) -> None:
    from prometheus_api_client import PrometheusConnect
    from requests import Session

    from inference_capacity.observe.sync_reader import _session

    src = PromSource(prometheus_server.url, selector=LLAMA_SEL)
    with _session(src, src.url) as session:
        prom = _Prom(src, session, prometheus_server.trace.end)
        assert isinstance(prom.client, PrometheusConnect) and isinstance(session, Session)
        rows = prom.query(f"count(vllm:num_requests_running{{{LLAMA_SEL}}})")
    assert rows == [({}, 3.0)]  # three llama pods at the trace's end (the canary ended early)


def test_bearer_token_through_the_auth_option(
    bearer_proxy: Proxy, prometheus_server: PromServer
) -> None:
    end = prometheus_server.trace.end
    refused, refused_async = _both(PromSource(bearer_proxy.url, selector=LLAMA_SEL), now=end)
    assert refused.reason == "AuthRefused" and refused == refused_async
    ok = observe_sync(
        PromSource(bearer_proxy.url, selector=LLAMA_SEL, bearer_token=bearer_proxy.token), now=end
    )
    assert ok.ok, ok.message
    plain = observe_sync(PromSource(prometheus_server.url, selector=LLAMA_SEL), now=end)
    assert ok.prompt_tokens == plain.prompt_tokens and ok.at == plain.at


def test_tls_with_a_ca_bundle(tls_proxy: Proxy, prometheus_server: PromServer) -> None:
    end = prometheus_server.trace.end
    src = PromSource(tls_proxy.url, selector=LLAMA_SEL, ca_cert_pem=tls_proxy.ca_pem)
    obs = observe_sync(src, now=end)
    assert obs.ok, obs.message
    untrusted, untrusted_async = _both(PromSource(tls_proxy.url, selector=LLAMA_SEL), now=end)
    assert untrusted.reason == "PrometheusUnreachable" and "TLS" in untrusted.message
    assert untrusted == untrusted_async


# ---- bounds ----------------------------------------------------------------------------------


def test_unreachable_is_the_same_message(closed_port_url: str) -> None:
    src = PromSource(closed_port_url, timeout_s=1.0)
    sync, async_ = _both(src, now=1.0e9)
    assert sync.reason == "PrometheusUnreachable"
    assert sync.message.startswith(f"cannot reach Prometheus at {closed_port_url}: ")
    assert async_.message.startswith(f"cannot reach Prometheus at {closed_port_url}: ")


@pytest.mark.parametrize("head", [b"", b'{"status":"success",'])
def test_a_slow_server_times_out(slow_stub: Callable[..., SlowServer], head: bytes) -> None:
    """Headers late, or headers and the body's first bytes sent and the rest late."""
    srv = slow_stub(5.0, head)
    src = PromSource(srv.url, timeout_s=1.0)
    obs = observe_sync(src, now=1.0e9)
    # the server answers after 5 s: a client that waited for it would have an answer, not this
    assert obs.reason == "PrometheusUnreachable"
    assert obs.message == f"{srv.url} did not answer within 1 s (the per-request timeout)"
    assert srv.total == 1  # a timeout is not retried
    assert observe(src, now=1.0e9) == obs


class _Reply(http.server.BaseHTTPRequestHandler):
    status = 200
    body = b""
    location = ""
    hits: list[str]

    def do_GET(self) -> None:  # noqa: N802
        self.hits.append(self.headers.get("Authorization", ""))
        try:
            self.send_response(self.status)
            if self.location:
                self.send_header("Location", self.location)
            self.send_header("Content-Length", str(len(self.body)))
            self.end_headers()
            self.wfile.write(self.body)
        except OSError:
            pass  # the reader stops reading an answer it refuses

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def reply() -> Iterator[Callable[..., tuple[str, list[str]]]]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(status: int, body: bytes = b"", location: str = "") -> tuple[str, list[str]]:
        hits: list[str] = []
        attrs = {"status": status, "body": body, "location": location, "hits": hits}
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Reply,), attrs))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", hits

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def test_an_answer_over_the_cap_is_refused(reply: Callable[..., tuple[str, list[str]]]) -> None:
    url, _ = reply(
        200,
        b'{"status":"success","data":{"resultType":"vector","result":['
        + b" " * (MAX_RESPONSE_BYTES + 10)
        + b"]}}",
    )
    obs = observe_sync(PromSource(url, timeout_s=5.0), now=1.0e9)
    assert obs.reason == "PrometheusUnreachable"
    assert obs.message == f"{url} answered with more than 16 MiB"
    assert observe(PromSource(url, timeout_s=5.0), now=1.0e9) == obs


def test_a_redirect_is_not_followed(reply: Callable[..., tuple[str, list[str]]]) -> None:
    target, target_hits = reply(200, b"{}")
    url, hits = reply(302, b"", f"{target}/api/v1/query")
    src = PromSource(url, bearer_token="tok", timeout_s=2.0)
    obs = observe_sync(src, now=1.0e9)
    assert obs.reason == "PrometheusUnreachable"
    assert obs.message == f"{url} answered with a redirect (not followed)"
    assert target_hits == []  # nothing reached where the redirect pointed
    assert hits == ["Bearer tok"]  # the token went to the URL given, once
    assert observe(src, now=1.0e9) == obs


SECRET_BODY = b"AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG token=s3cret"


@pytest.mark.parametrize("status", [200, 400, 401, 500, 503])
def test_bodies_never_reach_the_message(
    reply: Callable[..., tuple[str, list[str]]], status: int
) -> None:
    url, hits = reply(status, SECRET_BODY)
    src = PromSource(url, timeout_s=2.0)
    obs = observe_sync(src, now=1.0e9)
    assert not obs.ok
    assert "wJalrXUtnFEMI" not in obs.message and "s3cret" not in obs.message
    # the first query's answer ends it; 503 is retried once, as on the operator's path
    assert len(hits) == (2 if status == 503 else 1)
    assert obs == observe(src, now=1.0e9)
