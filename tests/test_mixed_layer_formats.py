"""Per-layer quantization formats (issue 21: "per-layer mixed formats ... sized per tensor").

vLLM resolves a format per layer, not per module kind:

* AutoRound (``quant_method: auto-round``, vLLM's INC method): ``INCConfigParser._resolve_raw``
  (inc/config_parser.py, 0.24.0/0.25.0; ``INCConfig.get_layer_config``, inc.py, 0.20.0) gives
  an ``extra_config`` entry naming one layer's module its own bits and group size (>= 16 bits:
  unquantized); the shards of one fused linear
  (``packed_modules_mapping``: qkv_proj, gate_up_proj, Qwen3.5's in_proj_qkvz / in_proj_ba) and
  the experts of one fused MoE layer must resolve to one config, else it raises ValueError
  ("Fused module ... requires consistent quant config", "Fused MoE layer ... requires consistent
  quant config for all sub-layers").
* ModelOpt MIXED_PRECISION: ``ModelOptMixedPrecisionConfig._resolve_quant_algo`` (modelopt.py,
  0.25.0) looks each layer up in ``quantized_layers``; a fused linear takes the algorithm its
  listed shards share (two raise "Mixed quant_algo within fused layer"); a layer resolved to
  nothing stays unquantized.

Every byte count below is the format's ``create_weights`` allocation, written out here (less the
float32 per-tensor scales the ledger rounds to one or none, a few bytes a tensor):
INC WNA16 (``INCWNA16LinearMethod.create_weights``, the GPTQ layout): an int32-packed qweight
(rows × cols × bits / 8 B), model-dtype scales and bit-packed qzeros per ``group_size`` inputs,
an int32 g_idx per input; ModelOpt FP8: e4m3 weight + a float32 scale per tensor; NVFP4:
``rows × cols / 2`` + an e4m3 scale per 16 inputs + float32 global scales.
"""

from __future__ import annotations

from typing import Any

import pytest

from inference_capacity.ledger.weights import weight_breakdown
from inference_capacity.model.catalog import load_config, model_from_dict
from inference_capacity.model.errors import ModelConfigError
from inference_capacity.model.quant import config_checkpoint_bytes

#: Llama-3.1-8B: hidden 4096, intermediate 14336, 32 layers, 8 KV heads of 128
H, FF, L = 4096, 14336, 32


def wna16(rows: int, cols: int, bits: int = 4, group: int = 128) -> int:
    groups = cols // group
    return rows * cols * bits // 8 + groups * rows * 2 + groups * rows * bits // 8 + cols * 4


def _auto_round(extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "quant_method": "auto-round",
        "bits": 4,
        "group_size": 128,
        "sym": True,
        "packing_format": "auto_round:auto_gptq",
        "extra_config": extra,
    }


def _llama(qc: dict[str, Any], name: str) -> Any:
    _, cfg = load_config("meta-llama/Llama-3.1-8B-Instruct")
    return model_from_dict({**cfg, "quantization_config": qc}, name)


def _mlp(layer: int, bits: int, group: int = 128) -> dict[str, Any]:
    entry = {"bits": bits, "group_size": group}
    return {f"model.layers.{layer}.mlp.{m}_proj": entry for m in ("gate", "up", "down")}


