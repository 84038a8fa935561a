"""Kopf's own HTTP client with a bounded connection pool.

Kopf's default client (``kopf._cogs.clients.auth.APIContext``) is an ``aiohttp`` session whose
``TCPConnector`` has ``limit=0``: every request that finds no idle connection opens a new one.
After a restart with 1,000 InferenceCapacities waiting, Kopf starts a worker for each and all of
them write their status at about the same time: the operator held ~1,500 TLS connections to the
kube-apiserver, each with asyncio's 256 KiB TLS read buffer (``asyncio.sslproto.SSLProtocol``,
``max_size``): ~200 MB of its peak, beside a TLS handshake per connection on both sides.

The login handler here logs in as Kopf's own fallback does (``kopf.login_via_client``: the
official client's kubeconfig or in-cluster config) and hands Kopf a session
(``kopf.AiohttpSession``, Kopf closes it) whose connector opens at most ``kopf_connections``
connections beside the watch streams Kopf keeps open; a request past them waits for a free one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import kopf

from .. import settings
from . import metrics
from .apirequest import classify

#: the resources Kopf itself watches (the kinds of the handlers in handlers.py): each a stream
#: per namespace it serves, or one over the cluster
KOPF_WATCHED_KINDS = ("inferencecapacities", "deployments")
#: Kopf's own observers beside them: CustomResourceDefinitions and Namespaces
OBSERVER_STREAMS = 2
#: characters that make a ``--namespace`` a pattern (Kopf's globs): the namespaces it matches,
#: and so the watch streams, are not known in advance
GLOB_CHARS = frozenset("*?[!")


def connection_limit(s: settings.Settings) -> int:
    """The connector's limit: the watch streams Kopf keeps open plus ``s.kopf_connections`` for
    requests. 0 (aiohttp: no limit, Kopf's own default) when a namespace is a pattern: a limit
    below the number of streams would leave every request waiting behind them."""
    if any(GLOB_CHARS & set(ns) for ns in s.namespaces):
        return 0
    per_kind = len(s.namespaces) if s.namespaces else 1
    peering = 0 if (s.standalone or s.peering is None) else 1
    streams = len(KOPF_WATCHED_KINDS) * per_kind + OBSERVER_STREAMS + peering
    return streams + s.kopf_connections


async def _count(
    _session: aiohttp.ClientSession, _ctx: Any, params: aiohttp.TraceRequestStartParams
) -> None:
    """Kopf's requests in ``inference_capacity_api_requests_total`` (client "kopf")."""
    metrics.API_REQUESTS.labels("kopf", *classify(params.method, str(params.url))).inc()


def counted() -> aiohttp.TraceConfig:
    """An aiohttp trace that counts every request the session sends."""
    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(_count)
    return trace


def bounded_session(info: kopf.ConnectionInfo, limit: int) -> kopf.AiohttpSession:
    """The session Kopf would build for ``info`` (its TLS context, headers and proxy), with
    ``limit`` connections at most, its requests counted. Must run on Kopf's event loop."""
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        proxy=info.proxy_url,
        trust_env=info.trust_env,
        trace_configs=[counted()],
    )
    return kopf.AiohttpSession(
        aiohttp_session=session,
        server=info.server,
        default_namespace=info.default_namespace,
        priority=info.priority,
        expiration=info.expiration,
    )


@kopf.on.login()
async def login(**kwargs: Any) -> kopf.AiohttpSession | None:
    """Kopf's fallback login (the official client's configuration), on a bounded pool."""
    # the official client may read files or run a kubeconfig's exec plugin: not on the loop
    info = await asyncio.to_thread(kopf.login_via_client, **kwargs)
    if info is None:
        return None
    return bounded_session(info, connection_limit(settings.current()))
