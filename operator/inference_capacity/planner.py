"""The plan: one function from resolved inputs to the ledger, the vLLM prediction and the
recommended flags, replicas and rollout settings. Pure; the CLI and the controller both call it.

Order of work:
1. the largest ``gpu_memory_utilization`` whose margin holds everything vLLM does not budget
   (CUDA context, graphs before 0.20, fragmentation, post-KV workspaces, operational headroom);
   or, when a KV pool is asked for, the utilization that makes vLLM allocate exactly it;
2. vLLM's startup at that utilization: the KV pool, blocks, tokens, and whether it starts;
3. a safe ``max-num-seqs`` for the workload, by the sizing rule (``distribution``: the largest
   batch whose preemption probability is below the target, :mod:`.sizing.distribution`;
   ``conservative``: per-sequence reservations at a quantile, :mod:`.sizing.workload`), capped by
   the ITL target; the profile's activation depends on it, so the prediction is redone at the
   chosen value (a smaller batch only frees memory);
4. replicas, maxSurge / maxUnavailable and the PDB.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass, field, replace

from .budget import RankLedger, build_ledger, max_utilization
from .engines import (
    EngineSettings,
    SettingsError,
    StartupPrediction,
    batch_defaults,
    predict_startup,
)
from .engines.vllm import prefix_caching_enabled
from .hardware import Gpu
from .ledger import kv_bytes_per_token, kv_token_format
from .model import ModelShape
from .sizing import (
    DEFAULT_PREEMPTION_TARGET,
    MAX_REQUESTS,
    Arrivals,
    BatchLatency,
    DistributionSizing,
    LatencyModel,
    LatencyPoint,
    RolloutPlan,
    SeqSizing,
    Simulations,
    Workload,
    build_latency_model,
    plan_rollout,
    replicas_for_peak,
    size_by_distribution,
    size_max_num_seqs,
)
from .units import GiB

#: How max-num-seqs is sized: "distribution" (the default; the preemption risk of a batch drawn
#: from the length distributions) or "conservative" (every sequence at the sizing quantile).
SIZING_RULES = ("distribution", "conservative")


@dataclass(frozen=True, slots=True)
class Headroom:
    operational_fraction: float = 0.05
    kv_safety_fraction: float = 0.10
    recovery_replicas: int = 1


@dataclass(frozen=True, slots=True)
class RolloutInput:
    min_replicas: int = 1
    max_replicas: int = 16
    spare_gpus: int | None = None
    hpa_min_replicas: int | None = None


@dataclass(frozen=True, slots=True)
class PlanInput:
    model: ModelShape
    gpu: Gpu
    tp: int = 1
    pp: int = 1
    engine: EngineSettings = field(default_factory=EngineSettings)
    workload: Workload | None = None
    headroom: Headroom = field(default_factory=Headroom)
    rollout: RolloutInput = field(default_factory=RolloutInput)
    max_num_seqs_cap: int | None = None
    kv_pool_bytes: int | None = None  # a KV pool asked for explicitly (per rank)
    choose_utilization: bool = True  # False: keep engine.gpu_memory_utilization (what-if)
    choose_max_num_seqs: bool = True  # False: keep engine.max_num_seqs (what-if)
    notes: tuple[str, ...] = ()  # from reading the Deployment (resolve.py)
    sizing_rule: str = "distribution"  # one of SIZING_RULES
    preemption_target: float = DEFAULT_PREEMPTION_TARGET
    hbm_efficiency: float | None = None  # None: hardware.DEFAULT_HBM_EFFICIENCY
    latency_curve: bool = True  # False: no batch curve (a sweep compares the chosen batch)


@dataclass(frozen=True, slots=True)
class Recommendation:
    gpu_memory_utilization: float
    max_num_seqs: int
    max_model_len: int
    max_num_batched_tokens: int
    kv_cache_dtype: str
    kv_cache_memory_bytes: int | None
    per_replica_concurrency: int
    rollout: RolloutPlan
    provenance: dict[str, str]

    def removed_flags(self, *, kv_cache_memory: bool = False) -> tuple[str, ...]:
        """The flags to delete with :meth:`flags`: the pool is set by exactly one of
        ``--gpu-memory-utilization`` / ``--kv-cache-memory-bytes`` (vLLM ignores the utilization
        for the budget when both are given, gpu_worker.py::determine_available_memory)."""
        if kv_cache_memory and self.kv_cache_memory_bytes is not None:
            return ("gpu-memory-utilization",)
        return ("kv-cache-memory-bytes",)

    def flags(
        self,
        *,
        max_model_len: bool = False,
        batched_tokens: bool = False,
        kv_cache_dtype: bool = False,
        kv_cache_memory: bool = False,
    ) -> dict[str, str]:
        """The vLLM flags to set (names without the leading dashes); with
        :meth:`removed_flags` they set the pool one way only."""
        out: dict[str, str] = {}
        if kv_cache_memory and self.kv_cache_memory_bytes is not None:
            out["kv-cache-memory-bytes"] = str(self.kv_cache_memory_bytes)
        else:
            out["gpu-memory-utilization"] = format_utilization(self.gpu_memory_utilization)
        out["max-num-seqs"] = str(self.max_num_seqs)
        if max_model_len:
            out["max-model-len"] = str(self.max_model_len)
        if batched_tokens:
            out["max-num-batched-tokens"] = str(self.max_num_batched_tokens)
        if kv_cache_dtype:
            out["kv-cache-dtype"] = self.kv_cache_dtype
        return out


@dataclass(frozen=True, slots=True)
class LatencyReport:
    """Decode-step latency at the chosen max-num-seqs, the ITL-limited batch and the curve."""

    at_max_num_seqs: LatencyPoint | None
    at_peak: LatencyPoint | None  # a replica's share of the peak with the recovery replicas down
    itl_limit: int | None  # largest N meeting workload.itlTargetMs (None: no target)
    curve: tuple[LatencyPoint, ...]
    hbm_efficiency: float
    bandwidth_bytes_per_s: float
    #: "lockstep": every request alike, so arrivals come in groups and TTFT waits for the
    #: group's prefill step (sizing/latency.py::lockstep_group); "spread": one prompt a step
    arrivals: Arrivals = "spread"


@dataclass(frozen=True, slots=True)
class Plan:
    input: PlanInput
    prediction: StartupPrediction
    ledger: tuple[RankLedger, ...]
    recommendation: Recommendation
    seqs: SeqSizing | None
    fits: bool
    reason: str
    message: str
    kv_bytes_per_token_rank: int
    kv_bytes_per_token_model: int
    notes: tuple[str, ...] = ()
    distribution: DistributionSizing | None = None  # the distribution rule's numbers
    latency: LatencyReport | None = None

    @property
    def kv_token_capacity(self) -> int:
        return self.prediction.kv_cache_tokens


def format_utilization(u: float) -> str:
    """Shortest exact spelling, at most 6 decimals (vLLM parses any float)."""
    text = f"{u:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def utilization_for_pool(inp: PlanInput, settings: EngineSettings, pool_bytes: int) -> float:
    """The smallest utilization (6 decimals) at which vLLM's available KV memory on the binding
    rank is at least ``pool_bytes``: the inverse of the budget formula."""
    probe = predict_startup(
        inp.model,
        inp.gpu.total_bytes,
        inp.gpu.name,
        inp.tp,
        inp.pp,
        replace(settings, gpu_memory_utilization=0.5),
    )
    r = probe.ranks[probe.binding_rank]
    non_kv = r.requested - r.available_kv
    u = math.ceil((pool_bytes + non_kv) / inp.gpu.total_bytes * 1e6) / 1e6
    # requested is ceil(total × u): check and nudge once for rounding
    for _ in range(3):
        p = predict_startup(
            inp.model,
            inp.gpu.total_bytes,
            inp.gpu.name,
            inp.tp,
            inp.pp,
            replace(settings, gpu_memory_utilization=min(u, 1.0)),
        )
        if p.ranks[p.binding_rank].available_kv >= pool_bytes or u >= 1.0:
            break
        u += 1e-6
    return min(u, 1.0)


def _predict(inp: PlanInput, settings: EngineSettings) -> StartupPrediction:
    return predict_startup(inp.model, inp.gpu.total_bytes, inp.gpu.name, inp.tp, inp.pp, settings)


@dataclass
class PlanCache:
    """The simulations and latency batches of one plan (or of plans one caller makes in a row,
    on one thread), owned by the caller: the planner asks again at each step of its sizing loop
    with the same latency model and simulation, so the last few are kept. Keyed on the objects
    themselves (a simulation by identity), never on ``id()``. Nothing here is shared between
    callers, so plans on several threads need no lock (each passes its own cache, or none: a
    fresh one per plan); what is shared underneath (a pool's Monte Carlo draws, weights and
    latency terms per model shape) is append-only or keyed on values, each behind its own
    lock."""

    #: the Monte Carlo simulations the sizing grew (per workload and block layout)
    simulations: Simulations = field(default_factory=Simulations)
    batches: dict[tuple[object, ...], BatchLatency] = field(default_factory=dict)
    #: entries kept (most recently made last)
    keep: int = 4
    #: the last plan's sizing with its simulation (the plan keeps it detached): for a caller
    #: that reads more of that plan's batch latency (benchmarks/latency_accuracy.py)
    sizing: DistributionSizing | None = None

    def batch_latency(self, model: LatencyModel, d: DistributionSizing) -> BatchLatency:
        """The latency of batches along the simulation's paths."""
        sim = d.binding.paths.simulation
        key = (model, sim, sim.length, d.binding_mix)
        hit = self.batches.get(key)
        if hit is not None and hit.sizing is d:
            return hit
        # another sizing of the same paths (a budget of another step or utilization): the
        # latency terms are the same, the preemption probabilities are d's
        batches = hit.with_sizing(d) if hit is not None else BatchLatency(model, d)
        self.batches[key] = batches
        while len(self.batches) > self.keep:
            del self.batches[next(iter(self.batches))]
        return batches


