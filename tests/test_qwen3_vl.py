"""Qwen3-VL, dense and MoE (vllm models/qwen3_vl.py and qwen3_vl_moe.py, 0.12.0 and 0.21.0):
Qwen3's language models (``Qwen3LLMModel(Qwen3Model)``, ``Qwen3MoeLLMModel(Qwen3MoeModel)``),
the Qwen3-VL vision tower with its deepstack mergers, and the deepstack buffers the model
allocates while it loads. Configs: the catalog's byte copies (catalog/models/SOURCES.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inference_capacity.engines.vllm import EngineSettings, predict_startup
from inference_capacity.hardware import get_gpu
from inference_capacity.model import load_model
from inference_capacity.model.config.dispatch import SUPPORTED_MODEL_TYPES

H100 = get_gpu("H100-SXM-80GB")
VL8B = "Qwen/Qwen3-VL-8B-Instruct"
VL30B = "Qwen/Qwen3-VL-30B-A3B-Instruct"
VOCAB = 151936


def _tower(out: int) -> int:
    """The vision tower's parameters, module by module (Qwen3_VisionTransformer; vision_config:
    hidden 1152, intermediate 4304, depth 27, patch 16, temporal patch 2, 2,304 position
    embeddings, spatial merge 2, deepstack indexes [8, 16, 24])."""
    h, inter, depth = 1152, 4304, 27
    block = (2 * h) * 2 + (3 * h * h + 3 * h) + (h * h + h) + (inter * h + inter) + (h * inter + h)
    patch = h * 3 * 2 * 16 * 16 + h
    pos = 2304 * h
    hm = 4 * h  # the merged patch: spatial_merge_size² × hidden

    def merger(norm: int) -> int:  # LayerNorm, linear_fc1 hm → hm, linear_fc2 hm → out
        return 2 * norm + (hm * hm + hm) + (out * hm + out)

    return depth * block + patch + pos + merger(h) + 3 * merger(hm)


def _attention(hidden: int, heads: int, kv_heads: int, head_dim: int = 128) -> int:
    q, kv = heads * head_dim, kv_heads * head_dim
    return hidden * q + 2 * hidden * kv + q * hidden + 2 * head_dim  # q/k/v/o + q/k norms


def test_qwen3_vl_is_supported() -> None:
    assert {"qwen3_vl", "qwen3_vl_moe"} <= set(SUPPORTED_MODEL_TYPES)


def test_dense_parameters_by_module() -> None:
    # text_config: hidden 4096, 36 layers, 32 / 8 heads of 128, intermediate 12288, untied
    h, layers = 4096, 36
    layer = _attention(h, 32, 8) + 3 * h * 12288 + 2 * h
    text = 2 * VOCAB * h + layers * layer + h
    m = load_model(VL8B)
    assert m.model_type == "qwen3_vl_text" and m.deepstack_levels == 3
    assert m.num_parameters == text + _tower(out=h) == 8_767_123_696


def test_moe_parameters_by_module() -> None:
    # text_config: hidden 2048, 48 layers, 32 / 4 heads of 128, 128 experts top-8 of 768, a
    # router per layer, no shared expert, untied
    h, layers = 2048, 48
    layer = _attention(h, 32, 4) + 128 * h + 128 * 3 * h * 768 + 2 * h
    text = 2 * VOCAB * h + layers * layer + h
    m = load_model(VL30B)
    assert m.model_type == "qwen3_vl_moe_text" and m.num_experts == 128
    assert m.experts_per_token == 8
    assert m.num_parameters == text + _tower(out=h) == 31_070_754_032


@pytest.mark.parametrize(("model", "hidden"), [(VL8B, 4096), (VL30B, 2048)])
@pytest.mark.parametrize("version", ["0.12.0", "0.21.0"])
def test_deepstack_buffers_counted_with_the_tower(model: str, hidden: int, version: str) -> None:
    # Qwen3VL(Moe)ForConditionalGeneration.__init__ allocates deepstack_num_level = 3 zeroed
    # (max_num_batched_tokens, text hidden) tensors in the model dtype while the model loads
    # (in its weights), where the tower is built; with image and video at 0 vLLM builds
    # neither (0.12: self.visual = None; 0.21: _mark_tower_model's meta device)
    m = load_model(model)
    base = EngineSettings(version=version, max_model_len=16384, max_num_batched_tokens=8192)
    built = predict_startup(
        m, H100.total_bytes, H100.name, 1, 1, replace(base, skip_mm_profiling=True)
    )
    text_only = predict_startup(
        m, H100.total_bytes, H100.name, 1, 1, replace(base, mm_limits=(("image", 0), ("video", 0)))
    )
    w, t = built.ranks[0].weights, text_only.ranks[0].weights
    assert w.by_group["deepstack"] == 3 * 8192 * hidden * 2
    assert "deepstack" not in t.by_group and "vision" not in t.by_group
    tower = _tower(out=hidden) * 2  # bfloat16
    assert w.total - t.total == tower + 3 * 8192 * hidden * 2
    # the buffers follow the step budget
    half = predict_startup(
        m,
        H100.total_bytes,
        H100.name,
        1,
        1,
        replace(base, skip_mm_profiling=True, max_num_batched_tokens=4096),
    )
    assert half.ranks[0].weights.by_group["deepstack"] == 3 * 4096 * hidden * 2


def test_image_profile_sized_from_the_processor_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    # the encoder profile is sized as Qwen3.5's (the same Qwen3-VL tower and processor): without
    # the image processor's bounds the plan is Supported=False naming them (never a guess);
    # with max_pixels (16,777,216: size.longest_edge of the Qwen3-VL processors) it is sized
    import json

    from inference_capacity.cli import main as cli_main

    args = [
        "plan",
        "--model",
        VL8B,
        "--gpu",
        "H100-SXM-80GB",
        "--max-model-len",
        "16384",
        "--engine-version",
        "0.21.0",
        "--limit-mm-per-prompt",
        '{"image": 1, "video": 0}',
        "-o",
        "json",
    ]
    assert cli_main(args) == 0
    unsized = json.loads(capsys.readouterr().out)
    assert unsized["supported"] is False and "max_pixels" in unsized["unsupported"][0]["why"]
    assert cli_main([*args, "--mm-processor-kwargs", '{"max_pixels": 16777216}']) == 0
    sized = json.loads(capsys.readouterr().out)
    assert "unsupported" not in sized
    text = unsized["vllm_startup"]["activation_peak_gib"]  # the text-only profile's numbers
    assert sized["vllm_startup"]["activation_peak_gib"] > text
