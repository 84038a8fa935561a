"""vLLM's rules by version: each test pins a number derived from the vLLM file/function cited
next to the rule in engines/vllm.py."""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

import inference_capacity
from inference_capacity.budget import max_utilization
from inference_capacity.cli import main as cli_main
from inference_capacity.engines.versions import Era, parse_version
from inference_capacity.engines.vllm import (
    EngineSettings,
    GiB,
    SettingsError,
    batch_defaults,
    capture_count,
    cuda_graph_estimate_applied,
    distributed_init_bytes,
    pre_snapshot_bytes,
    predict_startup,
)
from inference_capacity.engines.vllm_flags import parse_speculative_config
from inference_capacity.engines.vllm_rules import VllmRules
from inference_capacity.hardware import get_gpu
from inference_capacity.ledger.weights import lora_bytes
from inference_capacity.model import catalog_names, load_model
from inference_capacity.planner import PlanInput, make_plan

H100 = get_gpu("H100-SXM-80GB")
H200 = get_gpu("H200-SXM-141GB")
LLAMA8B = load_model("meta-llama/Llama-3.1-8B-Instruct")
QWEN30B = load_model("Qwen/Qwen3-30B-A3B")


def predict(shape=LLAMA8B, gpu=H100, tp=1, pp=1, **kw):  # type: ignore[no-untyped-def]
    s = EngineSettings(**{"version": "0.19.0", "max_model_len": 16384, **kw})
    return predict_startup(shape, gpu.total_bytes, gpu.name, tp, pp, s)


# --- memory before the init snapshot (Worker.init_device, 0.11+) ----------------------------


@pytest.mark.parametrize(
    # 0.19.0 H100 DEBUG "init memory snapshot": cuda_memory at TP1, TP2, TP4, PP2
    ("tp", "pp", "used_gib"),
    [(1, 1, 0.51), (2, 1, 1.53), (4, 1, 2.07), (1, 2, 1.43)],
)
def test_pre_snapshot_memory_matches_the_019_logs(tp: int, pp: int, used_gib: float) -> None:
    assert pre_snapshot_bytes(Era.V1_NO_CG, tp, pp) == pytest.approx(used_gib * GiB, abs=2)


def test_pre_snapshot_before_011_is_the_context_only() -> None:
    assert distributed_init_bytes(Era.V1_PRE_NCCL, 4, 1) == 0


def test_tp4_at_098_does_not_start_with_vllms_error() -> None:
    # free 79.19 − 2.07 = 77.12 GiB < ceil(0.98 × 79.19 GiB) = 77.61 GiB
    # (v1/worker/utils.py::request_memory)
    p = predict(tp=4, gpu_memory_utilization=0.98)
    assert not p.starts
    assert p.error == (
        "Free memory on device cuda:0 (77.12/79.19 GiB) on startup is less than desired GPU "
        "memory utilization (0.98, 77.61 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes."
    )
    # the largest utilization vLLM accepts at TP4: 77.12 / 79.19 = 0.9738
    free = H100.total_bytes - pre_snapshot_bytes(Era.V1_NO_CG, 4, 1)
    u_max = math.floor(free / H100.total_bytes * 10_000) / 10_000
    assert u_max == 0.9738
    assert predict(tp=4, gpu_memory_utilization=u_max).starts
    assert not predict(tp=4, gpu_memory_utilization=u_max + 0.0002).starts


def test_the_safe_utilization_leaves_the_pre_snapshot_memory() -> None:
    p = predict(tp=4, gpu_memory_utilization=0.9)
    u = max_utilization(p, 0.0)
    assert u * H100.total_bytes <= H100.total_bytes - pre_snapshot_bytes(Era.V1_NO_CG, 4, 1)


# --- kv-cache-memory-bytes (gpu_worker.py::determine_available_memory, 0.11+) ---------------


def test_kv_cache_memory_bytes_replaces_the_budget() -> None:
    p = predict(kv_cache_memory_bytes=20_000_000_000, gpu_memory_utilization=0.5)
    r = p.ranks[0]
    assert r.available_kv == 20_000_000_000
    assert p.num_gpu_blocks == 20_000_000_000 // (2 * 2**20) == 9536
    # vLLM holds the non-KV terms plus N, whatever the utilization
    q = predict(gpu_memory_utilization=0.5)
    assert r.requested == q.ranks[0].requested - q.ranks[0].available_kv + 20_000_000_000


# --- LoRA on fused MoE (lora/layers/fused_moe.py::FusedMoEWithLoRA) -------------------------


