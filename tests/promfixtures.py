"""pytest plugin: a real Prometheus over a TSDB backfilled from a generated vLLM trace.

Register with ``pytest_plugins = [..., "tests.promfixtures"]`` in ``tests/conftest.py``.

Fixtures:

- ``vllm_trace`` (session): the ``tests.vllm_trace.Trace``, ending ten minutes ago.
- ``prometheus_server`` (session): ``PromServer(url, trace, data_dir)``; ``promtool tsdb
  create-blocks-from openmetrics`` backfills the trace, then ``prometheus`` serves it on
  127.0.0.1 with no scrape targets. Started once per session, killed at the end.
- ``prometheus_url`` (session): its base URL.
- ``bearer_proxy`` (session): ``Proxy(url, token)``, a reverse proxy to that Prometheus that
  answers 401 unless ``Authorization: Bearer <token>`` (Prometheus itself only does basic auth).
- ``tls_proxy`` (session): ``Proxy(url, token=None, ca_pem)``, the same over HTTPS with a
  self-signed certificate for 127.0.0.1 (needs the ``openssl`` CLI, else skipped).
- ``closed_port_url``: an http URL where nothing listens.
- ``http_stub``: a factory for a local HTTP server answering every request with one status and
  body (for failure modes that need no Prometheus).
- ``slow_stub``: a factory for a local Prometheus stub that answers every query after a delay
  (an empty vector), counting the requests it holds open at once (``SlowServer``).

Without ``prometheus``/``promtool`` on PATH the fixtures skip with how to install them (the
Debian package ``prometheus``), and fail instead when ``CI`` is set: CI must not go green by
skipping the only test of the Prometheus integration.
"""

from __future__ import annotations

import http.server
import os
import select
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.vllm_trace import INTERVAL, Trace, generate

INSTALL_HINT = (
    "the Prometheus tests need `prometheus` and `promtool` on PATH: install the Debian package "
    "`prometheus` (`sudo apt-get install prometheus`; .ci/run does this)"
)


def require_prometheus() -> tuple[str, str]:
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    if prom and tool:
        return prom, tool
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but {INSTALL_HINT}", pytrace=False)
    pytest.skip(INSTALL_HINT)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class PromServer:
    url: str
    trace: Trace
    data_dir: Path


@dataclass(frozen=True)
class Proxy:
    url: str
    token: str | None = None
    ca_pem: str | None = None


@pytest.fixture(scope="session")
def vllm_trace() -> Trace:
    end = int(time.time()) // INTERVAL * INTERVAL - 600
    return generate(end)


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-3000:]
    raise RuntimeError(f"prometheus did not become ready at {url} within {timeout}s:\n{tail}")