def test_auto_round_layers_of_their_own_width() -> None:
    """Layers 0 and 31's MLP at 8 bits (group 64), the rest at the checkpoint's 4 / 128."""
    shape = _llama(_auto_round({**_mlp(0, 8, 64), **_mlp(31, 8, 64)}), "ar-mixed")
    mlp4 = 2 * wna16(FF, H) + wna16(H, FF)
    mlp8 = 2 * wna16(FF, H, 8, 64) + wna16(H, FF, 8, 64)
    assert mlp8 > mlp4
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group
    assert w["mlp"] == 30 * mlp4 + 2 * mlp8
    # per pipeline stage: each stage holds one of the two 8-bit layers
    for stage in (0, 1):
        ws = weight_breakdown(shape, 1, 2, stage, 2, shape.quantization).by_group
        assert ws["mlp"] == 15 * mlp4 + mlp8
    # TP2: gate/up split by rows, down by columns (its groups with it)
    w2 = weight_breakdown(shape, 2, 1, 0, 2, shape.quantization).by_group
    assert w2["mlp"] == 30 * (2 * wna16(FF // 2, H) + wna16(H, FF // 2)) + 2 * (
        2 * wna16(FF // 2, H, 8, 64) + wna16(H, FF // 2, 8, 64)
    )
    # the checkpoint's own bytes (the safetensors cross-check) count the same widths
    plain = _llama(_auto_round({}), "ar-plain")
    assert config_checkpoint_bytes(shape) - config_checkpoint_bytes(plain) == 2 * (mlp8 - mlp4)


def test_auto_round_unquantized_layer_and_fused_shards() -> None:
    """q/k/v of layer 0 at 16 bits stay in the model dtype; q_proj alone at 16 bits is the
    config vLLM refuses (its qkv_proj shards would differ)."""
    qkv16 = {f"model.layers.0.self_attn.{m}_proj": {"bits": 16} for m in "qkv"}
    shape = _llama(_auto_round(qkv16), "ar-qkv16")
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group
    attn4 = 2 * wna16(H, H) + 2 * wna16(1024, H)
    assert w["attention"] == 31 * attn4 + (H + 2 * 1024) * H * 2 + wna16(H, H)
    with pytest.raises(ModelConfigError, match=r"layers\.0\.qkv_proj.*consistent"):
        _llama(_auto_round({"model.layers.0.self_attn.q_proj": {"bits": 16}}), "ar-q16")
    with pytest.raises(ModelConfigError, match=r"gate_up_proj"):
        _llama(_auto_round({"model.layers.4.mlp.up_proj": {"bits": 8}}), "ar-up8")


def test_auto_round_experts_of_one_layer_share_a_width() -> None:
    """Qwen3-30B-A3B (128 experts, hidden 2048, expert intermediate 768): layer 5's experts
    at 8 bits; one expert of another width is the config vLLM refuses."""
    _, cfg = load_config("Qwen/Qwen3-30B-A3B")
    e, h, ie = 128, 2048, 768
    extra = {
        f"model.layers.5.mlp.experts.{j}.{m}_proj": {"bits": 8}
        for j in range(e)
        for m in ("gate", "up", "down")
    }
    shape = model_from_dict({**cfg, "quantization_config": _auto_round(extra)}, "ar-moe")
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group
    per4 = e * (wna16(2 * ie, h) + wna16(h, ie))
    per8 = e * (wna16(2 * ie, h, 8) + wna16(h, ie, 8))
    assert w["experts"] == 47 * per4 + per8
    odd = {**extra, "model.layers.5.mlp.experts.7.down_proj": {"bits": 2}}
    with pytest.raises(ModelConfigError, match="fused MoE layer of layer 5"):
        model_from_dict({**cfg, "quantization_config": _auto_round(odd)}, "ar-moe-odd")


def test_auto_round_gated_deltanet_projections() -> None:
    """Qwen3.5-27B's layer 0 is Gated DeltaNet: vLLM loads in_proj_qkv and in_proj_z into one
    in_proj_qkvz (16,384 × 5,120: 2 × 16 × 128 key/query + 2 × 48 × 128 value/z rows), so both
    at 8 bits size it at 8 bits, and one alone is refused."""
    _, cfg = load_config("Qwen/Qwen3.5-27B")
    base = "model.language_model.layers.0.linear_attn"
    both = {f"{base}.in_proj_qkv": {"bits": 8}, f"{base}.in_proj_z": {"bits": 8}}
    plain = model_from_dict({**cfg, "quantization_config": _auto_round({})}, "ar35")
    shape = model_from_dict({**cfg, "quantization_config": _auto_round(both)}, "ar35-qkvz8")
    w0 = weight_breakdown(plain, 1, 1, 0, 2, plain.quantization).by_group["mamba"]
    w1 = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group["mamba"]
    assert w1 - w0 == wna16(16384, 5120, 8) - wna16(16384, 5120)
    with pytest.raises(ModelConfigError, match="in_proj_qkvz"):
        model_from_dict(
            {**cfg, "quantization_config": _auto_round({f"{base}.in_proj_z": {"bits": 8}})}, "z"
        )


def test_auto_round_widths_without_a_layer_are_refused() -> None:
    with pytest.raises(ModelConfigError, match="lm_head"):
        _llama(_auto_round({"lm_head": {"bits": 4}}), "ar-head")
    with pytest.raises(ModelConfigError, match="not sized"):
        _llama(_auto_round({".*down_proj": {"bits": 8}}), "ar-regex")
    # at 16 bits such entries stay exclusions (the router / lm_head kept in the model dtype)
    _llama(_auto_round({"lm_head": {"bits": 16}, ".*mlp.gate$": {"bits": 16}}), "ar-ok")


def test_auto_round_regex_keys_at_16_bits() -> None:
    """A regex key (INCConfigParser: any of ``*+?^$()[]{}|\\``) is re.search'ed against each
    layer's module path: at >= 16 bits every module it matches stays in the model dtype."""
    shape = _llama(_auto_round({r".*mlp\.down_proj$": {"bits": 16}}), "ar-rx-down")
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group
    assert w["mlp"] == 32 * (2 * wna16(FF, H) + H * FF * 2)
    # q_proj alone: vLLM's qkv_proj shards would differ (it raises at load)
    with pytest.raises(ModelConfigError, match="qkv_proj"):
        _llama(_auto_round({r".*q_proj": {"bits": 16}}), "ar-rx-q")
    # a pattern that may pick layers is not sized per layer
    with pytest.raises(ModelConfigError, match="digits"):
        _llama(_auto_round({r"layers\.[0-3]\.mlp.*": {"bits": 16}}), "ar-rx-layers")
    # \d stands for any layer, not a given one
    any_layer = _llama(_auto_round({r"layers\.\d+\.mlp\.down_proj": {"bits": 16}}), "ar-rx-d")
    wd = weight_breakdown(any_layer, 1, 1, 0, 2, any_layer.quantization).by_group
    assert wd["mlp"] == w["mlp"]
    # a width for a module the ledger does not hold: refused naming it and the field
    with pytest.raises(ModelConfigError, match=r"extra_config.*mlp\.frob"):
        _llama(_auto_round({"model.layers.0.mlp.frob": {"bits": 8}}), "ar-frob")


def _modelopt(layers: dict[str, Any]) -> dict[str, Any]:
    return {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": layers}


def test_modelopt_mixed_algorithm_per_layer() -> None:
    """MLP down_proj FP8 in layers 0-7 and NVFP4 in 8-31; attention listed in layers 0-3
    only (the rest bf16); layer 0 lists q_proj alone, and vLLM loads its fused qkv_proj in
    q's algorithm, so k and v of layer 0 are FP8 too."""
    layers: dict[str, Any] = {}
    for i in range(L):
        layers[f"model.layers.{i}.mlp.down_proj"] = {"quant_algo": "FP8" if i < 8 else "NVFP4"}
    for i in range(1, 4):
        for m in "qkvo":
            layers[f"model.layers.{i}.self_attn.{m}_proj"] = {"quant_algo": "FP8"}
    layers["model.layers.0.self_attn.q_proj"] = {"quant_algo": "FP8"}
    shape = _llama(_modelopt(layers), "mo-mixed")
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group

    # the ledger counts one float32 scale per FP8 tensor and none of NVFP4's per-tensor float32
    # globals (a few bytes a tensor; test_formats_2026.py says the same)
    def fp8(rows: int, cols: int) -> int:
        return rows * cols + 4

    def nvfp4(rows: int, cols: int) -> int:
        return rows * cols // 2 + rows * cols // 16

    gate_up = 2 * FF * H * 2  # unlisted: bf16
    assert w["mlp"] == 32 * gate_up + 8 * fp8(H, FF) + 24 * nvfp4(H, FF)
    qkv8 = fp8(H, H) + 2 * fp8(1024, H)
    attn16 = (2 * H * H + 2 * 1024 * H) * 2
    assert w["attention"] == 3 * (qkv8 + fp8(H, H)) + (qkv8 + H * H * 2) + 28 * attn16


def test_modelopt_mixed_fused_shards_of_two_algorithms_refused() -> None:
    layers = {
        "model.layers.2.self_attn.q_proj": {"quant_algo": "FP8"},
        "model.layers.2.self_attn.k_proj": {"quant_algo": "NVFP4"},
    }
    with pytest.raises(ModelConfigError, match=r"Mixed quant_algo within fused layer"):
        _llama(_modelopt(layers), "mo-bad")


def _ct_w4a16(ignore: list[str]) -> dict[str, Any]:
    group = {
        "targets": ["Linear"],
        "weights": {
            "num_bits": 4,
            "type": "int",
            "strategy": "group",
            "group_size": 128,
            "symmetric": True,
        },
    }
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {"group_0": group},
        "ignore": ignore,
    }


def ct4(rows: int, cols: int) -> int:
    """compressed-tensors W4A16 (CompressedTensorsWNA16.create_weights): int32-packed weight
    and a model-dtype scale per 128 inputs, symmetric (no zero points)."""
    return rows * cols // 2 + cols // 128 * rows * 2


def test_compressed_tensors_regex_ignore_entries() -> None:
    """``re:`` entries of ``ignore`` are re.match'ed against each layer's module path
    (should_ignore_layer, compressed_tensors/utils.py, 0.25.0): they were read as module paths
    and matched nothing. One without digits names every layer's module; one with digits is
    matched layer by layer; one naming some shards of a fused linear is refused (vLLM raises
    "Found a different quantization schemes")."""
    plain = _llama(_ct_w4a16(["lm_head"]), "ct-plain")
    wp = weight_breakdown(plain, 1, 1, 0, 2, plain.quantization).by_group
    assert wp["mlp"] == 32 * (2 * ct4(FF, H) + ct4(H, FF))
    down = _llama(_ct_w4a16(["lm_head", r"re:.*mlp\.down_proj$"]), "ct-down")
    wd = weight_breakdown(down, 1, 1, 0, 2, down.quantization).by_group
    assert wd["mlp"] == 32 * (2 * ct4(FF, H) + H * FF * 2)
    two = _llama(_ct_w4a16(["lm_head", r"re:.*layers\.(0|31)\.mlp\.down_proj$"]), "ct-two")
    wt = weight_breakdown(two, 1, 1, 0, 2, two.quantization).by_group
    assert wt["mlp"] == wp["mlp"] + 2 * (H * FF * 2 - ct4(H, FF))
    # pipeline stage 1 (layers 16-31) holds one of the two
    w1 = weight_breakdown(two, 1, 2, 1, 2, two.quantization).by_group
    assert w1["mlp"] == 16 * (2 * ct4(FF, H) + ct4(H, FF)) + H * FF * 2 - ct4(H, FF)
    with pytest.raises(ModelConfigError, match="qkv_proj"):
        _llama(_ct_w4a16([r"re:.*q_proj"]), "ct-q")
    with pytest.raises(ModelConfigError, match="does not compile"):
        _llama(_ct_w4a16([r"re:layers\.(0|1\.mlp"]), "ct-bad-regex")


def test_kimi_k25_published_ignore_list() -> None:
    """moonshotai/Kimi-K2.5's compressed-tensors config (the catalog's copy) keeps attention,
    the shared experts and the dense MLP of layer 0 in bf16 with three ``re:`` entries; only
    the routed experts are INT4. Kimi-K2 (DeepSeek-V3 shapes): hidden 7168, 61 layers, q LoRA
    1536, kv LoRA 512 + 64 rope, 64 heads of 128 (+64 rope) / 128 values, shared expert 2048,
    dense intermediate 18432."""
    from inference_capacity.model import load_model

    shape = load_model("moonshotai/Kimi-K2.5")
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group
    hid = 7168
    mla = hid * 1536 + 1536 * 64 * 192 + hid * 576 + 512 * 64 * 256 + 64 * 128 * hid
    kv_b = 512 * 64 * 256  # vLLM's MLA keeps kv_b_proj and derives W_UK/W_UV from it (bf16)
    assert w["attention"] == 61 * (mla + kv_b) * 2
    assert w["shared_experts"] == 60 * 3 * hid * 2048 * 2
    assert w["mlp"] == 3 * hid * 18432 * 2


def _gptq(**rules: Any) -> dict[str, Any]:
    return {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 128,
        "desc_act": False,
        "sym": True,
        **rules,
    }


def test_gptq_modules_in_block_to_quantize() -> None:
    """is_layer_gptq_quantized (quantization/utils/gptq_utils.py, 0.25.0): a linear is GPTQ
    only where an entry of ``modules_in_block_to_quantize`` is a substring of its path; the
    shards of a fused linear must agree. The GPTQ layout is INC's (qweight, scales, qzeros,
    g_idx), so ``wna16`` above sizes it."""
    everything = [
        ["self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj"],
        ["self_attn.o_proj"],
        ["mlp.up_proj", "mlp.gate_proj"],
        ["mlp.down_proj"],
    ]
    plain = _llama(_gptq(), "gptq")
    listed = _llama(_gptq(modules_in_block_to_quantize=everything), "gptq-all")
    wp = weight_breakdown(plain, 1, 1, 0, 2, plain.quantization).by_group
    assert weight_breakdown(listed, 1, 1, 0, 2, listed.quantization).by_group == wp
    assert wp["mlp"] == 32 * (2 * wna16(FF, H) + wna16(H, FF))
    no_down = _llama(_gptq(modules_in_block_to_quantize=everything[:3]), "gptq-no-down")
    wn = weight_breakdown(no_down, 1, 1, 0, 2, no_down.quantization).by_group
    assert wn["mlp"] == 32 * (2 * wna16(FF, H) + H * FF * 2)
    with pytest.raises(ModelConfigError, match="shards of qkv_proj"):
        _llama(_gptq(modules_in_block_to_quantize=["self_attn.q_proj"]), "gptq-q")
    with pytest.raises(ModelConfigError, match="names a layer"):
        _llama(_gptq(modules_in_block_to_quantize=["model.layers.0.mlp.down_proj"]), "g0")


def test_gptq_blocks_leave_gated_deltanet_unquantized() -> None:
    """A Qwen3.5 GPTQ checkpoint whose block list names attention and MLP only keeps the Gated
    DeltaNet projections in bf16: the GDN layers' weights are the unquantized model's."""
    _, cfg = load_config("Qwen/Qwen3.5-27B")
    blocks = [
        ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
        ["self_attn.o_proj"],
        ["mlp.gate_proj", "mlp.up_proj"],
        ["mlp.down_proj"],
    ]
    bf16 = model_from_dict(cfg, "q35")
    gq = model_from_dict(
        {**cfg, "quantization_config": _gptq(modules_in_block_to_quantize=blocks)}, "q35-gptq"
    )
    wb = weight_breakdown(bf16, 1, 1, 0, 2, None).by_group
    wg = weight_breakdown(gq, 1, 1, 0, 2, gq.quantization).by_group
    assert wg["mamba"] == wb["mamba"]
    assert wg["mlp"] < wb["mlp"] / 3


def test_gptq_dynamic_rules() -> None:
    """get_dynamic_override: the first rule whose regex re.matches vLLM's fused module path
    decides; -: leaves it unquantized, +: overrides its bits / group_size."""
    skip = _llama(_gptq(dynamic={r"-:.*mlp\.down_proj": {}}), "gd-skip")
    w = weight_breakdown(skip, 1, 1, 0, 2, skip.quantization).by_group
    assert w["mlp"] == 32 * (2 * wna16(FF, H) + H * FF * 2)
    eight = _llama(_gptq(dynamic={r"+:.*down_proj": {"bits": 8, "group_size": 64}}), "gd-8")
    w8 = weight_breakdown(eight, 1, 1, 0, 2, eight.quantization).by_group
    assert w8["mlp"] == 32 * (2 * wna16(FF, H) + wna16(H, FF, 8, 64))
    first = _llama(_gptq(dynamic={r"-:.*down": {}, r"+:.*down_proj": {"bits": 8}}), "gd-first")
    wf = weight_breakdown(first, 1, 1, 0, 2, first.quantization).by_group
    assert wf["mlp"] == w["mlp"]
    # the fused gate_up_proj is one module to the rules: gate and up go together
    gu = _llama(_gptq(dynamic={r"-:.*gate_up_proj": {}}), "gd-gu")
    wg = weight_breakdown(gu, 1, 1, 0, 2, gu.quantization).by_group
    assert wg["mlp"] == 32 * (2 * FF * H * 2 + wna16(H, FF))
    # a rule naming layers: layers 10-15 at 8 bits, every module (resolve_layer_rules)
    mid = _llama(_gptq(dynamic={r"+:.*\.(?:1[0-5])\..*": {"bits": 8}}), "gd-layers")
    wm = weight_breakdown(mid, 1, 1, 0, 2, mid.quantization).by_group
    mlp4, mlp8 = 2 * wna16(FF, H) + wna16(H, FF), 2 * wna16(FF, H, 8) + wna16(H, FF, 8)
    assert wm["mlp"] == 26 * mlp4 + 6 * mlp8
    attn4 = 2 * wna16(H, H) + 2 * wna16(1024, H)
    attn8 = 2 * wna16(H, H, 8) + 2 * wna16(1024, H, 8)
    assert wm["attention"] == 26 * attn4 + 6 * attn8


def test_gptq_dynamic_per_layer_skips_of_a_qwen35_export() -> None:
    """AutoRound's GPTQ-format export of a Qwen3.5 model skips each Gated DeltaNet layer's
    in_proj_b / in_proj_a with one ``-:`` rule per layer (``-:.*model\\.layers\\.N\\.
    linear_attn\\.in_proj_b.*``): vLLM's fused in_proj_ba (96 x 5,120) stays bf16 in the 48
    GDN layers of Qwen3.5-27B, every other linear GPTQ."""
    _, cfg = load_config("Qwen/Qwen3.5-27B")
    gdn = [i for i, k in enumerate(cfg["text_config"]["layer_types"]) if k == "linear_attention"]
    assert len(gdn) == 48
    rules = {rf"-:.*model\.layers\.{i}\.linear_attn\.in_proj_{p}.*": {} for i in gdn for p in "ba"}
    plain = model_from_dict({**cfg, "quantization_config": _gptq()}, "q35-gptq-plain")
    skip = model_from_dict({**cfg, "quantization_config": _gptq(dynamic=rules)}, "q35-gptq-ba")
    wp = weight_breakdown(plain, 1, 1, 0, 2, plain.quantization).by_group
    ws = weight_breakdown(skip, 1, 1, 0, 2, skip.quantization).by_group
    assert ws["mamba"] - wp["mamba"] == 48 * (96 * 5120 * 2 - wna16(96, 5120))
    assert ws["mlp"] == wp["mlp"] and ws["attention"] == wp["attention"]


def test_compressed_tensors_regex_targets() -> None:
    """find_matched_target (compressed_tensors/utils.py, 0.25.0): a layer's own name or a
    regex target first, then the module class (``Linear``). FP8 per-channel MLP by regex, the
    other linears W4A16; a regex-only group leaves the linears it does not name unquantized."""
    fp8 = {"num_bits": 8, "type": "float", "strategy": "channel"}
    qc = _ct_w4a16(["lm_head"])
    qc["config_groups"] = {
        **qc["config_groups"],
        "group_1": {"weights": fp8, "targets": [r"re:.*mlp\..*"]},
    }
    shape = _llama(qc, "ct-rx-mlp")
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group

    def fp8c(rows: int, cols: int) -> int:  # e4m3 + a float32 scale per output row
        return rows * cols + rows * 4

    assert w["mlp"] == 32 * (2 * fp8c(FF, H) + fp8c(H, FF))
    assert w["attention"] == 32 * (2 * ct4(H, H) + 2 * ct4(1024, H))
    only = _ct_w4a16(["lm_head"])
    only["config_groups"]["group_0"]["targets"] = [r"re:.*self_attn\..*"]
    s2 = _llama(only, "ct-rx-attn")
    w2 = weight_breakdown(s2, 1, 1, 0, 2, s2.quantization).by_group
    assert w2["attention"] == w["attention"]
    assert w2["mlp"] == 32 * 3 * FF * H * 2


def awq4(rows: int, cols: int) -> int:
    """AWQ 4-bit, group 128 (AWQLinearMethod.create_weights): packed qweight, model-dtype
    scales and packed zeros per group."""
    groups = cols // 128
    return rows * cols // 2 + groups * rows * 2 + groups * rows // 2


def _awq(skip: list[str] | None) -> dict[str, Any]:
    qc: dict[str, Any] = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
    if skip is not None:
        qc["modules_to_not_convert"] = skip
    return qc


def test_awq_modules_to_not_convert_are_substrings() -> None:
    """is_layer_skipped(..., skip_with_substr=True) (quant_utils.py, from auto_awq.py, 0.25.0):
    an entry skips every module path it is a substring of, the fused linear's own name first:
    "mlp.gate" is in "mlp.gate_up_proj", so gate and up stay bf16, down stays AWQ."""
    plain = _llama(_awq(None), "awq")
    wp = weight_breakdown(plain, 1, 1, 0, 2, plain.quantization).by_group
    assert wp["mlp"] == 32 * (2 * awq4(FF, H) + awq4(H, FF))
    gate = _llama(_awq(["mlp.gate"]), "awq-gate")
    wg = weight_breakdown(gate, 1, 1, 0, 2, gate.quantization).by_group
    assert wg["mlp"] == 32 * (2 * FF * H * 2 + awq4(H, FF))
    assert wg["attention"] == wp["attention"]
    # one layer's path: that layer's copies
    one = _llama(_awq(["model.layers.0.mlp.down_proj"]), "awq-l0")
    wo = weight_breakdown(one, 1, 1, 0, 2, one.quantization).by_group
    assert wo["mlp"] == wp["mlp"] + H * FF * 2 - awq4(H, FF)
    with pytest.raises(ModelConfigError, match="shards of qkv_proj"):
        _llama(_awq(["q_proj"]), "awq-q")
    # Qwen3-30B-A3B: "mlp.gate" names the router, not the experts' fused path "mlp.experts"
    _, cfg = load_config("Qwen/Qwen3-30B-A3B")
    moe = model_from_dict({**cfg, "quantization_config": _awq(["mlp.gate"])}, "awq-moe")
    moe0 = model_from_dict({**cfg, "quantization_config": _awq(None)}, "awq-moe0")
    wm = weight_breakdown(moe, 1, 1, 0, 2, moe.quantization).by_group
    assert (
        wm["experts"] == weight_breakdown(moe0, 1, 1, 0, 2, moe0.quantization).by_group["experts"]
    )


def test_fp8_exclusions_by_fused_name_and_partial_shards() -> None:
    """is_layer_skipped (quant_utils.py, 0.25.0) for FP8: a fused linear's own name in the
    list skips all its shards; a layer listing some shards of one fused linear is refused
    (vLLM: "Detected some but not all shards ... are quantized")."""
    fp8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    plain = _llama(fp8, "fp8")
    fused = _llama({**fp8, "ignored_layers": ["model.layers.0.mlp.gate_up_proj"]}, "fp8-gu")
    wp = weight_breakdown(plain, 1, 1, 0, 2, plain.quantization).by_group
    wf = weight_breakdown(fused, 1, 1, 0, 2, fused.quantization).by_group
    # per-tensor FP8: e4m3 + one float32 scale (the ledger's count)
    assert wf["mlp"] - wp["mlp"] == 2 * (FF * H * 2 - (FF * H + 4))
    with pytest.raises(ModelConfigError, match=r"layers\.5\.qkv_proj"):
        _llama({**fp8, "ignored_layers": ["model.layers.5.self_attn.k_proj"]}, "fp8-k")


def test_modelopt_exclude_modules_fused_names() -> None:
    """ModelOptQuantConfigBase.is_layer_excluded (modelopt.py, 0.25.0) checks exact paths with
    the fused mapping first (is_layer_skipped): a fused name skips its shards, a layer
    excluding some shards of one fused linear makes vLLM raise."""
    nvfp4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    plain = _llama({**nvfp4, "exclude_modules": ["lm_head"]}, "mo-nvfp4")
    fused = _llama(
        {**nvfp4, "exclude_modules": ["lm_head", "model.layers.0.mlp.gate_up_proj"]}, "mo-gu"
    )
    wp = weight_breakdown(plain, 1, 1, 0, 2, plain.quantization).by_group
    wf = weight_breakdown(fused, 1, 1, 0, 2, fused.quantization).by_group
    nv = FF * H // 2 + FF * H // 16  # the ledger's NVFP4 (payload + e4m3 block scales)
    assert wf["mlp"] - wp["mlp"] == 2 * (FF * H * 2 - nv)
    with pytest.raises(ModelConfigError, match="exclude_modules"):
        _llama({**nvfp4, "exclude_modules": ["model.layers.2.self_attn.v_proj"]}, "mo-v")


def test_bitsandbytes_skip_modules_by_path_component() -> None:
    """is_layer_skipped_bnb (bitsandbytes.py, 0.25.0): an llm_int8_skip_modules entry equal to
    a component of vLLM's fused module path, or to a leading part of it, skips the module:
    "down_proj" skips every down_proj, "q_proj" nothing (vLLM's module is qkv_proj), and
    "model.layers.2.mlp" layer 2's MLP; 8-bit checkpoints read the list too."""

    def bnb(skip: list[str], bits: int = 4) -> dict[str, Any]:
        qc: dict[str, Any] = {"quant_method": "bitsandbytes", "llm_int8_skip_modules": skip}
        if bits == 8:
            qc["load_in_8bit"] = True
        else:
            qc.update(load_in_4bit=True, bnb_4bit_quant_type="nf4")
        return qc

    base = _llama(bnb(["lm_head"]), "bnb")
    wb = weight_breakdown(base, 1, 1, 0, 2, base.quantization).by_group
    down = _llama(bnb(["lm_head", "down_proj"]), "bnb-down")
    wd = weight_breakdown(down, 1, 1, 0, 2, down.quantization).by_group
    nf4_down = H * FF // 2 + H * FF // 64 * 4  # NF4: 4-bit values + a float32 absmax per 64
    assert wd["mlp"] - wb["mlp"] == 32 * (H * FF * 2 - nf4_down)
    q = _llama(bnb(["lm_head", "q_proj"]), "bnb-q")
    assert weight_breakdown(q, 1, 1, 0, 2, q.quantization).by_group == wb
    two = _llama(bnb(["lm_head", "model.layers.2.mlp"]), "bnb-l2")
    w2 = weight_breakdown(two, 1, 1, 0, 2, two.quantization).by_group
    assert w2["mlp"] - wb["mlp"] == (2 * FF * H + H * FF) * 2 - (
        2 * (FF * H // 2 + FF * H // 64 * 4) + nf4_down
    )
    e8 = _llama(bnb(["lm_head", "mlp"], bits=8), "bnb8-mlp")
    w8 = weight_breakdown(e8, 1, 1, 0, 2, e8.quantization).by_group
    assert w8["mlp"] == 32 * 3 * FF * H * 2


def test_a_split_is_refused_only_where_the_model_has_the_modules() -> None:
    """AutoRound keeps MoE routers in 16 bits with the regex ``.*mlp\\.gate.*``. On a MoE
    model it names the routers (never quantized) and no dense gate_up_proj exists, so it plans;
    on a dense model it also names gate_proj and not up_proj, splitting vLLM's gate_up_proj,
    which vLLM refuses (INCConfigParser: "Fused module ... requires consistent quant
    config")."""
    router16 = _auto_round({r".*mlp\.gate.*": {"bits": 16, "data_type": "float"}})
    _, cfg = load_config("Qwen/Qwen3-30B-A3B")
    moe = model_from_dict({**cfg, "quantization_config": router16}, "ar-moe-router")
    plain = model_from_dict({**cfg, "quantization_config": _auto_round({})}, "ar-moe-plain")
    w = weight_breakdown(moe, 1, 1, 0, 2, moe.quantization).by_group
    assert w == weight_breakdown(plain, 1, 1, 0, 2, plain.quantization).by_group
    with pytest.raises(ModelConfigError, match="shards of gate_up_proj"):
        _llama(router16, "ar-dense-router")


def test_compressed_tensors_target_naming_some_shards_does_not_match() -> None:
    """_match_fused_layer (compressed_tensors/utils.py, 0.25.0) matches a fused linear only
    where every shard matches: a target naming q_proj alone leaves qkv_proj to Linear."""
    fp8 = {"num_bits": 8, "type": "float", "strategy": "channel"}
    qc = _ct_w4a16(["lm_head"])
    qc["config_groups"] = {
        **qc["config_groups"],
        "group_1": {"weights": fp8, "targets": [r"re:.*q_proj"]},
    }
    shape = _llama(qc, "ct-rx-q")
    plain = _llama(_ct_w4a16(["lm_head"]), "ct-plain-q")
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group
    assert w == weight_breakdown(plain, 1, 1, 0, 2, plain.quantization).by_group


def test_mtp_layers_left_out_of_the_quantization() -> None:
    """nvidia/Qwen3.5-397B-A17B-NVFP4 ignores ``mtp.layers.0*`` (its published config), so
    vLLM builds the MTP layer (models/qwen3_5_mtp.py: ``mtp.layers.N``, one full-attention
    decoder layer plus fc and norms) unquantized: the drafter weighs the decoder's last layer in
    bf16. An AutoRound config whose block_name_to_quantize names the decoder only does the
    same (INCConfigParser: a layer outside it stays 16-bit)."""
    from inference_capacity.engines.vllm import EngineSettings, predict_startup
    from inference_capacity.engines.vllm_flags import SpeculativeConfig
    from inference_capacity.hardware import get_gpu
    from inference_capacity.model import load_model

    b200 = get_gpu("B200")
    mtp = EngineSettings("0.25.0", speculative=SpeculativeConfig("mtp", 1))

    def drafter(shape: Any, tp: int) -> int:
        p = predict_startup(shape, b200.total_bytes, b200.name, tp, 1, mtp)
        return int(p.ranks[0].weights.by_group["drafter"])

    def last_layer(shape: Any, tp: int, q: Any) -> int:
        n = shape.num_layers
        w = weight_breakdown(shape, tp, n, n - 1, 2, q).by_group
        return sum(v for g, v in w.items() if g not in ("embedding", "lm_head"))

    big = load_model("nvidia/Qwen3.5-397B-A17B-NVFP4")
    assert big.quantization is not None and big.quantization.mtp_unquantized
    h = big.hidden_size
    eh = (2 * h * h + 2 * h) * 2  # eh_proj (2H -> H) and two norms, bf16
    assert drafter(big, 8) == last_layer(big, 8, None) + eh
    assert last_layer(big, 8, None) > 3 * last_layer(big, 8, big.quantization)
    _, cfg = load_config("Qwen/Qwen3.5-27B")
    qc = {**_auto_round({}), "block_name_to_quantize": "model.language_model.layers"}
    ar = model_from_dict({**cfg, "quantization_config": qc}, "ar-mtp")
    assert ar.quantization is not None and ar.quantization.mtp_unquantized
    plain = model_from_dict({**cfg, "quantization_config": _auto_round({})}, "ar-mtp-q")
    assert plain.quantization is not None and not plain.quantization.mtp_unquantized
    assert drafter(ar, 1) - drafter(plain, 1) == last_layer(ar, 1, None) - last_layer(
        plain, 1, plain.quantization
    )


def test_gptq_dynamic_rule_on_mixtral_experts() -> None:
    """vLLM names Mixtral's fused MoE module ``block_sparse_moe.experts``
    (models/mixtral.py): a ``-:`` rule on it keeps the 8 experts of every layer in bf16."""
    _, cfg = load_config("mistralai/Mixtral-8x7B-v0.1")
    skip = {**cfg, "quantization_config": _gptq(dynamic={r"-:.*block_sparse_moe.*": {}})}
    shape = model_from_dict(skip, "gptq-mixtral")
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group
    assert w["experts"] == 32 * 8 * 3 * 4096 * 14336 * 2
