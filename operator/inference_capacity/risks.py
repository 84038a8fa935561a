"""The seven ways a vLLM replica runs out of memory, per resource, from the plan's ledger: each
with its margin in bytes (negative: it happens) and the flag that moves it.

1. ``load`` (GPU): the weights, plus one decoder layer in flight (a dequant / repack copy, assumed),
   against the memory free when the weights load (the device less the CUDA context).
2. ``startup`` (GPU): vLLM's free-memory check at startup (``v1/worker/utils.py::request_memory``):
   free memory must be at least ``--gpu-memory-utilization`` x total.
3. ``kvExhaustion`` (GPU): the KV pool against one request at max-model-len (vLLM refuses to start
   below it: ``kv_cache_utils.py::check_enough_kv_cache_memory``); the preemption probability of
   the sized batch (the distribution sizing) says how often a full batch outgrows it.
4. ``activation`` (GPU): prefill / sampler spikes beyond the batch vLLM profiled
   (``--max-num-batched-tokens``): only the headroom outside vLLM's budget absorbs them (the
   operational headroom and what is left unallocated).
5. ``cudaGraph`` (GPU): the CUDA-graph pool captured after the KV cache: outside vLLM's budget
   before 0.20 (it must fit in what vLLM does not request), an estimate inside it from 0.20
   (the capture can exceed the estimate: the 0.19 logs show up to +121 %).
6. ``compileCache`` (GPU): a pod whose torch.compile artifacts do not outlive it compiles cold at
   every start, and vLLM counts a cold compile's freed temporaries as activation in its profile
   (vllm-project/vllm#54122, open: ``profile_run`` compiles inside ``memory_profiling``), so its
   KV pool is smaller than the plan, which is a warm boot's (``vllm-startup-171/173``: 0.99 GiB
   on Qwen3-8B); at risk where the cache directory is on no volume that outlives the pod
   (:func:`compile_cache_state`) under a warm plan and a cold boot loses KV (the margin: minus
   what it loses, engines/vllm.py::cold_compile_loss; none where the warm profile peak is the
   larger); ``spec.engine.compileCache: cold`` plans the compile's peak.
7. ``host`` (CPU memory): the pod's memory limit (else request) against the load-time host peak
   (:func:`host_peak_bytes`, the one estimate: the risk, ``plan -o patch`` and the operator's
   ``spec.policy.setMemoryRequest`` all read it).

Pure: no Kubernetes API; :func:`host_input` reads :class:`HostInput` from the container spec.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from .engines.versions import Era
from .engines.vllm import cold_compile_loss
from .engines.vllm_flag_table import flag_table
from .planner import Plan
from .units import GiB

MiB: Final = 2**20

RiskKind = Literal[
    "load", "startup", "kvExhaustion", "activation", "cudaGraph", "compileCache", "host"
]

#: the Python process, torch, CUDA and NCCL libraries, the tokenizer (assumed: ~2 GiB resident
#: per vLLM process before any weight is read)
HOST_BASE_BYTES: Final = 2 * GiB


@dataclass(frozen=True)
class CompileCache:
    """vLLM's cache directory in the container and the volume holding it (``volume`` None: the
    container's own filesystem; ``persistent``: a volume source that outlives the pod)."""

    path: str | None  # None: set from a reference the spec does not resolve (valueFrom)
    volume: str | None = None
    persistent: bool = False


#: vLLM's cache root when neither ``VLLM_CACHE_ROOT`` nor ``XDG_CACHE_HOME`` is set:
#: ``~/.cache/vllm`` (vllm/envs.py, 0.27.1); the official images run as root
DEFAULT_HOME: Final = "/root"
#: pod volume sources that outlive the pod (a generic ``ephemeral`` volume, ``emptyDir`` and an
#: inline ``csi`` volume are created with it and go with it)
PERSISTENT_VOLUME_SOURCES: Final = frozenset(
    {
        "persistentVolumeClaim",
        "hostPath",
        "nfs",
        "cephfs",
        "glusterfs",
        "iscsi",
        "fc",
        "azureFile",
        "awsElasticBlockStore",
        "gcePersistentDisk",
    }
)


