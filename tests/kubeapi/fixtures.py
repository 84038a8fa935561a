"""Pytest fixtures: ``kubeapi`` starts a fresh in-memory API server for one test.

Used by ``benchmarks/reconcile.py`` (the in-memory column); ``kubectl_path`` and ``wait_for`` are
the real cluster's (``tests/realk8s/fixtures.py``), re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realk8s.faults import Faults, RequestLog
from tests.realk8s.fixtures import KubectlMixin, kubectl_path, wait_for

from .server import KubeAPIServer


class KubeAPI(KubectlMixin):
    """A running emulator plus the kubectl/client helpers the real cluster's tests use."""

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

    def object(self, group: str, plural: str, name: str, namespace: str = "") -> Any:
        """The stored object (or None), read directly from the server's memory."""
        return self.server.get_object(group, plural, namespace, name)


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


__all__ = ["KubeAPI", "kubeapi", "kubeapi_factory", "kubectl_path", "wait_for"]