def test_moe_lora_slot() -> None:
    # Qwen3-30B-A3B: 48 MoE layers × 128 experts × rank 16 × (3 × 2048 + 3 × 768) × 2 B per slot
    moe = 48 * 128 * 16 * (3 * 2048 + 3 * 768) * 2
    assert moe / GiB == pytest.approx(1.547, abs=0.001)  # the review's ≈1.55 GiB per slot
    dense = sum(
        16 * sum(t.shape_per_rank(1)) * 2 * t.copies
        for t in QWEN30B.tensors
        if t.quantizable and t.experts == 1
    )
    assert lora_bytes(QWEN30B, 1, range(48), 1, 16, 2) == moe + dense
    # expert parallel over 2 ranks: 64 experts each, whole (not TP-split)
    moe_ep = 48 * 64 * 16 * (3 * 2048 + 3 * 768) * 2
    assert lora_bytes(QWEN30B, 2, range(48), 1, 16, 2, ep=2) - moe_ep == sum(
        16 * sum(t.shape_per_rank(2)) * 2 * t.copies
        for t in QWEN30B.tensors
        if t.quantizable and t.experts == 1
    )


# --- speculative decoding ----------------------------------------------------------------------


def test_rejection_sampler_logits() -> None:
    spec = parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 4}')
    a = predict(max_num_seqs=1024)
    b = predict(max_num_seqs=1024, speculative=spec)
    # (k + R) × V fp32 logits on the last rank (v1/sample/rejection_sampler.py)
    assert b.ranks[0].sampler_peak - a.ranks[0].sampler_peak == (4 + 1024) * 128256 * 4


def test_mtp_layers_add_weights_and_kv() -> None:
    v3 = load_model("deepseek-ai/DeepSeek-V3")
    assert v3.mtp_layers == 1
    spec = parse_speculative_config('{"method": "deepseek_mtp", "num_speculative_tokens": 1}')
    a = predict(v3, H200, tp=8, max_model_len=8192)
    b = predict(v3, H200, tp=8, max_model_len=8192, speculative=spec)
    # one more MLA layer in every block: 61 → 62 layers of (512 + 64) × 2 B × 16 tokens
    assert a.ranks[0].layout.bytes_per_block == 61 * 576 * 2 * 16
    assert b.ranks[0].layout.bytes_per_block == 62 * 576 * 2 * 16
    assert b.ranks[-1].weights.by_group["drafter"] > 0


# --- versions: V2 runner, CUDA-graph estimate, batch defaults ----------------------------------


@pytest.mark.parametrize(
    ("version", "v2", "rocm", "applied"),
    [
        ("0.19.0", False, False, True),
        ("0.17.1", False, False, False),  # before profile_cudagraph_memory (0.18)
        ("0.23.0", True, False, False),  # V2 runner returns 0 in 0.21–0.28
        ("0.28.0", True, False, False),
        ("0.30.0", True, False, True),  # implemented by 0.30 (PR #49233)
        ("0.23.0", False, False, True),
        ("0.25.0", False, True, False),  # ROCm: is_cuda() through 0.25
        ("0.26.0", False, True, True),  # is_cuda_alike() from 0.26
    ],
)
def test_cuda_graph_estimate_exceptions(version: str, v2: bool, rocm: bool, applied: bool) -> None:
    assert cuda_graph_estimate_applied(parse_version(version), v2, rocm) is applied


def test_v2_runner_defaults_by_version() -> None:
    qwen25 = load_model("Qwen/Qwen2.5-7B-Instruct")
    v2lite = load_model("deepseek-ai/DeepSeek-V2-Lite")
    # 0.23: Llama/Mistral/Qwen3 dense only
    assert predict(version="0.23.0").settings.v2_runner
    assert not predict(qwen25, version="0.23.0").settings.v2_runner
    # 0.25: every dense non-hybrid model, and DeepseekV2 (config/vllm.py, 0.25.0)
    assert predict(qwen25, version="0.25.0").settings.v2_runner
    assert predict(v2lite, version="0.25.0").settings.v2_runner
    assert not predict(QWEN30B, version="0.25.0").settings.v2_runner


def test_big_gpu_batch_tier_from_028() -> None:
    # EngineArgs.get_batch_defaults: the ≥ 160 GiB tier first appears in 0.28
    b200 = get_gpu("B200-180GB")
    v = parse_version
    assert batch_defaults(v("0.27.1"), Era.V1_CONSUMED, b200.total_bytes, b200.name, "api") == (
        8192,
        1024,
    )
    assert batch_defaults(v("0.28.0"), Era.V1_CONSUMED, b200.total_bytes, b200.name, "api") == (
        16384,
        1024,
    )