def compile_cache_state(
    container: Mapping[str, Any], volumes: list[Mapping[str, Any]]
) -> CompileCache:
    """Where vLLM keeps its compile artifacts in ``container`` (``VLLM_CACHE_ROOT``, else
    ``$XDG_CACHE_HOME/vllm``, else ``$HOME/.cache/vllm``: vllm/envs.py) and which of the pod's
    ``volumes`` holds it (the mount with the longest path containing it)."""
    env = {
        str(e.get("name")): e.get("value")
        for e in (container.get("env") or [])
        if isinstance(e, Mapping)
    }
    if "VLLM_CACHE_ROOT" in env:
        root = env["VLLM_CACHE_ROOT"]
    elif "XDG_CACHE_HOME" in env:
        root = None if env["XDG_CACHE_HOME"] is None else f"{env['XDG_CACHE_HOME']}/vllm"
    else:
        home = env.get("HOME", DEFAULT_HOME)
        root = None if home is None else f"{home}/.cache/vllm"
    if not isinstance(root, str):
        return CompileCache(None)
    path = root.rstrip("/") or "/"
    best: tuple[int, str] | None = None  # (mount path length, volume name)
    for m in container.get("volumeMounts") or []:
        mount = str(m.get("mountPath") or "").rstrip("/")
        inside = path == mount or path.startswith(mount + "/")
        if inside and (best is None or len(mount) > best[0]):
            best = (len(mount), str(m.get("name")))
    if best is None:
        return CompileCache(path)
    name = best[1]
    source = next((v for v in volumes if v.get("name") == name), {})
    return CompileCache(path, name, any(k in source for k in PERSISTENT_VOLUME_SOURCES))


@dataclass(frozen=True)
class HostInput:
    """The vLLM container's host memory: its request and limit (bytes, None: not set) and the
    flags that put bytes in host memory."""

    memory_request: int | None = None
    memory_limit: int | None = None
    cpu_offload_gb: float = 0.0
    swap_space_gb: float = 0.0
    #: None: the flag is not given (vLLM's default of the version, for a multimodal model)
    mm_processor_cache_gb: float | None = None
    #: where vLLM's torch.compile cache lives and whether it outlives the pod
    #: (:func:`compile_cache_state`); None: the pod spec was not read
    compile_cache: CompileCache | None = None


@dataclass(frozen=True)
class Risk:
    kind: RiskKind
    resource: Literal["gpu", "host"]
    margin_bytes: int | None
    at_risk: bool
    flag: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "resource": self.resource,
            "margin_bytes": self.margin_bytes,
            "margin_gib": None if self.margin_bytes is None else round(self.margin_bytes / GiB, 3),
            "at_risk": self.at_risk,
            "flag": self.flag,
            "detail": self.detail,
        }


def _items(plan: Plan, rank: int) -> dict[str, int]:
    """The ledger items of global rank ``rank`` (the ledger lists each distinct rank once: an
    identical rank uses the first one's)."""
    ledger = next((rl for rl in plan.ledger if rl.rank == rank), plan.ledger[0])
    out: dict[str, int] = {}
    for item in ledger.items:
        out[item.name] = out.get(item.name, 0) + item.bytes
    return out


def mm_processor_cache_gb(plan: Plan, host: HostInput) -> float:
    """GiB of one multimodal processor cache: ``--mm-processor-cache-gb``, else vLLM's default
    for the version (the flag table: 4 GiB in 0.11–0.33) when the model takes images/audio/video;
    0 for a text-only model (vLLM builds no processor cache for it)."""
    if host.mm_processor_cache_gb is not None:
        return host.mm_processor_cache_gb
    if not plan.input.model.mm_modalities:
        return 0.0
    run = flag_table().run("mm-processor-cache-gb", str(plan.prediction.settings.version))
    return float(run.default) if run is not None and run.default is not None else 0.0


def host_peak_bytes(plan: Plan, host: HostInput) -> int:
    """The load-time host peak of one pod (one replica: TP x PP ranks, DP engine cores).

    Terms (what is measured or read, what is assumed):

    * the weights of the replica, once (every rank's ledger weights): safetensors are mmap'd and
      read through the page cache, and the pages touched are charged to the pod's memory cgroup
      while the weights load (assumed: all of them at once, the worst case; vLLM reads one file
      at a time but the kernel keeps the pages until pressure);
    * :data:`HOST_BASE_BYTES` per rank process (assumed: Python, torch, CUDA/NCCL libraries, the
      tokenizer and pinned staging buffers);
    * ``--cpu-offload-gb`` and ``--swap-space`` per rank (vLLM's per-GPU meanings; the flags
      read from the container, 0 when absent: in the V1 engine of 0.11+ no swap space is
      allocated, so counting it is conservative);
    * the multimodal processor cache (:func:`mm_processor_cache_gb`) once per API-server process
      and once per engine core (``config/multimodal.py``: "duplicated for each API process and
      engine core process"; one API server assumed).
    """
    ranks = plan.input.tp * plan.input.pp
    dp = max(1, plan.input.engine.data_parallel)
    weights = sum(r.weights.total for r in plan.prediction.ranks)
    per_rank = (host.cpu_offload_gb + host.swap_space_gb) * GiB
    mm = mm_processor_cache_gb(plan, host) * GiB * (1 + dp)
    return int(HOST_BASE_BYTES * ranks + weights + per_rank * ranks + mm)


