"""Small helpers shared by the kubeapi tests (raw HTTP with ``requests``, watch readers)."""

from __future__ import annotations

import contextlib
import http.client as httplib
import json
import queue
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests

CRD_PATH = Path(__file__).parent / "manifests" / "widgets-crd.yaml"
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"


class Http:
    """A thin ``requests`` wrapper for a server URL; JSON in, response out."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = requests.Session()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str | None = None,
        **kwargs: Any,
    ) -> requests.Response:
        headers = dict(kwargs.pop("headers", {}))
        data = None
        if body is not None:
            data = body if isinstance(body, str | bytes) else json.dumps(body)
            headers["Content-Type"] = content_type or "application/json"
        return self.session.request(
            method,
            self.url + path,
            data=data,
            headers=headers,
            timeout=kwargs.pop("timeout", 10),
            **kwargs,
        )

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any, **kwargs: Any) -> requests.Response:
        return self.request("POST", path, body, **kwargs)

    def put(self, path: str, body: Any, **kwargs: Any) -> requests.Response:
        return self.request("PUT", path, body, **kwargs)

    def patch(self, path: str, body: Any, kind: str = "merge", **kwargs: Any) -> requests.Response:
        return self.request(
            "PATCH", path, body, content_type=f"application/{kind}-patch+json", **kwargs
        )

    def delete(self, path: str, body: Any = None, **kwargs: Any) -> requests.Response:
        return self.request("DELETE", path, body, **kwargs)

    def crd(self) -> None:
        import yaml

        crd = yaml.safe_load(CRD_PATH.read_text())
        response = self.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        assert response.status_code == 201, response.text

    def widget(self, name: str, size: int = 3, **extra: Any) -> dict[str, Any]:
        body = {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": name},
            "spec": {"size": size},
            **extra,
        }
        response = self.post(WIDGETS, body)
        assert response.status_code == 201, response.text
        return dict(response.json())


class WatchReader:
    """Read a watch stream in a thread; events come out of a queue (None when it ends)."""

    def __init__(self, http: Http, path: str, timeout: float = 10) -> None:
        url = urllib.parse.urlsplit(http.url)
        self.conn = httplib.HTTPConnection(url.hostname, url.port, timeout=timeout)
        self.conn.request("GET", path, headers={"Accept": "application/json"})
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while True:
                line = self.response.readline()
                if not line:
                    break
                if line.strip():
                    self.events.put(json.loads(line))
        except Exception:  # noqa: BLE001 - any read failure means the stream has ended
            pass
        finally:
            self.events.put(None)

    def next(self, timeout: float = 5) -> dict[str, Any] | None:
        return self.events.get(timeout=timeout)

    def take(self, count: int, timeout: float = 5) -> list[dict[str, Any]]:
        items = []
        for _ in range(count):
            item = self.next(timeout)
            assert item is not None, f"stream ended after {items}"
            items.append(item)
        return items

    def __iter__(self) -> Iterator[dict[str, Any] | None]:
        while True:
            item = self.next()
            yield item
            if item is None:
                return

    def close(self) -> None:
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.conn.close()
        self.thread.join(5)
