"""The ledger: KV bytes per token, blocks, weights per rank, and its invariants.

Hand-derivable numbers from the seeds (003): Llama 3.1 8B in BF16 stores
32 layers × 2 (K, V) × 8 KV heads × 128 × 2 B = 131,072 B = 128 KiB per token; the same shape
with MHA (32 KV heads) stores 512 KiB; a 55 GB pool holds 55e9 / 131,072 ≈ 419,616 tokens.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference_capacity.budget import build_ledger, max_utilization
from inference_capacity.engines.vllm import EngineSettings, predict_startup
from inference_capacity.hardware import get_gpu
from inference_capacity.ledger.kv import kv_bytes_per_token, kv_layout, layers_on_rank
from inference_capacity.ledger.weights import pp_layer_ranges, weight_breakdown
from inference_capacity.model import AttnKind, load_config, load_model, shape_from_config

H100 = get_gpu("H100-SXM-80GB")
LLAMA8B = load_model("meta-llama/Llama-3.1-8B-Instruct")
DSV2 = load_model("deepseek-ai/DeepSeek-V2-Lite")


def test_seed_kv_bytes_per_token() -> None:
    assert kv_bytes_per_token(LLAMA8B, tp=1, kv_bytes=2) == 131_072
    _, cfg = load_config("meta-llama/Llama-3.1-8B-Instruct")
    mha = shape_from_config({**cfg, "num_key_value_heads": 32})
    assert kv_bytes_per_token(mha, tp=1, kv_bytes=2) == 512 * 1024
    assert 55_000_000_000 // kv_bytes_per_token(LLAMA8B, 1, 2) == 419_616


def test_llama8b_weights_match_vllm_log_exactly() -> None:
    # 8,030,261,248 × 2 B + rope cache 131072 × 128 × 2 B = 16,094,076,928 B = 14.9888 GiB
    w = weight_breakdown(LLAMA8B, 1, 1, 0, 2, None)
    assert w.total == 8_030_261_248 * 2 + 131072 * 128 * 2 == 16_094_076_928


def test_block_and_page_for_dense_model() -> None:
    layout = kv_layout(
        layers_on_rank(LLAMA8B, 1, 0), tp=1, kv_bytes=2, model_dtype_bytes=2, block_size=16
    )
    assert layout.bytes_per_block == 32 * 16 * 8 * 256 * 2 == 2 * 2**20  # 2 MiB
    assert layout.num_blocks(58_107 * 2**20) == 29_053


def test_mla_latent_not_split_by_tp() -> None:
    # (kv_lora_rank + qk_rope_head_dim) × 2 B × 27 layers = 576 × 2 × 27
    assert kv_bytes_per_token(DSV2, 1, 2) == 576 * 2 * 27
    assert kv_bytes_per_token(DSV2, 8, 2) == kv_bytes_per_token(DSV2, 1, 2)


def test_kv_heads_replicated_when_fewer_than_tp() -> None:
    # 8 KV heads on TP16: each rank keeps one head (replicated), not half a head
    assert kv_bytes_per_token(LLAMA8B, 16, 2) == 32 * 2 * 1 * 128 * 2


def test_gemma2_hybrid_groups_match_vllm_log() -> None:
    # vllm-startup-035: 54.12 GiB -> 21,110 blocks, 168,880 tokens: 21 SW + 21 full layers
    gemma = load_model("google/gemma-2-9b-it")
    layout = kv_layout(layers_on_rank(gemma, 1, 0), 1, 2, 2, 16)
    assert layout.num_groups == 2 and layout.group_size == 21
    assert layout.bytes_per_block == 21 * 16 * 8 * 512 * 2
    assert layout.blocks_per_request(8192, 8192) == 512 + 513


def test_sliding_window_bounds_blocks_per_request() -> None:
    mistral = load_model("mistralai/Mistral-7B-Instruct-v0.1")  # window 4096 on every layer
    layout = kv_layout(layers_on_rank(mistral, 1, 0), 1, 2, 2, 16)
    assert layout.blocks_per_request(32768, 2048) == (4096 - 1 + 2048 + 15) // 16 + 1
    assert layout.blocks_per_request(1000, 2048) == 63 + 1


def test_mamba_state_is_per_sequence() -> None:
    nemo = load_model("nvidia/Nemotron-H-56B-Base-8K")
    layout = kv_layout(layers_on_rank(nemo, 1, 0), 1, 2, 2, 16)
    assert layout.state_bytes_per_sequence > 0
    # the attention block size grows until an attention page holds a Mamba state
    assert layout.block_size > 16
    assert any(g.kind is AttnKind.MAMBA for g in layout.groups)


def test_pp_layer_split_matches_vllm() -> None:
    # get_pp_indices: 61 layers on 4 stages -> the remainder goes before the last stage
    sizes = [len(r) for r in pp_layer_ranges(61, 4)]
    assert sizes == [15, 15, 16, 15] and sum(sizes) == 61


def test_ledger_sums_to_device_for_examples() -> None:
    for tp, pp in [(1, 1), (2, 1), (1, 2)]:
        p = predict_startup(
            LLAMA8B,
            H100.total_bytes,
            H100.name,
            tp,
            pp,
            EngineSettings(version="0.19.0", gpu_memory_utilization=0.9),
        )
        for rl in build_ledger(p, 0.05):
            assert rl.total == H100.total_bytes


MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen3-30B-A3B",
    "google/gemma-2-9b-it",
    "deepseek-ai/DeepSeek-V2-Lite",
    "openai/gpt-oss-20b",
    "mistralai/Mixtral-8x7B-v0.1",
]
VERSIONS = ["0.6.4", "0.8.5", "0.10.1.1", "0.19.0", "0.23.0", "0.33.0"]


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(MODELS),
    version=st.sampled_from(VERSIONS),
    u=st.floats(0.3, 1.0),
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2]),
    gib=st.floats(16, 200),
)
def test_items_always_sum_to_the_device(
    name: str, version: str, u: float, tp: int, pp: int, gib: float
) -> None:
    m = load_model(name)
    total = int(gib * 2**30)
    p = predict_startup(
        m,
        total,
        "custom",
        tp,
        pp,
        EngineSettings(version=version, gpu_memory_utilization=u, max_model_len=4096),
    )
    for rl in build_ledger(p, 0.05):
        assert rl.total == total
        assert all(i.bytes >= 0 for i in rl.items if i.name != "unallocated")


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(MODELS + ["meta-llama/Llama-3.1-70B-Instruct"]),
    tp=st.sampled_from([1, 2, 4]),
)
def test_more_tp_never_raises_per_rank_weights(name: str, tp: int) -> None:
    m = load_model(name)
    a = weight_breakdown(m, tp, 1, 0, 2, m.quantization).total
    b = weight_breakdown(m, tp * 2, 1, 0, 2, m.quantization).total
    assert b <= a


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(MODELS), tp=st.sampled_from([1, 2, 4, 8]))
def test_fp8_kv_halves_bytes_per_token(name: str, tp: int) -> None:
    m = load_model(name)
    assert kv_bytes_per_token(m, tp, 1) * 2 == kv_bytes_per_token(m, tp, 2)


@settings(max_examples=30, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8, 16]))
def test_mla_bytes_do_not_shrink_with_tp(tp: int) -> None:
    assert kv_bytes_per_token(DSV2, tp, 2) == kv_bytes_per_token(DSV2, 1, 2)


@settings(max_examples=30, deadline=None)
@given(u=st.floats(0.5, 0.99))
def test_higher_utilization_never_shrinks_the_pool(u: float) -> None:
    def blocks(x: float) -> int:
        return predict_startup(
            LLAMA8B,
            H100.total_bytes,
            H100.name,
            1,
            1,
            EngineSettings(version="0.19.0", gpu_memory_utilization=x, max_model_len=8192),
        ).num_gpu_blocks

    assert blocks(min(u + 0.01, 1.0)) >= blocks(u)


def test_max_utilization_leaves_margin_items() -> None:
    p = predict_startup(
        LLAMA8B,
        H100.total_bytes,
        H100.name,
        1,
        1,
        EngineSettings(version="0.19.0", gpu_memory_utilization=0.9),
    )
    u = max_utilization(p, 0.05)
    p2 = predict_startup(
        LLAMA8B,
        H100.total_bytes,
        H100.name,
        1,
        1,
        EngineSettings(version="0.19.0", gpu_memory_utilization=u),
    )
    (rl,) = build_ledger(p2, 0.05)
    assert 0 <= rl.unallocated < 0.001 * H100.total_bytes + 2**20
    assert 0.90 < u < 0.95


def test_lora_slots_add_weight_bytes() -> None:
    base = weight_breakdown(LLAMA8B, 1, 1, 0, 2, None)
    lora = weight_breakdown(LLAMA8B, 1, 1, 0, 2, None, max_loras=4, max_lora_rank=16)
    # per wrapped linear: 4 × 16 × (in + out) × 2 B; q,k,v,o,gate,up,down per layer
    per_layer = sum(
        4 * 16 * (i + o) * 2
        for o, i in [
            (4096, 4096),
            (1024, 4096),
            (1024, 4096),
            (4096, 4096),
            (14336, 4096),
            (14336, 4096),
            (4096, 14336),
        ]
    )
    assert lora.total - base.total == 32 * per_layer


@pytest.mark.parametrize("q,expected", [("fp8", 8.49)])
def test_online_fp8_weights(q: str, expected: float) -> None:
    m = load_model("meta-llama/Llama-3.1-8B-Instruct", quantization=q)
    w = weight_breakdown(m, 1, 1, 0, 2, m.quantization)
    assert round(w.total / 2**30, 2) == expected  # vllm-startup-031 "Model loading took 8.49"


def test_the_weight_memo_is_keyed_on_the_shape_not_its_identity() -> None:
    """weight_breakdown's memo (shared by every thread) is keyed on the shape's value: an equal
    copy of a shape finds the entry the original made, a different shape makes its own, and
    both equal what the ledger computes unmemoised."""
    from dataclasses import replace

    from inference_capacity.ledger import weights
    from inference_capacity.memo import ValueMemo

    assert isinstance(weights._MEMO, ValueMemo)
    shape = load_model("meta-llama/Llama-3.1-8B-Instruct")
    copy = replace(shape, notes=tuple(shape.notes))
    assert copy is not shape and copy == shape and hash(copy) == hash(shape)
    weights._MEMO.clear()
    a = weights.weight_breakdown(shape, 2, 1, 0, 2, None)
    assert len(weights._MEMO) == 1
    b = weights.weight_breakdown(copy, 2, 1, 0, 2, None)
    assert len(weights._MEMO) == 1 and b is a
    other = replace(shape, tensors=shape.tensors[:-1])  # one tensor fewer
    c = weights.weight_breakdown(other, 2, 1, 0, 2, None)
    assert len(weights._MEMO) == 2
    assert a == weights._weight_breakdown(shape, 2, 1, 0, 2, None, 0, 16, 1, 2)
    assert c == weights._weight_breakdown(other, 2, 1, 0, 2, None, 0, 16, 1, 2)
    assert c != a


def test_a_v2_runner_sampler_peak_is_assumed_only_off_flashinfers_sampler() -> None:
    # 0.33's warm-up-params pass is derived from the code on FlashInfer's sampler (SM80-SM121:
    # engines/vllm.py::flashinfer_sampler); elsewhere vLLM's Triton top-k/top-p runs and the
    # figure is a bound: where it sets the activation peak, the ledger says "assumed"; 0.22-0.32
    # sample once in the model dtype (sampler_peak, from the code)
    from inference_capacity.budget import build_ledger
    from inference_capacity.engines.vllm import EngineSettings, predict_startup
    from inference_capacity.hardware import get_gpu
    from inference_capacity.model import load_model

    h100 = get_gpu("H100-SXM-80GB")
    shape = load_model("google/gemma-2-9b-it")  # 256,000 logits a row: the sampler can lead
    lines = {}
    for version in ("0.19.0", "0.29.0", "0.33.0"):  # V1 runner / V2 runner for a dense model
        p = predict_startup(
            shape, h100.total_bytes, h100.name, 1, 1, EngineSettings(version=version)
        )
        item = next(i for i in build_ledger(p, 0.0)[0].items if i.name == "activation_peak")
        lines[version] = (p.settings.v2_runner, p.ranks[0], item)
    v1, v2, v2w = lines["0.19.0"], lines["0.29.0"], lines["0.33.0"]
    assert not v1[0] and v2[0] and v2w[0]
    assert v1[2].provenance == "calibrated"
    assert v2w[1].sampler_peak >= v2w[1].forward_peak  # the warm-up pass sets it
    assert v2w[2].provenance == "exact" and "warm-up pass" in v2w[2].note
    # one model-dtype pass: below the fp32 pipeline
    assert v2[1].sampler_peak < v2w[1].sampler_peak
    assert v2[2].provenance != "assumed"
    # a V100 (SM70): not FlashInfer's sampler, the figure a bound
    v100 = get_gpu("V100-32GB")
    p = predict_startup(
        shape, v100.total_bytes, v100.name, 1, 1, EngineSettings(version="0.33.0", dtype="float16")
    )
    item = next(i for i in build_ledger(p, 0.0)[0].items if i.name == "activation_peak")
    assert p.ranks[0].sampler_bound and item.provenance == "assumed" and "bound" in item.note


def test_v2_default_sampler_pass_from_the_code() -> None:
    """0.22-0.32 (v1/worker/gpu/model_runner.py ``_dummy_sampler_run``, one default pass; the
    dummy requests need no logits processing, so ``apply_sampling_params`` keeps the model
    dtype): the logits of R rows over the rank's slice of the vocabulary padded to 64, at
    TP > 1 all-gathered into a (tp·R, slice) buffer and reshaped into an (R, padded vocab) copy
    (base_device_communicator.py ``all_gather``), beside the forward's T output rows and the R
    sampled rows of hidden states, all in bf16."""
    from inference_capacity.engines.vllm import sampler_peak
    from inference_capacity.model import load_model

    gemma = load_model("google/gemma-2-9b-it")  # vocab 256,000 (a multiple of 64), hidden 3584
    R, T = 1024, 8192
    hidden = (T + R) * 3584 * 2
    tp1 = sampler_peak(gemma, R, True, T, 1, 2, warmup_pass=False)
    assert tp1 == R * 256_000 * 2 + hidden
    tp4 = sampler_peak(gemma, R, True, T, 4, 2, warmup_pass=False)
    assert tp4 == R * 64_000 * (1 + 2 * 4) * 2 + hidden
    qwen = load_model("Qwen/Qwen3-8B")  # vocab 151,936 = 2,374 × 64
    assert (
        sampler_peak(qwen, 8, True, 64, 1, 2, warmup_pass=False)
        == (8 * 151_936 + (64 + 8) * 4096) * 2
    )
    # the V1 runner keeps its fitted constant
    assert sampler_peak(gemma, R, False) == int(R * 256_000 * 14.95)


def test_v2_sampler_warmup_pass_from_the_code() -> None:
    """0.33 (v1/worker/gpu/model_runner.py ``_dummy_sampler_run``) samples the same logits again
    with ``SamplingParams.for_sampler_warmup()``: sample/sampler.py ``apply_sampling_params``
    makes an fp32 copy, and FlashInfer's ``top_k_top_p_sampling_from_logits`` (flashinfer-python
    0.7.2.post1, top-k as a tensor: ``top_k_mask_logits`` then ``torch.softmax``) two more fp32
    (R, V) tensors, beside the bf16 (R, padded V) logits (all-gathered whole on every TP rank)
    and the hidden rows: 2 + 3 × 4 = 14 B a logit at TP1."""
    from inference_capacity.engines.vllm import sampler_peak
    from inference_capacity.model import load_model

    gemma = load_model("google/gemma-2-9b-it")  # vocab 256,000, hidden 3584
    R, T = 1024, 8192
    hidden = (T + R) * 3584 * 2
    tp1 = sampler_peak(gemma, R, True, T, 1, 2, warmup_pass=True)
    assert tp1 == R * 256_000 * (2 + 12) + hidden
    # at TP4 the all-gather's transient (9 slices) is below the fp32 pipeline: the same peak
    assert sampler_peak(gemma, R, True, T, 4, 2, warmup_pass=True) == tp1
    qwen = load_model("Qwen/Qwen3-8B")  # vocab 151,936: padded to 64 for the bf16 logits only
    assert (
        sampler_peak(qwen, 256, True, 2048, 1, 2, warmup_pass=True)
        == 256 * 151_936 * 2 + 12 * 256 * 151_936 + (2048 + 256) * 4096 * 2
    )
