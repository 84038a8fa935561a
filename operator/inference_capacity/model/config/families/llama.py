"""Llama-style families: ``llama`` (also ``mllama_text_model``), ``mistral``, ``mixtral`` and
``llama4_text``."""

from __future__ import annotations

from ...layerset import Pattern
from ...shapes import AttnKind
from ..access import _Cfg
from ..decoder import _base, _Decoder, every


def _llama(c: _Cfg) -> _Decoder:
    d = _base(
        c,
        qkv_bias=c.boolean("attention_bias", False),
        o_bias=c.boolean("attention_bias", False),
        mlp_bias=c.boolean("mlp_bias", False),
    )
    return d


def _mistral(c: _Cfg) -> _Decoder:
    d = _base(c)
    sw = c.get("sliding_window")
    if sw:
        d.kinds = Pattern.constant(AttnKind.SLIDING, d.layers)
        d.window = int(sw)
    return d


def _mixtral(c: _Cfg) -> _Decoder:
    d = _mistral(c)
    d.experts = c.pos("num_local_experts")
    d.expert_intermediate = d.intermediate
    d.experts_per_token = c.pos("num_experts_per_tok")
    d.moe_layers = Pattern.constant(True, d.layers)
    return d


def _llama4(c: _Cfg) -> _Decoder:
    d = _base(c, qk_norm=False)
    d.experts = c.pos("num_local_experts")
    d.expert_intermediate = c.pos("intermediate_size")
    d.intermediate = c.pos("intermediate_size_mlp")
    d.experts_per_token = c.pos("num_experts_per_tok")
    step = c.pos("interleave_moe_layer_step", 1)
    d.moe_layers = every(d.layers, step, offset=1)
    d.shared_intermediate = d.expert_intermediate
    chunk = c.integer("attention_chunk_size", 0)
    no_rope = c.get("no_rope_layers")
    if chunk:
        d.window = chunk
        if isinstance(no_rope, list) and len(no_rope) == d.layers:
            d.kinds = Pattern.from_list(
                [AttnKind.CHUNKED if int(r) else AttnKind.FULL for r in no_rope]
            )
        else:
            # every 4th layer is a global NoPE layer (Llama4TextConfig.no_rope_layer_interval)
            d.kinds = every(d.layers, 4, offset=1).map(
                lambda full: AttnKind.FULL if full else AttnKind.CHUNKED
            )
    return d