def make_plan(inp: PlanInput, cache: PlanCache | None = None) -> Plan:
    """Plan one replica of a vLLM deployment and the fleet around it. ``cache``: the caller's
    memo (a fresh one per plan when not given)."""
    return _make_plan(inp, cache if cache is not None else PlanCache())


#: plans kept by :func:`planned`. A plan keeps its sizing without the Monte Carlo simulation
#: or the request pool (:meth:`DistributionSizing.detached`): the fit per path and the sorted
#: request lengths, ~0.3 MB a plan
PLAN_MEMO_SIZE = 256
#: plans :func:`planned` makes at once, whatever the number of threads asking: a plan with a
#: workload peaks at ~11 MB of arrays (tracemalloc, examples/llama-3.1-8b-h100.yaml), and the
#: operator's 16 handler threads planning 16 workloads at once would hold 16 of them; the work
#: is CPU-bound, so more plans at once than cores gain nothing
PLAN_CONCURRENCY = 4
_computing = threading.BoundedSemaphore(PLAN_CONCURRENCY)


class _Flight:
    """The callers of :func:`planned` waiting on one input: the first plans, the rest find
    the plan memoised (a fleet of resources with one spec, seen at once after a restart, is
    planned once, not once per handler thread)."""

    __slots__ = ("lock", "waiters")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiters = 0


