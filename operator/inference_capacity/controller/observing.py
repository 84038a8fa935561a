"""The Prometheus loop of a reconcile: observe (cached per refresh interval), fold the observed
workload into the plan input, and compare the predicted pool with the real one.

Prometheus failing never stops the operator: it keeps sizing from the spec and says so in the
``Observed`` condition. A prediction drift is an Event and a ``Calibrated=False`` condition,
never a silent change of the formulas.

I/O: the queries are coroutines (``observe.observe_async``) on the operator's I/O loop
(:mod:`.ioloop`, a daemon thread ``operator-io`` shared with the Hub fetches), started at the
first observation and stopped by ``shutdown`` (Kopf's cleanup). A reconcile is a sync Kopf
handler in Kopf's executor; it submits the observation to that loop
(``run_coroutine_threadsafe``) and waits at most ``observe_wait_seconds`` for it, then goes on
with the last observation or ``Pending``. Not
Kopf's own loop: answers are parsed on the loop, and a large one there would stall Kopf's watch
streams and the dispatch of every handler; on a loop of its own a hostile Prometheus delays only
observations. Bounds: one observation in flight per resource (a new source cancels the old
one), at most 4 queries of one observation at once, ``prometheus_connections`` requests open
over all resources, each within ``PromSource.timeout_s`` (10 s). While a query waits no thread
is held (a host name is resolved in the loop's default executor, as aiohttp does; the hosts are
those the admin's URL prefixes allow).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Mapping
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import Any

from .. import settings
from ..api import InferenceCapacitySpec
from ..engines import predict_startup
from ..engines.vllm_config import EngineConfigError, read_engine
from ..observe import (
    Calibration,
    Client,
    Observation,
    PromSource,
    calibrate,
    fromspec,
    observe_async,
)
from ..observe.observation import (
    PENDING,
    PROMETHEUS_UNREACHABLE,
    TOKEN_SECRET_NOT_ALLOWED,
)
from ..planner import PlanInput
from . import ioloop, k8s

#: URL prefixes the cluster admin allows Prometheus queries to (``run
#: --prometheus-allowed-url-prefix``, Helm ``prometheus.allowedUrlPrefixes``); empty (the
#: default): every ``fromPrometheus`` is refused. The resource author does not choose where the
#: operator connects.
ALLOWED_URL_PREFIXES_ENV = "INFERENCE_CAPACITY_PROMETHEUS_ALLOWED_URL_PREFIXES"
#: a Secret is sent as a bearer token only when it carries this label with value "true"
TOKEN_SECRET_LABEL = "capacity.inference.dev/prometheus-token"


def allowed_url_prefixes() -> tuple[str, ...]:
    return settings.current().prometheus_allowed_url_prefixes


_NotAllowed = fromspec.NotAllowed


_cache: dict[str, tuple[float, Observation]] = {}
_cache_lock = threading.Lock()


@dataclass
class Observed:
    observation: Observation
    plan_input: PlanInput
    calibration: Calibration | None
    status: dict[str, Any]


def _source(spec: InferenceCapacitySpec, namespace: str) -> PromSource:
    fp = spec.workload.from_prometheus
    assert fp is not None
    fromspec.check_url(
        fp.url,
        allowed_url_prefixes(),
        "the operator's",
        "the cluster admin has allowed none",
        "The admin sets them with --prometheus-allowed-url-prefix (Helm: "
        "prometheus.allowedUrlPrefixes)",
    )
    token = None
    if fp.bearer_token_secret_ref is not None:
        ref = fp.bearer_token_secret_ref
        secret = k8s.read_secret(namespace, ref.name)
        where = "spec.workload.fromPrometheus.bearerTokenSecretRef"
        if secret is None:
            raise _NotAllowed(
                TOKEN_SECRET_NOT_ALLOWED,
                f"{where}: Secret {ref.name!r} not found or not readable by the operator",
            )
        labels, data = secret
        if labels.get(TOKEN_SECRET_LABEL) != "true":
            raise _NotAllowed(
                TOKEN_SECRET_NOT_ALLOWED,
                f'{where}: Secret {ref.name!r} lacks the label {TOKEN_SECRET_LABEL}: "true" '
                "that opts it in as a Prometheus token; it was not used and nothing was sent",
            )
        token = data.get(ref.key)
        if not token:
            raise _NotAllowed(
                TOKEN_SECRET_NOT_ALLOWED, f"{where}: Secret {ref.name!r} has no key {ref.key!r}"
            )
    ca = None
    if fp.ca_config_map_ref is not None:
        ref2 = fp.ca_config_map_ref
        ca = k8s.get_config_maps(namespace, [ref2.name]).get(ref2.name, {}).get(ref2.key)
    return fromspec.source(spec, namespace, token, ca)


#: how long a reconcile waits for an observation it just started before going on without it
OBSERVE_WAIT_SECONDS = settings.current().observe_wait_seconds


PROMETHEUS_CLIENT = "prometheus"


def _client() -> Client:
    """The loop's one Prometheus client (made there at first use, closed by ``shutdown``)."""
    return ioloop.current().resource(
        PROMETHEUS_CLIENT,
        lambda: Client(max(1, settings.current().prometheus_connections)),
        Client.close,
    )


