"""MiniMax-M2 (``minimax_m2``): the tensors vLLM's ``models/minimax_m2.py`` (0.12.0, 0.19.0, 0.20.0,
0.26.0) creates, counted by hand from the config, in the FP8 checkpoint and in NVIDIA's NVFP4
one (both configs from aiconfigurator-core 0.12.0; catalog/models/SOURCES.md)."""

from __future__ import annotations

import pytest

from inference_capacity.engines.vllm import EngineSettings, predict_startup
from inference_capacity.hardware import get_gpu
from inference_capacity.ledger.weights import weight_breakdown
from inference_capacity.model import load_model
from inference_capacity.model.catalog import load_config, model_from_dict
from inference_capacity.model.errors import ModelConfigError

L, H, HEADS, KV, D, E, INTER, V = 62, 3072, 48, 8, 128, 256, 1536, 200064
Q_OUT, KV_OUT = HEADS * D, KV * D
#: qkv_proj + o_proj (QKVParallelLinear / RowParallelLinear, bias=False)
ATTN = (Q_OUT + 2 * KV_OUT) * H + H * Q_OUT
#: FusedMoE w13 (2 × intermediate × hidden) and w2 (hidden × intermediate) per expert
EXPERT = 3 * INTER * H
#: q_norm, k_norm (MiniMaxText01RMSNormTP over all heads) + input/post-attention RMSNorm
NORMS = Q_OUT + KV_OUT + 2 * H
ROUTER_FP32 = (E * H + E) * 4  # ReplicatedLinear(params_dtype=float32) + e_score_correction_bias
ROPE = 196608 * 64 * 2  # get_rope cache: max positions × rotary_dim (64), bf16


def _fp8_block(rows: int, cols: int) -> int:
    """Fp8LinearMethod with weight_block_size [128, 128]: e4m3 weight + float32 scale per block."""
    return rows * cols + -(-rows // 128) * -(-cols // 128) * 4


def test_minimax_m2_fp8_weights_by_hand() -> None:
    m = load_model("MiniMaxAI/MiniMax-M2.5")
    assert m.model_type == "minimax_m2" and m.num_experts == E and m.experts_per_token == 8
    assert m.quantization is not None and m.quantization.method == "fp8"
    assert m.rope_caches[0].rotary_dim == 64
    attn = L * (
        _fp8_block(Q_OUT + 2 * KV_OUT, H) + _fp8_block(H, Q_OUT)
    )  # qkv fused in vLLM: q, k and v blocks are each a multiple of 128 rows
    experts = L * E * (_fp8_block(2 * INTER, H) + _fp8_block(H, INTER))
    embed = lm_head = V * H * 2  # bf16, not converted
    total = attn + experts + embed + lm_head + L * NORMS * 2 + H * 2 + L * ROUTER_FP32 + ROPE
    w = weight_breakdown(m, 1, 1, 0, 2, m.quantization)
    assert w.by_group["router"] == L * ROUTER_FP32
    assert w.total == total
    # the unquantized parameter count: 229B (the model card's "230B total")
    params = L * (ATTN + E * EXPERT + NORMS + E * H + E) + 2 * V * H + H
    assert m.num_parameters == params
    assert 228.6e9 < params < 229.2e9


def test_minimax_m2_tp_shards_norms_and_keeps_router_whole() -> None:
    m = load_model("MiniMaxAI/MiniMax-M2.5")
    w1 = weight_breakdown(m, 1, 1, 0, 2, m.quantization)
    w8 = weight_breakdown(m, 8, 1, 0, 2, m.quantization)
    assert w8.by_group["router"] == w1.by_group["router"]  # replicated on every rank
    # q_norm/k_norm weights: head_dim × heads / tp per rank; the layer norms stay whole
    assert w8.by_group["norm"] == (L * (NORMS - 2 * H) // 8 + L * 2 * H + H) * 2


def test_minimax_m2_nvfp4_keeps_attention_bf16() -> None:
    """nvidia/MiniMax-M2.5-NVFP4 excludes every layer's self_attn* and block_sparse_moe.gate:
    the attention is bf16, the experts NVFP4 (uint8 weight out × in/2 + e4m3 scale out × in/16,
    ModelOptNvFp4FusedMoE.create_weights) and the KV cache fp8."""
    m = load_model("nvidia/MiniMax-M2.5-NVFP4")
    q = m.quantization
    assert q is not None and q.method == "modelopt_fp4" and q.kv_cache_algo == "fp8"
    w = weight_breakdown(m, 1, 1, 0, 2, q)
    assert w.by_group["attention"] == L * ATTN * 2
    per_expert = EXPERT // 2 + EXPERT // 16
    got = w.by_group["experts"]
    # plus the per-expert float32 global scales (input_scale, weight_scale_2: a few bytes each)
    assert L * E * per_expert <= got < L * E * per_expert + L * E * 64
    b200 = get_gpu("B200-180GB")
    p = predict_startup(
        m, b200.total_bytes, b200.name, 2, 1, EngineSettings("0.19.0", max_model_len=8192)
    )
    assert p.settings.kv_cache_dtype == "fp8" and p.starts


def test_minimax_m2_shared_expert_refused() -> None:
    _, cfg = load_config("MiniMaxAI/MiniMax-M2.5")
    with pytest.raises(ModelConfigError, match="shared_intermediate_size"):
        model_from_dict({**cfg, "shared_intermediate_size": 1536}, "mm")


@pytest.mark.parametrize(("version", "norm"), [("0.13.0", 2), ("0.14.0", 1), ("0.19.0", 1)])
def test_minimax_m2_step_pays_the_qk_norm_all_reduce(version: str, norm: int) -> None:
    # MiniMaxText01RMSNormTP (the q/k norm over every head) all-reduces its variance at TP > 1:
    # q and k each in vLLM 0.12-0.13 (models/minimax_m2.py: self.q_norm(q), self.k_norm(k)),
    # one concatenated from 0.14 (forward_qk); the step model adds their latency beside the
    # two all-reduces of every layer (attention and MoE outputs)
    from inference_capacity.sizing import perf
    from inference_capacity.sizing.latency import build_latency_model

    gpu = get_gpu("H200-SXM-141GB")
    m = load_model("MiniMaxAI/MiniMax-M2.5")
    assert m.qk_norm_tp and not load_model("Qwen/Qwen3-30B-A3B").qk_norm_tp
    settings = EngineSettings(version=version, max_model_len=8192)
    pred = predict_startup(m, gpu.total_bytes, gpu.name, 4, 1, settings)
    lm = build_latency_model(m, gpu, pred)
    assert lm is not None
    (stage,) = lm.stages
    assert stage.allreduce_s == pytest.approx((2 + norm) * 62 * perf.ALLREDUCE_LATENCY_S)
    # one rank: no collective at all
    one = build_latency_model(m, gpu, predict_startup(m, gpu.total_bytes, gpu.name, 1, 1, settings))
    assert one is not None and one.stages[0].allreduce_s == 0.0
    # a model whose q/k norms are per head keeps the two
    q = load_model("Qwen/Qwen3-30B-A3B")
    lq = build_latency_model(q, gpu, predict_startup(q, gpu.total_bytes, gpu.name, 4, 1, settings))
    assert lq is not None
    assert lq.stages[0].allreduce_s == pytest.approx(2 * 48 * perf.ALLREDUCE_LATENCY_S)
