"""Kimi-VL (``kimi_vl``): an MLA + MoE text model (DeepSeek-V3 layout) with a MoonViT tower."""

from __future__ import annotations

from typing import Any

from inference_capacity.engines.vllm import EngineSettings, predict_startup
from inference_capacity.hardware import get_gpu
from inference_capacity.model import model_from_dict

#: The layout of moonshotai/Kimi-VL-A3B-Instruct's config.json (Moonlight-16B-A3B text model,
#: MoonViT 1152 × 27 tower). Reconstructed: the public data has no copy
#: (operator/inference_capacity/catalog/models/SOURCES.md), so the test checks structure, not
#: the exact file.
TEXT: dict[str, Any] = {
    "model_type": "deepseek_v3",
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 2048,
    "intermediate_size": 11264,
    "moe_intermediate_size": 1408,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_experts_per_tok": 6,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 163840,
    "max_position_embeddings": 131072,
    "rope_theta": 800000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
VISION = {
    "model_type": "moonvit",
    "patch_size": 14,
    "init_pos_emb_height": 64,
    "init_pos_emb_width": 64,
    "num_attention_heads": 16,
    "num_hidden_layers": 27,
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "merge_kernel_size": [2, 2],
}
CONFIG = {
    "architectures": ["KimiVLForConditionalGeneration"],
    "model_type": "kimi_vl",
    "text_config": TEXT,
    "vision_config": VISION,
}


def test_kimi_vl_plans() -> None:
    m = model_from_dict(CONFIG, name="kimi-vl")
    assert m.is_multimodal and m.model_type == "deepseek_v3"
    assert {layer.kind.value for layer in m.per_layer()} == {"mla"}
    h, inter, depth = 1152, 4304, 27
    vision = sum(t.numel for t in m.tensors if t.group.value == "vision")
    tower = depth * (4 * h * h + 4 * h + 2 * h * inter + inter + h + 4 * h)
    patch = h * (3 * 14 * 14 + 1) + 64 * 64 * h + 2 * h
    projector = 2 * h + (4 * h) ** 2 + 4 * h + 4 * h * 2048 + 2048
    assert vision == tower + patch + projector
    h100 = get_gpu("H100-SXM-80GB")
    p = predict_startup(
        m, h100.total_bytes, h100.name, 1, 1, EngineSettings(version="0.19.0", max_model_len=32768)
    )
    assert p.starts, p.error
    # MLA: one latent of (512 + 64) × 2 B per token and layer, 27 layers, block 16 on Hopper
    assert p.ranks[0].layout.bytes_per_block == 27 * 576 * 2 * 16
