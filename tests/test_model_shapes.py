"""Model shapes from config.json: parameter counts and attention kinds.

Parameter counts are checked against the figures the model cards publish (or the exact count
reproduced by hand from the config, shown in the comment)."""

from __future__ import annotations

import json

import pytest

from inference_capacity.model import (
    AttnKind,
    ModelConfigError,
    UnknownModelError,
    catalog_names,
    load_config,
    load_model,
    shape_from_config,
)


def llama8b_params() -> int:
    # embed + lm_head: 2 * 128256 * 4096; per layer: q,o 4096^2, k,v 1024*4096,
    # gate/up/down 3 * 14336 * 4096, 2 norms; final norm
    per_layer = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096 + 2 * 4096
    return 2 * 128256 * 4096 + 32 * per_layer + 4096


def test_llama_31_8b_parameter_count_is_exact() -> None:
    m = load_model("meta-llama/Llama-3.1-8B-Instruct")
    assert llama8b_params() == 8_030_261_248
    assert m.num_parameters == 8_030_261_248
    assert m.num_layers == 32 and m.num_kv_heads == 8 and m.head_dim == 128
    assert m.derived_max_model_len == 131072  # llama3 rope: no factor


@pytest.mark.parametrize(
    ("name", "params", "tolerance"),
    [
        ("facebook/opt-125m", 125_239_296, 0),  # HF model card / torch count
        ("meta-llama/Llama-2-7b-hf", 6_738_415_616, 0),
        ("mistralai/Mixtral-8x7B-v0.1", 46_702_792_704, 0),
        ("Qwen/Qwen2.5-7B-Instruct", 7_615_616_512, 0),  # "7.61B" on the card
        ("openai/gpt-oss-20b", 20.91e9, 0.005),  # "21B parameters" (20.9B)
        ("openai/gpt-oss-120b", 116.83e9, 0.005),  # "117B parameters"
        ("deepseek-ai/DeepSeek-V3", 671e9, 0.001),  # 671B main model (MTP excluded)
        ("deepseek-ai/DeepSeek-V2-Lite", 15.7e9, 0.005),
        ("Qwen/Qwen3-30B-A3B", 30.5e9, 0.005),
        ("Qwen/Qwen3-235B-A22B", 235e9, 0.005),
        ("google/gemma-2-9b-it", 9.24e9, 0.005),
        ("microsoft/phi-2", 2.78e9, 0.005),
        ("meta-llama/Meta-Llama-3.1-405B", 405.85e9, 0.001),
        ("nvidia/Nemotron-H-56B-Base-8K", 56.3e9, 0.01),
    ],
)
def test_parameter_counts_match_model_cards(name: str, params: float, tolerance: float) -> None:
    got = load_model(name).num_parameters
    if tolerance == 0:
        assert got == params
    else:
        assert abs(got - params) / params <= tolerance, got


def test_attention_kinds_per_family() -> None:
    assert load_model("google/gemma-2-9b-it").attention_kinds == ("full", "sliding")
    assert load_model("openai/gpt-oss-20b").attention_kinds == ("full", "sliding")
    assert load_model("deepseek-ai/DeepSeek-V2-Lite").attention_kinds == ("mla",)
    scout = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert scout.attention_kinds == ("chunked", "full")
    kinds = [layer.kind for layer in scout.per_layer()]
    assert kinds.count(AttnKind.FULL) == 12 and kinds.count(AttnKind.CHUNKED) == 36
    nemo = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert "mamba" in nemo.attention_kinds
    gemma3 = load_model("google/gemma-3-27b-it")
    g3 = [layer.kind for layer in gemma3.per_layer()]
    assert g3.count(AttnKind.FULL) == 10 and g3.count(AttnKind.SLIDING) == 52


def test_moe_metadata() -> None:
    m = load_model("deepseek-ai/DeepSeek-V3")
    assert m.num_experts == 256 and m.experts_per_token == 8
    assert tuple(m.dense_layers) == (0, 1, 2)  # first_k_dense_replace = 3
    assert m.quantization is not None and m.quantization.block == (128, 128)
    q = load_model("Qwen/Qwen3-30B-A3B")
    assert q.num_experts == 128 and q.expert_intermediate_size == 768 and not q.dense_layers