async def _observe(source: PromSource) -> Observation:
    return await observe_async(source, client=_client())


def _submit(source: PromSource) -> Future[Observation]:
    return ioloop.submit(_observe(source))


#: at most one observation in flight per resource: resource key -> (source, its future)
_inflight: dict[str, tuple[PromSource, Future[Observation]]] = {}


def _observe_cached(key: str, source: PromSource, refresh_s: float) -> Observation | None:
    """The observation of ``source`` for resource ``key``: fresh from the cache; else the one
    in flight if it is done (or finishes within OBSERVE_WAIT_SECONDS); else the last one (stale)
    while a new one runs; None when there is none yet. One observation in flight per resource:
    one of an older source (the spec changed) is cancelled when a new one starts."""
    now = time.monotonic()
    ckey = f"{key}|{source}"
    with _cache_lock:
        hit = _cache.get(ckey)
        if hit is not None and now - hit[0] < refresh_s:
            return hit[1]
        running = _inflight.get(key)
        started = running is None or running[0] != source
        if running is not None and started:
            running[1].cancel()
        if started:
            fut = _submit(source)
            _inflight[key] = (source, fut)
        else:
            assert running is not None
            fut = running[1]
    try:
        # only the reconcile that starts an observation waits (briefly) for it; later ones look
        obs = fut.result(timeout=OBSERVE_WAIT_SECONDS if started else 0)
    except FutureTimeout:
        return hit[1] if hit is not None else None
    except CancelledError:
        return hit[1] if hit is not None else None
    except Exception as exc:  # a programming error in the reader: say so, do not loop on it
        obs = Observation(
            ok=False,
            reason=PROMETHEUS_UNREACHABLE,
            message=f"observation failed ({type(exc).__name__})",
            window=source.window,
            at=time.time(),
        )
    with _cache_lock:
        if (got := _inflight.get(key)) is not None and got[1] is fut:
            del _inflight[key]
            _cache[ckey] = (time.monotonic(), obs)
    return obs


def inflight() -> int:
    """Observations in flight now (all resources)."""
    with _cache_lock:
        return sum(not fut.done() for _, fut in _inflight.values())