_flights: dict[PlanInput, _Flight] = {}
_flights_lock = threading.Lock()


@functools.lru_cache(maxsize=PLAN_MEMO_SIZE)
def _planned(inp: PlanInput) -> Plan:
    with _computing:
        return make_plan(inp)


def planned(inp: PlanInput) -> Plan:
    """:func:`make_plan`, memoized on the input, for a caller that plans the same input again:
    the operator on every refresh of every resource, and a fleet of resources that share one
    spec (1,000 of them planned 1,000 times). A plan is a pure function of its frozen input, so
    an equal input gets the same (immutable) plan; an input that cannot be hashed is planned.
    Callers asking for one input at once wait for one plan; at most :data:`PLAN_CONCURRENCY`
    plans are made at once."""
    try:
        hash(inp)
    except TypeError:
        with _computing:
            return make_plan(inp)
    with _flights_lock:
        flight = _flights.get(inp)
        if flight is None:
            flight = _flights[inp] = _Flight()
        flight.waiters += 1
    try:
        with flight.lock:
            return _planned(inp)
    finally:
        with _flights_lock:
            flight.waiters -= 1
            if not flight.waiters:
                del _flights[inp]


def _utilization(inp: PlanInput, st: EngineSettings, notes: list[str]) -> float:
    """The safe maximum for ``st`` (its margin items do not depend on u), or the one that gives
    the asked KV pool."""
    h = inp.headroom
    probe = _predict(inp, replace(st, gpu_memory_utilization=0.9))
    u_max = max_utilization(probe, h.operational_fraction)
    if inp.kv_pool_bytes is None:
        return u_max
    u_pool = utilization_for_pool(inp, st, inp.kv_pool_bytes)
    if u_pool > u_max:
        notes.append(
            f"the asked KV pool ({inp.kv_pool_bytes / GiB:.2f} GiB) needs "
            f"utilization {u_pool}, above the safe maximum {u_max}"
        )
    return u_pool