def test_performance_mode_throughput_doubles_the_batch() -> None:
    v = parse_version("0.33.0")
    t, r = batch_defaults(v, Era.V1_CONSUMED, H100.total_bytes, H100.name, "api")
    assert batch_defaults(v, Era.V1_CONSUMED, H100.total_bytes, H100.name, "api", "throughput") == (
        2 * t,
        2 * r,
    )


def test_capture_sizes() -> None:
    base = EngineSettings()
    assert capture_count(base) == 51
    assert capture_count(replace(base, cudagraph_capture_sizes=(1, 2, 4, 8))) == 4
    # [1, 2, 4] + 8..248 step 8 (31) + 256 = 35 sizes up to 256
    assert capture_count(replace(base, max_cudagraph_capture_size=256)) == 35
    a = predict(version="0.20.0")
    b = predict(version="0.20.0", cudagraph_capture_sizes=(1, 2, 4, 8))
    # vLLM's estimate (0.20, tests/test_cudagraph_estimate.py): a first capture and an increment
    # per further graph, so 4 + 4 graphs keep a first capture and are far above 4/51 of 51 + 51
    assert a.ranks[0].cuda_graph * 4 // 51 < b.ranks[0].cuda_graph < a.ranks[0].cuda_graph // 4


def test_estimate_env_var_off() -> None:
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 on 0.20: graphs back in the margin
    a = predict(version="0.20.0")
    b = predict(version="0.20.0", estimate_cuda_graphs=False)
    assert a.settings.cg_in_budget and not b.settings.cg_in_budget
    assert b.ranks[0].available_kv - a.ranks[0].available_kv == a.ranks[0].cuda_graph


def test_kv_transfer_turns_the_hybrid_manager_off() -> None:
    gemma = load_model("google/gemma-2-9b-it")
    a = predict(gemma, max_model_len=8192)
    b = predict(gemma, max_model_len=8192, kv_transfer=True)
    assert a.ranks[0].layout.num_groups == 2
    assert b.ranks[0].layout.num_groups == 1  # every layer as full attention


# --- hybrid Mamba cache modes (models/config.py::MambaModelConfig) ---------------------------

NANO = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
#: Nemotron-3-Nano per layer: attention 2 KV heads × 128 × 2 (K, V) × 2 B = 1024 B per token;
#: Mamba2 state: conv (64·64 + 2·8·128) × 3 × 2 B + SSM 64 × 64 × 128 × 4 B (fp32 cache dtype)
NANO_ATTN_TOKEN = 2 * 128 * 2 * 2
NANO_MAMBA = (64 * 64 + 2 * 8 * 128) * 3 * 2 + 64 * 64 * 128 * 4


def test_nemotron_nano_all_mode_at_020() -> None:
    # "all" only with --enable-prefix-caching given: 0.20–0.25 default it off for hybrids
    # (ModelConfig.is_prefix_caching_supported; test_formats_2026 pins the default)
    p = predict(
        NANO,
        version="0.20.0",
        gpu_memory_utilization=0.85,
        max_model_len=262144,
        enable_prefix_caching=True,
    )
    layout = p.ranks[0].layout
    # "all" mode: B a multiple of lcm(chunk_size 128, 16) with B × 1024 ≥ the Mamba page
    block = 128 * math.ceil(NANO_MAMBA / (128 * NANO_ATTN_TOKEN))
    assert block == layout.block_size == 2176
    # 23 Mamba + 6 attention layers: group size 6, 4 Mamba groups + 1 attention group, each
    # holding cdiv(262144, 2176) = 121 blocks per request
    assert layout.num_groups == 5
    per_request = 6 * block * NANO_ATTN_TOKEN * 5 * math.ceil(262144 / block)
    assert round(per_request / GiB, 2) == 7.53  # the review's "needs 7.53 GiB"
    assert not p.starts and "(7.53 GiB KV cache is needed" in (p.error or "")
    assert p.max_concurrency == pytest.approx(p.num_gpu_blocks / (5 * 121))


