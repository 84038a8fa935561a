"""The plan: one function from resolved inputs to the ledger, the vLLM prediction and the
recommended flags, replicas and rollout settings. Pure; the CLI and the controller both call it.

Order of work:
1. the largest ``gpu_memory_utilization`` whose margin holds everything vLLM does not budget
   (CUDA context, graphs before 0.20, fragmentation, post-KV workspaces, operational headroom);
   or, when a KV pool is asked for, the utilization that makes vLLM allocate exactly it;
2. vLLM's startup at that utilization: the KV pool, blocks, tokens, and whether it starts;
3. a safe ``max-num-seqs`` for the workload; the profile's activation depends on it, so the
   prediction is redone once at the chosen value (a smaller batch only frees memory);
4. replicas, maxSurge / maxUnavailable and the PDB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .engines.vllm import (
    EngineSettings,
    GiB,
    SettingsError,
    StartupPrediction,
    predict_startup,
)
from .hardware import Gpu
from .ledger.kv import kv_bytes_per_token
from .ledger.ledger import RankLedger, build_ledger, max_utilization
from .model.shapes import ModelShape
from .sizing.rollout import RolloutPlan, plan_rollout
from .sizing.workload import SeqSizing, Workload, size_max_num_seqs


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

    def flags(
        self,
        *,
        max_model_len: bool = False,
        batched_tokens: bool = False,
        kv_cache_dtype: bool = False,
        kv_cache_memory: bool = False,
    ) -> dict[str, str]:
        """The vLLM flags to set (names without the leading dashes)."""
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


def make_plan(inp: PlanInput) -> Plan:
    """Plan one replica of a vLLM deployment and the fleet around it."""
    h = inp.headroom
    if not 0 <= h.operational_fraction < 1:
        raise SettingsError("headroom.operationalFraction must be in [0, 1)")
    settings = inp.engine
    notes: list[str] = []
    provenance = {
        "gpuMemoryUtilization": "calibrated",
        "maxNumSeqs": "assumed",
        "maxModelLen": "exact",
        "replicas": "assumed",
    }

    def utilization(st: EngineSettings) -> float:
        """The safe maximum for ``st`` (its margin items do not depend on u), or the one that
        gives the asked KV pool."""
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

    def predict(st: EngineSettings) -> tuple[EngineSettings, StartupPrediction]:
        if inp.choose_utilization:
            st = replace(st, gpu_memory_utilization=utilization(st))
        return st, _predict(inp, st)

    settings, pred = predict(settings)
    seqs: SeqSizing | None = None
    R = pred.settings.max_num_seqs
    hbm = inp.gpu.hbm_bandwidth_bytes_per_s
    if (
        inp.choose_max_num_seqs
        and inp.workload is not None
        and inp.workload.cohorts
        and pred.starts
    ):
        workload = inp.workload
        # vLLM refuses max_num_batched_tokens < max_num_seqs: never recommend more sequences
        # than one scheduler step can hold
        cap = min(inp.max_num_seqs_cap or 1 << 20, pred.settings.max_num_batched_tokens)

        def size(p: StartupPrediction) -> SeqSizing:
            r = p.ranks[p.binding_rank]
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
            settings, pred = predict(replace(settings, max_num_seqs=R))
        if seqs is not None and seqs.max_num_seqs > 0 and R == pred.settings.max_num_seqs:
            final = size(pred)
            if final.max_num_seqs < R:  # over-reserves its own pool: take the smaller batch
                seqs = final
                R = final.max_num_seqs
                settings = replace(settings, max_num_seqs=R)
                pred = _predict(inp, settings)
        provenance["maxNumSeqs"] = "calibrated"
    elif inp.choose_max_num_seqs and inp.workload is None:
        notes.append(
            f"no workload cohorts: max-num-seqs left at {R} (vLLM's default); give "
            "spec.workload.cohorts to size it"
        )
    rs = pred.settings
    r = pred.ranks[pred.binding_rank]
    ledger = build_ledger(pred, h.operational_fraction)
    per_replica = seqs.max_num_seqs if seqs is not None else rs.max_num_seqs
    peak = inp.workload.peak_concurrency if inp.workload is not None else None
    rollout = plan_rollout(
        peak,
        per_replica,
        h.recovery_replicas,
        inp.rollout.min_replicas,
        inp.rollout.max_replicas,
        inp.tp * inp.pp,
        inp.rollout.spare_gpus,
        inp.rollout.hpa_min_replicas,
    )
    if peak is not None:
        provenance["replicas"] = "calibrated" if seqs is not None else "assumed"
    kv_mem = r.available_kv if r.available_kv > 0 else None
    rec = Recommendation(
        rs.gpu_memory_utilization,
        per_replica,
        rs.max_model_len,
        rs.max_num_batched_tokens,
        rs.kv_cache_dtype,
        kv_mem,
        per_replica,
        rollout,
        provenance,
    )
    fits, reason, message = True, "Fits", ""
    over = [rl for rl in ledger if rl.unallocated < 0]
    if not pred.starts:
        fits, reason, message = False, "VllmWillNotStart", pred.error or "vLLM will not start"
    elif inp.kv_pool_bytes is not None and r.available_kv < inp.kv_pool_bytes:
        fits, reason = False, "KvPoolUnreachable"
        message = (
            f"the asked KV pool ({inp.kv_pool_bytes / GiB:.2f} GiB per GPU) is out of reach: "
            f"at utilization {rs.gpu_memory_utilization} vLLM allocates "
            f"{max(r.available_kv, 0) / GiB:.2f} GiB"
        )
    elif over:
        rl = over[0]
        fits, reason = False, "OverCommitted"
        message = (
            f"rank {rl.rank}: the plan needs {-rl.unallocated / GiB:.2f} GiB more than "
            f"the device's {rl.device_bytes / GiB:.2f} GiB (utilization "
            f"{rs.gpu_memory_utilization} leaves too little for the CUDA context, "
            "graphs and headroom)"
        )
    elif seqs is not None and seqs.max_num_seqs <= 0:
        fits, reason = False, "WorkloadDoesNotFit"
        message = (
            f"not one {inp.workload.quantile if inp.workload else ''} sequence fits: "
            + seqs.message
        )
    elif not rollout.fits_max_replicas:
        fits, reason, message = False, "ExceedsMaxReplicas", rollout.message
    else:
        message = (
            f"KV pool {r.num_blocks * r.layout.bytes_per_block / GiB:.2f} GiB = "
            f"{pred.kv_cache_tokens:,} tokens per replica; max-num-seqs {per_replica}"
            + (f" ({seqs.message})" if seqs is not None else "")
        )
    kvb = rs.kv_bytes
    return Plan(
        input=inp,
        prediction=pred,
        ledger=ledger,
        recommendation=rec,
        seqs=seqs,
        fits=fits,
        reason=reason,
        message=message,
        kv_bytes_per_token_rank=kv_bytes_per_token(inp.model, inp.tp, kvb, inp.pp, stage=r.stage),
        kv_bytes_per_token_model=kv_bytes_per_token(inp.model, inp.tp, kvb, inp.pp) * inp.tp,
        notes=inp.model.notes + tuple(notes) + pred.notes,
    )
