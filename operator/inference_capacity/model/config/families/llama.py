"""Llama-style families: ``llama`` (also ``mllama_text_model``), ``mistral``, ``mixtral`` and
``llama4_text``."""

from __future__ import annotations

from collections.abc import Mapping

from ...errors import ModelConfigError
from ...layerset import Pattern
from ...shapes import AttnKind, cdiv
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


def _nemotron_nas(c: _Cfg) -> _Decoder:
    """Llama-Nemotron "NAS" models (``nemotron-nas``, DeciLMForCausalLM; vllm
    models/nemotron_nas.py ``DeciLMDecoderLayer``, 0.21.0): per layer of ``block_configs`` an
    attention block (none where ``attention.no_op``; then no input norm either) with
    ``num_attention_heads // n_heads_in_group`` KV heads, and a Llama MLP of
    ``_ffn_mult_to_intermediate_size``: ``int(2 × ffn_mult × hidden / 3)`` rounded up to a
    multiple of 256 (or ``ffn.intermediate_size``). What vLLM's layer does not build, or the
    ledger does not size, is refused: attention replaced by a linear, windowed or sink
    attention, a skipped or replaced MLP, and attention layers with different KV heads."""
    blocks = c.get("block_configs")
    n = c.pos("num_hidden_layers")
    if not isinstance(blocks, list) or len(blocks) != n:
        raise ModelConfigError(c.path("block_configs"), f"needs one entry per layer ({n})")
    hidden, heads = c.pos("hidden_size"), c.pos("num_attention_heads")
    kinds: list[AttnKind] = []
    sizes: list[int] = []
    groups: set[int] = set()
    for i, block in enumerate(blocks):
        at = f"block_configs.{i}"
        attn = block.get("attention") if isinstance(block, Mapping) else None
        ffn = block.get("ffn") if isinstance(block, Mapping) else None
        if not isinstance(attn, Mapping) or not isinstance(ffn, Mapping):
            raise ModelConfigError(c.path(at), "needs an attention and an ffn block")
        for key in ("replace_with_linear", "sparsify", "window_length", "num_sink_tokens"):
            if attn.get(key):
                raise ModelConfigError(c.path(f"{at}.attention.{key}"), "is not modelled")
        for key in ("no_op", "replace_with_linear", "sparsify"):
            if ffn.get(key):
                raise ModelConfigError(c.path(f"{at}.ffn.{key}"), "is not modelled")
        if attn.get("no_op"):
            kinds.append(AttnKind.NONE)
        else:
            g = attn.get("n_heads_in_group")
            if not isinstance(g, int) or g <= 0 or heads % g:
                raise ModelConfigError(
                    c.path(f"{at}.attention.n_heads_in_group"),
                    f"must be a positive divisor of num_attention_heads ({heads}), got {g!r}",
                )
            groups.add(g)
            kinds.append(AttnKind.FULL)
        mult = ffn.get("ffn_mult")
        if isinstance(mult, int | float) and mult > 0:
            inter = int(2 * mult * hidden / 3)
            sizes.append(cdiv(inter, 256) * 256)  # _find_multiple(n, 256)
        elif isinstance(ffn.get("intermediate_size"), int) and ffn["intermediate_size"] > 0:
            sizes.append(int(ffn["intermediate_size"]))
        else:
            raise ModelConfigError(c.path(f"{at}.ffn.ffn_mult"), "missing")
    if len(groups) > 1:
        raise ModelConfigError(
            c.path("block_configs"),
            f"attention layers with different n_heads_in_group {sorted(groups)} (KV heads) are "
            "not modelled",
        )
    kv = heads // groups.pop() if groups else heads
    data = {**c.data, "num_key_value_heads": kv, "intermediate_size": max(sizes)}
    d = _llama(_Cfg(data, c.prefix))
    d.kinds = Pattern.from_list(kinds)
    d.mlp_only_layers = Pattern.from_list([k is AttnKind.NONE for k in kinds])
    d.ffn_sizes = Pattern.from_list(sizes)
    return d
