"""Qwen families: ``qwen2`` (also ``qwen2_vl``, ``qwen2_5_vl``), ``qwen3``, ``qwen2_moe`` and
``qwen3_moe``."""

from __future__ import annotations

from ..access import _Cfg
from ..decoder import _base, _Decoder, config_indices, every


def _qwen2(c: _Cfg) -> _Decoder:
    d = _base(c, qkv_bias=True)
    if c.boolean("use_sliding_window", False) and c.get("sliding_window"):
        d.notes.append("use_sliding_window is set; vLLM serves Qwen2 with full attention")
    return d


def _qwen3(c: _Cfg) -> _Decoder:
    return _base(c, qkv_bias=c.boolean("attention_bias", False), qk_norm=True)


def _qwen_moe(c: _Cfg, qwen3: bool) -> _Decoder:
    d = _base(c, qk_norm=qwen3, qkv_bias=not qwen3)
    d.experts = c.pos("num_experts")
    d.expert_intermediate = c.pos("moe_intermediate_size")
    d.experts_per_token = c.pos("num_experts_per_tok")
    step = c.pos("decoder_sparse_step", 1)
    mlp_only = config_indices(c.get("mlp_only_layers", []) or [])
    d.moe_layers = every(d.layers, step, offset=1).with_values(mlp_only, False)
    if not qwen3:
        d.shared_intermediate = c.integer("shared_expert_intermediate_size", 0)
        d.shared_gate = bool(d.shared_intermediate)
    return d
