"""The formats and defaults of 2026 (issue 21): ModelOpt NVFP4/MXFP8/mixed checkpoints and their
``hf_quant_config.json``, MoE experts under data parallelism, hybrid Mamba defaults by version,
DeepSeek-V4. Each number is derived here from the vLLM function cited next to it (sdists 0.20.0,
0.25.0, 0.26.0, 0.28.0, 0.32.0, 0.33.0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference_capacity.engines.versions import parse_version
from inference_capacity.engines.vllm import (
    EngineSettings,
    SettingsError,
    mamba_blocks_per_request,
    mamba_cache_mode,
    predict_startup,
    prefill_checkpoint_blocks,
    resolve_kv_cache_dtype,
)
from inference_capacity.hardware import get_gpu
from inference_capacity.ledger.weights import weight_breakdown
from inference_capacity.model import load_model
from inference_capacity.model.catalog import load_config, model_from_dict
from inference_capacity.model.errors import ModelConfigError
from inference_capacity.model.quant import merge_hf_quant_config
from inference_capacity.units import GiB

H100 = get_gpu("H100-SXM-80GB")
B200 = get_gpu("B200")
V = parse_version

#: the hf_quant_config.json ModelOpt writes for an NVFP4 checkpoint (the fields
#: ModelOptNvFp4Config._from_config requires: group_size, kv_cache_quant_algo, exclude_modules;
#: as nvidia/*-NVFP4 publish them, e.g. nvidia--Qwen3-235B-A22B-NVFP4_hf_quant_config.json in
#: ai-dynamo/aiconfigurator)
NVFP4_HQ = {
    "producer": {"name": "modelopt", "version": "0.29.0"},
    "quantization": {
        "quant_algo": "NVFP4",
        "kv_cache_quant_algo": "FP8",
        "group_size": 16,
        "exclude_modules": ["lm_head"],
    },
}


def _llama70b(hq: dict[str, object]) -> object:
    _, cfg = load_config("meta-llama/Llama-3.3-70B-Instruct")
    return model_from_dict(merge_hf_quant_config(cfg, hq), "llama-3.3-70b-q")


#: Llama-3.3-70B: per layer q, k, v, o, gate, up, down (out × in)
H, INTER, KV = 8192, 28672, 8 * 128
LAYER_LINEAR = H * H + 2 * KV * H + H * H + 2 * INTER * H + H * INTER  # 855,638,016
EMBED = 128256 * H * 2  # bf16 embed_tokens; lm_head (excluded) the same
NORMS = (2 * 80 + 1) * H * 2
ROPE = 131072 * 128 * 2  # the rope cos/sin cache: max positions × rotary dim, bf16


def test_modelopt_nvfp4_llama70b_b200_weights_and_fp8_kv() -> None:
    """Acceptance: Llama-3.3-70B NVFP4 (ModelOpt) on B200.

    ``ModelOptNvFp4LinearMethod.create_weights`` (quantization/modelopt.py, 0.20.0/0.25.0):
    uint8 weight ``out × in/2``, e4m3 ``weight_scale`` ``out × in/16``, float32 input_scale and
    weight_scale_2 per shard (a few bytes): 9/16 B per parameter. lm_head is in
    exclude_modules (bf16), the embedding is not a linear (bf16)."""
    shape = _llama70b(NVFP4_HQ)
    q = shape.quantization
    assert q is not None and q.method == "modelopt_fp4" and q.kv_cache_algo == "fp8"
    vllm_bytes = 80 * LAYER_LINEAR * 9 // 16 + 2 * EMBED + NORMS + ROPE
    assert vllm_bytes / GiB == pytest.approx(39.807, abs=0.001)
    p = predict_startup(
        shape, B200.total_bytes, B200.name, 1, 1, EngineSettings("0.30.0", max_model_len=32768)
    )
    w = p.ranks[0].weights.total
    assert abs(w - vllm_bytes) / vllm_bytes < 0.01
    # KV: --kv-cache-dtype auto resolves to fp8 for every modelopt* method
    # (utils/torch_utils.py::get_kv_cache_quant_algo_string): 1 B per element,
    # 16 tokens × 80 layers × (K + V) × 8 heads × 128 per block
    assert p.settings.kv_cache_dtype == "fp8"
    assert p.ranks[0].layout.bytes_per_block == 16 * 80 * 2 * 8 * 128 * 1


def test_modelopt_quant_algo_to_method_and_kv() -> None:
    """override_quantization_method (0.25.0): FP8 -> modelopt, *FP4* -> modelopt_fp4,
    MXFP8 -> modelopt_mxfp8; the KV algorithm string maps through
    MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP (fp8, nvfp4)."""
    _, cfg = load_config("meta-llama/Llama-3.1-8B-Instruct")
    flat = {
        "quant_method": "modelopt",
        "quant_algo": "MXFP8",
        "ignore": ["lm_head"],
        "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"},
    }
    mx = model_from_dict({**cfg, "quantization_config": flat}, "mx")
    assert mx.quantization is not None and mx.quantization.method == "modelopt_mxfp8"
    # ModelOptMxFp8LinearMethod.create_weights: e4m3 out × in + uint8 scale out × in/32
    w = weight_breakdown(mx, 1, 1, 0, 2, mx.quantization)
    q_proj = 4096 * 4096 + 4096 * 4096 // 32
    assert w.by_group["attention"] == 32 * (2 * q_proj + 2 * (1024 * 4096 + 1024 * 4096 // 32))
    assert resolve_kv_cache_dtype(V("0.25.0"), mx, "auto") == "fp8"
    nv4 = {**NVFP4_HQ, "quantization": {**NVFP4_HQ["quantization"], "kv_cache_quant_algo": "NVFP4"}}
    s = _llama70b(nv4)
    assert resolve_kv_cache_dtype(V("0.25.0"), s, "auto") == "nvfp4"
    assert resolve_kv_cache_dtype(V("0.20.0"), s, "auto") == "nvfp4"
    with pytest.raises(SettingsError, match="nvfp4"):
        resolve_kv_cache_dtype(V("0.19.0"), s, "auto")
    # an explicit --kv-cache-dtype wins
    assert resolve_kv_cache_dtype(V("0.25.0"), s, "auto") != resolve_kv_cache_dtype(
        V("0.25.0"), s, "bfloat16"
    )


def test_hf_quant_config_unknown_algo_refused() -> None:
    """_normalize_quantization_config (transformers_utils/model_arch_config_convertor.py,
    0.20.0/0.25.0) raises 'Unknown ModelOpt quant algo' for anything but FP8*/NVFP4 read from
    hf_quant_config.json."""
    hq = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "W4A8_AWQ"}}
    with pytest.raises(ModelConfigError, match="W4A8_AWQ"):
        _llama70b(hq)
    # config.json's own quantization_config wins over the file (get_config)
    _, cfg = load_config("Qwen/Qwen3-32B-FP8")
    assert merge_hf_quant_config(cfg, NVFP4_HQ)["quantization_config"] == cfg["quantization_config"]


def test_catalog_fp8_entry_reads_its_hf_quant_config() -> None:
    """nvidia/Llama-3.1-70B-Instruct-FP8 keeps its quantization in hf_quant_config.json
    (quant_algo FP8, exclude lm_head): ModelOptFp8LinearMethod, e4m3 weights + two float32
    scales per logical shard. Was 131 GiB (bf16) at TP1."""
    shape = load_model("nvidia/Llama-3.1-70B-Instruct-FP8")
    q = shape.quantization
    assert q is not None and q.method == "fp8" and q.producer == "modelopt"
    w = weight_breakdown(shape, 1, 1, 0, 2, q).by_group
    linear = w["attention"] + w["mlp"]
    assert linear == pytest.approx(80 * LAYER_LINEAR, abs=80 * 7 * 4)
    assert w["lm_head"] == EMBED  # excluded: bf16
    assert resolve_kv_cache_dtype(V("0.25.0"), shape, "auto") == "fp8"


def test_local_folder_reads_hf_quant_config(tmp_path: Path) -> None:
    from inference_capacity.model.source import _resolve_local

    _, cfg = load_config("meta-llama/Llama-3.3-70B-Instruct")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(NVFP4_HQ))
    resolved = _resolve_local(tmp_path)
    assert resolved.config["quantization_config"]["quant_method"] == "modelopt_fp4"
    # and a config.json path given to the catalog loader
    _, data = load_config(str(tmp_path / "config.json"))
    assert data["quantization_config"]["quantization"]["quant_algo"] == "NVFP4"


def test_modelopt_mixed_precision_per_module() -> None:
    """ModelOptMixedPrecisionConfig (0.25.0): each quantized_layers entry has its own algo; a
    linear not listed stays unquantized (get_quant_method). Qwen3-30B-A3B with FP8 attention
    and NVFP4 experts (the layout of nvidia/Qwen3.6-35B-A3B-NVFP4's hf_quant_config)."""
    _, cfg = load_config("Qwen/Qwen3-30B-A3B")
    layers: dict[str, dict[str, object]] = {}
    for i in range(48):
        for m in ("q_proj", "k_proj", "v_proj", "o_proj"):
            layers[f"model.layers.{i}.self_attn.{m}"] = {"quant_algo": "FP8"}
        layers[f"model.layers.{i}.mlp.experts"] = {"quant_algo": "NVFP4", "group_size": 16}
    qc = {
        "quant_method": "modelopt",
        "quant_algo": "MIXED_PRECISION",
        "kv_cache_quant_algo": "FP8",
        "quantized_layers": layers,
        "ignore": ["lm_head"],
    }
    shape = model_from_dict({**cfg, "quantization_config": qc}, "qwen3-mixed")
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group
    hid, inter, e = 2048, 768, 128
    # FP8 attention: q 4096×2048, k/v 512×2048, o 2048×4096, + 2 float32 scales per shard
    attn = 4096 * hid + 2 * 512 * hid + hid * 4096
    assert w["attention"] == pytest.approx(48 * attn, rel=1e-5)
    # NVFP4 experts (ModelOptNvFp4FusedMoE.create_weights): 9/16 B per parameter
    experts = 48 * e * (2 * inter * hid + hid * inter) * 9 // 16
    assert w["experts"] == pytest.approx(experts, rel=1e-6)
    assert resolve_kv_cache_dtype(V("0.25.0"), shape, "auto") == "fp8"
    # one layer's experts in another algorithm: that layer's copy in it (FP8: e4m3 and a
    # float32 scale per expert and tensor), sized per layer (tests/test_mixed_layer_formats.py)
    fp8_3 = {**layers, "model.layers.3.mlp.experts": {"quant_algo": "FP8"}}
    s3 = model_from_dict({**cfg, "quantization_config": {**qc, "quantized_layers": fp8_3}}, "x")
    w3 = weight_breakdown(s3, 1, 1, 0, 2, s3.quantization).by_group
    fp8_layer = e * (2 * inter * hid + 4 + hid * inter + 4)
    assert w3["experts"] == pytest.approx(experts * 47 // 48 + fp8_layer, rel=1e-6)
    # a name the ledger lacks is refused
    odd = {**layers, "model.layers.0.mlp.frobnicator": {"quant_algo": "FP8"}}
    with pytest.raises(ModelConfigError, match="frobnicator"):
        model_from_dict({**cfg, "quantization_config": {**qc, "quantized_layers": odd}}, "y")


def test_modelopt_exclusions_by_module_path() -> None:
    """Nemotron-3-Nano NVFP4's exclude_modules name backbone.layers.N.mixer.{q,k,v,o}_proj
    (attention, the ledger's attn.*) and wildcards (fnmatch in is_layer_excluded)."""
    _, cfg = load_config("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    attn_layers = [i for i, c in enumerate(cfg["hybrid_override_pattern"]) if c == "*"]
    hq = {
        "producer": {"name": "modelopt"},
        "quantization": {
            "quant_algo": "NVFP4",
            "kv_cache_quant_algo": "FP8",
            "group_size": 16,
            "exclude_modules": ["lm_head"]
            + [f"backbone.layers.{i}.mixer.{m}_proj" for i in attn_layers for m in "qkvo"],
        },
    }
    shape = model_from_dict(merge_hf_quant_config(cfg, hq), "nano-nvfp4")
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group
    heads, kvh, hd, hid = 32, 2, 128, 2688
    # every attention projection excluded: bf16
    attn = len(attn_layers) * (2 * heads * hd * hid + 2 * kvh * hd * hid) * 2
    assert w["attention"] == attn
    wild = {**hq, "quantization": {**hq["quantization"], "exclude_modules": ["*self_attn*"]}}
    llama = _llama70b(wild)
    wa = weight_breakdown(llama, 1, 1, 0, 2, llama.quantization).by_group
    assert wa["attention"] == 80 * (2 * H * H + 2 * KV * H) * 2


def test_moe_data_parallel_without_ep_shards_experts() -> None:
    """Acceptance: Qwen3-30B-A3B --data-parallel-size 2, no EP. FusedMoEParallelConfig.make
    (fused_moe/config.py, 0.20.0/0.25.0): use_ep False -> tp_size = flatten_tp_across_dp_and_pcp
    = dp × pcp × tp = 2, so each rank holds half of every expert."""
    shape = load_model("Qwen/Qwen3-30B-A3B")
    experts_full = 48 * 128 * (2 * 768 * 2048 + 2048 * 768) * 2  # bf16, all layers
    one = predict_startup(shape, H100.total_bytes, H100.name, 1, 1, EngineSettings("0.25.0"))
    dp2 = predict_startup(
        shape, H100.total_bytes, H100.name, 1, 1, EngineSettings("0.25.0", data_parallel=2)
    )
    assert one.ranks[0].weights.by_group["experts"] == experts_full
    assert dp2.ranks[0].weights.by_group["experts"] == experts_full // 2
    assert (
        one.ranks[0].weights.total - dp2.ranks[0].weights.total == experts_full // 2
    )  # attention, embeddings and router stay whole per DP rank
    ep = predict_startup(
        shape,
        H100.total_bytes,
        H100.name,
        1,
        1,
        EngineSettings("0.25.0", data_parallel=2, expert_parallel=True),
    )
    assert ep.ranks[0].weights.by_group["experts"] == experts_full // 2  # 64 whole experts


def test_hybrid_mamba_cache_mode_by_version() -> None:
    """is_prefix_caching_supported: False for hybrids through 0.25.0, True from 0.26.0
    (config/model.py); MambaModelConfig.verify_and_update_config: 'all' for
    SupportsMambaPrefixCaching models 0.26–0.27, 'align' from 0.28.0; 0.20–0.21 with
    speculative decoding 'align'."""
    nano = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert mamba_cache_mode(V("0.20.0"), nano, None) == "none"
    assert mamba_cache_mode(V("0.25.0"), nano, None) == "none"
    assert mamba_cache_mode(V("0.25.0"), nano, True) == "all"
    assert mamba_cache_mode(V("0.20.0"), nano, True, speculative=True) == "align"
    assert mamba_cache_mode(V("0.26.0"), nano, None) == "all"
    assert mamba_cache_mode(V("0.28.0"), nano, None) == "align"
    assert mamba_cache_mode(V("0.28.0"), nano, False) == "none"
    # MambaMixer2.get_kv_cache_spec adds a prefill checkpoint block from 0.32.0
    assert prefill_checkpoint_blocks(V("0.31.0"), nano, "H100") == 0
    assert prefill_checkpoint_blocks(V("0.32.0"), nano, "H100") == 1
    assert mamba_blocks_per_request("align", V("0.32.0"), 4096, 2096, 0, 1) == 3
    qwen35 = load_model("Qwen/Qwen3.5-35B-A3B")
    assert prefill_checkpoint_blocks(V("0.32.0"), qwen35, "H100") == 0
    assert prefill_checkpoint_blocks(V("0.33.0"), qwen35, "H100") == 1
    assert prefill_checkpoint_blocks(V("0.33.0"), qwen35, "A100") == 0


def test_nemotron3_nano_025_defaults_concurrency() -> None:
    """Acceptance: Nemotron-3-Nano-30B-A3B on 0.25 at default flags (H100, L = 262,144).

    Mode 'none' (prefix caching off for hybrids): one state block per request per Mamba group.
    Block size from page-size unification: a Mamba layer's state per sequence is conv
    (64·64 + 2·8·128) × 3 × 2 B = 36,864 plus SSM 64·64·128 × 4 B (float32,
    mamba_ssm_cache_dtype) = 2,097,152: 2,134,016 B; an attention token is 2·2·128·2 = 1,024 B
    a layer, so B = roundup(2,134,016 / 1,024 = 2,084, 16) = 2,096. Groups of 6 layers: 6
    attention layers (1 group), 23 Mamba layers (4 groups). A request: ceil(262144/2096) = 126
    attention blocks + 4 state blocks = 130. The review's vLLM figure is 6.41×."""
    nano = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    p = predict_startup(nano, H100.total_bytes, H100.name, 1, 1, EngineSettings("0.25.0"))
    assert p.ranks[0].layout.block_size == 2096
    assert p.max_concurrency == pytest.approx(p.num_gpu_blocks / 130)
    assert p.max_concurrency == pytest.approx(6.41, rel=0.05)


def test_nemotron_h_ssm_state_float32_from_020() -> None:
    """NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype (models/config.py, 0.20.0):
    float32 when the HF config is silent; Nemotron-H-56B-Base-8K has no such key.

    At TP4: conv (256·64 + 2·8·256)/4 × 3 × 2 B = 30,720; SSM 256/4 × 64 × 256 elements =
    1,048,576: bf16 2,097,152 B (≤ 0.19), float32 4,194,304 B (0.20). An attention token is
    (8/4 heads) × 128 × 2 × 2 B = 1,024 B a layer, so the unified block is
    roundup(2,127,872 / 1,024, 16) = 2,080 before and roundup(4,225,024 / 1,024, 16) = 4,128."""
    n56 = load_model("nvidia/Nemotron-H-56B-Base-8K")
    kw = {"max_model_len": 8192}
    old = predict_startup(n56, H100.total_bytes, H100.name, 4, 1, EngineSettings("0.19.0", **kw))
    new = predict_startup(n56, H100.total_bytes, H100.name, 4, 1, EngineSettings("0.20.0", **kw))
    conv = (256 * 64 + 2 * 8 * 256) // 4 * 3 * 2
    ssm = 256 // 4 * 64 * 256

    def block(state: int) -> int:
        tokens = -(-state // 1024)  # attention tokens a state page spans, rounded up
        return -(-tokens // 16) * 16

    assert old.ranks[0].layout.block_size == block(conv + 2 * ssm) == 2080
    assert new.ranks[0].layout.block_size == block(conv + 4 * ssm) == 4128


def test_deepseek_v4_refused_naming_what_is_missing() -> None:
    """DeepSeek-V4 is sized (tests/test_kv_dsv4.py); a config without its per-layer
    compress_ratios is refused naming the field."""
    _, catalog = load_config("deepseek-ai/DeepSeek-V4-Flash")
    cfg = dict(catalog)
    del cfg["compress_ratios"]
    with pytest.raises(ModelConfigError, match="compress_ratios"):
        model_from_dict(cfg, "dsv4")


def test_compressed_tensors_config_groups_per_module() -> None:
    """Two config groups (CompressedTensorsConfig matches a layer to the group whose targets
    name it, 0.25.0): FP8 per-channel attention, NVFP4-like 4-bit float group-16 experts;
    the lm_head listed in a ModelOpt mixed config is quantized too."""
    _, cfg = load_config("Qwen/Qwen3-30B-A3B")
    fp8 = {"num_bits": 8, "type": "float", "strategy": "channel"}
    fp4 = {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 16}
    qc = {
        "quant_method": "compressed-tensors",
        "config_groups": {
            "group_0": {
                "weights": fp8,
                "targets": [
                    f"model.layers.{i}.self_attn.{m}_proj" for i in range(48) for m in "qkvo"
                ],
            },
            "group_1": {"weights": fp4, "targets": ["Linear"]},
        },
        "ignore": ["lm_head"],
    }
    shape = model_from_dict({**cfg, "quantization_config": qc}, "ct-groups")
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group
    hid, inter, e = 2048, 768, 128
    # channel FP8: e4m3 + a float32 scale per output row (CompressedTensorsW8A8Fp8)
    rows = 4096 + 512 + 512 + 2048
    assert w["attention"] == 48 * ((4096 * hid + 2 * 512 * hid + hid * 4096) + rows * 4)
    # 4-bit float, group 16 = NVFP4 (CompressedTensorsW4A4Fp4.create_weights, 0.25.0): uint8
    # out × in/2 + e4m3 out × in/16
    per = (2 * inter * hid + hid * inter) // 2 + (2 * inter * hid + hid * inter) // 16
    assert w["experts"] == 48 * e * per
    # a regex target is matched against vLLM's module paths (tests/test_mixed_layer_formats.py):
    # re:.*gate names the experts' gate projections and not their up/down, a config vLLM
    # refuses ("All MoE projections need to have same quantization scheme")
    rx = {
        **qc,
        "config_groups": {**qc["config_groups"], "g2": {"weights": fp8, "targets": ["re:.*gate"]}},
    }
    with pytest.raises(ModelConfigError, match="MoE projections"):
        model_from_dict({**cfg, "quantization_config": rx}, "ct-rx")


def test_modelopt_mixed_lists_lm_head() -> None:
    _, cfg = load_config("meta-llama/Llama-3.1-8B-Instruct")
    layers = {f"model.layers.{i}.mlp.down_proj": {"quant_algo": "FP8"} for i in range(32)}
    layers["lm_head"] = {"quant_algo": "W4A16_NVFP4", "group_size": 16}
    qc = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": layers}
    shape = model_from_dict({**cfg, "quantization_config": qc}, "mixed-head")
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group
    assert w["lm_head"] == 128256 * 4096 * 9 // 16  # NVFP4: 1/2 + 1/16 B per parameter
    # gate/up unlisted (bf16), down FP8 with its per-tensor scale (the ledger counts one float32
    # scale a tensor; vLLM's input_scale is 4 B more)
    assert w["mlp"] == 32 * (2 * 14336 * 4096 * 2 + 4096 * 14336 + 4)


def test_qwen35_and_gemma4_text_only_without_audio() -> None:
    """Qwen3_5(Moe)ProcessingInfo inherits {"image", "video"} (qwen2_vl.py
    get_supported_mm_limits); Gemma4 adds audio only with an audio_config (gemma4_mm.py,
    0.25.0). So {"image": 0, "video": 0} is a text-only profile for both."""
    from inference_capacity.engines.vllm_mm import text_only

    for name in ("Qwen/Qwen3.5-35B-A3B", "google/gemma-4-26B-A4B"):
        shape = load_model(name)
        assert set(shape.mm_modalities) == {"image", "video"}, name
        assert text_only({"image": 0, "video": 0}, shape.mm_modalities)
        assert not text_only({"image": 0}, shape.mm_modalities)
    _, cfg = load_config("google/gemma-4-26B-A4B")
    with_audio = model_from_dict({**cfg, "audio_config": {"model_type": "gemma4_audio"}}, "g4a")
    assert "audio" in with_audio.mm_modalities


def test_kimi_vl_text_config_without_model_type() -> None:
    """KimiVLConfig (transformers_utils/configs/kimi_vl.py, 0.25.0) builds a DeepseekV2Config
    from a text_config dict (whatever its keys), so a text_config without model_type is the
    DeepSeek MLA + MoE layout, not an unknown 'kimi_vl_text'."""
    _, cfg = load_config("moonshotai/Kimi-K2.5")
    tc = {k: v for k, v in cfg["text_config"].items() if k != "model_type"}
    vl = {**cfg, "model_type": "kimi_vl", "text_config": tc}
    shape = model_from_dict(vl, "kimi-vl-no-type")
    assert shape.model_type == "deepseek_v2"
    assert shape.is_multimodal


def test_default_v2_runner_by_version() -> None:
    """config/vllm.py DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES: 0.22.0 {Qwen3}, 0.23.0
    {Llama, Mistral, Qwen3} dense and unquantized; 0.24.0 adds DeepseekV2, Qwen2Moe,
    GraniteMoe with no dense/unquantized condition."""
    from inference_capacity.engines.vllm import _uses_v2_runner

    llama, qwen3 = load_model("meta-llama/Llama-3.1-8B-Instruct"), load_model("Qwen/Qwen3-8B")
    dsv2 = load_model("deepseek-ai/DeepSeek-V2-Lite")
    llama_fp8 = load_model("meta-llama/Llama-3.1-8B-Instruct", quantization="fp8")
    assert not _uses_v2_runner(V("0.22.0"), llama) and _uses_v2_runner(V("0.22.0"), qwen3)
    assert _uses_v2_runner(V("0.23.0"), llama) and not _uses_v2_runner(V("0.23.0"), llama_fp8)
    assert not _uses_v2_runner(V("0.23.0"), dsv2)
    assert _uses_v2_runner(V("0.24.0"), dsv2) and _uses_v2_runner(V("0.24.0"), llama_fp8)
    assert not _uses_v2_runner(V("0.24.0"), load_model("Qwen/Qwen2.5-7B-Instruct"))


def test_pd_connector_with_hma_keeps_hybrid_manager() -> None:
    """config/vllm.py: 0.20.0 turns the hybrid KV manager off for any --kv-transfer-config;
    from 0.22.0 only for a connector that is not SupportsHMA (NixlConnector is). Gemma-3-27B
    (52 sliding + 10 full layers): groups of 10 layers by kind with HMA, one group of every
    layer as full attention without."""
    from inference_capacity.engines.vllm import connector_keeps_hma

    assert connector_keeps_hma(V("0.25.0"), "NixlConnector")
    assert not connector_keeps_hma(V("0.20.0"), "NixlConnector")
    assert not connector_keeps_hma(V("0.25.0"), "LMCacheConnectorV1")
    gemma = load_model("google/gemma-3-27b-it")
    kw = {"max_model_len": 32768, "kv_transfer": True}
    nixl = predict_startup(
        gemma,
        H100.total_bytes,
        H100.name,
        2,
        1,
        EngineSettings("0.25.0", kv_connector="NixlConnector", **kw),
    )
    lmc = predict_startup(
        gemma,
        H100.total_bytes,
        H100.name,
        2,
        1,
        EngineSettings("0.25.0", kv_connector="LMCacheConnectorV1", **kw),
    )
    assert nixl.ranks[0].layout.num_groups > 1 and lmc.ranks[0].layout.num_groups == 1
    assert nixl.kv_cache_tokens > lmc.kv_cache_tokens
    # a Mamba hybrid needs HMA: a connector without it fails vLLM's startup
    nano = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    with pytest.raises(SettingsError, match="hybrid KV-cache manager"):
        predict_startup(
            nano,
            H100.total_bytes,
            H100.name,
            1,
            1,
            EngineSettings("0.25.0", kv_connector="LMCacheConnectorV1", **kw),
        )


def test_read_engine_reads_the_connector_name() -> None:
    from inference_capacity.engines.vllm_config import read_engine

    flags = {"kv-transfer-config": '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'}
    cfg = read_engine(flags, {}, "0.25.0")
    assert (cfg.kv_transfer.enabled, cfg.kv_transfer.connector) == (True, "NixlConnector")
    assert cfg.settings().kv_connector == "NixlConnector"
    assert read_engine({}, {}, "0.25.0").kv_transfer.connector is None


def test_gpt_oss_mxfp4_padding_by_moe_backend() -> None:
    """mxfp4_round_up_hidden_size_and_intermediate_size (fused_moe/oracle/mxfp4.py, 0.20.0/
    0.25.0): Marlin 256/128, the TRTLLM backends (first for gpt-oss on Blackwell) 256/256.
    gpt-oss-120b, hidden 2880 -> 3072, expert intermediate 2880 -> 2944 (Marlin) or 3072:
    per expert w13 (2I × 3072) + w2 (3072 × I) at 4 bits plus a uint8 scale per 32 inputs."""
    m = load_model("openai/gpt-oss-120b")

    def expert_bytes(inter: int) -> int:
        payload = (2 * inter * 3072 + 3072 * inter) // 2
        scales = 2 * inter * (3072 // 32) + 3072 * (inter // 32)
        return payload + scales

    per_layer = 128 * (expert_bytes(3072) - expert_bytes(2944))
    a100, b200 = get_gpu("A100-SXM-80GB"), B200
    s = EngineSettings("0.25.0")
    ea = predict_startup(m, a100.total_bytes, a100.name, 1, 1, s).ranks[0].weights
    eb = predict_startup(m, b200.total_bytes, b200.name, 1, 1, s).ranks[0].weights
    assert eb.by_group["experts"] - ea.by_group["experts"] == 36 * per_layer == 2_887_778_304


def test_auto_round_sized_as_inc_wna16() -> None:
    """INCConfig takes quant_method auto-round (override_quantization_method, 0.25.0);
    INCWNA16LinearMethod.create_weights: int32 qweight (in/8 × out at 4 bits), scales in the
    model dtype and packed qzeros per 128 inputs, an int32 g_idx per input."""
    _, cfg = load_config("meta-llama/Llama-3.1-8B-Instruct")
    qc = {
        "quant_method": "auto-round",
        "bits": 4,
        "group_size": 128,
        "sym": True,
        "packing_format": "auto_round:auto_gptq",
        "extra_config": {
            f"model.layers.0.self_attn.{m}_proj": {"bits": 16} for m in ("q", "k", "v")
        },
    }
    shape = model_from_dict({**cfg, "quantization_config": qc}, "ar")
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group

    def wna16(rows: int, cols: int) -> int:
        groups = cols // 128
        return rows * cols // 2 + groups * rows * 2 + groups * rows // 2 + cols * 4

    down = wna16(4096, 14336)
    assert w["mlp"] == 32 * (2 * wna16(14336, 4096) + down)
    qkv_bf16 = (4096 + 2 * 1024) * 4096 * 2  # layer 0's q/k/v at 16 bits (extra_config)
    layer = wna16(4096, 4096) * 2 + 2 * wna16(1024, 4096)
    assert w["attention"] == qkv_bf16 + wna16(4096, 4096) + 31 * layer
    with pytest.raises(ModelConfigError, match="packing"):
        model_from_dict(
            {**cfg, "quantization_config": {**qc, "packing_format": "auto_round:fp8"}}, "ar2"
        )


def test_lora_doubles_the_cuda_graph_cases() -> None:
    """_get_lora_cases (0.20.0/0.25.0): [0, max_loras + 1] with the default
    cudagraph_specialize_lora=True and specialize_active_lora=False: twice the graphs."""
    from inference_capacity.engines.vllm import lora_graph_cases

    assert lora_graph_cases(V("0.25.0"), 0) == 1 and lora_graph_cases(V("0.25.0"), 4) == 2
    llama = load_model("meta-llama/Llama-3.1-8B-Instruct")
    base = predict_startup(llama, H100.total_bytes, H100.name, 1, 1, EngineSettings("0.25.0"))
    lora = predict_startup(
        llama, H100.total_bytes, H100.name, 1, 1, EngineSettings("0.25.0", max_loras=4)
    )
    assert lora.ranks[0].cuda_graph == 2 * base.ranks[0].cuda_graph


def test_deployment_quantization_modelopt_on_a_modelopt_checkpoint() -> None:
    """`--quantization modelopt` on a ModelOpt checkpoint: vLLM's ModelOpt config classes pick
    the format from its quant_algo (override_quantization_method), so the plan is supported;
    the NIXL connector name reaches the engine settings."""
    import yaml

    from inference_capacity.api import InferenceCapacity
    from inference_capacity.resolve import resolve

    example = Path(__file__).resolve().parent.parent / "examples" / "llama-3.1-8b-h100.yaml"
    icap, dep = list(yaml.safe_load_all(example.read_text()))
    icap["spec"]["model"]["name"] = "nvidia/Qwen3-235B-A22B-NVFP4"
    c = dep["spec"]["template"]["spec"]["containers"][0]
    c["args"] = [
        "--max-model-len",
        "8192",
        "--tensor-parallel-size",
        "4",
        "--quantization",
        "modelopt",
        "--kv-transfer-config",
        '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}',
    ]
    r = resolve(InferenceCapacity.from_manifest(icap, ignore_status=True).spec, dep)
    assert r.unsupported == ()
    assert r.plan_input.engine.kv_connector == "NixlConnector"


def test_catalog_nvfp4_moe_reads_its_hf_quant_config() -> None:
    """nvidia/Qwen3-235B-A22B-NVFP4 (ModelOpt 0.33 NVFP4, routers excluded): the experts at
    9/16 B per parameter (ModelOptNvFp4FusedMoE.create_weights), TP-sharded over 4 ranks."""
    shape = load_model("nvidia/Qwen3-235B-A22B-NVFP4")
    q = shape.quantization
    assert q is not None and q.method == "modelopt_fp4" and q.kv_cache_algo == "fp8"
    w = weight_breakdown(shape, 4, 1, 0, 2, q).by_group
    assert w["experts"] == 94 * 128 * (3 * 1536 * 4096 // 4) * 9 // 16
    assert w["router"] == 94 * 128 * 4096 * 2  # mlp.gate in exclude_modules: bf16


def test_hybrid_shared_prefix_credit_only_with_prefix_caching() -> None:
    """A hybrid at 0.25 defaults (prefix caching off, is_prefix_caching_supported) gets no
    shared-prefix credit; at 0.26 (on by default) it does; a dense model always does."""
    from inference_capacity.engines.vllm import prefix_caching_enabled
    from inference_capacity.planner import PlanInput, make_plan
    from inference_capacity.sizing import Cohort, Quantiles, Workload

    nano = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert not prefix_caching_enabled(V("0.25.0"), nano, None)
    assert prefix_caching_enabled(V("0.26.0"), nano, None)
    assert prefix_caching_enabled(V("0.25.0"), load_model("Qwen/Qwen3-8B"), None)
    wl = Workload(
        (Cohort("chat", 1.0, Quantiles(20000, 20000, 20000), Quantiles(500, 500, 500), 16384),)
    )

    def shared(version: str) -> int:
        eng = EngineSettings(version, max_model_len=32768)
        p = make_plan(PlanInput(model=nano, gpu=H100, engine=eng, workload=wl))
        assert p.seqs is not None
        return p.seqs.shared_prefix_blocks

    assert shared("0.25.0") == 0 and shared("0.26.0") > 0


def test_v2_runner_falls_back_for_unsupported_speculation() -> None:
    """_get_v2_model_runner_unsupported_features (config/vllm.py): ngram falls back to V1 in
    0.25.0/0.28.0, not in 0.32.0 (only suffix/medusa/mlp_speculator/custom_class there)."""
    from inference_capacity.engines.vllm import v2_runner_unsupported
    from inference_capacity.engines.vllm_flags import parse_speculative_config

    ngram = parse_speculative_config(
        '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'
    )
    eagle = parse_speculative_config('{"method": "mtp", "num_speculative_tokens": 1}')
    assert v2_runner_unsupported(V("0.25.0"), ngram)
    assert v2_runner_unsupported(V("0.28.0"), ngram)
    assert not v2_runner_unsupported(V("0.32.0"), ngram)
    assert not v2_runner_unsupported(V("0.25.0"), eagle)
    assert not v2_runner_unsupported(V("0.25.0"), None)
    llama = load_model("meta-llama/Llama-3.1-8B-Instruct")
    p = predict_startup(
        llama, H100.total_bytes, H100.name, 1, 1, EngineSettings("0.25.0", speculative=ngram)
    )
    assert not p.settings.v2_runner


def test_compressed_tensors_nvfp4_tensor_group() -> None:
    """RedHatAI-style NVFP4 (strategy tensor_group, group 16) and a config without a strategy
    (nvidia/Gemma-4-31B-IT-NVFP4's config.json): CompressedTensorsW4A4Fp4.create_weights,
    uint8 out × in/2 + e4m3 out × in/16 (+ float32 global scales)."""
    _, cfg = load_config("meta-llama/Llama-3.1-8B-Instruct")
    for weights in (
        {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
        {"num_bits": 4, "type": "float", "group_size": 16, "dynamic": False},
    ):
        qc = {
            "quant_method": "compressed-tensors",
            "format": "nvfp4-pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
            "ignore": ["lm_head"],
        }
        shape = model_from_dict({**cfg, "quantization_config": qc}, "ct-nvfp4")
        w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group
        n = 2 * 14336 * 4096 + 4096 * 14336
        assert w["mlp"] == 32 * (n // 2 + n // 16)


def test_qwen_shared_expert_formats_are_read() -> None:
    """nvidia/Qwen3.6-35B-A3B-NVFP4's hf_quant_config (aiconfigurator-core 0.12.0's copy) names
    the one shared expert ``mlp.shared_expert.{gate,up,down}_proj`` (vLLM's Qwen3.5-MoE holds
    ``self.shared_expert``, models/qwen3_5.py 0.24.0), W4A16_NVFP4 group 16: 4-bit weights and
    one e4m3 scale per 16 (ModelOptNvFp4LinearMethod.create_weights): 9/16 B per parameter.
    It was refused as a module kind the ledger does not know."""
    shape = load_model("nvidia/Qwen3.6-35B-A3B-NVFP4")
    w = weight_breakdown(shape, 1, 1, 0, 2, shape.quantization).by_group
    hid, shared, layers = 2048, 512, 40
    assert w["shared_experts"] == pytest.approx(layers * 3 * shared * hid * 9 / 16, rel=1e-4)
    assert w["experts"] == pytest.approx(layers * 256 * 3 * 512 * hid * 9 / 16, rel=1e-4)
    # its config.json (which vLLM reads before hf_quant_config.json) names no KV algorithm:
    # --kv-cache-dtype auto stays auto (get_kv_cache_quant_algo_string returns None)
    assert resolve_kv_cache_dtype(parse_version("0.24.0"), shape, "auto") == "auto"