def test_nemotron_nano_at_020_and_u090_gives_the_reviews_concurrency() -> None:
    # vllm-fidelity-review.md finding 3: "vLLM 2176 and ≈1.12×" for Nemotron-3-Nano on an H100 at
    # 0.20 and L = 262k; that figure is at u = 0.90 (the default before 0.20; 0.20's own default,
    # 0.92, gives more blocks). Concurrency = blocks / (5 groups × cdiv(262144, 2176) = 121).
    # That figure assumed prefix caching on, which 0.20 needs --enable-prefix-caching for
    # (vllm-fidelity-rereview.md N1: at 0.20 defaults vLLM is at ≈ 5.4×)
    p = predict(
        NANO,
        version="0.20.0",
        gpu_memory_utilization=0.90,
        max_model_len=262144,
        enable_prefix_caching=True,
    )
    assert p.starts and p.ranks[0].layout.block_size == 2176
    assert p.max_concurrency == pytest.approx(p.num_gpu_blocks / (5 * 121))
    # the review's 1.12 assumed the old CUDA-graph term (it is not a log); with vLLM's estimate
    # structure (52 MoE-model layers at the MoE per-graph rates) the budget is 0.39 GiB smaller
    assert 1.0 < p.max_concurrency < 1.12


def test_nemotron_nano_align_mode_from_030_and_none_without_prefix_caching() -> None:
    # "align" (0.30+): B a multiple of 16 only, 2 state blocks per request per Mamba group
    p = predict(NANO, version="0.30.0", max_model_len=262144)
    block = 16 * math.ceil(NANO_MAMBA / (16 * NANO_ATTN_TOKEN))
    assert p.ranks[0].layout.block_size == block == 2096
    need = math.ceil(262144 / block) + 4 * 2
    assert p.max_concurrency == pytest.approx(p.num_gpu_blocks / need)
    # 0.33: a prefill checkpoint block more
    q = predict(NANO, version="0.33.0", max_model_len=262144)
    assert q.max_concurrency == pytest.approx(q.num_gpu_blocks / (need + 4))
    # --no-enable-prefix-caching: "none", one block
    r = predict(NANO, version="0.20.0", max_model_len=262144, enable_prefix_caching=False)
    assert r.ranks[0].layout.block_size == 2096
    assert r.max_concurrency == pytest.approx(r.num_gpu_blocks / (math.ceil(262144 / 2096) + 4))


# --- unequal page sizes (kv_cache_utils.py::unify_kv_cache_spec_page_size) -------------------


def test_gemma4_full_layers_hold_more_tokens_per_block() -> None:
    g4 = load_model("google/gemma-4-26B-A4B")
    p = predict(g4, version="0.33.0", max_model_len=262144)
    layout = p.ranks[0].layout
    # sliding: 8 KV heads × 256 × 2 × 2 B = 8192 B per token; full: 2 × 512 × 2 × 2 B = 4096 B,
    # so a full-layer block holds 16 × 8192 / 4096 = 32 tokens in the same 128 KiB page
    blocks = {g.kind.value: g.block_size for g in layout.groups}
    assert blocks == {"sliding": 16, "full": 32}
    assert {g.page_bytes for g in layout.groups} == {16 * 8192}
    sliding_groups = sum(1 for g in layout.groups if g.kind.value == "sliding")
    T = p.settings.max_num_batched_tokens
    sliding = math.ceil(min(1024 - 1 + 2 * T, 262144) / 16) + 1
    need = sliding_groups * sliding + math.ceil(262144 / 32)
    assert p.max_concurrency == pytest.approx(p.num_gpu_blocks / need)


GEMMA4_NVFP4 = load_model("nvidia/Gemma-4-26B-A4B-NVFP4")


@pytest.mark.parametrize(
    ("version", "from_concurrency"),
    [
        ("0.20.0", False),  # _report_kv_cache_config: num_blocks // groups × min block size
        ("0.20.1rc1.dev16+g7a1eb8ac2", False),  # a 0.20.1 pre-release (vllm-startup-059)
        ("0.20.1", True),  # int(max_concurrency × max_model_len), read in the 0.20.1 sdist
        ("0.20.2", True),
        ("0.21.0", True),
        ("0.22.0", True),
    ],
)
def test_reported_kv_tokens_by_version(version: str, from_concurrency: bool) -> None:
    # vllm-startup-103's setup: Gemma-4-26B-A4B NVFP4 on an RTX 5090, fp8 KV, 256,000 tokens,
    # 16,384 batched tokens, its logged 4.58 GiB of KV. fp8 pages: sliding 8 × 256 × 2 × 1 B =
    # 4096 B a token × 16 = 64 KiB, full 2 × 512 × 2 × 1 B × 32 tokens = 64 KiB; six groups of
    # five layers share five tensors, so a block costs 5 × 64 KiB
    kv = int(round(4.58 * GiB))
    p = predict(
        GEMMA4_NVFP4,
        get_gpu("RTX-5090"),
        version=version,
        max_model_len=256000,
        max_num_seqs=2,
        max_num_batched_tokens=16384,
        kv_cache_dtype="fp8_e4m3",
        kv_cache_memory_bytes=kv,
    )
    blocks = kv // (5 * 65536)
    assert p.num_gpu_blocks == blocks == 15007
    # a request of 256,000 tokens: a sliding group holds window - 1 + batched tokens (0.20-0.25)
    need = 5 * (math.ceil((1024 - 1 + 16384) / 16) + 1) + math.ceil(256000 / 32)
    assert p.max_concurrency == pytest.approx(blocks / need)
    if from_concurrency:
        assert p.kv_cache_tokens == int(blocks / need * 256000) == 285741
    else:
        assert p.kv_cache_tokens == blocks // 6 * 16 == 40016
    assert parse_version(version).prerelease == ("rc" in version)


