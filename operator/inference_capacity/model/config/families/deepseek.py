"""DeepSeek V2/V3 and Kimi K2: multi-head latent attention (MLA) with routed and shared
experts."""

from __future__ import annotations

from collections.abc import Mapping

from ...layerset import Pattern
from ...shapes import AttnKind
from ..access import _Cfg
from ..decoder import _base, _Decoder, every


def _deepseek(c: _Cfg) -> _Decoder:
    d = _base(c, mla=True)
    d.q_lora_rank = c.integer("q_lora_rank", 0)
    d.kv_lora_rank = c.pos("kv_lora_rank")
    d.qk_nope = c.pos("qk_nope_head_dim")
    d.qk_rope = c.pos("qk_rope_head_dim")
    d.v_head = c.pos("v_head_dim")
    d.head_dim = d.qk_nope + d.qk_rope
    d.kinds = Pattern.constant(AttnKind.MLA, d.layers)
    d.experts = c.integer("n_routed_experts", 0)
    if d.experts:
        d.expert_intermediate = c.pos("moe_intermediate_size")
        d.experts_per_token = c.pos("num_experts_per_tok")
        d.shared_intermediate = c.integer("n_shared_experts", 0) * d.expert_intermediate
        first = c.integer("first_k_dense_replace", 0)
        freq = c.pos("moe_layer_freq", 1)
        d.moe_layers = every(d.layers, freq, start=max(0, first))
        d.router_bias = c.get("topk_method") == "noaux_tc"
    d.rotary_dim = d.qk_rope
    rope = c.get("rope_scaling")
    if isinstance(rope, Mapping) and "factor" in rope:
        # DeepseekScalingRotaryEmbedding: cache of original_max × factor positions, in fp32
        d.rope_positions = int(
            rope.get("original_max_position_embeddings", d.max_pos) * float(rope["factor"])
        )
        d.rope_fp32 = True
    if c.integer("num_nextn_predict_layers", 0):
        d.mtp_layers = c.integer("num_nextn_predict_layers", 0)
        d.notes.append("MTP (next-n) layers are only loaded with speculative decoding; not counted")
    return d
