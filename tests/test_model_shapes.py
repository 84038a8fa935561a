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
    kinds = [layer.kind for layer in scout.layers]
    assert kinds.count(AttnKind.FULL) == 12 and kinds.count(AttnKind.CHUNKED) == 36
    nemo = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert "mamba" in nemo.attention_kinds
    gemma3 = load_model("google/gemma-3-27b-it")
    g3 = [layer.kind for layer in gemma3.layers]
    assert g3.count(AttnKind.FULL) == 10 and g3.count(AttnKind.SLIDING) == 52


def test_moe_metadata() -> None:
    m = load_model("deepseek-ai/DeepSeek-V3")
    assert m.num_experts == 256 and m.experts_per_token == 8
    assert m.dense_layers == (0, 1, 2)  # first_k_dense_replace = 3
    assert m.quantization is not None and m.quantization.block == (128, 128)
    q = load_model("Qwen/Qwen3-30B-A3B")
    assert q.num_experts == 128 and q.expert_intermediate_size == 768 and q.dense_layers == ()


@pytest.mark.parametrize("name", catalog_names())
def test_every_catalog_model_sizes_or_says_why(name: str) -> None:
    try:
        m = load_model(name)
    except ModelConfigError as exc:
        assert "not modelled yet" in str(exc)
        return
    assert m.num_parameters > 0 and len(m.layers) == m.num_layers


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