def test_the_gemma4_nvfp4_5090_log_replays_its_layout() -> None:
    # vllm-startup-103 (99sono/DockerBuildFiles, vLLM 0.20.2): Model loading took 17.89 GiB;
    # 4.58 GiB -> 286,007 tokens, 1.12x at 256,000 (its KV printed to 0.01 GiB: ±0.11 %)
    from benchmarks.helpers import load_points, predict_point

    from tests.test_startup_log_sources import DATA

    point = next(p for p in load_points(DATA) if p.id == "vllm-startup-103")
    pred, reason = predict_point(point)
    assert reason is None and pred is not None
    assert pred["replay"] == "layout"
    assert pred["ranks"][0]["weights_gib"] == pytest.approx(17.89, abs=0.005)
    assert pred["kv_cache_tokens"] == pytest.approx(286007, rel=0.0011)
    assert pred["max_concurrency"] == 1.12


# --- block size chosen by the attention backend (MLA) ----------------------------------------

V2LITE = load_model("deepseek-ai/DeepSeek-V2-Lite")


@pytest.mark.parametrize(
    ("version", "gpu", "kv", "block"),
    [
        ("0.13.0", "H100-SXM-80GB", "auto", 64),  # FlashMLA on Hopper (cuda.py, ≤ 0.17)
        ("0.13.0", "B200-180GB", "auto", 128),  # CUTLASS MLA on Blackwell
        ("0.19.0", "H100-SXM-80GB", "auto", 16),  # FlashAttention-MLA keeps 16 (0.19 log)
        ("0.19.0", "H100-SXM-80GB", "fp8", 64),  # fp8 KV → FlashMLA
        ("0.19.0", "B200-180GB", "auto", 32),  # FlashInfer-MLA
        ("0.19.0", "MI300X", "auto", 64),  # ROCm AITER MLA
        ("0.19.0", "A100-SXM-80GB", "auto", 16),
    ],
)
def test_mla_block_size(version: str, gpu: str, kv: str, block: int) -> None:
    g = get_gpu(gpu)
    p = predict(V2LITE, g, version=version, kv_cache_dtype=kv, max_model_len=8192)
    assert p.settings.block_size == block
    # the pool does not change, the block count does: (512 + 64) × kv bytes × 27 layers × B
    kvb = 1 if kv == "fp8" else 2
    assert p.ranks[0].layout.bytes_per_block == 27 * 576 * kvb * block


def test_dense_models_keep_16() -> None:
    assert predict(version="0.13.0").settings.block_size == 16


# --- KV dtype resolution (utils/torch_utils.py::get_kv_cache_quant_algo_string) ---------------


def test_auto_kv_dtype_resolution() -> None:
    from inference_capacity.engines.vllm import resolve_kv_cache_dtype
    from inference_capacity.model.shapes import Quantization

    ct = replace(LLAMA8B, quantization=Quantization("compressed-tensors", 8, kv_cache_fp8=True))
    mo = replace(
        LLAMA8B,
        quantization=Quantization(
            "fp8", 8, kv_cache_fp8=True, kv_cache_algo="fp8", producer="modelopt"
        ),
    )
    # a native fp8 checkpoint with a kv_cache_quant_algo keeps auto: get_kv_cache_quant_algo_
    # string reads only quant_method "modelopt*" (0.20.0, 0.25.0)
    native = replace(LLAMA8B, quantization=Quantization("fp8", 8, kv_cache_fp8=True))
    v = parse_version
    assert resolve_kv_cache_dtype(v("0.25.0"), native, "auto") == "auto"
    assert resolve_kv_cache_dtype(v("0.33.0"), ct, "auto") == "auto"  # not resolved
    assert resolve_kv_cache_dtype(v("0.15.1"), mo, "auto") == "fp8"  # ModelOpt from 0.15
    assert resolve_kv_cache_dtype(v("0.13.0"), mo, "auto") == "auto"  # not at all before
    assert resolve_kv_cache_dtype(v("0.13.0"), ct, "fp8") == "fp8"