def parse_quantity(value: Any) -> int | None:
    """Bytes of a Kubernetes memory quantity ("64Gi", "1e9", "500M"); None when absent or
    unreadable."""
    if value is None:
        return None
    from kubernetes.utils import parse_quantity as _pq

    try:
        return int(math.ceil(_pq(str(value))))  # type: ignore[no-untyped-call]
    except (ValueError, ArithmeticError, TypeError):
        return None


def _gb(flags: Mapping[str, str], flag: str) -> float | None:
    raw = flags.get(flag)
    if raw is None:
        return None
    try:
        v = float(raw)
    except ValueError:
        return None
    return v if math.isfinite(v) and v >= 0 else None


def host_input(
    container: Mapping[str, Any],
    flags: Mapping[str, str],
    volumes: list[Mapping[str, Any]] | None = None,
) -> HostInput:
    """The vLLM container's memory request/limit and the host-memory flags it runs with; with
    the pod's ``volumes``, where its compile cache lives (:func:`compile_cache_state`)."""
    res = container.get("resources") or {}
    return HostInput(
        memory_request=parse_quantity((res.get("requests") or {}).get("memory")),
        memory_limit=parse_quantity((res.get("limits") or {}).get("memory")),
        cpu_offload_gb=_gb(flags, "cpu-offload-gb") or 0.0,
        swap_space_gb=_gb(flags, "swap-space") or 0.0,
        mm_processor_cache_gb=_gb(flags, "mm-processor-cache-gb"),
        compile_cache=None if volumes is None else compile_cache_state(container, volumes),
    )


#: flags that put bytes in host memory the estimate does not model: with
#: spec.policy.setMemoryRequest no request is written while the container sets one (fail closed)
HOST_UNMODELLED_FLAGS: Final[Mapping[str, str]] = {
    "kv-transfer-config": "a KV connector may keep KV blocks in host memory (LMCache, offloading)",
    "api-server-count": "more API-server processes, each with its own processor cache",
}


def host_unmodelled(flags: Mapping[str, str]) -> list[str]:
    """What the container sets that the host estimate does not model ([] when nothing)."""
    return [
        f"--{f}: {why}"
        for f, why in HOST_UNMODELLED_FLAGS.items()
        if f in flags and not (f == "api-server-count" and flags[f].strip() == "1")
    ]


#: each OOMKilled step multiplies the memory request by this (bounded: at most
#: :data:`MAX_MEMORY_STEPS` steps per resource, one per template hash and stabilization window)
MEMORY_STEP_FACTOR: Final = 1.25
MAX_MEMORY_STEPS: Final = 3


@dataclass(frozen=True)
class MemoryStep:
    """Steps up after OOMKilled starts: the request becomes at least ``base_bytes`` (the
    container's bound when first killed, or the estimate) x ``factor``."""

    factor: float
    base_bytes: int


def quantity(b: int) -> str:
    """A memory quantity of at least ``b`` bytes, in whole MiB."""
    return f"{math.ceil(b / MiB)}Mi"


def memory_target_bytes(plan: Plan, host: HostInput, step: MemoryStep | None = None) -> int:
    """The memory request spec.policy.setMemoryRequest wants: the load-time host peak, raised by
    the OOMKilled steps taken."""
    peak = host_peak_bytes(plan, host)
    if step is None:
        return peak
    return max(peak, math.ceil(step.factor * max(step.base_bytes, peak)))


def memory_resources(
    container: Mapping[str, Any], target: int
) -> tuple[dict[str, Any], tuple[int | None, int]] | None:
    """The ``resources`` patch that raises the container's memory request to ``target`` (and
    its limit when one exists below it), and (old, new) request bytes; None when the request
    already covers it. A request is never lowered."""
    res = container.get("resources") or {}
    req_raw = (res.get("requests") or {}).get("memory")
    lim_raw = (res.get("limits") or {}).get("memory")
    req, lim = parse_quantity(req_raw), parse_quantity(lim_raw)
    if req_raw is not None and req is None:
        raise ValueError(f"resources.requests.memory {req_raw!r} is not a quantity")
    if lim_raw is not None and lim is None:
        raise ValueError(f"resources.limits.memory {lim_raw!r} is not a quantity")
    if req is None and lim is not None:
        req = lim  # the API server defaults an unset request to the limit
    if req is not None and req >= target:
        return None
    q = quantity(target)
    out: dict[str, Any] = {"requests": {"memory": q}}
    if lim is not None and lim < target:
        out["limits"] = {"memory": q}
    return out, (req, parse_quantity(q) or target)


