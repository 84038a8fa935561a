"""Read vLLM's own startup lines back from the target's pods (``pods/log``) and compare them with
the prediction: ``status.observed.startup``, the ``PredictionDrift`` condition, an Event and the
``inference_capacity_kv_tokens`` / ``inference_capacity_prediction_error_percent`` metrics.

Thin: the parsing is :mod:`inference_capacity.observe.startup_log` (pure), the prediction is
:func:`inference_capacity.engines.predict_startup`; here only which pods, when, and the bounds.

Which pods: one per pod-template hash (the label the Deployment controller sets) — a Ready pod,
else one whose vLLM container failed (last termination ``OOMKilled``, or a restart: then its
*previous* log is read, where vLLM's error is). At most :data:`MAX_TEMPLATES` hashes, at most
:data:`LIMIT_BYTES` of a log (``limitBytes``, and never more read off the socket), within
``settings.startup_log_timeout_seconds``.

When: a log is read once per (pod, restart count): a Ready vLLM has printed every startup line.
A log without them is read again after ``settings.startup_log_retry_seconds``; a log read is
kept for ``settings.startup_log_refresh_seconds`` and then read again (the bounded schedule).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .. import risks, settings
from ..engines import predict_startup
from ..engines.vllm_args import find_vllm_container, read_flags
from ..engines.vllm_config import at_running_flags
from ..observe.startup_log import LIMIT_BYTES, StartupLog, parse, prediction_errors
from ..planner import PlanInput
from ..risks import HostInput
from ..units import GiB
from . import k8s, metrics, state

log = logging.getLogger("inference_capacity.startup")

#: pod-template hashes observed per InferenceCapacity (newest pods first)
MAX_TEMPLATES = 4
TEMPLATE_HASH_LABEL = "pod-template-hash"


@dataclass(frozen=True)
class _Read:
    pod: str
    restarts: int
    at_monotonic: float
    at: str
    entry: dict[str, Any]
    has_numbers: bool


#: (resource key, template hash) -> the last read
_reads: state.Bounded[tuple[str, str], _Read] = state.Bounded()
#: resource key -> (label selector, monotonic time, the pods listed)
_pods: state.Bounded[str, tuple[str, float, list[dict[str, Any]]]] = state.Bounded(limit=1000)


def _iso(ts: float) -> str:
    return (
        dt.datetime.fromtimestamp(ts, dt.UTC)
        .replace(microsecond=0)
        .isoformat()
        .replace("+00:00", "Z")
    )


def _ready(pod: Mapping[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _container_status(pod: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == name:
            return dict(cs)
    return {}


def _oom_killed(cs: Mapping[str, Any]) -> bool:
    for key in ("lastState", "state"):
        term = (cs.get(key) or {}).get("terminated") or {}
        if term.get("reason") == "OOMKilled":
            return True
    return False


def _slim(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What is read of a listed Pod (kept for the listing's TTL): name, labels, times, the
    containers (their flags) and the status of containers and readiness."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    keep = ("name", "labels", "creationTimestamp", "deletionTimestamp")
    return {
        "metadata": {k: meta[k] for k in keep if k in meta},
        "spec": {"containers": (pod.get("spec") or {}).get("containers") or []},
        "status": {
            "conditions": [c for c in status.get("conditions") or [] if c.get("type") == "Ready"],
            "containerStatuses": [
                {k: cs.get(k) for k in ("name", "restartCount", "state", "lastState")}
                for cs in status.get("containerStatuses") or []
            ],
        },
    }


def _pick_pods(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """template hash -> the pod to read: one whose start failed (not Ready, restarted or
    OOM-killed: its previous log has vLLM's error), else a Ready one, else any (its NotReady
    entry); the hashes of the newest pods first, at most MAX_TEMPLATES."""
    by_hash: dict[str, list[dict[str, Any]]] = {}
    for p in pods:
        h = ((p.get("metadata") or {}).get("labels") or {}).get(TEMPLATE_HASH_LABEL)
        if h and not (p.get("metadata") or {}).get("deletionTimestamp"):
            by_hash.setdefault(str(h), []).append(p)

    def newest(ps: list[dict[str, Any]]) -> str:
        return max(str((p.get("metadata") or {}).get("creationTimestamp") or "") for p in ps)

    order = sorted(by_hash, key=lambda h: newest(by_hash[h]), reverse=True)[:MAX_TEMPLATES]
    out = {}
    for h in order:
        ps = sorted(by_hash[h], key=lambda p: str(p["metadata"].get("name")))
        failed = [p for p in ps if not _ready(p) and _restarted_or_oom(p)]
        ready = [p for p in ps if _ready(p)]
        out[h] = (failed or ready or ps)[0]
    return out


def _restarted_or_oom(pod: Mapping[str, Any]) -> bool:
    """A container of the pod restarted or was OOM-killed: evidence of a failed start."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if int(cs.get("restartCount") or 0) > 0 or _oom_killed(cs):
            return True
    return False