@pytest.mark.parametrize("name", catalog_names())
def test_every_catalog_model_sizes_or_says_why(name: str) -> None:
    try:
        m = load_model(name)
    except ModelConfigError as exc:
        assert "not modelled yet" in str(exc)
        return
    assert m.num_parameters > 0 and len(m.per_layer()) == m.num_layers


def test_catalog_lookup_is_case_insensitive_and_org_optional() -> None:
    assert load_config("META-LLAMA/llama-3.1-8b-instruct")[0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert load_config("Llama-3.1-8B-Instruct")[0] == "meta-llama/Llama-3.1-8B-Instruct"


def test_unknown_model_suggests_close_names() -> None:
    with pytest.raises(UnknownModelError, match="Did you mean"):
        load_config("meta-llama/Llama-3.1-8B-Instrct")


def test_unknown_model_type_is_named() -> None:
    with pytest.raises(ModelConfigError, match="unsupported model_type 'bert'"):
        shape_from_config({"model_type": "bert", "hidden_size": 768})


def test_missing_field_is_named() -> None:
    _, cfg = load_config("meta-llama/Llama-3.1-8B-Instruct")
    del cfg["num_hidden_layers"]
    with pytest.raises(ModelConfigError, match="^num_hidden_layers: missing"):
        shape_from_config(cfg)
    _, g = load_config("google/gemma-3-27b-it")
    g["text_config"]["hidden_size"] = "big"
    with pytest.raises(ModelConfigError, match="text_config.hidden_size: expected an integer"):
        shape_from_config(g)


def test_user_config_json_path(tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, cfg = load_config("meta-llama/Llama-3.2-1B")
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert load_model(str(p)).num_parameters == load_model("meta-llama/Llama-3.2-1B").num_parameters
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ModelConfigError, match="not valid JSON"):
        load_model(str(bad))


def test_quantization_configs_parsed() -> None:
    assert load_model("openai/gpt-oss-20b").quantization.method == "mxfp4"  # type: ignore[union-attr]
    awq = load_model("LDCC/Qwen2.5-72B-Instruct-ko-AWQ").quantization
    assert awq is not None and awq.method == "awq" and awq.group_size == 128
    bnb = load_model("asif00/bangla-llama-4bit").quantization
    assert bnb is not None and bnb.method == "bitsandbytes" and bnb.weight_bits == 4
    kimi = load_model("moonshotai/Kimi-K2.5").quantization
    assert kimi is not None and kimi.method == "compressed-tensors" and kimi.weight_bits == 4
    with pytest.raises(ModelConfigError, match="unknown quantization 'int3'"):
        load_model("meta-llama/Llama-3.2-1B", quantization="int3")
    with pytest.raises(ModelConfigError, match="needs a quantized checkpoint"):
        load_model("meta-llama/Llama-3.2-1B", quantization="gptq")


# ---------------------------------------------------------------------------------------------
# Qwen3.5 (Gated DeltaNet hybrid MoE) and Gemma 4 (K=V global layers, MoE beside a dense MLP)


def qwen35_text_params() -> int:
    """Qwen3.5-35B-A3B language model, by hand from its config.json (MTP layer excluded)."""
    h, vocab = 2048, 248320
    embed = 2 * vocab * h  # embed_tokens + untied lm_head
    # every layer: router 256×h, 256 experts of gate/up/down 512, shared expert 512 + its gate
    moe = 256 * h + 256 * 3 * 512 * h + 3 * 512 * h + h
    # GDN: in_proj_qkvz (2·16·128 + 2·32·128) × h, in_proj_ba 2·32 × h, conv1d 8192 × 4,
    # dt_bias 32, A_log 32, norm 128, out_proj h × 32·128
    gdn = 12288 * h + 64 * h + 8192 * 4 + 32 + 32 + 128 + h * 4096
    # gated attention: q_proj 2·16·256 (query + gate), k/v 2·256, o_proj h × 16·256, q/k norms
    attn = 8192 * h + 2 * 512 * h + h * 4096 + 2 * 256
    return embed + 40 * (moe + 2 * h) + 30 * gdn + 10 * attn + h


def test_qwen35_moe_parameters_and_layers() -> None:
    m = load_model("Qwen/Qwen3.5-35B-A3B")
    vision = m.parameters_by_group()["vision"]
    assert m.num_parameters - vision == qwen35_text_params() == 34_660_610_688
    # Qwen3-VL tower: 27 blocks of 15,239,504, Conv3d patch embed 1152×(3·2·16·16)+bias,
    # 2304×1152 position table, merger LayerNorm + 4608→4608→2048 (biases)
    assert vision == 27 * 15_239_504 + 1152 * 1537 + 2304 * 1152 + 2304 + 4608 * 4609 + 2048 * 4609
    # model card: "Number of Parameters: 35B in total and 3B activated" (HF lists the checkpoint,
    # which also holds the MTP layer, as 36B)
    assert abs(m.num_parameters - 35e9) / 35e9 <= 0.01
    assert any("MTP" in n for n in m.notes)
    kinds = [layer.kind for layer in m.per_layer()]
    assert kinds.count(AttnKind.MAMBA) == 30 and kinds.count(AttnKind.FULL) == 10
    assert [i for i, k in enumerate(kinds) if k is AttnKind.FULL] == list(range(3, 40, 4))
    assert m.num_experts == 256 and m.experts_per_token == 8 and m.num_shared_experts == 1
    assert m.is_multimodal and m.rope_caches[0].rotary_dim == 64  # 256 × partial 0.25
    q = next(t for t in m.tensors if t.name == "attn.q_proj")
    assert (q.rows, q.cols) == (2 * 16 * 256, 2048)  # attn_output_gate doubles q
    a_log = next(t for t in m.tensors if t.name == "linear_attn.A_log")
    assert a_log.fp32 and a_log.rows == 32


def test_qwen35_gdn_state_and_kv_by_hand() -> None:
    from inference_capacity.ledger.kv import kv_bytes_per_token

    m = load_model("Qwen/Qwen3.5-35B-A3B")
    gdn = next(layer for layer in m.per_layer() if layer.kind is AttnKind.MAMBA)
    assert gdn.mamba is not None and gdn.token_bytes(1, 2) == 0
    # conv (2·16·128 + 32·128) × (4−1) bf16 = 49,152 B; temporal 32 × 128 × 128 fp32
    # (mamba_ssm_dtype) = 2,097,152 B
    assert gdn.mamba.bytes_per_sequence(1, 2) == 8192 * 3 * 2 + 32 * 128 * 128 * 4 == 2_146_304
    assert gdn.mamba.bytes_per_sequence(2, 2) == 4096 * 3 * 2 + 16 * 128 * 128 * 4 == 1_073_152
    # full layers: K and V, 2 KV heads × 256 × bf16 = 2,048 B/token/layer; 10 layers
    assert kv_bytes_per_token(m, 1, 2) == 10 * 2 * 2 * 256 * 2 == 20_480
    assert kv_bytes_per_token(m, 8, 2) == 10 * 2 * 1 * 256 * 2  # 1 KV head per rank (replicated)


def test_gemma4_26b_parameters_match_checkpoint() -> None:
    m = load_model("google/gemma-4-26B-A4B")
    # safetensors headers of google/gemma-4-26B-A4B: total_size 51,611,872,412 B of bf16
    # = 25,805,936,206 parameters (experts 22,837,985,280; embed 738,197,504; vision tower +
    # embed_vision 572,794,416); the card's "25.2B total parameters" is the language model
    # (~550M vision encoder on top), the name says 26B
    assert m.num_parameters == 25_805_936_206
    by = m.parameters_by_group()
    assert by["experts"] == 22_837_985_280 and by["vision"] == 572_794_416
    assert abs((m.num_parameters - by["vision"]) - 25.2e9) / 25.2e9 <= 0.01
    assert abs(m.num_parameters - 26e9) / 26e9 <= 0.01
    # the V slot vLLM allocates on the 5 K=V full layers (2 heads × 512 × 2816) is in the
    # tensors (bytes) but not in the checkpoint count
    extra = sum(t.numel for t in m.tensors) - m.num_parameters
    assert extra == 5 * 2 * 512 * 2816
    assert m.num_experts == 128 and m.experts_per_token == 8 and m.expert_intermediate_size == 704
    assert (
        sum(t.copies for t in m.tensors if t.name == "mlp.down_proj") == 30
    )  # dense MLP beside MoE
    assert [r.rotary_dim for r in m.rope_caches] == [256, 512]


def test_gemma4_layers_and_kv_by_hand() -> None:
    from inference_capacity.ledger.kv import kv_bytes_per_token

    m = load_model("google/gemma-4-26B-A4B")
    kinds = [layer.kind for layer in m.per_layer()]
    assert kinds.count(AttnKind.SLIDING) == 25 and kinds.count(AttnKind.FULL) == 5
    assert [i for i, k in enumerate(kinds) if k is AttnKind.FULL] == [5, 11, 17, 23, 29]
    assert all(layer.window == 1024 for layer in m.per_layer() if layer.kind is AttnKind.SLIDING)
    full = m.per_layer()[5]
    assert (full.kv_heads, full.head_dim_k, full.head_dim_v) == (2, 512, 512)
    # global layer: K and V both cached, 2 heads × 512 × bf16 = 4,096 B/token at TP1;
    # at TP4 the 2 KV heads are replicated (1 per rank): 2 × 512 × 2 = 2,048 B
    assert full.token_bytes(1, 2) == 2 * 2 * 512 * 2 == 4096
    assert full.token_bytes(4, 2) == 2 * 1 * 512 * 2 == 2048
    assert m.per_layer()[0].token_bytes(1, 2) == 2 * 8 * 256 * 2 == 8192
    assert kv_bytes_per_token(m, 1, 2) == 25 * 8192 + 5 * 4096 == 225_280
    assert kv_bytes_per_token(m, 4, 2) == 25 * 2 * 2 * 256 * 2 + 5 * 2048 == 61_440


def test_gemma4_per_layer_embeddings_say_not_modelled() -> None:
    _, cfg = load_config("google/gemma-4-26B-A4B")
    cfg["text_config"]["hidden_size_per_layer_input"] = 256
    with pytest.raises(ModelConfigError, match="hidden_size_per_layer_input.*not modelled yet"):
        shape_from_config(cfg)


def test_qwen35_dense_variant() -> None:
    _, cfg = load_config("Qwen/Qwen3.5-35B-A3B")
    cfg["model_type"] = "qwen3_5"
    tc = cfg["text_config"]
    tc["model_type"] = "qwen3_5_text"
    tc["intermediate_size"] = 6144
    for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size"):
        del tc[k]
    m = shape_from_config(cfg)
    assert not m.is_moe and sum(t.copies for t in m.tensors if t.name == "mlp.down_proj") == 40
    assert [layer.kind for layer in m.per_layer()].count(AttnKind.MAMBA) == 30


def test_linear_and_dynamic_ropes_cache_max_position_times_factor() -> None:
    # vLLM's LinearScalingRotaryEmbedding / DynamicNTKScalingRotaryEmbedding
    # (_compute_cos_sin_cache, 0.19.0): max_len = max_position_embeddings × scaling_factor;
    # YaRN's families set their own length (original × factor)
    from inference_capacity.model.config.decoder import rope_cache_factor
    from inference_capacity.model.errors import ModelConfigError

    assert rope_cache_factor({"type": "linear", "factor": 4.0}) == 4.0
    assert rope_cache_factor({"rope_type": "dynamic", "factor": 2}) == 2.0
    assert rope_cache_factor({"rope_type": "yarn", "factor": 4.0}) == 1.0
    assert rope_cache_factor({"rope_type": "llama3", "factor": 8.0}) == 1.0
    assert rope_cache_factor(None) == 1.0
    with pytest.raises(ModelConfigError, match="factor"):
        rope_cache_factor({"type": "linear", "factor": 0.5})
    # deepseek-coder-6.7b-instruct: linear 4 over 16,384 positions
    coder = load_model("deepseek-ai/deepseek-coder-6.7b-instruct")
    assert [r.positions for r in coder.rope_caches] == [65536]