def _predict_chosen(
    inp: PlanInput, st: EngineSettings, notes: list[str]
) -> tuple[EngineSettings, StartupPrediction]:
    """The prediction at ``st``, with the utilization chosen first when the plan chooses it."""
    if inp.choose_utilization:
        st = replace(st, gpu_memory_utilization=_utilization(inp, st, notes))
    return st, _predict(inp, st)


def _size_seqs(
    inp: PlanInput,
    settings: EngineSettings,
    pred: StartupPrediction,
    notes: list[str],
    cache: PlanCache,
) -> tuple[EngineSettings, StartupPrediction, SeqSizing | None]:
    """max-num-seqs sized from the workload by the spec's rule, predicted again at the chosen
    value until the batch fits its own pool (the profile's activation depends on it); the
    settings and prediction at that batch, and the sizing (None when not sized)."""
    h = inp.headroom
    seqs: SeqSizing | None = None
    R = pred.settings.max_num_seqs
    if not (
        inp.choose_max_num_seqs
        and inp.workload is not None
        and inp.workload.cohorts
        and pred.starts
    ):
        if inp.choose_max_num_seqs and inp.workload is None:
            notes.append(
                f"no workload cohorts: max-num-seqs left at {R} (vLLM's default); give "
                "spec.workload.cohorts to size it"
            )
        return settings, pred, None
    workload = _effective_workload(
        inp.workload,
        prefix_caching_enabled(pred.settings.version, inp.model, settings.enable_prefix_caching),
    )
    # vLLM refuses max_num_batched_tokens < max_num_seqs: never recommend more sequences
    # than one scheduler step can hold
    cap = min(inp.max_num_seqs_cap or 1 << 20, pred.settings.max_num_batched_tokens)
    if inp.sizing_rule not in SIZING_RULES:
        raise SettingsError(
            f"policy.sizing: {inp.sizing_rule!r} is not one of {', '.join(SIZING_RULES)}"
        )
    hbm = inp.gpu.hbm_bandwidth_bytes_per_s

    def size(p: StartupPrediction) -> SeqSizing:
        r = p.ranks[p.binding_rank]
        if inp.sizing_rule == "conservative":
            return size_max_num_seqs(
                workload,
                r.layout,
                p.num_gpu_blocks,
                p.settings.max_model_len,
                h.kv_safety_fraction,
                cap,
                r.weights.total,
                hbm,
            )
        return _size_distribution(inp, workload, p, cap, cache)

    for _ in range(4):
        seqs = size(pred)
        if seqs.max_num_seqs <= 0:
            break
        if seqs.max_num_seqs == R and R == pred.settings.max_num_seqs:
            break  # fixed point: the pool was predicted at this very batch
        # the profile's activation depends on R: predict again at the chosen value. A
        # smaller R only frees memory; a larger one may shrink the pool, so the next pass
        # re-sizes on the new pool and the loop ends on a batch that fits its own pool.
        R = seqs.max_num_seqs
        settings, pred = _predict_chosen(inp, replace(settings, max_num_seqs=R), notes)
    if seqs is not None and seqs.max_num_seqs > 0 and R == pred.settings.max_num_seqs:
        final = size(pred)
        if final.max_num_seqs < R:  # over-reserves its own pool: take the smaller batch
            seqs = final
            R = final.max_num_seqs
            # fewer FULL decode CUDA graphs at a smaller batch: the utilization is chosen
            # again (the pool only grows, so the batch still fits it)
            settings, pred = _predict_chosen(inp, replace(settings, max_num_seqs=R), notes)
    return settings, pred, seqs