def _predicted(inp: PlanInput, flags: Mapping[str, str]) -> dict[str, object] | None:
    """What the ledger predicts vLLM prints with this pod's flags (its utilization, max-num-seqs
    and max-model-len over the spec's)."""
    eng = at_running_flags(inp.engine, flags)  # the pod's flags read as vLLM reads them
    if eng is None:
        return None
    try:
        p = predict_startup(inp.model, inp.gpu.total_bytes, inp.gpu.name, inp.tp, inp.pp, eng)
    except (ValueError, ArithmeticError):
        return None
    return p.to_json()


def _entry(
    h: str,
    pod: Mapping[str, Any],
    parsed: StartupLog | None,
    reason: str,
    message: str,
    restarts: int,
    oom: bool,
    predicted: Mapping[str, object] | None,
    at: str,
) -> dict[str, Any]:
    e: dict[str, Any] = {
        "templateHash": h,
        "pod": str(pod["metadata"]["name"]),
        "reason": reason,
        "message": message[:1000],
        "restartCount": restarts,
        "at": at,
    }
    if parsed is not None and parsed.rejected is None:
        e.update(
            {
                "vllmVersion": parsed.vllm_version,
                "weightsGib": parsed.weights_gib,
                "activationPeakGib": parsed.activation_peak_gib,
                "nonTorchGib": parsed.non_torch_gib,
                "cudaGraphGib": parsed.cuda_graph_gib,
                "cudaGraphEstimatedGib": parsed.cuda_graph_estimated_gib,
                "availableKvCacheGib": parsed.available_kv_cache_gib,
                "kvCacheTokens": parsed.kv_cache_tokens,
                "numGpuBlocks": parsed.num_gpu_blocks,
                "maxConcurrency": parsed.max_concurrency,
                "maxConcurrencyLen": parsed.max_concurrency_len,
            }
        )
        e = {k: v for k, v in e.items() if v is not None}
        if parsed.failure is not None:
            e["failure"] = parsed.failure.kind
            short = shortfall_gib(parsed)
            if short is not None:
                e["shortfallGib"] = round(short, 4)
        if predicted is not None:
            e["predictionErrorPercent"] = prediction_errors(parsed, dict(predicted))
            tokens = predicted.get("kv_cache_tokens")
            if isinstance(tokens, int):
                e["predictedKvCacheTokens"] = tokens
    if parsed is not None:
        e["bytesRead"] = parsed.bytes_read
    if oom and "failure" not in e:
        e["failure"] = "OOMKilled"
    return e


def _read_one(
    namespace: str, h: str, pod: Mapping[str, Any], container: str, inp: PlanInput
) -> _Read:
    s = settings.current()
    now = time.time()
    at = _iso(now)
    cs = _container_status(pod, container)
    restarts = int(cs.get("restartCount") or 0)
    oom = _oom_killed(cs)
    ready = _ready(pod)
    name = str(pod["metadata"]["name"])
    # a Ready pod: its current log has the startup lines; a restarted one: the previous log has
    # the error the last start died of
    previous = not ready and restarts > 0
    containers = (pod.get("spec") or {}).get("containers") or []
    flags: Mapping[str, str] = {}
    try:
        flags = read_flags(containers[find_vllm_container(containers, container)])
    except Exception:  # a pod whose container the operator cannot read: no prediction
        flags = {}
    predicted = _predicted(inp, flags)
    if not ready and restarts == 0 and not oom:
        e = _entry(h, pod, None, "NotReady", "no pod of this hash is Ready", 0, oom, None, at)
        return _Read(name, restarts, time.monotonic(), at, e, False)
    try:
        data = k8s.read_pod_log(
            namespace,
            name,
            container,
            limit_bytes=LIMIT_BYTES,
            timeout=s.startup_log_timeout_seconds,
            previous=previous,
        )
    except Exception as exc:  # 403 (no pods/log RBAC), 400 (no such log), a timeout
        msg = f"pods/log of {name}: {k8s.describe_error(exc)}"
        e = _entry(h, pod, None, "LogUnavailable", msg, restarts, oom, None, at)
        return _Read(name, restarts, time.monotonic(), at, e, False)
    parsed = parse(data)
    which = "previous log" if previous else "log"
    if parsed.rejected is not None:
        reason, msg = "Rejected", f"{which} of {name}: {parsed.rejected}; nothing taken from it"
    elif parsed.failure is not None or (oom and not ready):
        kind = parsed.failure.kind if parsed.failure else "OOMKilled"
        line = parsed.failure.line if parsed.failure else "last termination: OOMKilled"
        reason, msg = "Failed", f"{which} of {name}: {kind}: {line}"
    elif parsed.kv_cache_tokens is None and parsed.available_kv_cache_gib is None:
        reason = "NoStartupLines"
        msg = f"{which} of {name}: none of vLLM's startup lines in {parsed.bytes_read} bytes"
    else:
        reason, msg = "Observed", f"{which} of {name}: {parsed.matched} startup lines"
    e = _entry(h, pod, parsed, reason, msg, restarts, oom, predicted, at)
    return _Read(name, restarts, time.monotonic(), at, e, reason in ("Observed", "Failed"))