# --- in-flight tokens, chunked-local layers, batch validation --------------------------------


def test_in_flight_tokens() -> None:
    from inference_capacity.engines.vllm import in_flight_tokens

    v = parse_version
    T = 8192
    assert in_flight_tokens(v("0.25.0"), T, 1, False, None) == T
    assert in_flight_tokens(v("0.26.0"), T, 1, False, None) == 2 * T  # V1 async, PP 1
    assert in_flight_tokens(v("0.26.0"), T, 4, False, None) == 4 * T  # V1 async, PP 4: pp
    assert in_flight_tokens(v("0.33.0"), T, 2, True, None) == 3 * T  # V2 async: pp + 1
    assert in_flight_tokens(v("0.33.0"), T, 2, True, False) == 2 * T  # no async: pp


def test_llama4_chunked_layers_as_full_on_011_to_013() -> None:
    scout = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    old = predict(scout, H200, tp=4, version="0.13.0", max_model_len=131072)
    new = predict(scout, H200, tp=4, version="0.14.0", max_model_len=131072)
    assert {g.kind.value for g in old.ranks[0].layout.groups} == {"full"}
    assert "chunked" in {g.kind.value for g in new.ranks[0].layout.groups}
    opt_in = predict(
        scout, H200, tp=4, version="0.13.0", max_model_len=131072, chunked_local_hybrid=True
    )
    assert "chunked" in {g.kind.value for g in opt_in.ranks[0].layout.groups}


def test_batched_tokens_below_max_num_seqs_is_refused() -> None:
    from inference_capacity.engines.vllm import SettingsError

    with pytest.raises(SettingsError, match=r"max_num_batched_tokens \(256\) must be greater"):
        predict(max_num_batched_tokens=256, max_num_seqs=512)


# --- every architecture of the catalog (catalog/models) plans ---------------------------------


#: flags a family cannot start without, as its vLLM recipe gives them (none now: DeepSeek-V4's
#: FlashMLA layout needs an fp8 KV cache, which vLLM 0.30+ takes ``auto`` for, and the default
#: release, 0.33.0, is read; engines/vllm.py::check_deepseek_v4 refuses the rest, naming why)
REQUIRED_FLAGS: dict[str, tuple[str, str]] = {}


