"""A fault-injecting HTTPS proxy in front of the real kube-apiserver.

The operator under test talks to the proxy; the proxy forwards every request unchanged (bearer
token included, so the real apiserver authenticates and authorizes it) and streams the answer
back. On request it answers with an error instead (409/429/500/503 ... for the next N matching
requests), delays requests, ends every open watch stream, or ends them with an in-stream
``410 Gone`` ERROR event (as an apiserver does when a resumed watch's resourceVersion is too old).
Every request is recorded as its RBAC (verb, group, resource, subresource) with the answer's code.

It runs an aiohttp server on its own event loop in a background thread.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections.abc import Awaitable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
from aiohttp import web

from tests.realk8s.faults import Faults, RequestLog, RequestRecord

_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}


def rbac_of(method: str, path: str, query: dict[str, list[str]]) -> RequestRecord:
    """The RBAC attributes kube-apiserver derives from a request (its RequestInfoFactory)."""
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        return RequestRecord(verb=method.lower(), group="", version="", resource="",
                             namespace="", subresource="", method=method, path=path)  # fmt: skip
    if parts[0] == "api":
        group, rest = "", parts[1:]
    else:
        group, rest = (parts[1] if len(parts) > 1 else ""), parts[2:]
    version, rest = (rest[0] if rest else ""), rest[1:]
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if resource == "namespaces" and name:
        namespace = name
    watch = query.get("watch", ["false"])[0] in ("true", "1")
    verb = {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if name else "deletecollection",
    }.get(method.upper(), "get" if name else ("watch" if watch else "list"))
    if method.upper() == "GET" and watch:
        verb = "watch"
    return RequestRecord(verb=verb, group=group, version=version, resource=resource,
                         namespace=namespace, subresource=sub, name=name, method=method,
                         path=path)  # fmt: skip


def _status(code: int, message: str) -> dict[str, Any]:
    reasons = {
        400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
        409: "Conflict", 410: "Expired", 422: "Invalid", 429: "TooManyRequests",
        500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
    }  # fmt: skip
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reasons.get(code, "InternalError"),
        "code": code,
    }


class _Watch:
    def __init__(self, path: str, response: web.StreamResponse) -> None:
        self.path = path
        self.response = response
        self.end: asyncio.Event = asyncio.Event()
        self.expire = False


class FaultProxy:
    """``start()`` → ``url``; ``faults`` and ``requests`` as the tests use them."""

    def __init__(self, upstream: str, ca: Path, cert: Path, key: Path) -> None:
        self.upstream = upstream.rstrip("/")
        self.ca, self.cert, self.key = ca, cert, key
        self.faults = Faults()
        self.requests = RequestLog()
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="proxy")
        self._watches: set[_Watch] = set()
        self._expire_paths: set[str] = set()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.faults.bind("drop_watches", lambda: self._call(self._drop_watches(False)))
        self.faults.bind("expire", lambda: self._call(self._drop_watches(True)))

    def _call(self, coro: Awaitable[int]) -> int:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    async def _start(self) -> None:
        client_ctx = ssl.create_default_context(cafile=str(self.ca))
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=client_ctx, limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ctx.load_cert_chain(str(self.cert), str(self.key))
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=server_ctx)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"https://127.0.0.1:{port}"

    def stop(self) -> None:
        async def _stop() -> None:
            await self._drop_watches(False)
            if self._runner is not None:
                await self._runner.cleanup()
            if self._session is not None:
                await self._session.close()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(_stop(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    async def _drop_watches(self, expire: bool) -> int:
        n = 0
        for w in list(self._watches):
            w.expire = expire
            w.end.set()
            if expire:
                self._expire_paths.add(w.path)
            n += 1
        return n

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        full = request.path_qs
        query = parse_qs(urlsplit(full).query)
        record = rbac_of(request.method, path, query)
        delay, rule = self.faults.take(request.method, full)
        if delay:
            await asyncio.sleep(delay)
        body = await request.read()
        if rule is not None and rule.status is not None:
            status = rule.status
            headers = {"Content-Type": "application/json"}
            if rule.retry_after is not None:
                headers["Retry-After"] = str(rule.retry_after)
            self._record(record, status, request)
            text = json.dumps(_status(status, rule.message or f"injected {status}"))
            return web.Response(status=status, text=text, headers=headers)
        watch = record.verb == "watch"
        if (
            watch
            and path in self._expire_paths
            and query.get("resourceVersion", [""])[0]
            not in (
                "",
                "0",
            )
        ):
            self._expire_paths.discard(path)
            return await self._expired_stream(request, record)
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        try:
            # forwarded as sent: aiohttp would add "Content-Type: application/octet-stream" to a
            # body without one (the kubernetes client sends none), which the apiserver answers 415
            upstream = await self._session.request(
                request.method,
                self.upstream + full,
                data=body or None,
                headers=headers,
                skip_auto_headers=("Content-Type", "User-Agent", "Accept-Encoding"),
            )
        except aiohttp.ClientError as exc:
            self._record(record, 502, request)
            return web.Response(status=502, text=json.dumps(_status(503, str(exc))))
        async with upstream:
            resp = web.StreamResponse(status=upstream.status)
            for k, v in upstream.headers.items():
                if k.lower() not in _HOP:
                    resp.headers[k] = v
            if not watch:
                data = await upstream.read()
                self._record(record, upstream.status, request, _message(upstream.status, data))
                resp.content_length = len(data)
                await resp.prepare(request)
                await resp.write(data)
                await resp.write_eof()
                return resp
            self._record(record, upstream.status, request)
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            w = _Watch(path, resp)
            self._watches.add(w)
            try:
                await self._pump(upstream, resp, w)
            finally:
                self._watches.discard(w)
            return resp

    async def _pump(
        self, upstream: aiohttp.ClientResponse, resp: web.StreamResponse, w: _Watch
    ) -> None:
        ended = asyncio.ensure_future(w.end.wait())
        try:
            while True:
                chunk_task = asyncio.ensure_future(upstream.content.readany())
                done, _ = await asyncio.wait(
                    {chunk_task, ended}, return_when=asyncio.FIRST_COMPLETED
                )
                if ended in done:
                    chunk_task.cancel()
                    if w.expire:
                        await resp.write(_expired_event())
                    break
                chunk = chunk_task.result()
                if not chunk:
                    break
                await resp.write(chunk)
            await resp.write_eof()
        except (ConnectionResetError, aiohttp.ClientError, asyncio.CancelledError):
            pass
        finally:
            ended.cancel()

    async def _expired_stream(
        self, request: web.Request, record: RequestRecord
    ) -> web.StreamResponse:
        self._record(record, 200, request)
        resp = web.StreamResponse(status=200)
        resp.headers["Content-Type"] = "application/json"
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(_expired_event())
        await resp.write_eof()
        return resp

    def _record(
        self, record: RequestRecord, code: int, request: web.Request, message: str = ""
    ) -> None:
        self.requests.add(
            RequestRecord(
                verb=record.verb, group=record.group, version=record.version,
                resource=record.resource, namespace=record.namespace,
                subresource=record.subresource, name=record.name, method=record.method,
                path=request.path_qs, code=code,
                user_agent=request.headers.get("User-Agent", ""), message=message,
            )
        )  # fmt: skip


def _message(code: int, data: bytes) -> str:
    if code < 400:
        return ""
    try:
        return str(json.loads(data).get("message", ""))
    except (ValueError, AttributeError):
        return data[:200].decode(errors="replace")


def _expired_event() -> bytes:
    event = {"type": "ERROR", "object": _status(410, "too old resource version (injected)")}
    return (json.dumps(event) + "\n").encode()