def observe(
    key: str,
    namespace: str,
    dep: Mapping[str, Any],
    container: str | None,
    inp: PlanInput,
) -> list[dict[str, Any]] | None:
    """``status.observed.startup`` for the target, reading only the logs not read yet (or due).
    None when the target's pods cannot be listed (RBAC) or it has no selector."""
    s = settings.current()
    selector = ((dep.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    if not selector:
        return None
    label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    listed = _pods.get(key)
    if (
        listed is not None
        and listed[0] == label_selector
        and (time.monotonic() - listed[1] < s.startup_pods_ttl_seconds)
    ):
        pods = listed[2]
    elif k8s.any_scheduled_pod(namespace, selector) is False:
        pods = []  # no pod of the target is on a Node (the cache says): no log to read yet
    else:
        try:
            got = k8s.list_pods(namespace, label_selector)
        except Exception as exc:
            log.info("pods of %s not listed: %s", namespace, k8s.describe_error(exc))
            return None
        if got is None:
            return None
        pods = [_slim(p) for p in got]
        _pods.set(key, (label_selector, time.monotonic(), pods))
    chosen = _pick_pods(pods)
    tmpl = (dep.get("spec") or {}).get("template", {}).get("spec", {}).get("containers") or []
    try:
        cname = str(tmpl[find_vllm_container(tmpl, container)]["name"])
    except Exception:  # refused earlier by resolve; nothing to read
        return None
    out = []
    now = time.monotonic()
    for h, pod in chosen.items():
        cs = _container_status(pod, cname)
        restarts = int(cs.get("restartCount") or 0)
        name = str(pod["metadata"]["name"])
        last = _reads.get((key, h))
        due = (
            last is None
            or last.pod != name
            or last.restarts != restarts
            or (last.entry.get("reason") == "NotReady" and _ready(pod))
            or now - last.at_monotonic
            > (s.startup_log_refresh_seconds if last.has_numbers else s.startup_log_retry_seconds)
        )
        if due:
            last = _read_one(namespace, h, pod, cname, inp)
            _reads.set((key, h), last)
        assert last is not None
        out.append(last.entry)
    _reads.pop_where(lambda k: k[0] != key or k[1] in chosen)
    return out


def drift(entries: list[dict[str, Any]], threshold: float) -> tuple[str, str, str]:
    """(status, reason, message) of the PredictionDrift condition."""
    errs = [
        (e["templateHash"], e["pod"], e["predictionErrorPercent"]["kvCacheTokens"], e)
        for e in entries
        if e.get("reason") == "Observed" and "kvCacheTokens" in e.get("predictionErrorPercent", {})
    ]
    if not errs:
        return "Unknown", "NotObserved", "no pod has printed its KV cache size yet"
    worst = max(errs, key=lambda x: abs(x[2]))
    h, pod, err, e = worst
    text = (
        f"pod-template-hash {h} (pod {pod}): vLLM printed GPU KV cache size "
        f"{e['kvCacheTokens']:,} tokens, predicted {e.get('predictedKvCacheTokens', 0):,} "
        f"({err:+.2f} %, threshold {threshold:g} %)"
    )
    if abs(err) > threshold:
        return "True", "KvTokensDrift", text
    return "False", "WithinThreshold", text


def publish(namespace: str, name: str, entries: list[dict[str, Any]]) -> None:
    """The observed and predicted KV tokens and the error per term of the newest observed hash."""
    seen = [e for e in entries if e.get("reason") == "Observed" and "kvCacheTokens" in e]
    if not seen:
        return
    e = seen[0]
    per = metrics.PER_RESOURCE
    per.set_in(namespace, name, "kv_by_source", "observed", float(e["kvCacheTokens"]))
    if "predictedKvCacheTokens" in e:
        per.set_in(namespace, name, "kv_by_source", "predicted", float(e["predictedKvCacheTokens"]))
    for term, err in (e.get("predictionErrorPercent") or {}).items():
        per.set_in(namespace, name, "prediction_error", str(term), float(err))


def forget(key: str) -> None:
    _reads.pop_where(lambda k: k[0] != key)
    _pods.pop_where(lambda k: k != key)
    _steps.pop_where(lambda k: k != key)
    _mem_steps.pop_where(lambda k: k != key)


def host_input(dep: Mapping[str, Any], index: int, flags: Mapping[str, str]) -> HostInput:
    """The vLLM container's memory request/limit, the host-memory flags it runs with and where
    its compile cache lives among the pod's volumes."""
    pod = (dep.get("spec") or {}).get("template", {}).get("spec", {}) or {}
    containers = pod.get("containers")
    container = (containers or [{}])[index] if containers else {}
    volumes = [v for v in (pod.get("volumes") or []) if isinstance(v, Mapping)]
    return risks.host_input(container, flags, volumes)


def shortfall_gib(parsed: StartupLog) -> float | None:
    """The GiB a failed start was short of, as vLLM's error line measured it: the free memory
    below the request (FreeMemoryCheck), the KV memory below one request at max-model-len
    (MaxSeqLenTooLong), the allocation that failed (CudaOutOfMemory: "Tried to allocate X")."""
    f = parsed.failure
    if f is None or f.needed_gib is None:
        return None
    if f.kind == "CudaOutOfMemory":
        return f.needed_gib
    if f.available_gib is None:
        return None
    return max(0.0, f.needed_gib - f.available_gib)


#: failures a lower --gpu-memory-utilization cures (more memory left outside vLLM's request)
STEP_BACK_KINDS = ("CudaOutOfMemory", "FreeMemoryCheck")
#: the most operational headroom steps back may add in all (fraction of the GPU)
MAX_STEP_BACK_FRACTION = 0.2

#: resource key -> (template hashes stepped back for, monotonic time of the last step, fraction
#: added in all)
_steps: state.Bounded[str, tuple[frozenset[str], float, float]] = state.Bounded()


#: resource key -> (template hashes stepped up for, monotonic time of the last step, the step)
_mem_steps: state.Bounded[str, tuple[frozenset[str], float, risks.MemoryStep]] = state.Bounded()


@dataclass(frozen=True)
class Adjustment:
    plan_input: PlanInput
    #: status.observed.adjustment (None: nothing changed)
    status: dict[str, Any] | None
    #: (kind, message) of a failed start of the newest template, for Ready=False
    failed: tuple[str, str] | None
    #: OOMKilled steps up of the memory request (spec.policy.setMemoryRequest), for the decision
    memory_step: risks.MemoryStep | None = None


def memory_step(
    key: str,
    cur: Mapping[str, Any] | None,
    host: HostInput | None,
    enforce: bool,
    window_s: float,
    now: float,
) -> risks.MemoryStep | None:
    """The memory step after an OOMKilled start of the newest template: one step of
    :data:`risks.MEMORY_STEP_FACTOR` per template hash, at most one per stabilization window
    and :data:`risks.MAX_MEMORY_STEPS` in all (never a loop: the base is the bound when first
    killed, so a raised request does not raise itself again)."""
    hashes, last, step = _mem_steps.get(key) or (frozenset(), -1e18, None)
    if (
        enforce
        and host is not None
        and cur is not None
        and cur.get("failure") == "OOMKilled"
        and str(cur.get("templateHash")) not in hashes
        and now - last >= window_s
    ):
        n = 0 if step is None else round(math.log(step.factor, risks.MEMORY_STEP_FACTOR))
        if n < risks.MAX_MEMORY_STEPS:
            bound = host.memory_limit if host.memory_limit is not None else host.memory_request
            base = step.base_bytes if step is not None else (bound or 0)
            step = risks.MemoryStep(risks.MEMORY_STEP_FACTOR ** (n + 1), base)
            _mem_steps.set(key, (hashes | {str(cur.get("templateHash"))}, now, step))
    return step


def _current(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    return entries[0] if entries else None


def adjust(
    key: str,
    inp: PlanInput,
    entries: list[dict[str, Any]],
    enforce: bool,
    window_s: float,
    hysteresis_percent: float,
    calibrate: bool,
    now: float | None = None,
    host: HostInput | None = None,
) -> Adjustment:
    """The plan input after what the pods printed: a failed start of the newest template gives
    ``failed``; in Enforce mode a CudaOutOfMemory / FreeMemoryCheck failure adds its measured
    shortfall to the operational headroom (a lower --gpu-memory-utilization), once per template
    hash and at most once per stabilization window; with ``calibrate`` (spec.policy
    .calibrateFromObserved) KV tokens vLLM printed below the prediction shrink the usable pool by
    their ratio (max-num-seqs and replicas sized from the observed tokens; never raised); with
    ``host`` (spec.policy.setMemoryRequest: the container's memory) an OOMKilled start steps
    the memory request up (:func:`memory_step`)."""
    t = time.monotonic() if now is None else now
    cur = _current(entries)
    failed = None
    out = inp
    status: dict[str, Any] | None = None
    steps, last, added = _steps.get(key) or (frozenset(), -1e18, 0.0)
    if cur is not None and cur.get("failure"):
        message = str(cur.get("message", ""))
        if cur["failure"] == "OOMKilled" and "OOMKilled" not in message:
            # the container status says so even when its previous log cannot be read
            message = f"pod {cur.get('pod')}: last termination OOMKilled; {message}"
        failed = (str(cur["failure"]), message)
        short = cur.get("shortfallGib")
        h = str(cur["templateHash"])
        if (
            enforce
            and cur["failure"] in STEP_BACK_KINDS
            and isinstance(short, int | float)
            and h not in steps
            and t - last >= window_s
            and added < MAX_STEP_BACK_FRACTION
        ):
            measured = short * GiB / inp.gpu.total_bytes
            # at least the hysteresis, or the decision would call the change immaterial
            util = inp.engine.gpu_memory_utilization or 0.9
            step = max(measured, util * hysteresis_percent / 100 * 1.01)
            step = min(step, MAX_STEP_BACK_FRACTION - added)
            steps, last, added = steps | {h}, t, added + step
            _steps.set(key, (steps, last, added))
    if added > 0:
        hr = replace(
            out.headroom,
            operational_fraction=min(0.9, out.headroom.operational_fraction + added),
        )
        out = replace(out, headroom=hr)
        status = {
            "kind": "StepBack",
            "reason": (
                f"vLLM failed to start ({failed[0] if failed else 'earlier'}); operational "
                f"headroom +{added:.4f} of the GPU (the measured shortfall, at least the "
                "hysteresis), so --gpu-memory-utilization is lower; at most one step per "
                "template hash and stabilization window"
            ),
            "operationalFractionAdded": round(added, 6),
        }
    if calibrate and cur is not None and cur.get("reason") == "Observed":
        obs, pred = cur.get("kvCacheTokens"), cur.get("predictedKvCacheTokens")
        if isinstance(obs, int) and isinstance(pred, int) and 0 < obs < pred:
            ratio = obs / pred
            kv = out.headroom.kv_safety_fraction
            new_kv = 1 - (1 - kv) * ratio
            out = replace(out, headroom=replace(out.headroom, kv_safety_fraction=new_kv))
            status = {
                **(status or {}),
                "kind": "Calibrated" if status is None else "StepBackAndCalibrated",
                "kvTokensRatio": round(ratio, 6),
                "kvSafetyFraction": round(new_kv, 6),
                "reason": (status["reason"] + "; " if status else "")
                + f"vLLM printed {obs:,} KV tokens, {(1 - ratio) * 100:.2f} % below the "
                f"predicted {pred:,}: max-num-seqs and replicas sized from the observed tokens "
                f"(usable pool x {ratio:.4f})",
            }
    mem = memory_step(key, cur, host, enforce, window_s, t)
    if mem is not None:
        why = (
            f"the vLLM container was OOMKilled; memory request at least {mem.factor:g} x "
            f"{mem.base_bytes / GiB:.2f} GiB (its memory bound when first killed, at least the "
            "load-time host estimate); one step per template hash and stabilization window, at "
            f"most {risks.MAX_MEMORY_STEPS}"
        )
        status = {
            **(status or {}),
            "kind": status["kind"] if status else "MemoryStepUp",
            "reason": (status["reason"] + "; " if status else "") + why,
            "memoryStepFactor": round(mem.factor, 6),
            "memoryBaseBytes": mem.base_bytes,
        }
    return Adjustment(out, status, failed, mem)


def forget_steps(key: str) -> None:
    _steps.pop_where(lambda k: k != key)
    _mem_steps.pop_where(lambda k: k != key)
