"""The 2026 checkpoints the catalog carries as byte copies of aiconfigurator-core 0.12.0's
model configs (catalog/models/SOURCES.md): each plans with its own format, and its parameter
count is the size its name gives (or, for a re-release, its predecessor's)."""

from __future__ import annotations

import pytest

from inference_capacity.ledger.weights import weight_breakdown
from inference_capacity.model import load_model


@pytest.mark.parametrize(
    ("name", "billions", "method"),
    [
        ("nvidia/Qwen3.5-397B-A17B-NVFP4", 397, "modelopt_fp4"),
        ("nvidia/Qwen3.5-122B-A10B-NVFP4", 122, "modelopt_fp4"),
        ("nvidia/Gemma-4-31B-IT-NVFP4", 31, "modelopt_fp4"),
        ("nvidia/Gemma-4-26B-A4B-NVFP4", 26, "modelopt_fp4"),
        ("Qwen/Qwen3.5-397B-A17B", 397, None),
        ("Qwen/Qwen3.5-27B", 27, None),
    ],
)
def test_named_size_and_format(name: str, billions: int, method: str | None) -> None:
    m = load_model(name)
    assert m.num_parameters == pytest.approx(billions * 1e9, rel=0.015)
    assert (m.quantization.method if m.quantization else None) == method


@pytest.mark.parametrize(
    ("name", "predecessor"),
    [
        ("MiniMaxAI/MiniMax-M2.7", "MiniMaxAI/MiniMax-M2.5"),
        ("nvidia/MiniMax-M2.7-NVFP4", "nvidia/MiniMax-M2.5-NVFP4"),
        ("nvidia/Kimi-K2.6-NVFP4", "nvidia/Kimi-K2.5-NVFP4"),
    ],
)
def test_rereleases_keep_their_predecessors_shapes(name: str, predecessor: str) -> None:
    new, old = load_model(name), load_model(predecessor)
    assert new.num_parameters == old.num_parameters
    assert new.quantization is not None and old.quantization is not None
    assert new.quantization.method == old.quantization.method


def test_gemma4_moe_experts_are_not_the_excluded_mlp() -> None:
    # nvidia/Gemma-4-26B-A4B-NVFP4 excludes every layer's mlp*, router* and self_attn* (its
    # config.json's ignore list): the dense MLP stays bf16, the experts (vLLM's
    # layers.N.moe.experts, the checkpoint's layers.N.experts) are NVFP4 -- 4.5 bits a weight
    # (payload, plus one e4m3 scale per 16) against 16
    q = load_model("nvidia/Gemma-4-26B-A4B-NVFP4")
    bf16 = load_model("google/gemma-4-26B-A4B")
    wq = weight_breakdown(q, 1, 1, 0, 2, q.quantization)
    wb = weight_breakdown(bf16, 1, 1, 0, 2, None)
    assert wq.by_group["mlp"] == wb.by_group["mlp"]
    assert wq.by_group["attention"] == wb.by_group["attention"]
    ratio = wq.by_group["experts"] / wb.by_group["experts"]
    assert ratio == pytest.approx(4.5 / 16, rel=0.01)
