"""spec.model in the cluster: resolve a Hub id with the resource's own token, under a deadline.

Kopf runs the handlers in worker threads, so a Hub request never blocks the event loop; it must
not hold a handler worker either, nor let one tenant fill the threads that fetch. So:

- resolutions run in a small pool of their own (``INFERENCE_CAPACITY_MODEL_WORKERS``), never in
  a handler worker; a reconcile waits at most ``MODEL_RESOLVE_DEADLINE_SECONDS`` for one: past
  it, the reconcile reports ``ModelResolved=False`` (reason ``Resolving``) and is retried, while
  the fetch finishes in the background and fills the cache (:mod:`inference_capacity.model.source`:
  in memory by (id, commit), bounded), so the retry is a cache hit;
- one resolution per (namespace, model, revision, token) is in flight: a retry, or a second
  resource of the namespace naming the same model, joins it instead of queueing another;
- at most ``PER_NAMESPACE`` resolutions of one namespace hold a pool thread at a time; the rest
  of that namespace waits in its own queue, so one namespace naming many slow models cannot
  take the pool from the others;
- each Hub request times out after ``HUB_TIMEOUT_SECONDS``.

huggingface_hub's API is synchronous (revisions, gated access, its disk cache, offline mode), so
the fetch itself runs in a thread; these bounds are what keep it from being shared.

The token comes only from ``spec.model.tokenSecretRef``, a Secret in the resource's own
namespace; without one the request carries no token at all (the operator's own environment
never lends its credentials to a resource).
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from .. import settings
from ..api import InferenceCapacitySpec
from ..model.source import ModelSourceError, ResolvedModel
from ..resolve import ResolveError, draft_model_ref, resolve_draft_source, resolve_model_source
from . import k8s

MODEL_RESOLVE_DEADLINE_SECONDS = settings.current().model_resolve_deadline_seconds
#: per Hub request (connect / read)
HUB_TIMEOUT_SECONDS = settings.current().hub_timeout
_pool = ThreadPoolExecutor(
    max_workers=max(1, settings.current().model_workers),
    thread_name_prefix="model-resolve",
)
#: resolutions of one namespace that may hold a pool thread at the same time
PER_NAMESPACE = 1

_Key = tuple[str, str, str | None, str]
_lock = threading.Lock()
#: resolutions queued or running, by (namespace, model, revision, token digest)
_inflight: dict[_Key, Future[ResolvedModel | None]] = {}
#: per namespace: how many hold a pool thread, and the ones waiting for their turn
_running: dict[str, int] = {}
_waiting: dict[str, deque[tuple[_Key, Callable[[], ResolvedModel | None]]]] = {}


def _start_locked(key: _Key, work: Callable[[], ResolvedModel | None]) -> None:
    """Hand ``work`` to the pool (caller holds _lock and has counted it as running)."""
    fut = _inflight[key]

    def run() -> None:
        if fut.set_running_or_notify_cancel():
            try:
                fut.set_result(work())
            except BaseException as exc:  # carried to the waiting reconcile
                fut.set_exception(exc)
        _finished(key)

    _pool.submit(run)


def _finished(key: _Key) -> None:
    ns = key[0]
    with _lock:
        _inflight.pop(key, None)
        queue = _waiting.get(ns)
        if queue:
            nxt, work = queue.popleft()
            if not queue:
                del _waiting[ns]
            _start_locked(nxt, work)
            return
        left = _running.get(ns, 1) - 1
        if left > 0:
            _running[ns] = left
        else:
            _running.pop(ns, None)


def _submit(key: _Key, work: Callable[[], ResolvedModel | None]) -> Future[ResolvedModel | None]:
    """The resolution for ``key``: the one in flight, or a new one (queued behind the
    namespace's running ones when it has PER_NAMESPACE of them)."""
    with _lock:
        fut = _inflight.get(key)
        if fut is not None:
            return fut
        fut = Future()
        _inflight[key] = fut
        ns = key[0]
        if _running.get(ns, 0) < PER_NAMESPACE:
            _running[ns] = _running.get(ns, 0) + 1
            _start_locked(key, work)
        else:
            _waiting.setdefault(ns, deque()).append((key, work))
        return fut


def in_flight() -> dict[str, tuple[int, int]]:
    """Per namespace: (resolutions holding a thread, resolutions waiting their turn)."""
    with _lock:
        names = set(_running) | set(_waiting)
        return {ns: (_running.get(ns, 0), len(_waiting.get(ns, ()))) for ns in names}


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
    future = _submit(key, lambda: resolve_model_source(spec, token, HUB_TIMEOUT_SECONDS, False))
    try:
        source = future.result(timeout=MODEL_RESOLVE_DEADLINE_SECONDS)
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
    """The target's ``--speculative-config`` drafter, resolved as spec.model is: the same pool
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
        key, lambda: resolve_draft_source(model, revision, token, HUB_TIMEOUT_SECONDS, False)
    )
    try:
        source = future.result(timeout=MODEL_RESOLVE_DEADLINE_SECONDS)
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