@pytest.mark.parametrize("name", catalog_names())
def test_every_catalog_architecture_plans(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    m = load_model(name)
    needed = REQUIRED_FLAGS.get(m.model_type)
    needed_args = []
    if needed is not None:
        needed_args = ["--kv-cache-dtype", needed[0], "--engine-version", needed[1]]
    tp = 1
    while True:  # the smallest power-of-two TP at which vLLM starts, up to 8
        s = EngineSettings(max_model_len=min(8192, m.derived_max_model_len))
        if needed is not None:
            s = dataclasses.replace(s, kv_cache_dtype=needed[0], version=needed[1])
        p = make_plan(PlanInput(model=m, gpu=H200, tp=tp, engine=s))
        if p.prediction.starts or tp == 8:
            break
        tp *= 2
    assert p.prediction.starts, p.prediction.error
    assert all(rl.total == H200.total_bytes for rl in p.ledger)
    # and through the CLI's what-if (issue 11: every config plans without error): exit 0 with
    # a ledger, also where the encoder profile is not sized (Supported=False, text-only numbers)
    args = ["plan", "--model", name, "--gpu", H200.name, "--tp", str(tp)]
    args += ["--max-model-len", str(s.max_model_len), "-o", "json", *needed_args]
    assert cli_main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["vllm_startup"]["starts"] and out["ledger"]["ranks"]
    if out.get("supported") is False:
        assert m.is_multimodal and "text-only profile" in out["unsupported_message"]


# --- KV page layouts with scales (v1/kv_cache_interface.py, 0.33) ----------------------------


@pytest.mark.parametrize(
    ("kv", "per_layer_token"),
    [
        ("fp8", 8 * 256),  # 8 KV heads × (128 + 128) × 1 B
        ("fp8_per_token_head", 8 * 256 + 2 * 8 * 4),  # + one fp32 scale per head for K and V
        ("int8_per_token_head", 8 * 256 + 2 * 8 * 4),
        ("nvfp4", 8 * 256 // 2 + 8 * 256 // 16),  # 4-bit values + an fp8 scale per 16
    ],
)
def test_kv_formats_dense(kv: str, per_layer_token: int) -> None:
    # nvfp4 KV runs only on SM100-family GPUs (FlashInfer trtllm-gen)
    gpu = get_gpu("B200-180GB") if kv == "nvfp4" else H100
    p = predict(gpu=gpu, version="0.33.0", kv_cache_dtype=kv)
    assert p.ranks[0].layout.bytes_per_block == 32 * per_layer_token * 16


def test_fp8_ds_mla() -> None:
    # the layout: 656 B per token and layer (512 fp8 latent values, 4 fp32 tile scales, 64 bf16
    # rope values; v1/kv_cache_interface.py MLAAttentionSpec, 0.26.0)
    from inference_capacity.ledger.kv import kv_token_format, token_bytes

    layer = V2LITE.layer_groups[-1].attention
    assert token_bytes(layer, 1, 1, kv_token_format("fp8_ds_mla")) == 656
    # ... which only DeepSeek's sparse MLA backends take (v1/attention/backends/mla/, 0.22-0.33:
    # flashmla_sparse, flashinfer_mla_sparse, sparse_swa): a dense MLA model is refused
    with pytest.raises(SettingsError, match="sparse MLA backends"):
        predict(V2LITE, version="0.33.0", kv_cache_dtype="fp8_ds_mla", max_model_len=8192)


def test_mtp_default_speculative_tokens() -> None:
    # config/speculative.py: MTP without num_speculative_tokens takes the model's n_predict
    v3 = load_model("deepseek-ai/DeepSeek-V3")
    spec = parse_speculative_config('{"method": "deepseek_mtp"}')
    assert spec.num_speculative_tokens is None
    a = predict(v3, H200, tp=8, max_model_len=8192, max_num_seqs=256)
    b = predict(v3, H200, tp=8, max_model_len=8192, max_num_seqs=256, speculative=spec)
    assert b.ranks[-1].sampler_peak - a.ranks[-1].sampler_peak == (
        (v3.mtp_layers + 256) * v3.vocab_size * 4
    )


# --- one rulebook (issue 20 item 3) -----------------------------------------------------------

#: the modules allowed to compare vLLM versions: the rulebook record, the version parser with
#: its budget eras, and the generated flag table's lookup (a release against the table's own
#: releases, no rule of its own)
RULEBOOK_MODULES = frozenset({"engines/vllm_rules.py", "engines/versions.py"})
TABLE_LOOKUP = "engines/vllm_flag_table.py"
#: the adapters read no version rule either, but they are not the pure core
ADAPTERS = frozenset({"cli", "controller", "ui"})
_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_VERSION_TEXT = re.compile(r"^v?\d+\.\d+")


def _is_version_operand(node: ast.expr) -> bool:
    """A version on one side of a comparison: a literal ``(0, 20, 0)``/``(0, 20)``, a
    ``.key``/``.minor``/``.major``/``.patch`` attribute, a ``*_FROM``/``*_VERSION`` constant,
    or a version string literal."""
    if isinstance(node, ast.Tuple) and 2 <= len(node.elts) <= 4:
        first = node.elts[0]
        return (
            isinstance(first, ast.Constant)
            and first.value == 0
            and all(isinstance(e, ast.Constant) and isinstance(e.value, int) for e in node.elts)
        )
    if isinstance(node, ast.Attribute):
        if node.attr in ("key", "minor", "major", "patch"):
            return True
        return node.attr.endswith(("_FROM", "_VERSION"))
    if isinstance(node, ast.Name):
        return node.id.endswith(("_FROM", "_VERSION"))
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(_VERSION_TEXT.match(node.value))
    return False


def version_comparisons(source: str) -> list[int]:
    """Lines of ``source`` that order-compare a version, or call ``at_least(``."""
    found: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, _ORDER) for op in node.ops):
            if any(_is_version_operand(x) for x in (node.left, *node.comparators)):
                found.append(node.lineno)
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name == "at_least":
                found.append(node.lineno)
    return sorted(set(found))


def test_the_version_comparison_check_finds_each_spelling() -> None:
    for line in (
        "ok = v.key >= (0, 20, 0)",
        "ok = (0, 11, 0) <= v.key < (0, 18, 0)",
        "ok = version.minor < 21",
        "ok = k < NVFP4_KV_FROM",
        "ok = rs.version.at_least(0, 20)",
        'ok = text >= "0.20.0"',
    ):
        assert version_comparisons(line) == [1], line
    assert version_comparisons("ok = ref.key not in data and x < 3 and u <= (1, 0)") == []