def _published(
    inp: PlanInput, pred: StartupPrediction, seqs: SeqSizing | None, cache: PlanCache
) -> tuple[DistributionSizing | None, LatencyReport | None]:
    """The distribution's numbers, published under either rule (for the conservative rule: the
    preemption risk of the batch it chose), with the latency at the chosen N."""
    rs = pred.settings
    if inp.workload is None or not inp.workload.cohorts or not pred.starts:
        return None, None
    cap = min(inp.max_num_seqs_cap or 1 << 20, rs.max_num_batched_tokens)
    distribution = _distribution(
        inp,
        _effective_workload(
            inp.workload,
            prefix_caching_enabled(rs.version, inp.model, inp.engine.enable_prefix_caching),
        ),
        pred,
        cap,
        cache,
    )
    chosen = seqs.max_num_seqs if seqs is not None else rs.max_num_seqs
    return distribution, _latency(inp, pred, distribution, chosen, cache)


def _verdict(
    inp: PlanInput,
    pred: StartupPrediction,
    ledger: tuple[RankLedger, ...],
    seqs: SeqSizing | None,
    rollout: RolloutPlan,
    per_engine: int,
) -> tuple[bool, str, str]:
    """(fits, reason, message): the first of vLLM will not start, the asked KV pool out of
    reach, a rank over-committed, no sequence fits, too many replicas; else Fits."""
    rs = pred.settings
    r = pred.ranks[pred.binding_rank]
    over = [rl for rl in ledger if rl.unallocated < 0]
    if not pred.starts:
        return False, "VllmWillNotStart", pred.error or "vLLM will not start"
    if inp.kv_pool_bytes is not None and r.available_kv < inp.kv_pool_bytes:
        return (
            False,
            "KvPoolUnreachable",
            f"the asked KV pool ({inp.kv_pool_bytes / GiB:.2f} GiB per GPU) is out of reach: "
            f"at utilization {rs.gpu_memory_utilization} vLLM allocates "
            f"{max(r.available_kv, 0) / GiB:.2f} GiB",
        )
    if over:
        rl = over[0]
        return (
            False,
            "OverCommitted",
            f"rank {rl.rank}: the plan needs {-rl.unallocated / GiB:.2f} GiB more than "
            f"the device's {rl.device_bytes / GiB:.2f} GiB (utilization "
            f"{rs.gpu_memory_utilization} leaves too little for the CUDA context, "
            "graphs and headroom)",
        )
    if seqs is not None and seqs.max_num_seqs <= 0:
        return (
            False,
            "WorkloadDoesNotFit",
            f"not one {_rule_words(inp)} sequence fits: " + seqs.message,
        )
    if not rollout.fits_max_replicas:
        return False, "ExceedsMaxReplicas", rollout.message
    return (
        True,
        "Fits",
        f"KV pool {r.num_blocks * r.layout.bytes_per_block / GiB:.2f} GiB = "
        f"{pred.kv_cache_tokens:,} tokens per replica; max-num-seqs {per_engine}"
        + (f" ({seqs.message})" if seqs is not None else ""),
    )


