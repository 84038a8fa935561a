"""spec.model in the cluster: resolve a Hub id with the resource's own token, under a deadline.

No thread waits on the Hub: a resolution is a coroutine (:mod:`inference_capacity.model.
hub_async`, on huggingface_hub's ``httpx2.AsyncClient``) on the operator's I/O loop
(:mod:`.ioloop`, shared with the Prometheus queries). A reconcile (a sync Kopf handler in Kopf's
executor) submits it and waits at most ``MODEL_RESOLVE_DEADLINE_SECONDS`` for it: past it, the
reconcile reports ``ModelResolved=False`` (reason ``Resolving``) and is retried, while the fetch
finishes on the loop and fills the cache (:mod:`inference_capacity.model.source`: in memory by
(id, commit), bounded), so the retry is a cache hit. Bounds, so one tenant cannot take the
fetching from the others:

- one resolution per (namespace, model, revision, token) is in flight: a retry, or a second
  resource of the namespace naming the same model, joins it instead of starting another;
- at most ``PER_NAMESPACE`` resolutions of one namespace run at a time (the rest of that
  namespace waits its turn, in order), at most ``RESOLUTIONS`` over all namespaces;
- at most ``source.HEADER_WORKERS`` header reads of one resolution at once, at most
  ``hub_connections`` Hub requests open over all of them, each within ``HUB_TIMEOUT_SECONDS``
  from its start to its last byte.

The token comes only from ``spec.model.tokenSecretRef``, a Secret in the resource's own
namespace; without one the request carries no token at all (the operator's own environment
never lends its credentials to a resource).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from .. import settings
from ..api import InferenceCapacitySpec
from ..model.hub_async import HubClient, resolve_model_ref_async
from ..model.source import HEADER_WORKERS, ModelSourceError, ResolvedModel
from ..resolve import ResolveError, draft_model_ref, resolve_model_source_async
from . import ioloop, k8s

MODEL_RESOLVE_DEADLINE_SECONDS = settings.current().model_resolve_deadline_seconds
#: per Hub request (connect to last byte)
HUB_TIMEOUT_SECONDS = settings.current().hub_timeout
#: resolutions of one namespace that run at the same time
PER_NAMESPACE = max(1, settings.current().model_resolutions_per_namespace)
#: resolutions that run at the same time over all namespaces
RESOLUTIONS = max(1, settings.current().model_resolutions)

_Key = tuple[str, str, str | None, str]
Work = Callable[[HubClient], Awaitable[ResolvedModel | None]]
_lock = threading.Lock()
#: resolutions queued or running, by (namespace, model, revision, token digest)
_inflight: dict[_Key, Future[ResolvedModel | None]] = {}
#: per namespace: how many run, and how many wait for their turn
_running: dict[str, int] = {}
_waiting: dict[str, int] = {}


class _Hub:
    """What the Hub fetches keep on the I/O loop: the client, the bounds (asyncio objects are
    bound to the loop, so a new loop after a shutdown gets new ones)."""

    def __init__(self) -> None:
        self.client = HubClient(max(1, settings.current().hub_connections), HEADER_WORKERS)
        self.all = asyncio.Semaphore(RESOLUTIONS)
        self.namespaces: dict[str, asyncio.Semaphore] = {}

    async def close(self) -> None:
        await self.client.close()


def _hub() -> _Hub:
    return ioloop.current().resource("hub", _Hub, _Hub.close)


def _count(table: dict[str, int], ns: str, delta: int) -> None:
    with _lock:
        left = table.get(ns, 0) + delta
        if left > 0:
            table[ns] = left
        else:
            table.pop(ns, None)


async def _run(key: _Key, work: Work) -> ResolvedModel | None:
    hub = _hub()
    ns = key[0]
    sem = hub.namespaces.setdefault(ns, asyncio.Semaphore(PER_NAMESPACE))
    _count(_waiting, ns, 1)
    waiting = True
    try:
        async with sem, hub.all:  # FIFO: a namespace's resolutions run in the order they came
            _count(_waiting, ns, -1)
            waiting = False
            _count(_running, ns, 1)
            try:
                return await work(hub.client)
            finally:
                _count(_running, ns, -1)
    finally:
        if waiting:
            _count(_waiting, ns, -1)
        with _lock:  # all of these run on the one loop thread: no other is between here
            idle = ns not in _running and ns not in _waiting
        if idle:
            hub.namespaces.pop(ns, None)


def _submit(key: _Key, work: Work) -> Future[ResolvedModel | None]:
    """The resolution for ``key``: the one in flight, or a new one on the I/O loop (waiting
    behind the namespace's running ones when it has PER_NAMESPACE of them)."""
    with _lock:
        fut = _inflight.get(key)
        if fut is not None:
            return fut
        fut = ioloop.submit(_run(key, work))
        _inflight[key] = fut

    def done(f: Future[ResolvedModel | None]) -> None:
        with _lock:
            if _inflight.get(key) is f:
                del _inflight[key]

    fut.add_done_callback(done)
    return fut


def in_flight() -> dict[str, tuple[int, int]]:
    """Per namespace: (resolutions running, resolutions waiting their turn)."""
    with _lock:
        names = set(_running) | set(_waiting)
        return {ns: (_running.get(ns, 0), _waiting.get(ns, 0)) for ns in names}


def _wait(future: Future[ResolvedModel | None]) -> ResolvedModel | None:
    """The resolution within the deadline; FutureTimeout past it (or when the loop stopped)."""
    try:
        return future.result(timeout=MODEL_RESOLVE_DEADLINE_SECONDS)
    except CancelledError:
        raise FutureTimeout() from None


@dataclass(frozen=True)
class ModelOutcome:
    source: ResolvedModel | None  # None: configMapRef / inline config (resolved later)
    ok: bool
    reason: str
    message: str
    retry: bool = False


def _token(namespace: str, spec: InferenceCapacitySpec) -> str | bool | ModelOutcome:
    """The Hub token: spec.model.tokenSecretRef's value, ``False`` (no token at all) without
    one, or the refusal when the Secret cannot be read."""
    ref = spec.model.token_secret_ref
    if ref is None:
        return False
    value = k8s.read_secret_key(namespace, ref.name, ref.key)
    if not value:
        return ModelOutcome(
            None,
            False,
            "TokenSecretNotFound",
            f"spec.model.tokenSecretRef: Secret {namespace}/{ref.name} with key "
            f"{ref.key!r} not found (or not readable by the operator)",
        )
    return value.strip()


def _token_key(token: str | bool) -> str:
    return hashlib.sha256(token.encode()).hexdigest() if isinstance(token, str) else ""


def resolve_spec_model(namespace: str, spec: InferenceCapacitySpec) -> ModelOutcome:
    m = spec.model
    if m.name is None:
        kind = "configMap" if m.config_map_ref is not None else "inline config"
        return ModelOutcome(None, True, "Resolved", f"model config from the {kind}")
    token = _token(namespace, spec)
    if isinstance(token, ModelOutcome):
        return token
    key: _Key = (namespace, m.name, m.revision, _token_key(token))
    future = _submit(
        key, lambda hub: resolve_model_source_async(spec, token, HUB_TIMEOUT_SECONDS, hub)
    )
    try:
        source = _wait(future)
    except FutureTimeout:
        return ModelOutcome(
            None,
            False,
            "Resolving",
            f"spec.model.name: {m.name} is still being resolved on the Hub after "
            f"{MODEL_RESOLVE_DEADLINE_SECONDS:g} s; retrying",
            retry=True,
        )
    except ResolveError as exc:
        return ModelOutcome(None, False, exc.reason, str(exc))
    assert source is not None
    return ModelOutcome(source, True, "Resolved", describe_source(source))


def resolve_draft_model(
    namespace: str, spec: InferenceCapacitySpec, deployment: Mapping[str, Any]
) -> tuple[dict[tuple[str, str | None], ResolvedModel], ModelOutcome | None]:
    """The target's ``--speculative-config`` drafter, resolved as spec.model is: the same loop,
    and deadline, spec.model.tokenSecretRef's token or none, never a local path. Returns the
    drafters for :func:`~inference_capacity.resolve.resolve` and None, or the refusal."""
    ref = draft_model_ref(spec, deployment)
    if ref is None:
        return {}, None
    token = _token(namespace, spec)
    if isinstance(token, ModelOutcome):
        return {}, token
    model, revision = ref
    key: _Key = (namespace, f"draft:{model}", revision, _token_key(token))
    future = _submit(
        key, lambda hub: resolve_model_ref_async(model, revision, token, HUB_TIMEOUT_SECONDS, hub)
    )
    try:
        source = _wait(future)
    except FutureTimeout:
        return {}, ModelOutcome(
            None,
            False,
            "Resolving",
            f"--speculative-config: draft model {model} is still being resolved on the Hub "
            f"after {MODEL_RESOLVE_DEADLINE_SECONDS:g} s; retrying",
            retry=True,
        )
    except ModelSourceError as exc:
        return {}, ModelOutcome(
            None, False, exc.reason, f"--speculative-config: draft model {model!r}: {exc}"
        )
    assert source is not None  # resolve_draft_source always gives one, or raises
    return {ref: source}, None


def describe_source(src: ResolvedModel) -> str:
    where = {"hub": "the Hugging Face Hub", "catalog": "the built-in catalog", "local": "a path"}
    text = f"{src.id} from {where.get(src.source, src.source)}"
    if src.revision:
        text += f" at commit {src.revision}"
        if src.requested_revision and src.requested_revision != src.revision:
            text += f" ({src.requested_revision})"
    if src.checkpoint_bytes is not None:
        text += f"; checkpoint {src.checkpoint_bytes} B from its safetensors headers"
    return text


def model_status(spec: InferenceCapacitySpec, src: ResolvedModel | None) -> dict[str, Any]:
    """status.model."""
    if src is not None:
        return {
            "source": src.source,
            "id": src.id,
            "revision": src.revision,
            "requestedRevision": src.requested_revision,
            "checkpointBytes": src.checkpoint_bytes,
            "diskBytes": src.disk_bytes,
        }
    ref = spec.model.config_map_ref
    if ref is not None:
        return {"source": "configMap", "id": f"{ref.name}/{ref.key}"}
    return {"source": "inline", "id": "inline config"}
