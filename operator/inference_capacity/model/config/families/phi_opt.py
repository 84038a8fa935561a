"""Phi and OPT: non-gated MLPs with biases, LayerNorms with biases."""

from __future__ import annotations

from ...errors import ModelConfigError
from ..access import _Cfg
from ..decoder import _base, _Decoder


def _phi(c: _Cfg) -> _Decoder:
    # PhiForCausalLM: parallel attn+MLP, one LayerNorm per layer, biases everywhere
    return _base(
        c,
        qkv_bias=True,
        o_bias=True,
        gated_mlp=False,
        mlp_bias=True,
        norms_per_layer=1,
        norm_bias=True,
        lm_head_bias=True,
    )


def _opt(c: _Cfg) -> _Decoder:
    proj = c.pos("word_embed_proj_dim", c.pos("hidden_size"))
    if proj != c.pos("hidden_size"):
        raise ModelConfigError(
            c.path("word_embed_proj_dim"), "OPT with project_in/project_out (350m) is not supported"
        )
    data = {
        **c.data,
        "intermediate_size": c.pos("ffn_dim"),
        "tie_word_embeddings": c.boolean("tie_word_embeddings", True),
    }
    cc = _Cfg(data, c.prefix)
    d = _base(cc, qkv_bias=True, o_bias=True, gated_mlp=False, mlp_bias=True, norm_bias=True)
    d.learned_positions = d.max_pos + 2  # OPTLearnedPositionalEmbedding offset of 2
    d.rotary_dim = 0
    return d
