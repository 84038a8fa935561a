"""Workload sizing: per-sequence KV reservations and a safe ``max-num-seqs``.

A sequence of a cohort, sized at quantile q, reserves its uncached prompt plus its output,
rounded up to blocks in every KV group (a shared prefix is counted once per replica: physical
vs logical tokens, seed 000 §paged KV). ``max-num-seqs`` is the largest batch whose reservations
fit the usable pool (blocks − vLLM's null block − the policy's safety fraction) and, when an
inter-token-latency target is given, whose decode-step lower bound
``(weight bytes + Σ context × KV bytes/token) / HBM bandwidth`` meets it (seed 003 §decode).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ledger.kv import KvLayout
from ..model.shapes import cdiv
from ..units import GiB, MiB


@dataclass(frozen=True, slots=True)
class Quantiles:
    p50: int
    p95: int
    p99: int

    def at(self, q: str) -> int:
        if q not in ("p50", "p95", "p99"):
            raise ValueError(f"quantile must be p50, p95 or p99, got {q!r}")
        value: int = getattr(self, q)
        return value


@dataclass(frozen=True, slots=True)
class Cohort:
    name: str
    weight: float
    prompt: Quantiles
    output: Quantiles
    shared_prefix: int = 0
    n: int = 1  # parallel samples per request (vLLM's SamplingParams.n)


@dataclass(frozen=True, slots=True)
class Workload:
    cohorts: tuple[Cohort, ...]
    quantile: str = "p95"
    peak_concurrency: int | None = None
    itl_target_ms: float | None = None
    #: the burst hour's cohort weights, one per cohort (None: no burst mix given)
    burst_weights: tuple[float, ...] | None = None
    #: which ITL quantile itl_target_ms bounds: "p95" (default) or "p99"
    itl_quantile: str = "p95"
    #: time-to-first-token target (TTFT p95), ms; caps max-num-seqs with the ITL target
    ttft_target_ms: float | None = None


@dataclass(frozen=True, slots=True)
class SeqSizing:
    max_num_seqs: int
    blocks_per_seq: float  # weighted mean reservation, blocks
    tokens_per_seq: float  # weighted mean context, tokens
    usable_blocks: int
    shared_prefix_blocks: int
    limited_by: str  # "kv" | "itl" | "ttft" | "cap" | "engine"
    message: str


def _ctx(c: Cohort, q: str, max_model_len: int) -> int:
    return min(max_model_len, c.prompt.at(q) + c.output.at(q))


def size_max_num_seqs(
    workload: Workload,
    layout: KvLayout,
    num_blocks: int,
    max_model_len: int,
    safety_fraction: float,
    cap: int,
    weight_bytes: int = 0,
    hbm_bytes_per_s: float | None = None,
) -> SeqSizing:
    """The largest safe ``max-num-seqs`` for this workload on one replica."""
    if not workload.cohorts:
        raise ValueError("workload.cohorts: at least one cohort is needed to size max-num-seqs")
    q = workload.quantile
    total_w = sum(c.weight for c in workload.cohorts)
    if total_w <= 0:
        raise ValueError("workload.cohorts: weights must be positive")
    blocks = 0.0
    tokens = 0.0
    shared = 0
    for c in workload.cohorts:
        w = c.weight / total_w
        ctx = _ctx(c, q, max_model_len)
        # prefix caching shares only full blocks: the partial last block of a shared prefix is
        # private to every sequence (vLLM hashes full blocks only)
        aligned = (min(c.shared_prefix, c.prompt.at(q)) // layout.block_size) * layout.block_size
        shared_blocks = layout.blocks_per_request(aligned, 0) if aligned else 0
        # blocks one sequence of this cohort holds, over all KV groups (sliding windows bound it)
        blocks += w * max(1, layout.blocks_per_request(max(1, ctx), 0) - shared_blocks)
        tokens += w * ctx
        shared += shared_blocks
    usable = max(0, num_blocks - 1)  # BlockPool reserves one null block
    budget = usable * (1.0 - safety_fraction) - shared
    by_kv = int(budget // blocks) if blocks > 0 and budget > 0 else 0
    result, limited = by_kv, "kv"
    msg = (
        f"{by_kv} sequences of {blocks:.1f} blocks ({tokens:,.0f} tokens at {q}) fit "
        f"{usable:,} usable blocks less {safety_fraction:.0%} safety"
        + (f" and {shared} shared-prefix blocks" if shared else "")
    )
    if workload.itl_target_ms and hbm_bytes_per_s:
        step_budget = workload.itl_target_ms / 1000.0 * hbm_bytes_per_s - weight_bytes
        per_seq = tokens * layout.bytes_per_token
        by_itl = int(step_budget // per_seq) if per_seq > 0 and step_budget > 0 else 0
        if by_itl < result:
            result, limited = by_itl, "itl"
            msg += (
                f"; an ITL of {workload.itl_target_ms} ms allows {by_itl} "
                f"(decode reads {weight_bytes / GiB:.2f} GiB of weights + "
                f"{per_seq / MiB:.1f} MiB of KV per sequence per step)"
            )
    if result > cap:
        result, limited = cap, "cap"
        msg += f"; capped at {cap}"
    return SeqSizing(result, blocks, tokens, usable, shared, limited, msg)


def tokens_for_blocks(blocks: int, block_size: int) -> int:
    return blocks * block_size


def blocks_for_tokens(tokens: int, block_size: int) -> int:
    return cdiv(tokens, block_size)


def replicas_for_peak(peak: int, per_replica: int) -> int:
    """``ceil(peak / per-replica concurrency)``: the replicas that hold the peak (0 for no
    load). The one place this formula is written (rollout and the latency report use it)."""
    if per_replica <= 0:
        raise ValueError("per-replica concurrency must be positive")
    return max(1, math.ceil(peak / per_replica)) if peak > 0 else 0
