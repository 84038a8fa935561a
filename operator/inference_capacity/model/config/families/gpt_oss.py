"""gpt-oss: MoE with attention sinks and biases, sliding and full layers."""

from __future__ import annotations

from collections.abc import Mapping

from ...errors import ModelConfigError
from ...layerset import Pattern
from ...shapes import AttnKind
from ..access import _Cfg
from ..decoder import _base, _Decoder


def _gpt_oss(c: _Cfg) -> _Decoder:
    d = _base(c, qkv_bias=True, o_bias=True, attn_sinks=True, expert_bias=True, router_bias=True)
    d.experts = c.pos("num_local_experts")
    d.expert_intermediate = c.pos("intermediate_size")
    d.experts_per_token = c.pos("num_experts_per_tok")
    d.moe_layers = Pattern.constant(True, d.layers)
    d.window = c.pos("sliding_window")
    types = c.get("layer_types")
    if not isinstance(types, list) or len(types) != d.layers:
        raise ModelConfigError(c.path("layer_types"), "gpt-oss needs one entry per layer")
    d.kinds = Pattern.from_list(
        [AttnKind.SLIDING if "sliding" in t else AttnKind.FULL for t in types]
    )
    rope = c.get("rope_scaling")
    if isinstance(rope, Mapping) and "factor" in rope:
        d.rope_positions = int(
            rope.get("original_max_position_embeddings", d.max_pos) * float(rope["factor"])
        )
        d.rope_fp32 = True
    return d