def test_no_version_comparison_outside_the_rulebook() -> None:
    """Every version-dependent rule of the pure core is a field of VllmRules (or the era /
    release lookups beside it): a comparison elsewhere is a rule in the wrong place."""
    root = Path(inference_capacity.__file__).resolve().parent
    offenders: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] in ADAPTERS or rel in RULEBOOK_MODULES or rel == TABLE_LOOKUP:
            continue
        offenders += [f"{rel}:{n}" for n in version_comparisons(path.read_text())]
    assert offenders == [], "version comparisons outside engines/vllm_rules.py: " + ", ".join(
        offenders
    )


def test_the_flag_table_compares_releases_only_with_its_own() -> None:
    """The table lookup's comparisons are all between ``_key(...)`` results (releases of the
    generated table), never against a literal version."""
    root = Path(inference_capacity.__file__).resolve().parent
    tree = ast.parse((root / TABLE_LOOKUP).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, _ORDER) for op in node.ops):
            for x in (node.left, *node.comparators):
                literal = isinstance(x, ast.Tuple) or (
                    isinstance(x, ast.Constant)
                    and isinstance(x.value, str)
                    and bool(_VERSION_TEXT.match(x.value))
                )
                assert not literal, f"{TABLE_LOOKUP}:{node.lineno}"


def test_every_rule_cites_where_vllm_has_it() -> None:
    """Each field of VllmRules has a ``#:`` comment naming a vLLM file or function, or the
    rulebook's own table/record it derives from."""
    import inspect

    from inference_capacity.engines import vllm_rules

    lines = inspect.getsource(vllm_rules.VllmRules).splitlines()
    fields = {f.name for f in dataclasses.fields(VllmRules)} - {"version"}
    for i, line in enumerate(lines):
        m = re.match(r"^    (\w+): ", line)
        if m is None or m.group(1) not in fields:
            continue
        j = i - 1
        comment: list[str] = []
        while lines[j].strip().startswith("#:"):
            comment.insert(0, lines[j])
            j -= 1
        text = " ".join(comment)
        assert comment, f"VllmRules.{m.group(1)} has no #: comment"
        assert re.search(r"\.py|::|:data:|:attr:|research/|PR #\d+", text), (
            f"VllmRules.{m.group(1)} cites no vLLM source: {text}"
        )


@pytest.mark.parametrize(
    ("version", "utilization", "estimate", "lora_cases"),
    [
        # config/cache.py::CacheConfig gpu_memory_utilization 0.9 → 0.92 and
        # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default on, both in 0.20.0 (0.19.0: off)
        ("0.19.0", 0.90, False, 1),
        ("0.20.0", 0.92, True, 2),
        ("0.33.0", 0.92, True, 2),
    ],
)
def test_rulebook_record_by_version(
    version: str, utilization: float, estimate: bool, lora_cases: int
) -> None:
    r = VllmRules.for_version(version)
    assert r.default_gpu_memory_utilization == utilization
    assert r.estimate_cuda_graphs_default is estimate
    assert r.lora_graph_cases == lora_cases
    assert r is VllmRules.for_version(parse_version(version))  # one record per release
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.big_gpu_tier = True  # type: ignore[misc]


def test_rulebook_eras_match_the_budget_eras() -> None:
    # versions.py::era_of: 0.11–0.19 no CG estimate, 0.20–0.26 CG estimate, 0.27+ consumed
    assert VllmRules.for_version("0.19.1").era is Era.V1_NO_CG
    assert VllmRules.for_version("0.20.0").era is Era.V1_CG
    assert VllmRules.for_version("0.27.0").era is Era.V1_CONSUMED
    assert VllmRules.for_version("0.10.0").era_for("v0") is Era.V0


#: the longest function the pure core may hold (issue 20: "no function in the pure core over
#: ~120 lines"); the adapters (controller/, cli/, ui/) are not held to it
MAX_FUNCTION_LINES = 120
#: the adapters: Kubernetes, the terminal, the browser
ADAPTERS = ("controller", "cli", "ui")


def test_no_long_function_in_the_pure_core() -> None:
    root = Path(inference_capacity.__file__).resolve().parent
    paths = [p for p in sorted(root.rglob("*.py")) if p.relative_to(root).parts[0] not in ADAPTERS]
    assert root / "resolve.py" in paths and root / "planner.py" in paths
    long: list[str] = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(root)}::{node.name} ({n} lines)")
    assert long == []