@pytest.fixture(scope="session")
def prometheus_server(
    tmp_path_factory: pytest.TempPathFactory, vllm_trace: Trace
) -> Iterator[PromServer]:
    prom, tool = require_prometheus()
    root = tmp_path_factory.mktemp("prometheus")
    trace_file = root / "trace.om"
    trace_file.write_text(vllm_trace.openmetrics())
    data = root / "tsdb"
    backfill = subprocess.run(
        [tool, "tsdb", "create-blocks-from", "openmetrics", str(trace_file), str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if backfill.returncode != 0:
        raise RuntimeError(f"promtool backfill failed:\n{backfill.stdout}\n{backfill.stderr}")
    trace_file.unlink()
    config = root / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = root / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                prom,
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                # the backfilled blocks are hours old; keep everything
                "--storage.tsdb.retention.time=3650d",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_ready(url, proc, log, timeout=30)
        yield PromServer(url=url, trace=vllm_trace, data_dir=data)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="session")
def prometheus_url(prometheus_server: PromServer) -> str:
    return prometheus_server.url


def _proxy_handler(upstream: str, token: str | None) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

        def _reply(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the client went away (an observation ended at a failed query)
                pass

        def do_GET(self) -> None:  # noqa: N802
            if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
                self._reply(401, b'{"status":"error","errorType":"unauthorized"}')
                return
            try:
                with urllib.request.urlopen(upstream + self.path, timeout=30) as r:
                    self._reply(r.status, r.read(), r.headers.get("Content-Type", ""))
            except urllib.error.HTTPError as e:
                self._reply(e.code, e.read())

    return Handler


@dataclass
class _Running:
    server: http.server.ThreadingHTTPServer
    thread: threading.Thread

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many clients connect at once in the concurrency tests


def _serve(
    handler: type[http.server.BaseHTTPRequestHandler], context: ssl.SSLContext | None = None
) -> tuple[int, _Running]:
    server = _Server(("127.0.0.1", 0), handler)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server.server_address[1], _Running(server, thread)


@pytest.fixture(scope="session")
def bearer_proxy(prometheus_url: str) -> Iterator[Proxy]:
    token = "s3cret-token"
    port, running = _serve(_proxy_handler(prometheus_url, token))
    try:
        yield Proxy(url=f"http://127.0.0.1:{port}", token=token)
    finally:
        running.stop()


@pytest.fixture(scope="session")
def tls_proxy(prometheus_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the TLS test needs the openssl CLI to make a self-signed certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    port, running = _serve(_proxy_handler(prometheus_url, None), context)
    try:
        yield Proxy(url=f"https://127.0.0.1:{port}", ca_pem=cert.read_text())
    finally:
        running.stop()


@pytest.fixture
def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def http_stub() -> Iterator[Callable[[int, bytes], str]]:
    """``http_stub(status, body) -> url``: a server answering every GET with that reply."""
    running: list[_Running] = []

    def start(status: int, body: bytes) -> str:
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def do_GET(self) -> None:  # noqa: N802
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client went away (its observation ended at a failure)
                    pass

        port, r = _serve(Handler)
        running.append(r)
        return f"http://127.0.0.1:{port}"

    yield start
    for r in running:
        r.stop()


EMPTY_VECTOR = b'{"status":"success","data":{"resultType":"vector","result":[]}}'


class SlowServer:
    """A Prometheus stub answering every GET with an empty vector after ``delay`` seconds
    (``head``: bytes of the body sent at once, the rest after the delay). ``open``/``peak``:
    requests held open now / at most at once; ``total``: requests received."""

    def __init__(self, delay: float, head: bytes = b"") -> None:
        self.delay = delay
        self.head = head
        self.open = self.peak = self.total = 0
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def do_GET(self) -> None:  # noqa: N802
                with server._lock:
                    server.open += 1
                    server.total += 1
                    server.peak = max(server.peak, server.open)
                held = True
                try:
                    body = server.head + EMPTY_VECTOR
                    if server.head:
                        self.send_response(200)
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(server.head)
                        self.wfile.flush()
                    if self._client_left(server.delay):
                        return
                    if not server.head:
                        self.send_response(200)
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                    # no longer held before the last bytes go out: a client that reuses its
                    # connection slot as soon as it has them must not find this one counted
                    # (it was, until the handler thread got back: 7 open of a 6-slot client)
                    with server._lock:
                        server.open -= 1
                    held = False
                    self.wfile.write(body[len(server.head) :])
                except OSError:  # the client gave up (its timeout, a cancelled observation)
                    pass
                finally:
                    if held:
                        with server._lock:
                            server.open -= 1

            def _client_left(self, seconds: float) -> bool:
                """Wait ``seconds``; True as soon as the client closes the connection."""
                deadline = time.monotonic() + seconds
                while (left := deadline - time.monotonic()) > 0:
                    readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
                    if readable and self.connection.recv(1, socket.MSG_PEEK) == b"":
                        return True
                return False

        self._handler = Handler
        port, self._running = _serve(Handler)
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self._running.stop()


@pytest.fixture
def slow_stub() -> Iterator[Callable[..., SlowServer]]:
    """``slow_stub(delay, head=b"") -> SlowServer``, stopped after the test."""
    servers: list[SlowServer] = []

    def start(delay: float, head: bytes = b"") -> SlowServer:
        servers.append(SlowServer(delay, head))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()
