"""Sizing: per-sequence KV reservations and max-num-seqs, rollout headroom, spare GPUs.

Reference layout (every number below is derived from it by hand):
Llama-3.1-8B, TP1, bf16 KV, block 16 → one full-attention KV group of 32 layers;
one block of one layer = 16 tokens × 2 (K, V) × 8 KV heads × 128 head_dim × 2 B = 65,536 B;
one block id over the 32 layers = 32 × 65,536 B = 2,097,152 B = 2 MiB, 16 tokens;
KV bytes per token = 2 × 8 × 128 × 2 × 32 = 131,072 B.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from inference_capacity.hardware import GPU_PRODUCT_LABEL, get_gpu
from inference_capacity.ledger.kv import kv_layout, layers_on_rank
from inference_capacity.model import load_model
from inference_capacity.model.shapes import cdiv
from inference_capacity.sizing.gpus import spare_after_scale_up, spare_gpus
from inference_capacity.sizing.rollout import plan_rollout
from inference_capacity.sizing.workload import (
    Cohort,
    Quantiles,
    Workload,
    blocks_for_tokens,
    replicas_for_peak,
    size_max_num_seqs,
    tokens_for_blocks,
)

LLAMA8B = load_model("meta-llama/Llama-3.1-8B-Instruct")
LAYOUT = kv_layout(
    layers_on_rank(LLAMA8B, 1, 0), tp=1, kv_bytes=2, model_dtype_bytes=2, block_size=16
)
GEMMA2 = load_model("google/gemma-2-9b-it")  # alternating sliding (4096) / full layers
GEMMA_LAYOUT = kv_layout(
    layers_on_rank(GEMMA2, 1, 0), tp=1, kv_bytes=2, model_dtype_bytes=2, block_size=16
)

H100 = get_gpu("H100-SXM-80GB")
H100_LABEL = "NVIDIA-H100-80GB-HBM3"
A100_LABEL = "NVIDIA-A100-SXM4-80GB"
GPU = "nvidia.com/gpu"


def q(p: int) -> Quantiles:
    return Quantiles(p, p, p)


def one(prompt: int, output: int, shared: int = 0, **kw: Any) -> Workload:
    return Workload((Cohort("c", 1.0, q(prompt), q(output), shared),), **kw)


# ----------------------------------------------------------------------------- the layout


def test_reference_layout_is_2mib_blocks_of_16_tokens() -> None:
    assert LAYOUT.block_size == 16
    assert LAYOUT.bytes_per_block == 32 * 16 * 2 * 8 * 128 * 2 == 2 * 2**20
    assert LAYOUT.bytes_per_token == 131_072
    assert LAYOUT.num_groups == 1


# ------------------------------------------------------------------------- size_max_num_seqs


def test_single_cohort_kv_bound() -> None:
    # ctx = 2000 + 800 = 2800 tokens → cdiv(2800, 16) = 175 blocks per sequence.
    # 29,371 blocks − 1 null block = 29,370 usable; × (1 − 0.10) = 26,433 blocks of budget;
    # 26,433 // 175 = 151 (151 × 175 = 26,425; 152 × 175 = 26,600 > 26,433).
    s = size_max_num_seqs(one(2000, 800), LAYOUT, 29_371, 8192, 0.10, 4096)
    assert s.blocks_per_seq == 175
    assert s.tokens_per_seq == 2800
    assert s.usable_blocks == 29_370
    assert s.shared_prefix_blocks == 0
    assert s.max_num_seqs == 151
    assert s.limited_by == "kv"
    assert "151 sequences" in s.message


def test_quantile_selects_the_sizing_point() -> None:
    wl = Workload(
        (Cohort("c", 1.0, Quantiles(100, 2000, 4000), Quantiles(50, 800, 1500)),), quantile="p99"
    )
    # p99: ctx = 4000 + 1500 = 5500 → cdiv(5500, 16) = 344 blocks; 26,433 // 344 = 76
    s = size_max_num_seqs(wl, LAYOUT, 29_371, 8192, 0.10, 4096)
    assert s.blocks_per_seq == 344
    assert s.max_num_seqs == 76
    # p50: ctx 150 → cdiv(150, 16) = 10 blocks; 26,433 // 10 = 2,643
    p50 = size_max_num_seqs(
        Workload(wl.cohorts, quantile="p50"), LAYOUT, 29_371, 8192, 0.1, 1 << 20
    )
    assert p50.blocks_per_seq == 10
    assert p50.max_num_seqs == 2643


def test_two_cohorts_weighted_mean_reservation() -> None:
    chat = Cohort("chat", 3.0, q(1000), q(500))  # 1500 tokens → cdiv = 94 blocks
    rag = Cohort("rag", 1.0, q(6000), q(300))  # 6300 tokens → cdiv = 394 blocks
    s = size_max_num_seqs(Workload((chat, rag)), LAYOUT, 29_371, 8192, 0.10, 4096)
    # weights normalised: 0.75 × 94 + 0.25 × 394 = 70.5 + 98.5 = 169.0 blocks;
    # tokens 0.75 × 1500 + 0.25 × 6300 = 2700; 26,433 // 169 = 156 (157 × 169 = 26,533)
    assert s.blocks_per_seq == pytest.approx(169.0)
    assert s.tokens_per_seq == pytest.approx(2700.0)
    assert s.max_num_seqs == 156


def test_context_is_capped_at_max_model_len() -> None:
    # 8000 + 1000 = 9000 tokens, but vLLM stops a sequence at max_model_len 8192 →
    # cdiv(8192, 16) = 512 blocks; 26,433 // 512 = 51
    s = size_max_num_seqs(one(8000, 1000), LAYOUT, 29_371, 8192, 0.10, 4096)
    assert s.blocks_per_seq == 512
    assert s.tokens_per_seq == 8192
    assert s.max_num_seqs == 51


def test_shared_prefix_is_counted_once_per_replica() -> None:
    # prompt 2000 of which 1024 are a shared system prompt (64 whole blocks, cached once);
    # own = 2800 − 1024 = 1776 → cdiv(1776, 16) = 111 blocks per sequence;
    # budget 26,433 − 64 = 26,369 → 26,369 // 111 = 237 (238 × 111 = 26,418 > 26,369)
    s = size_max_num_seqs(one(2000, 800, shared=1024), LAYOUT, 29_371, 8192, 0.10, 4096)
    assert s.shared_prefix_blocks == 64
    assert s.blocks_per_seq == 111
    assert s.max_num_seqs == 237
    assert "64 shared-prefix blocks" in s.message
    without = size_max_num_seqs(one(2000, 800), LAYOUT, 29_371, 8192, 0.10, 4096)
    assert s.max_num_seqs > without.max_num_seqs


def test_shared_prefix_longer_than_prompt_only_saves_the_prompt() -> None:
    # a 4096-token "shared prefix" on 100-token prompts: the sequence still holds its own
    # 100 + 50 tokens minus at most the 100 prompt tokens → 50 own tokens → 4 blocks
    s = size_max_num_seqs(one(100, 50, shared=4096), LAYOUT, 29_371, 8192, 0.10, 1 << 20)
    assert s.blocks_per_seq == cdiv(50, 16) == 4


def test_unaligned_shared_prefix_reserves_the_partial_block_per_sequence() -> None:
    # A 20-token prompt that is all shared prefix, 13 output tokens: ctx = 33 tokens, in
    # blocks 0 (tokens 0-15), 1 (16-31) and 2 (32). Only block 0 holds prefix tokens alone and
    # can be shared (prefix caching hashes full blocks); block 1 mixes prefix tokens 16-19 with
    # the sequence's own tokens. Private blocks per sequence = cdiv(33, 16) − 20 // 16 = 2.
    s = size_max_num_seqs(one(20, 13, shared=20), LAYOUT, 1001, 8192, 0.0, 1 << 20)
    shared_full = 20 // 16
    private = cdiv(33, 16) - shared_full
    assert private == 2
    assert s.max_num_seqs * private + shared_full <= s.usable_blocks


def test_sliding_window_bounds_the_reservation() -> None:
    # gemma-2-9b: 21 sliding (window 4096) + 21 full layers → two KV groups of 21.
    # ctx 8000: sliding cdiv(min(4096 − 1, 8000), 16) + 1 = 256 + 1 = 257; full cdiv(8000, 16)
    # = 500 → 757 block ids, not 2 × 500.
    assert GEMMA_LAYOUT.num_groups == 2
    s = size_max_num_seqs(one(7000, 1000), GEMMA_LAYOUT, 10_001, 8192, 0.0, 1 << 20)
    assert s.blocks_per_seq == 757
    assert s.max_num_seqs == 10_000 // 757  # = 13
    # ctx 1000 is inside the window: 63 + 1 (sliding) + 63 (full) = 127
    short = size_max_num_seqs(one(900, 100), GEMMA_LAYOUT, 10_001, 8192, 0.0, 1 << 20)
    assert short.blocks_per_seq == 127


def test_itl_bound() -> None:
    # step budget = 20 ms × 3.35e12 B/s − 16 GiB of weights = 67e9 − 17,179,869,184
    # = 49,820,130,816 B; KV read per sequence per step = 2800 × 131,072 = 367,001,600 B;
    # 49,820,130,816 / 367,001,600 = 135.7 → 135 (the KV bound is 151)
    wl = one(2000, 800, itl_target_ms=20.0)
    s = size_max_num_seqs(wl, LAYOUT, 29_371, 8192, 0.10, 4096, 16 * 2**30, 3.35e12)
    assert s.max_num_seqs == 135
    assert s.limited_by == "itl"
    assert "ITL of 20.0 ms allows 135" in s.message
    # no bandwidth known: the ITL target cannot bind
    s2 = size_max_num_seqs(wl, LAYOUT, 29_371, 8192, 0.10, 4096, 16 * 2**30, None)
    assert (s2.max_num_seqs, s2.limited_by) == (151, "kv")


def test_itl_target_below_weight_read_time_allows_nothing() -> None:
    # 1 ms × 3.35e12 = 3.35e9 B < 16 GiB of weights: not even one sequence meets it
    wl = one(2000, 800, itl_target_ms=1.0)
    s = size_max_num_seqs(wl, LAYOUT, 29_371, 8192, 0.10, 4096, 16 * 2**30, 3.35e12)
    assert s.max_num_seqs == 0
    assert s.limited_by == "itl"


def test_cap_is_respected_and_reported() -> None:
    s = size_max_num_seqs(one(2000, 800), LAYOUT, 29_371, 8192, 0.10, 128)
    assert (s.max_num_seqs, s.limited_by) == (128, "cap")
    assert "capped at 128" in s.message
    s = size_max_num_seqs(one(2000, 800), LAYOUT, 29_371, 8192, 0.10, 151)
    assert (s.max_num_seqs, s.limited_by) == (151, "kv")  # not above the cap: not capped


def test_null_block_and_tiny_pools() -> None:
    # 176 blocks: 175 usable after the null block = exactly one 175-block sequence at 0 safety
    assert size_max_num_seqs(one(2000, 800), LAYOUT, 176, 8192, 0.0, 99).max_num_seqs == 1
    assert size_max_num_seqs(one(2000, 800), LAYOUT, 175, 8192, 0.0, 99).max_num_seqs == 0
    zero = size_max_num_seqs(one(2000, 800), LAYOUT, 0, 8192, 0.0, 99)
    assert (zero.max_num_seqs, zero.usable_blocks) == (0, 0)
    # a safety fraction of 100 % leaves nothing
    assert size_max_num_seqs(one(10, 10), LAYOUT, 29_371, 8192, 1.0, 99).max_num_seqs == 0


def test_invalid_workloads() -> None:
    with pytest.raises(ValueError, match="at least one cohort"):
        size_max_num_seqs(Workload(()), LAYOUT, 100, 8192, 0.1, 10)
    bad = Workload((Cohort("c", 0.0, q(10), q(10)),))
    with pytest.raises(ValueError, match="weights must be positive"):
        size_max_num_seqs(bad, LAYOUT, 100, 8192, 0.1, 10)
    with pytest.raises(ValueError, match="p50, p95 or p99"):
        size_max_num_seqs(Workload(one(10, 10).cohorts, quantile="p90"), LAYOUT, 100, 8192, 0.1, 10)
    assert q(7).at("p99") == 7


def test_block_token_helpers() -> None:
    assert blocks_for_tokens(2800, 16) == 175
    assert blocks_for_tokens(2801, 16) == 176
    assert blocks_for_tokens(0, 16) == 0
    assert tokens_for_blocks(175, 16) == 2800
    assert replicas_for_peak(600, 151) == 4  # ceil(600 / 151) = ceil(3.97)
    assert replicas_for_peak(604, 151) == 4
    assert replicas_for_peak(605, 151) == 5
    assert replicas_for_peak(1, 151) == 1
    assert replicas_for_peak(0, 151) == 0
    with pytest.raises(ValueError):
        replicas_for_peak(10, 0)


cohort_st = st.builds(
    lambda w, p, o, sp: Cohort("c", w, q(p), q(o), sp),
    st.floats(0.1, 10.0),
    st.integers(1, 20_000),
    st.integers(1, 4_000),
    st.sampled_from([0, 0, 16, 512, 2048]),
)
workload_st = st.builds(lambda cs: Workload(tuple(cs)), st.lists(cohort_st, min_size=1, max_size=3))
blocks_st = st.integers(0, 60_000)
safety_st = st.floats(0.0, 0.9)


@settings(max_examples=60, deadline=None)
@given(workload_st, blocks_st, st.integers(0, 5_000), safety_st)
def test_larger_pool_never_lowers_max_num_seqs(
    wl: Workload, blocks: int, extra: int, safety: float
) -> None:
    a = size_max_num_seqs(wl, LAYOUT, blocks, 8192, safety, 1 << 20)
    b = size_max_num_seqs(wl, LAYOUT, blocks + extra, 8192, safety, 1 << 20)
    assert b.max_num_seqs >= a.max_num_seqs


@settings(max_examples=60, deadline=None)
@given(workload_st, blocks_st, safety_st, st.floats(0.0, 0.5))
def test_larger_safety_never_raises_max_num_seqs(
    wl: Workload, blocks: int, safety: float, more: float
) -> None:
    a = size_max_num_seqs(wl, LAYOUT, blocks, 8192, safety, 1 << 20)
    b = size_max_num_seqs(wl, LAYOUT, blocks, 8192, min(1.0, safety + more), 1 << 20)
    assert b.max_num_seqs <= a.max_num_seqs


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 20_000),
    st.integers(0, 8_000),
    st.integers(1, 4_000),
    blocks_st,
    st.sampled_from([LAYOUT, GEMMA_LAYOUT]),
)
def test_longer_prompts_never_raise_max_num_seqs(
    prompt: int, longer: int, out: int, blocks: int, layout: Any
) -> None:
    a = size_max_num_seqs(one(prompt, out), layout, blocks, 8192, 0.1, 1 << 20)
    b = size_max_num_seqs(one(prompt + longer, out), layout, blocks, 8192, 0.1, 1 << 20)
    assert b.max_num_seqs <= a.max_num_seqs
    assert b.blocks_per_seq >= a.blocks_per_seq


@settings(max_examples=60, deadline=None)
@given(workload_st, blocks_st, safety_st, st.integers(0, 3000))
def test_cap_is_never_exceeded(wl: Workload, blocks: int, safety: float, cap: int) -> None:
    s = size_max_num_seqs(wl, LAYOUT, blocks, 8192, safety, cap)
    free = size_max_num_seqs(wl, LAYOUT, blocks, 8192, safety, 1 << 30)
    assert s.max_num_seqs == min(cap, free.max_num_seqs)
    assert (s.limited_by == "cap") == (free.max_num_seqs > cap)


@settings(max_examples=60, deadline=None)
@given(workload_st, st.floats(1.0, 200.0), st.floats(0.0, 200.0), st.integers(0, 40 * 2**30))
def test_itl_bound_is_monotone_in_the_target(
    wl: Workload, target: float, more: float, weights: int
) -> None:
    def at(ms: float) -> int:
        w = Workload(wl.cohorts, itl_target_ms=ms)
        return size_max_num_seqs(
            w, LAYOUT, 29_371, 8192, 0.1, 1 << 20, weights, H100.hbm_bandwidth_bytes_per_s
        ).max_num_seqs

    assert at(target + more) >= at(target)


@settings(max_examples=80, deadline=None)
@given(workload_st, blocks_st, safety_st)
def test_reservations_fit_the_usable_budget(wl: Workload, blocks: int, safety: float) -> None:
    # shared prefixes drawn here are whole blocks (0, 16, 512, 2048 tokens), so the
    # token-wise subtraction is exact
    s = size_max_num_seqs(wl, LAYOUT, blocks, 8192, safety, 1 << 20)
    budget = max(0, blocks - 1) * (1 - safety)
    if s.max_num_seqs > 0:
        assert s.max_num_seqs * s.blocks_per_seq + s.shared_prefix_blocks <= budget + 1e-6
    if s.limited_by == "kv" and s.max_num_seqs > 0:
        # and it is the largest such batch
        assert (s.max_num_seqs + 1) * s.blocks_per_seq + s.shared_prefix_blocks > budget - 1e-6


@settings(max_examples=50, deadline=None)
@given(workload_st, blocks_st, st.floats(1.0, 100.0))
def test_itl_sized_batch_meets_the_target(wl: Workload, blocks: int, target: float) -> None:
    weights = 16 * 2**30
    hbm = H100.hbm_bandwidth_bytes_per_s
    assert hbm is not None
    w = Workload(wl.cohorts, itl_target_ms=target)
    s = size_max_num_seqs(w, LAYOUT, blocks, 8192, 0.1, 1 << 20, weights, hbm)
    step_s = (weights + s.max_num_seqs * s.tokens_per_seq * LAYOUT.bytes_per_token) / hbm
    assume(s.max_num_seqs > 0)
    assert step_s * 1000 <= target * (1 + 1e-9)


# ------------------------------------------------------------------------------ rollout


def test_rollout_reference_numbers() -> None:
    # peak 600 at 151 per replica: N_min = ceil(600 / 151) = 4; N = 4 + 1 = 5;
    # maxUnavailable = 5 − 4 = 1; 9 spare GPUs at 2 per replica → 4 surge pods
    p = plan_rollout(600, 151, 1, 1, 16, 2, 9)
    assert (p.replicas, p.min_replicas_for_peak) == (5, 4)
    assert (p.max_unavailable, p.max_surge, p.pdb_min_available) == (1, 4, 4)
    assert p.safe and p.fits_max_replicas
    assert p.reason == "RolloutHeadroom"
    assert "keeps 4 × 151 ≥ peak" in p.message


def test_surge_bounded_by_replicas_and_whole_replicas() -> None:
    p = plan_rollout(100, 100, 1, 1, 16, 1, 64)  # 64 spare GPUs, 2 replicas
    assert p.max_surge == 2
    p = plan_rollout(100, 100, 1, 1, 16, 4, 7)  # 7 // 4 = 1 surge replica
    assert p.max_surge == 1
    p = plan_rollout(100, 100, 1, 1, 16, 4, None)  # unknown spare: no surge assumed
    assert p.max_surge == 0
    assert "spare GPUs unknown" in p.message


def test_no_headroom_is_unsafe_not_zero_zero() -> None:
    # no recovery replica, no spare GPUs: maxSurge = maxUnavailable = 0, which Kubernetes
    # rejects; the plan must say it is unsafe
    p = plan_rollout(600, 151, 0, 1, 16, 1, 0)
    assert (p.replicas, p.max_surge, p.max_unavailable) == (4, 0, 0)
    assert not p.safe
    assert p.reason == "NoRolloutHeadroom"
    assert p.fits_max_replicas
    # spare GPUs alone make it safe: surge without dropping below peak
    p = plan_rollout(600, 151, 0, 1, 16, 1, 3)
    assert p.safe and (p.max_surge, p.max_unavailable) == (3, 0)


def test_min_replicas_and_hpa_min_raise_n() -> None:
    p = plan_rollout(100, 100, 1, 6, 16, 1, 0)  # N_min 1, N = max(1 + 1, 6) = 6
    assert (p.replicas, p.min_replicas_for_peak, p.max_unavailable) == (6, 1, 5)
    p = plan_rollout(100, 100, 1, 1, 16, 1, 0, hpa_min_replicas=8)
    assert p.replicas == 8 and p.max_unavailable == 7 and p.pdb_min_available == 1


def test_exceeds_max_replicas() -> None:
    p = plan_rollout(10_000, 151, 1, 1, 16, 1, 100)  # ceil(10000 / 151) = 67; N = 68 > 16
    assert p.reason == "ExceedsMaxReplicas"
    assert not p.fits_max_replicas and not p.safe
    assert (p.replicas, p.min_replicas_for_peak) == (68, 67)
    assert "above maxReplicas 16" in p.message
    # an HPA minimum above maxReplicas is refused too
    p = plan_rollout(10, 151, 1, 1, 4, 1, 100, hpa_min_replicas=5)
    assert p.reason == "ExceedsMaxReplicas"


def test_no_capacity_and_no_peak() -> None:
    p = plan_rollout(600, 0, 1, 1, 16, 1, 8)
    assert p.reason == "NoCapacity" and not p.safe and p.replicas == 0
    p = plan_rollout(None, 151, 1, 3, 16, 1, 0)  # no peak: minReplicas hold it
    assert (p.replicas, p.min_replicas_for_peak, p.max_unavailable) == (4, 3, 1)
    assert "no peakConcurrency given" in p.message


@settings(max_examples=120, deadline=None)
@given(
    st.one_of(st.none(), st.integers(0, 100_000)),
    st.integers(1, 4096),
    st.integers(0, 4),
    st.integers(0, 20),
    st.integers(1, 200),
    st.sampled_from([1, 2, 4, 8]),
    st.one_of(st.none(), st.integers(0, 256)),
    st.one_of(st.none(), st.integers(0, 30)),
)
def test_rollout_properties(
    peak: int | None,
    per: int,
    recovery: int,
    mn: int,
    mx: int,
    gpr: int,
    spare: int | None,
    hpa: int | None,
) -> None:
    p = plan_rollout(peak, per, recovery, mn, mx, gpr, spare, hpa)
    n_min = max(1, math.ceil(peak / per)) if peak is not None else max(mn, 1)
    assert p.min_replicas_for_peak == n_min
    assert p.pdb_min_available == n_min
    assert p.replicas >= n_min + recovery and p.replicas >= mn
    if hpa is not None:
        assert p.replicas >= hpa
    assert p.fits_max_replicas == (p.replicas <= mx)
    if not p.fits_max_replicas:
        assert p.reason == "ExceedsMaxReplicas" and not p.safe
        return
    assert p.max_unavailable == p.replicas - n_min
    assert 0 <= p.max_surge <= p.replicas
    if spare is not None:
        assert p.max_surge * gpr <= spare
    assert p.safe == (p.max_surge > 0 or p.max_unavailable > 0)  # never the 0/0 Kubernetes
    if p.safe and peak is not None:
        # capacity left while maxUnavailable pods are down still holds the peak
        assert (p.replicas - p.max_unavailable) * per >= peak


# ----------------------------------------------------------------------------- spare GPUs


def node(
    name: str,
    alloc: Any = 8,
    product: str | None = H100_LABEL,
    ready: str = "True",
    unschedulable: bool = False,
    conditions: bool = True,
) -> dict[str, Any]:
    labels = {GPU_PRODUCT_LABEL: product} if product else {}
    n: dict[str, Any] = {
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {"allocatable": {GPU: alloc, "cpu": "96"}},
    }
    if conditions:
        n["status"]["conditions"] = [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": ready},
        ]
    return n


def pod(
    node_name: str | None,
    *gpus: int,
    phase: str = "Running",
    init: int = 0,
    limits_only: bool = False,
) -> dict[str, Any]:
    def res(g: int) -> dict[str, Any]:
        if limits_only:
            return {"limits": {GPU: str(g)}}
        return {"requests": {GPU: str(g), "cpu": "8"}, "limits": {GPU: str(g)}}

    spec: dict[str, Any] = {
        "containers": [{"name": f"c{i}", "resources": res(g)} for i, g in enumerate(gpus)]
    }
    if init:
        spec["initContainers"] = [{"name": "init", "resources": {"limits": {GPU: str(init)}}}]
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


def test_spare_subtracts_requests_on_matching_ready_nodes() -> None:
    nodes = [node("a"), node("b")]
    pods = [pod("a", 4), pod("a", 1, 1), pod("b", 8)]  # a: 8 − 6 = 2 free; b: 0 free
    usable, why = spare_gpus(nodes, pods, GPU, H100, 1)
    assert usable == 2
    assert "2 spare nvidia.com/gpu" in why and "2 matching Nodes" in why


def test_spare_counts_only_whole_replicas_per_node() -> None:
    nodes = [node("a"), node("b")]
    pods = [pod("a", 5), pod("b", 5)]  # 3 free on each: at TP2 one replica (2 GPUs) per node
    assert spare_gpus(nodes, pods, GPU, H100, 2)[0] == 4
    assert spare_gpus(nodes, pods, GPU, H100, 4)[0] == 0  # 3 + 3 free, but no Node holds 4
    why = spare_gpus(nodes, pods, GPU, H100, 4)[1]
    assert "(6 free in total)" in why


def test_replica_larger_than_a_node_counts_all_free() -> None:
    # TP16 spans Nodes of 8: per-Node whole-replica rounding does not apply
    nodes = [node("a"), node("b")]
    assert spare_gpus(nodes, [pod("a", 3)], GPU, H100, 16)[0] == 5 + 8


def test_spare_skips_finished_and_unscheduled_pods() -> None:
    nodes = [node("a")]
    pods = [
        pod("a", 4, phase="Succeeded"),
        pod("a", 4, phase="Failed"),
        pod(None, 8, phase="Pending"),  # not bound to a Node yet
        pod("a", 2, phase="Pending"),  # bound, starting: holds its GPUs
        pod("elsewhere", 8),  # on a Node not in the list
    ]
    assert spare_gpus(nodes, pods, GPU, H100, 1)[0] == 6


def test_spare_skips_wrong_product_and_unready_nodes() -> None:
    nodes = [
        node("h100"),
        node("a100", product=A100_LABEL),
        node("mig", product="NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"),
        node("unknown", product="NVIDIA-Made-Up-GPU"),
        node("notready", ready="False"),
        node("cordoned", unschedulable=True),
        node("cpu", alloc=None),
    ]
    usable, why = spare_gpus(nodes, [], GPU, H100, 1)
    assert usable == 8
    assert "on 1 matching Nodes" in why
    # without a GPU filter every Ready schedulable GPU Node counts (h100, a100, mig, unknown)
    assert spare_gpus(nodes, [], GPU, None, 1)[0] == 32


def test_spare_node_details() -> None:
    # time-sliced product names keep the model; Nodes without conditions are assumed Ready;
    # quantities may be strings; a Node without the product label is not excluded (the
    # module counts only Nodes whose label names another model as foreign)
    nodes = [
        node("s", product=H100_LABEL + "-SHARED", alloc="8"),
        node("nc", conditions=False, alloc="4"),
        node("nolabel", product=None, alloc=2),
    ]
    assert spare_gpus(nodes, [], GPU, H100, 1)[0] == 14


def test_pod_gpu_request_rules() -> None:
    nodes = [node("a")]
    # limits stand for requests for extended resources
    assert spare_gpus(nodes, [pod("a", 3, limits_only=True)], GPU, H100, 1)[0] == 5
    # an init container's GPUs count only if above the sum of the app containers
    assert spare_gpus(nodes, [pod("a", 1, 1, init=4)], GPU, H100, 1)[0] == 4
    assert spare_gpus(nodes, [pod("a", 3, 2, init=1)], GPU, H100, 1)[0] == 3
    # a Node over-committed by stale data never counts negative
    assert spare_gpus(nodes + [node("b")], [pod("a", 12)], GPU, H100, 1)[0] == 8


node_st = st.builds(
    lambda i, alloc, prod, ready, cordon: node(f"n{i}", alloc, prod, ready, cordon),
    st.integers(0, 5),
    st.integers(0, 8),
    st.sampled_from([H100_LABEL, A100_LABEL]),
    st.sampled_from(["True", "False"]),
    st.booleans(),
)
pod_st = st.builds(
    lambda i, g, phase: pod(f"n{i}", g, phase=phase),
    st.integers(0, 6),
    st.integers(0, 8),
    st.sampled_from(["Running", "Pending", "Succeeded"]),
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(node_st, max_size=6, unique_by=lambda n: n["metadata"]["name"]),
    st.lists(pod_st, max_size=10),
    pod_st,
    st.sampled_from([1, 2, 4, 8]),
)
def test_spare_gpu_properties(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], extra: dict[str, Any], gpr: int
) -> None:
    usable, _ = spare_gpus(nodes, pods, GPU, H100, gpr)
    counted = [
        n
        for n in nodes
        if n["metadata"]["labels"][GPU_PRODUCT_LABEL] == H100_LABEL
        and n["status"]["conditions"][1]["status"] == "True"
        and not n["spec"].get("unschedulable")
    ]
    expected = 0
    for n in counted:
        alloc = n["status"]["allocatable"][GPU]
        used = sum(
            int(p["spec"]["containers"][0]["resources"]["requests"][GPU])
            for p in pods
            if p["spec"]["nodeName"] == n["metadata"]["name"]
            and p["status"]["phase"] != "Succeeded"
        )
        free = max(0, alloc - used)
        expected += free if gpr > alloc else free // gpr * gpr
    assert usable == expected
    assert 0 <= usable <= sum(n["status"]["allocatable"][GPU] for n in counted)
    if all(n["status"]["allocatable"][GPU] in (0, 8) for n in counted):
        assert usable % gpr == 0  # whole replicas only
    # one more pod never adds spare GPUs
    assert spare_gpus(nodes, [*pods, extra], GPU, H100, gpr)[0] <= usable


def test_replicas_being_added_take_their_gpus_before_a_surge() -> None:
    # 11 free GPUs, 3 replicas of TP2 being added: 6 go to them, 5 stay for surge pods
    assert spare_after_scale_up(11, 3, 2) == (5, 6)
    # never below zero, and no replicas added takes nothing
    assert spare_after_scale_up(4, 3, 2) == (0, 6)
    assert spare_after_scale_up(4, 0, 8) == (4, 0)