def assess(plan: Plan, host: HostInput | None = None) -> list[Risk]:
    """The seven risks, each at the rank where its margin is smallest."""
    total = plan.input.gpu.total_bytes
    rs = plan.prediction.settings
    worst: dict[RiskKind, Risk] = {}

    def keep(r: Risk) -> None:
        cur = worst.get(r.kind)
        if cur is None or (r.margin_bytes or 0) < (cur.margin_bytes or 0):
            worst[r.kind] = r

    for rank in plan.prediction.ranks:
        items = _items(plan, rank.rank)
        context = items.get("cuda_context", 0)
        weights = rank.weights.total
        layers = max(1, plan.input.model.num_layers // max(1, plan.input.pp))
        in_flight = weights // layers
        free_at_start = total - context
        keep(
            Risk(
                "load",
                "gpu",
                free_at_start - weights - in_flight,
                free_at_start - weights - in_flight < 0,
                "--tensor-parallel-size / --pipeline-parallel-size (fewer weights per GPU)",
                f"rank {rank.rank}: weights {weights / GiB:.2f} GiB + one layer in flight "
                f"{in_flight / GiB:.2f} GiB (assumed) against {free_at_start / GiB:.2f} GiB free",
            )
        )
        keep(
            Risk(
                "startup",
                "gpu",
                free_at_start - rank.requested,
                free_at_start < rank.requested,
                "--gpu-memory-utilization",
                f"rank {rank.rank}: vLLM requests {rank.requested / GiB:.2f} GiB "
                f"(utilization {rs.gpu_memory_utilization:g}) of {free_at_start / GiB:.2f} GiB "
                "free at startup",
            )
        )
        one_request = rs.max_model_len * plan.kv_bytes_per_token_rank
        d = plan.distribution
        seqs = plan.recommendation.max_num_seqs
        p = d.probability(seqs) if d is not None and seqs > 0 else None
        target = plan.input.preemption_target
        preempt = (
            f"; P(preemption) {p:.2%} at --max-num-seqs {seqs} (target {target:.2%})"
            if p is not None
            else ""
        )
        keep(
            Risk(
                "kvExhaustion",
                "gpu",
                rank.available_kv - one_request,
                rank.available_kv < one_request or (p is not None and p > target),
                "--max-num-seqs (preemption) / --max-model-len (one request)",
                f"rank {rank.rank}: KV pool {rank.available_kv / GiB:.2f} GiB, one request at "
                f"max-model-len {rs.max_model_len} needs {one_request / GiB:.2f} GiB{preempt}",
            )
        )
        spike_room = items.get("operational_headroom", 0) + items.get("unallocated", 0)
        keep(
            Risk(
                "activation",
                "gpu",
                spike_room,
                spike_room <= 0,
                "--max-num-batched-tokens (the profiled batch) / spec.headroom.operationalFraction",
                f"rank {rank.rank}: profiled at {rs.max_num_batched_tokens} batched tokens "
                f"(peak {rank.activation_peak / GiB:.2f} GiB); a spike beyond it has "
                f"{spike_room / GiB:.2f} GiB outside vLLM's budget",
            )
        )
        outside = total - rank.requested - context
        graph = items.get("cuda_graph_pool", rank.cuda_graph)
        if rs.cg_in_budget:
            # the estimate is in the budget; the capture's excess over it is not
            excess = graph  # the 0.19 logs: actual up to 2.2x the estimate (vllm-startup-027)
            margin = outside - excess
            how = f"estimate {graph / GiB:.2f} GiB in the budget, up to as much again outside"
        else:
            margin = outside - graph
            how = f"pool {graph / GiB:.2f} GiB captured outside the budget"
        if not rs.cudagraphs:
            margin, how = outside, "no CUDA graphs (--enforce-eager)"
        keep(
            Risk(
                "cudaGraph",
                "gpu",
                margin,
                margin < 0,
                "--gpu-memory-utilization / --max-cudagraph-capture-size / --enforce-eager",
                f"rank {rank.rank}: {how}; {outside / GiB:.2f} GiB outside vLLM's request",
            )
        )
    worst["compileCache"] = _compile_cache(plan, host)
    worst["host"] = _host(plan, host)
    order: tuple[RiskKind, ...] = (
        "load",
        "startup",
        "kvExhaustion",
        "activation",
        "cudaGraph",
        "compileCache",
        "host",
    )
    return [worst[k] for k in order if k in worst]


def _compile_cache(plan: Plan, host: HostInput | None) -> Risk:
    """A cold torch.compile at every pod start where the cache does not outlive the pod
    (module doc, 6): at risk where vLLM compiles (a V1 engine without ``--enforce-eager``), the
    cache is on the container's filesystem or a volume that goes with the pod, and the plan is
    a warm boot's (``spec.engine.compileCache: warm``); a plan made cold counts the compile's
    peak (engines/vllm.py::cold_compile_bytes) and is not at risk."""
    cache = (host or HostInput()).compile_cache
    cold = plan.input.engine.compile_cache == "cold"
    at_risk = False
    margin: int | None = None
    if plan.prediction.settings.era is Era.V0 or plan.input.engine.enforce_eager:
        detail = "vLLM compiles nothing at startup"
    elif cold:
        peak = max(r.compile_peak for r in plan.prediction.ranks)
        detail = "planned cold (spec.engine.compileCache): " + (
            f"the compile's peak in vLLM's profile, {peak / GiB:.2f} GiB on the first stage, "
            "is counted"
            if peak
            else "no embedding table in the compiled graph here (a multimodal model's runner "
            "embeds outside it, or the version does not benchmark), nothing to count"
        )
    elif cache is None:
        detail = "the pod's volumes were not read (unknown)"
    elif cache.path is None:
        detail = "the cache directory is set by reference"
    elif cache.persistent:
        detail = (
            f"vLLM's cache {cache.path} on volume {cache.volume}, which outlives the pod: pods "
            "after the first boot warm"
        )
    else:
        where = "the container's filesystem" if cache.volume is None else f"volume {cache.volume}"
        # the plan's own prediction, at its own max-num-seqs (which sizes the warm sampler peak)
        lost = cold_compile_loss(plan.prediction)
        margin = -lost
        at_risk = lost > 0
        head = f"vLLM's cache {cache.path} is on {where}, which goes with the pod: every pod "
        detail = head + (
            "compiles cold, and vLLM counts a cold compile's temporaries as activation "
            f"(vllm-project/vllm#54122), so its KV pool is {lost / GiB:.2f} GiB smaller than "
            "this warm plan for the pod's life (engines/vllm.py::cold_compile_bytes); "
            "spec.engine.compileCache: cold plans it"
            if at_risk
            else "compiles cold, but here the compile's largest copy stays under the warm "
            "profile peak: the KV pool is the same"
        )
    flag = (
        "a PersistentVolumeClaim (or hostPath) mounted at VLLM_CACHE_ROOT / "
        "spec.engine.compileCache: cold / --enforce-eager"
    )
    return Risk("compileCache", "gpu", margin, at_risk, flag, detail)


def _host(plan: Plan, host: HostInput | None) -> Risk:
    h = host or HostInput()
    peak = host_peak_bytes(plan, h)
    bound = h.memory_limit if h.memory_limit is not None else h.memory_request
    which = "limit" if h.memory_limit is not None else "request"
    flag = "resources.limits.memory / spec.policy.setMemoryRequest / --cpu-offload-gb"
    if bound is None:
        return Risk(
            "host",
            "host",
            None,
            False,
            flag,
            f"load-time host peak {peak / GiB:.2f} GiB; the container sets no memory request "
            "or limit (unknown margin)",
        )
    return Risk(
        "host",
        "host",
        bound - peak,
        bound < peak,
        flag,
        f"load-time host peak {peak / GiB:.2f} GiB against the memory {which} "
        f"{bound / GiB:.2f} GiB",
    )


def risks_json(plan: Plan, host: HostInput | None = None) -> list[dict[str, Any]]:
    return [r.to_json() for r in assess(plan, host)]


def risks_text(plan: Plan, host: HostInput | None = None) -> list[str]:
    lines = ["  OOM risks (margin; flag that moves it):"]
    for r in assess(plan, host):
        m = "unknown" if r.margin_bytes is None else f"{r.margin_bytes / GiB:+.2f} GiB"
        mark = "AT RISK " if r.at_risk else ""
        lines.append(f"    {r.kind:<13} {r.resource:<4} {mark}{m}: {r.detail} [{r.flag}]")
    return lines
