"""Kopf's own client on a bounded connection pool (controller/session.py): the limit counts
the watch streams Kopf keeps open, and the session it hands Kopf opens no more connections than
that, however many requests are in flight (a real socket server counts them)."""

from __future__ import annotations

import asyncio
import dataclasses

import kopf

from inference_capacity import settings
from inference_capacity.controller import handlers, session


def _settings(**kw: object) -> settings.Settings:
    return dataclasses.replace(settings.Settings(), **kw)  # type: ignore[arg-type]


def test_the_limit_counts_kopfs_watch_streams() -> None:
    base = settings.Settings().kopf_connections
    # cluster-wide: one stream per watched kind, plus Kopf's CRD and Namespace observers
    assert session.connection_limit(_settings(standalone=True)) == 2 + 2 + base
    # namespaced: a stream per kind per namespace
    assert session.connection_limit(_settings(namespaces=("a", "b", "c"))) == 2 * 3 + 2 + base
    # peering (not standalone) watches its peering object
    assert session.connection_limit(_settings(peering="p")) == 2 + 2 + 1 + base
    assert session.connection_limit(_settings(standalone=True, kopf_connections=3)) == 2 + 2 + 3
    # a pattern matches namespaces not known yet: no limit, as Kopf's own client
    assert session.connection_limit(_settings(namespaces=("team-*",))) == 0


def test_the_watched_kinds_are_the_handlers_kinds() -> None:
    """KOPF_WATCHED_KINDS must follow the handlers: a kind watched but not counted would take
    a request connection for its stream."""
    assert handlers.icap_changed is not None  # the handlers are registered
    registry = kopf.get_default_registry()
    kinds = {
        sel.any_name
        for reg in (registry._changing, registry._watching, registry._indexing)
        for sel in reg.get_all_selectors()
    }
    assert kinds == set(session.KOPF_WATCHED_KINDS)


def test_our_login_replaces_kopfs_fallback() -> None:
    registry = kopf.get_default_registry()
    ours = [h for h in registry._activities.get_all_handlers() if not h._fallback]
    assert any(h.fn is session.login for h in ours)


async def test_the_session_opens_at_most_its_limit() -> None:
    """64 requests at once through a session limited to 4 connections: the server sees 4
    connections (keep-alive, each reused), never more; the same through an unlimited session
    opens many more (the test can fail)."""
    opened: list[int] = []
    live = 0
    peak = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal live, peak
        opened.append(1)
        live += 1
        peak = max(peak, live)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                await asyncio.sleep(0.02)
                body = b'{"kind":"Status"}'
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            live -= 1
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    info = kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}", token="t")

    async def burst(limit: int) -> int:
        opened.clear()
        ctx = session.bounded_session(info, limit)
        try:

            async def one() -> None:
                async with ctx.aiohttp_session.get(f"{info.server}/api") as r:
                    assert r.status == 200
                    assert r.request_info.headers["Authorization"] == "Bearer t"
                    await r.read()

            await asyncio.wait_for(asyncio.gather(*(one() for _ in range(64))), 60)
        finally:
            await ctx.aiohttp_session.close()
        return len(opened)

    try:
        assert await burst(4) <= 4
        assert peak <= 4
        peak = 0
        assert await burst(0) > 4
    finally:
        server.close()
        await server.wait_closed()


def test_the_operators_own_client_keeps_a_connection_per_thread() -> None:
    """urllib3's pool of the shared client holds a connection for every thread that may use
    it at once (its default, 5 per CPU, is 10 on 2 cores: below 16 workers, so requests past it
    opened and dropped a connection each)."""
    from kubernetes import client

    from inference_capacity.controller import k8s

    s = settings.current()
    api = k8s.new_api_client(client.Configuration())
    kept = api.rest_client.pool_manager.connection_pool_kw["maxsize"]
    assert kept == k8s.pool_size(s) >= s.workers + s.refresh_workers
    api.close()