def _make_plan(inp: PlanInput, cache: PlanCache) -> Plan:
    h = inp.headroom
    if not 0 <= h.operational_fraction < 1:
        raise SettingsError("headroom.operationalFraction must be in [0, 1)")
    notes: list[str] = []
    provenance = {
        "gpuMemoryUtilization": "calibrated",
        "maxNumSeqs": "assumed",
        "maxModelLen": "exact",
        "replicas": "assumed",
    }
    settings, pred = _predict_chosen(inp, inp.engine, notes)
    # sized from the workload (_size_seqs): the provenance says so
    sized = bool(
        inp.choose_max_num_seqs and inp.workload is not None and inp.workload.cohorts
    ) and bool(pred.starts)
    settings, pred, seqs = _size_seqs(inp, settings, pred, notes, cache)
    if sized:
        provenance["maxNumSeqs"] = "calibrated"
    rs = pred.settings
    r = pred.ranks[pred.binding_rank]
    distribution, latency = _published(inp, pred, seqs, cache)
    cache.sizing = distribution
    ledger = build_ledger(pred, h.operational_fraction)
    per_engine = seqs.max_num_seqs if seqs is not None else rs.max_num_seqs
    # each data-parallel rank is its own engine with its own max-num-seqs and KV pool
    dp = max(1, settings.data_parallel)
    per_replica = per_engine * dp
    peak = inp.workload.peak_concurrency if inp.workload is not None else None
    rollout = plan_rollout(
        peak,
        per_replica,
        h.recovery_replicas,
        inp.rollout.min_replicas,
        inp.rollout.max_replicas,
        inp.tp * inp.pp * dp,
        inp.rollout.spare_gpus,
        inp.rollout.hpa_min_replicas,
    )
    if peak is not None:
        provenance["replicas"] = "calibrated" if seqs is not None else "assumed"
    kv_mem = r.available_kv if r.available_kv > 0 else None
    if inp.kv_pool_bytes is not None:
        kv_mem = inp.kv_pool_bytes
    rec = Recommendation(
        rs.gpu_memory_utilization,
        per_engine,
        rs.max_model_len,
        rs.max_num_batched_tokens,
        rs.kv_cache_dtype,
        kv_mem,
        per_replica,
        rollout,
        provenance,
    )
    fits, reason, message = _verdict(inp, pred, ledger, seqs, rollout, per_engine)
    kvb = rs.kv_bytes
    kv_format = kv_token_format(rs.kv_cache_dtype)
    return Plan(
        input=inp,
        prediction=pred,
        ledger=ledger,
        recommendation=rec,
        seqs=seqs,
        fits=fits,
        reason=reason,
        message=message,
        kv_bytes_per_token_rank=kv_bytes_per_token(
            inp.model, inp.tp, kvb, inp.pp, stage=r.stage, kv_format=kv_format
        ),
        kv_bytes_per_token_model=kv_bytes_per_token(
            inp.model, inp.tp, kvb, inp.pp, kv_format=kv_format
        )
        * inp.tp,
        notes=inp.model.notes + inp.notes + tuple(notes) + pred.notes,
        distribution=distribution.detached() if distribution is not None else None,
        latency=latency,
    )


def _effective_workload(workload: Workload, prefix_caching: bool) -> Workload:
    """Prefix caching off (--no-enable-prefix-caching, or a hybrid's default before 0.26):
    no block is shared between requests."""
    if prefix_caching:
        return workload
    return replace(workload, cohorts=tuple(replace(c, shared_prefix=0) for c in workload.cohorts))


def _rule_words(inp: PlanInput) -> str:
    if inp.sizing_rule == "conservative" and inp.workload is not None:
        return inp.workload.quantile
    return "workload"


def default_max_num_seqs(pred: StartupPrediction, inp: PlanInput) -> int:
    """vLLM's own --max-num-seqs default for this version, GPU and usage context."""
    rs = pred.settings
    return batch_defaults(
        rs.version, rs.era, inp.gpu.total_bytes, inp.gpu.name, inp.engine.usage_context
    )[1]


def _distribution(
    inp: PlanInput,
    workload: Workload,
    p: StartupPrediction,
    cap: int,
    cache: PlanCache | None = None,
) -> DistributionSizing:
    r = p.ranks[p.binding_rank]
    return size_by_distribution(
        workload.cohorts,
        workload.burst_weights,
        r.layout,
        p.num_gpu_blocks,
        p.settings.max_model_len,
        inp.headroom.kv_safety_fraction,
        cap,
        inp.preemption_target,
        default_max_num_seqs(p, inp),
        cache.simulations if cache is not None else None,
    )