def observe_and_merge(
    spec: InferenceCapacitySpec,
    namespace: str,
    key: str,
    inp: PlanInput,
    running_flags: Mapping[str, str],
) -> Observed | None:
    """None when the spec has no ``workload.fromPrometheus``."""
    fp = spec.workload.from_prometheus
    if fp is None:
        return None
    try:
        source = _source(spec, namespace)
    except _NotAllowed as exc:
        obs = Observation(
            ok=False, reason=exc.reason, message=str(exc), window=fp.window, at=time.time()
        )
    except ValueError as exc:
        obs = Observation(
            ok=False, reason="QueryRejected", message=str(exc), window=fp.window, at=time.time()
        )
    else:
        got = _observe_cached(key, source, float(fp.refresh_seconds))
        obs = got or Observation(
            ok=False,
            reason=PENDING,
            message=f"querying Prometheus at {source.url} (in the background)",
            window=fp.window,
            at=time.time(),
        )
    workload = fromspec.fold(inp.workload, obs, fp.mode)
    new_inp = inp if workload is inp.workload else replace(inp, workload=workload)
    calibration = None
    predicted = None
    if obs.pods:
        predicted = _predicted_blocks(inp, obs, running_flags)
        calibration = calibrate(predicted, obs.pods)
    return Observed(obs, new_inp, calibration, _status(obs, calibration, predicted))


def _predicted_blocks(
    inp: PlanInput, obs: Observation, running: Mapping[str, str]
) -> dict[str, int]:
    """What the ledger predicts each pod allocated, at the flags that pod reports running."""
    out: dict[str, int] = {}
    try:
        seqs = read_engine(running, {}, inp.engine.version).scheduler.max_num_seqs
    except EngineConfigError:
        seqs = None
    for pod, pool in obs.pods.items():
        settings = inp.engine
        if pool.gpu_memory_utilization is not None:
            settings = replace(settings, gpu_memory_utilization=pool.gpu_memory_utilization)
        if seqs is not None:
            settings = replace(settings, max_num_seqs=seqs)
        if pool.block_size:
            settings = replace(settings, block_size=pool.block_size)
        if inp.kv_pool_bytes is not None and "kv-cache-memory-bytes" in running:
            # the pod runs with an absolute pool: vLLM ignores the utilization for it
            settings = replace(settings, kv_cache_memory_bytes=inp.kv_pool_bytes)
        try:
            p = predict_startup(
                inp.model, inp.gpu.total_bytes, inp.gpu.name, inp.tp, inp.pp, settings
            )
        except ValueError:
            continue
        out[pod] = p.num_gpu_blocks
    return out


def _status(
    obs: Observation, cal: Calibration | None, predicted: Mapping[str, int] | None
) -> dict[str, Any]:
    def q(x: Any) -> dict[str, float] | None:
        return None if x is None else {"p50": x.p50, "p95": x.p95, "p99": x.p99}

    blocks = [p.num_gpu_blocks for p in obs.pods.values() if p.num_gpu_blocks is not None]
    first = next(iter(obs.pods.values()), None)
    pred_vals = list((predicted or {}).values())
    return {
        "numGpuBlocks": min(blocks) if blocks else None,
        "blockSize": first.block_size if first else None,
        "gpuMemoryUtilization": first.gpu_memory_utilization if first else None,
        "kvUsageP95": obs.kv_usage_p95,
        "promptTokens": q(obs.prompt_tokens),
        "outputTokens": q(obs.output_tokens),
        "peakConcurrency": obs.peak_concurrency,
        "preemptionsPerHour": obs.preemptions_per_hour,
        "prefixCacheHitRate": obs.prefix_cache_hit_rate,
        "predictedNumGpuBlocks": min(pred_vals) if pred_vals else None,
        "predictionErrorPercent": cal.error_percent if cal else None,
        "samples": obs.samples,
        "window": obs.window,
        "at": dt.datetime.fromtimestamp(obs.at, dt.UTC)
        .replace(microsecond=0)
        .isoformat()
        .replace("+00:00", "Z"),
    }


def forget(key: str) -> None:
    """Drop a deleted resource's observations, cancelling the one in flight."""
    with _cache_lock:
        for k in [k for k in _cache if k.startswith(key + "|")]:
            del _cache[k]
        running = _inflight.pop(key, None)
    if running is not None:
        running[1].cancel()


def shutdown() -> None:
    """Cancel the observations in flight and stop the operator's I/O loop (operator shutdown;
    the Hub fetches on it stop too)."""
    ioloop.shutdown()
