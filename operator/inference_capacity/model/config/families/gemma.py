"""Gemma 2, Gemma 3 (``gemma3_text``) and Gemma 4 (``gemma4_text``)."""

from __future__ import annotations

from collections.abc import Mapping

from ...errors import ModelConfigError
from ...layerset import Pattern
from ...shapes import AttnKind, RopeCache
from ..access import _Cfg
from ..decoder import _base, _Decoder, every, rope_cache_factor


def _gemma(c: _Cfg, version: int, model_type: str) -> _Decoder:
    merged = c
    d = _base(merged, tie=True, norms_per_layer=4, qk_norm=version == 3)
    d.tie = True
    window = merged.pos("sliding_window", 4096)
    d.window = window
    pattern = 2 if version == 2 else int(merged.get("sliding_window_pattern", 6))
    types = merged.get("layer_types")
    if isinstance(types, list) and len(types) == d.layers:
        d.kinds = Pattern.from_list(
            [AttnKind.SLIDING if "sliding" in t else AttnKind.FULL for t in types]
        )
    elif version == 2:
        # Gemma 2: even layers slide
        d.kinds = Pattern.periodic((AttnKind.SLIDING, AttnKind.FULL), d.layers)
    else:
        # Gemma 3: every `pattern`-th layer is global
        if pattern < 1:
            raise ModelConfigError(merged.path("sliding_window_pattern"), "must be >= 1")
        d.kinds = every(d.layers, pattern, offset=1).map(
            lambda full: AttnKind.FULL if full else AttnKind.SLIDING
        )
    if version == 3:
        d.ropes = _gemma3_ropes(merged, d)
    return d


def _gemma3_ropes(c: _Cfg, d: _Decoder) -> list[RopeCache]:
    """Gemma 3's two rope caches (vLLM models/gemma3.py ``Gemma3Attention``, 0.19.0): sliding
    layers use a default rope at ``rope_local_base_freq``, full layers the config's rope
    setting (Transformers v5: ``rope_parameters`` per layer type); ``get_rope`` keeps one cache
    per distinct setting, and a linear factor caches max_position × factor positions
    (``LinearScalingRotaryEmbedding``): Gemma 3 4B/12B/27B (linear 8) hold 1,048,576 positions
    for their full layers, 0.5 GiB at head size 256 in bf16 (the 0.19.0 H100 log of
    gemma-3-4b-it loaded 8.58 GiB, 0.52 over the weights and one 131,072-position cache)."""
    params = c.get("rope_parameters")
    full = c.get("rope_scaling")
    if isinstance(params, Mapping) and isinstance(params.get("full_attention"), Mapping):
        full = params["full_attention"]
    scaled = RopeCache(int(d.max_pos * rope_cache_factor(full)), d.head_dim)
    return _ropes_by_kind(d, RopeCache(d.max_pos, d.head_dim), scaled)


def _ropes_by_kind(d: _Decoder, sliding: RopeCache, full: RopeCache) -> list[RopeCache]:
    """The rope caches of the layer kinds the model has: one for its sliding layers, one for
    its full ones (``get_rope`` keeps one cache per distinct setting)."""
    present = d.kinds.present() if d.kinds is not None else {AttnKind.FULL}
    kinds = ((AttnKind.SLIDING, sliding), (AttnKind.FULL, full))
    return [rope for kind, rope in kinds if kind in present]


def _gemma4(c: _Cfg) -> _Decoder:
    """Gemma 4 (vllm models/gemma4.py): sliding and full layers (``layer_types``); full layers
    use ``global_head_dim`` and, with ``attention_k_eq_v``, ``num_global_key_value_heads`` and no
    v_proj; an MoE block (router + experts) alongside the dense MLP when ``enable_moe_block``."""
    if c.integer("hidden_size_per_layer_input", 0):
        raise ModelConfigError(
            c.path("hidden_size_per_layer_input"),
            "Gemma 4 per-layer embeddings (E2B/E4B) are not modelled yet",
        )
    if c.integer("num_kv_shared_layers", 0):
        raise ModelConfigError(
            c.path("num_kv_shared_layers"),
            "Gemma 4 cross-layer KV sharing (E2B/E4B) is not modelled yet",
        )
    d = _base(c, qk_norm=True, norms_per_layer=4)
    d.tie = c.boolean("tie_word_embeddings", True)
    types = c.get("layer_types")
    if not isinstance(types, list) or len(types) != d.layers:
        raise ModelConfigError(c.path("layer_types"), "Gemma 4 needs one entry per layer")
    d.kinds = Pattern.from_list(
        [AttnKind.SLIDING if "sliding" in str(t) else AttnKind.FULL for t in types]
    )
    d.window = c.pos("sliding_window")
    d.full_head_dim = c.pos("global_head_dim") if c.has("global_head_dim") else d.head_dim
    d.k_eq_v = c.boolean("attention_k_eq_v", False)
    # Gemma4DecoderLayer: num_global_key_value_heads only on K=V full layers
    d.full_kv_heads = c.pos("num_global_key_value_heads", d.kv_heads) if d.k_eq_v else d.kv_heads
    if c.boolean("enable_moe_block", False) or c.boolean("use_second_mlp_block", False):
        d.experts = c.pos("num_experts")
        d.expert_intermediate = c.pos("moe_intermediate_size")
        d.experts_per_token = c.pos("top_k_experts")
        d.moe_layers = Pattern.constant(True, d.layers)
        d.dense_and_moe = True
        d.router_scale = True
        d.norms_per_layer = 7  # + post_feedforward_layernorm_1/_2, pre_feedforward_layernorm_2
    d.layer_scalar = True
    # one rope cache per layer type: Gemma4RotaryEmbedding ("proportional") caches the whole
    # head (rotary_dim = head_size, non-rotated pairs as cos 1 / sin 0)
    d.ropes = _ropes_by_kind(
        d, RopeCache(d.max_pos, d.head_dim), RopeCache(d.max_pos, d.full_head_dim)
    )
    d.rotary_dim = d.head_dim
    if d.k_eq_v:
        d.notes.append(
            "Gemma 4 K=V full layers: vLLM allocates a V slot in qkv_proj (loaded from K) and "
            "caches K and V separately (V is normed differently), so both are counted"
        )
    return d