def _latency(
    inp: PlanInput,
    p: StartupPrediction,
    d: DistributionSizing,
    chosen: int,
    cache: PlanCache,
    full: bool = True,
) -> LatencyReport | None:
    """The latency report; ``full`` False: only the ITL limit (inside the sizing loop)."""
    model = build_latency_model(inp.model, inp.gpu, p, inp.hbm_efficiency)
    if model is None:
        return None
    batches = cache.batch_latency(model, d)
    wl = inp.workload
    target = wl.itl_target_ms if wl is not None else None
    ttft = wl.ttft_target_ms if wl is not None else None
    limit = None
    if target or ttft:
        assert wl is not None
        limit = batches.largest_meeting(
            target or None, max(d.max_num_seqs, chosen, 1), wl.itl_quantile, ttft or None
        )
    arrivals = batches.arrivals
    if not full:
        return LatencyReport(None, None, limit, (), model.hbm_efficiency, model.bandwidth, arrivals)
    at = batches.point(chosen) if 0 < chosen <= batches.max_n else None
    peak = inp.workload.peak_concurrency if inp.workload is not None else None
    at_peak = None
    if peak and chosen > 0:
        share = math.ceil(peak / replicas_for_peak(peak, chosen))  # ≤ chosen
        at_peak = batches.point(share) if share <= batches.max_n else None
    extra = tuple(n for n in (chosen, d.max_num_seqs, limit or 0, d.default_max_num_seqs))
    curve = batches.curve(extra) if inp.latency_curve else ()
    return LatencyReport(at, at_peak, limit, curve, model.hbm_efficiency, model.bandwidth, arrivals)


def latency_binds(
    inp: PlanInput,
    p: StartupPrediction,
    d: DistributionSizing,
    n: int,
    cache: PlanCache | None = None,
) -> str:
    """Which latency target stops the batch at ``n``: "itl" or "ttft" (the one that one more
    request in flight would miss)."""
    wl = inp.workload
    model = build_latency_model(inp.model, inp.gpu, p, inp.hbm_efficiency)
    if wl is None or model is None:
        return "itl"
    batches = (cache if cache is not None else PlanCache()).batch_latency(model, d)
    nxt = batches.point(min(n + 1, batches.max_n))
    if wl.ttft_target_ms and nxt.ttft_ms_p95 > wl.ttft_target_ms:
        if not wl.itl_target_ms or nxt.itl_target_ms(wl.itl_quantile) <= wl.itl_target_ms:
            return "ttft"
    return "itl"


def _size_distribution(
    inp: PlanInput, workload: Workload, p: StartupPrediction, cap: int, cache: PlanCache
) -> SeqSizing:
    """The distribution rule as a :class:`SeqSizing`: the largest batch below the preemption
    target, then the ITL target (from the latency model), then the cap."""
    d = _distribution(inp, workload, p, cap, cache)
    n, limited = d.binding.max_num_seqs, "kv"
    msg = (
        f"{n} sequences keep P(preemption) at {d.probability(n):.2%} (target "
        f"{d.target:.0%}; {d.budget_blocks:,.0f} usable blocks, mean "
        f"{d.blocks_per_seq:.1f} blocks per sequence, {d.binding_mix} mix"
        + (
            f", {d.shared_prefix_blocks} shared-prefix blocks once"
            if d.shared_prefix_blocks
            else ""
        )
        + ")"
    )
    if workload.itl_target_ms or workload.ttft_target_ms:
        lat = _latency(inp, p, d, min(n, cap), cache, full=False)
        if lat is not None and lat.itl_limit is not None and lat.itl_limit < min(n, cap):
            n, limited = lat.itl_limit, latency_binds(inp, p, d, lat.itl_limit, cache)
            targets = []
            if workload.itl_target_ms:
                targets.append(
                    f"an ITL {workload.itl_quantile} (and mean TPOT) of {workload.itl_target_ms} ms"
                )
            if workload.ttft_target_ms:
                targets.append(f"a TTFT p95 of {workload.ttft_target_ms} ms")
            msg += f"; {' and '.join(targets)} allow {n} ({limited} binds)"
    sim = d.binding.paths.simulation
    if sim.truncated and n >= sim.seqs_at(MAX_REQUESTS).min():
        msg += f" (at least: the simulation stops at {MAX_REQUESTS:,} requests)"
    if n > cap:
        n, limited = cap, "cap"
        msg += f"; capped at {cap}"
    usable = max(0, p.num_gpu_blocks - 1)
    return SeqSizing(
        n, d.blocks_per_seq, d.tokens_per_seq, usable, d.shared_prefix_blocks, limited, msg
    )
