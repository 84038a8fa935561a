"""Nemotron-H LatentMoE (Nemotron-3 Super; vllm models/nemotron_h.py ``NemotronHMoE``, 0.13.0 on:
``use_latent_moe`` when the config has ``moe_latent_size``). The routed experts are built at the
latent width (``FusedMoE(hidden_size=moe_latent_size)``) between ``fc1_latent_proj`` (hidden →
latent) and ``fc2_latent_proj`` (latent → hidden), both ``ReplicatedLinear`` from 0.14.0; 0.12.0
has no latent path. Config: tests/data/model-configs/SOURCES.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference_capacity.engines.vllm import EngineSettings, SettingsError, predict_startup
from inference_capacity.hardware import get_gpu
from inference_capacity.ledger.weights import weight_breakdown
from inference_capacity.model import ModelShape, load_model
from inference_capacity.model.config.dispatch import shape_from_config

CONFIG = (
    Path(__file__).parent
    / "data/model-configs/nvidia__NVIDIA-Nemotron-3-Super-120B-A12B-FP8.config.json"
)
B200 = get_gpu("B200-180GB")
# the config: 88 layers, 40 of them MoE ("E"), hidden 4096, 512 experts of 2688, latent 1024
MOE_LAYERS, EXPERTS, INTER, LATENT, HIDDEN = 40, 512, 2688, 1024, 4096


def _super() -> ModelShape:
    return shape_from_config(json.loads(CONFIG.read_text()), "nemotron-3-super")


def test_experts_are_latent_width() -> None:
    m = _super()
    groups = m.parameters_by_group()
    assert str(json.loads(CONFIG.read_text())["hybrid_override_pattern"]).count("E") == MOE_LAYERS
    # non-gated (relu2) experts: up (intermediate × latent) and down (latent × intermediate)
    assert groups["experts"] == MOE_LAYERS * EXPERTS * 2 * INTER * LATENT
    # the two latent projections of each MoE layer (no bias: mlp_bias false)
    assert groups["mlp"] == MOE_LAYERS * 2 * LATENT * HIDDEN
    # the name's 120B (the model card's total); at the hidden width the experts alone were 451B
    assert m.num_parameters == pytest.approx(120e9, rel=0.01)
    assert m.moe_latent_size == LATENT


def test_latent_projections_are_replicated_over_tp() -> None:
    m = _super()
    one = weight_breakdown(m, 1, 1, 0, 2, None)
    four = weight_breakdown(m, 4, 1, 0, 2, None)
    assert four.by_group["mlp"] == one.by_group["mlp"] == MOE_LAYERS * 2 * LATENT * HIDDEN * 2
    assert four.by_group["experts"] * 4 == one.by_group["experts"]


def test_vllm_before_013_cannot_build_it() -> None:
    m = _super()
    ok = predict_startup(
        m,
        B200.total_bytes,
        B200.name,
        2,
        1,
        EngineSettings(version="0.13.0", max_model_len=8192),
    )
    assert ok.ranks[0].weights.by_group["experts"] > 0
    with pytest.raises(SettingsError, match="moe_latent_size"):
        predict_startup(
            m,
            B200.total_bytes,
            B200.name,
            2,
            1,
            EngineSettings(version="0.12.0", max_model_len=8192),
        )


def test_models_without_a_latent_are_unchanged() -> None:
    nano = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert nano.moe_latent_size == 0
    assert "fc1_latent_proj" not in " ".join(t.name for t in nano.tensors)
    assert nano.num_parameters == 31_577_940_288
