"""MiniMax-M2 (``minimax_m2``; vLLM ``models/minimax_m2.py``, 0.12.0-0.26.0): full attention
with partial rotary, q/k RMSNorms over all heads that are tensor-parallel sharded
(``MiniMaxText01RMSNormTP``), and a MoE block of routed experts only, with a float32 router
(``ReplicatedLinear(..., params_dtype=torch.float32)``, ``GateLinear(out_dtype=float32)`` from
0.26) and a float32 ``e_score_correction_bias`` when ``use_routing_bias``."""

from __future__ import annotations

from ...errors import ModelConfigError
from ...layerset import Pattern
from ..access import _Cfg
from ..decoder import _base, _Decoder


def _minimax_m2(c: _Cfg) -> _Decoder:
    d = _base(c, qk_norm_tp=True, router_fp32=True)
    d.experts = c.pos("num_local_experts")
    d.expert_intermediate = c.pos("intermediate_size")
    d.experts_per_token = c.pos("num_experts_per_tok")
    d.moe_layers = Pattern.constant(True, d.layers)
    d.router_bias = c.boolean("use_routing_bias", False)
    if c.integer("shared_intermediate_size", 0):
        # MiniMaxM2MoE builds routed experts only: a shared expert would not be loaded
        raise ModelConfigError(
            c.path("shared_intermediate_size"),
            "vLLM's MiniMax-M2 (models/minimax_m2.py) has no shared expert; a non-zero "
            "shared_intermediate_size is not modelled",
        )
    if c.has("rotary_dim"):
        # MiniMaxM2Attention: get_rope(head_dim, partial_rotary_factor=rotary_dim / head_dim)
        d.rotary_dim = c.pos("rotary_dim")
    if c.boolean("use_mtp", False) and c.integer("num_mtp_modules", 0):
        # get_spec_layer_idx_from_weight_name: the main model skips layers >= num_hidden_layers
        d.mtp_layers = c.integer("num_mtp_modules", 0)
        d.notes.append("MTP modules are only loaded with speculative decoding; not counted")
    return d
