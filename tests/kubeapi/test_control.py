"""Fault injection, request recording, the admin API and the standalone server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from .fixtures import KubeAPI, wait_for
from .helpers import Http, WatchReader

ROOT = Path(__file__).resolve().parents[2]
CM = "/api/v1/namespaces/default/configmaps"


def test_fail_next_requests_then_recover(kubeapi: KubeAPI) -> None:
    http = Http(kubeapi.url)
    http.post(CM, {"metadata": {"name": "c"}})
    kubeapi.faults.fail(409, "PATCH", r"/configmaps/c", times=1)
    kubeapi.faults.fail(503, "PATCH", r"/configmaps/c", times=1)
    codes = [http.patch(f"{CM}/c", {"data": {"a": str(i)}}).status_code for i in range(3)]
    assert codes == [409, 503, 200]
    kubeapi.faults.fail(429, "GET", r"/configmaps", times=1, retry_after=2)
    throttled = http.get(CM)
    assert throttled.status_code == 429 and throttled.headers["Retry-After"] == "2"
    assert throttled.json()["details"]["retryAfterSeconds"] == 2
    assert http.get(CM).status_code == 200


def test_python_client_retries_nothing_but_sees_injected_500(kubeapi: KubeAPI) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(kubeapi.api_client())
    kubeapi.faults.fail(500, "GET", r"/api/v1/namespaces/default$", times=1)
    with pytest.raises(ApiException) as info:
        core.read_namespace("default")
    assert info.value.status == 500
    assert core.read_namespace("default").metadata.name == "default"


def test_delay(kubeapi: KubeAPI) -> None:
    http = Http(kubeapi.url)
    kubeapi.faults.delay(0.3, "GET", r"/api/v1/namespaces$")
    started = time.monotonic()
    assert http.get("/api/v1/namespaces").status_code == 200
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    http.get("/api/v1/namespaces")
    assert time.monotonic() - started < 0.3


def test_drop_watches_ends_streams(kubeapi: KubeAPI) -> None:
    http = Http(kubeapi.url)
    watch = WatchReader(http, f"{CM}?watch=true&resourceVersion=1")
    wait_for(lambda: kubeapi.requests.filter(verb="watch"), message="the watch to start")
    assert kubeapi.faults.drop_watches() == 1
    assert watch.next() is None
    watch.close()


def test_request_log_against_rbac_rules(kubeapi: KubeAPI) -> None:
    http = Http(kubeapi.url)
    http.crd()
    kubeapi.requests.clear()
    http.widget("w1")
    http.get("/apis/example.com/v1/widgets")
    http.patch(
        "/apis/example.com/v1/namespaces/default/widgets/w1/status", {"status": {"phase": "x"}}
    )
    http.post(
        "/api/v1/namespaces/default/events",
        {"metadata": {"generateName": "e-"}, "involvedObject": {"name": "w1"}},
    )
    http.get("/api")
    records = kubeapi.requests.resource_requests()
    assert [(r.verb, r.group, r.resource, r.subresource, r.namespace) for r in records] == [
        ("create", "example.com", "widgets", "", "default"),
        ("list", "example.com", "widgets", "", ""),
        ("patch", "example.com", "widgets", "status", "default"),
        ("create", "", "events", "", "default"),
    ]
    role = [
        {
            "apiGroups": ["example.com"],
            "resources": ["widgets"],
            "verbs": ["create", "list", "watch"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]
    assert kubeapi.requests.not_allowed_by(role) == {("example.com", "widgets/status", "patch")}
    role.append({"apiGroups": ["example.com"], "resources": ["widgets/status"], "verbs": ["patch"]})
    assert kubeapi.requests.not_allowed_by(role) == set()


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.kubeapi",
            "--port",
            "0",
            "--kubeconfig",
            str(kubeconfig),
            "-v",
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        wait_for(kubeconfig.exists, message="the kubeconfig")
        yield proc, kubeconfig
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_standalone_server_admin_api_and_sigterm(
    standalone: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, kubeconfig = standalone
    url = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert requests.get(f"{url}/readyz", timeout=5).text == "ok"
    rule = requests.post(
        f"{url}/_kubeapi/faults",
        json={"status": 503, "method": "GET", "path": "/api/v1/namespaces$", "times": 1},
        timeout=5,
    )
    assert rule.status_code == 201
    assert requests.get(f"{url}/api/v1/namespaces", timeout=5).status_code == 503
    assert requests.get(f"{url}/api/v1/namespaces", timeout=5).status_code == 200
    log = requests.get(f"{url}/_kubeapi/requests", timeout=5).json()["items"]
    assert [(r["verb"], r["resource"], r["code"]) for r in log if r["resource"]] == [
        ("list", "namespaces", 503),
        ("list", "namespaces", 200),
    ]
    assert requests.post(f"{url}/_kubeapi/expire", timeout=5).status_code == 200
    stream = requests.get(f"{url}/api/v1/namespaces?watch=true&resourceVersion=1", timeout=5)
    assert '"code":410' in stream.text
    assert requests.post(f"{url}/_kubeapi/drop-watches", timeout=5).json() == {"dropped": 0}
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "GET /api/v1/namespaces 503" in stderr  # -v logs one line per request
    assert "Traceback" not in stderr
