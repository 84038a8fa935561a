"""Llama-Nemotron "NAS" models (``nemotron-nas``, DeciLMForCausalLM; vllm
models/nemotron_nas.py ``DeciLMDecoderLayer``, 0.21.0): per-layer attention (or none) and
per-layer MLP widths from ``block_configs``. Config: the catalog's byte copy of
nvidia/Llama-3_3-Nemotron-Super-49B-v1 (catalog/models/SOURCES.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from inference_capacity.engines.vllm import EngineSettings, predict_startup
from inference_capacity.hardware import get_gpu
from inference_capacity.model import ModelConfigError, load_model
from inference_capacity.model.config.dispatch import shape_from_config
from inference_capacity.model.shapes import AttnKind

NAME = "nvidia/Llama-3_3-Nemotron-Super-49B-v1"
CONFIG = (
    Path(__file__).parent.parent
    / "operator/inference_capacity/catalog/models/nvidia__Llama-3_3-Nemotron-Super-49B-v1.json"
)
H100 = get_gpu("H100-SXM-80GB")


def _intermediate(mult: float, hidden: int) -> int:
    """vllm models/nemotron_nas.py ``_ffn_mult_to_intermediate_size`` / ``_find_multiple``."""
    n = int(2 * mult * hidden / 3)
    return n if n % 256 == 0 else n + 256 - n % 256


def test_parameters_layer_by_layer() -> None:
    cfg = json.loads(CONFIG.read_text())
    h, heads, vocab = cfg["hidden_size"], cfg["num_attention_heads"], cfg["vocab_size"]
    head_dim = h // heads
    total = 2 * vocab * h + h  # embed_tokens, lm_head (untied), the final norm
    for block in cfg["block_configs"]:
        attn, ffn = block["attention"], block["ffn"]
        if not attn["no_op"]:
            kv = heads // attn["n_heads_in_group"]
            total += 2 * h * h + 2 * h * kv * head_dim + h  # q, o, k, v; input_layernorm
        total += 3 * h * _intermediate(ffn["ffn_mult"], h) + h  # gate/up/down; post norm
    m = load_model(NAME)
    assert m.num_parameters == total == 49_867_145_216  # the model card's 49.9 B
    assert _intermediate(5.25, 8192) == 28672 and _intermediate(1.0, 8192) == 5632


def test_only_attention_layers_hold_kv() -> None:
    m = load_model(NAME)
    groups = {g.attention.kind: g.layers.count for g in m.layer_groups}
    assert groups == {AttnKind.FULL: 49, AttnKind.NONE: 31}
    p = predict_startup(
        m, H100.total_bytes, H100.name, 2, 1, EngineSettings(version="0.21.0", max_model_len=32768)
    )
    # 49 layers × (K + V) × 8 KV heads / TP 2 × 128 × 2 B
    assert p.ranks[0].layout.bytes_per_token == 49 * 2 * 4 * 128 * 2


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("attention", "replace_with_linear"), True, "replace_with_linear"),
        (("attention", "window_length"), 4096, "window_length"),
        (("ffn", "no_op"), True, "ffn.no_op"),
        (("attention", "n_heads_in_group"), 4, "n_heads_in_group"),
    ],
)
def test_what_the_ledger_does_not_size_is_refused(
    path: tuple[str, str], value: object, named: str
) -> None:
    cfg = copy.deepcopy(json.loads(CONFIG.read_text()))
    cfg["block_configs"][0][path[0]][path[1]] = value  # layer 0 has attention (group 8)
    with pytest.raises(ModelConfigError, match=named):
        shape_from_config(cfg, "edited")
