"""Hybrids with state-space mixers: Nemotron-H (Mamba2 layers) and Qwen3.5 (Gated DeltaNet
layers)."""

from __future__ import annotations

from collections.abc import Mapping

from ....vocab import TORCH_DTYPE_BYTES
from ...errors import ModelConfigError
from ...layerset import Pattern
from ...shapes import AttnKind, MambaState
from ..access import _Cfg
from ..decoder import _base, _Decoder, every


def _nemotron_h(c: _Cfg) -> _Decoder:
    pattern = str(c.get("hybrid_override_pattern", ""))
    if not pattern:
        raise ModelConfigError(c.path("hybrid_override_pattern"), "missing")
    n = c.pos("num_hidden_layers")
    if len(pattern) != n:
        raise ModelConfigError(
            c.path("hybrid_override_pattern"), f"has {len(pattern)} entries for {n} layers"
        )
    head_dim = c.pos("head_dim", c.integer("attention_head_dim", 0) or None)
    data = {**c.data, "head_dim": head_dim}
    d = _base(_Cfg(data, c.prefix), gated_mlp=False, norms_per_layer=1)
    d.intermediate = c.pos("intermediate_size")
    heads, hd, state = c.pos("mamba_num_heads"), c.pos("mamba_head_dim"), c.pos("ssm_state_size")
    ngroups = c.pos("n_groups", 1)
    ssm_dtype = c.get("mamba_ssm_cache_dtype")
    d.mamba = MambaState(
        conv_channels=heads * hd + 2 * ngroups * state,
        conv_kernel=c.pos("conv_kernel", 4),
        ssm_heads=heads,
        ssm_head_dim=hd,
        ssm_state=state,
        # None: the config is silent (vLLM's default for NemotronH depends on the version:
        # engines/vllm.py::_cached_layers)
        ssm_dtype_bytes=TORCH_DTYPE_BYTES.get(str(ssm_dtype)) if ssm_dtype is not None else None,
        groups=ngroups,
        chunk_size=c.integer("chunk_size", 0) or c.integer("mamba_chunk_size", 0),
    )
    codes = {"M": AttnKind.MAMBA, "*": AttnKind.FULL, "-": AttnKind.NONE, "E": AttnKind.NONE}
    for i, ch in enumerate(pattern):
        if ch not in codes:
            raise ModelConfigError(
                c.path("hybrid_override_pattern"), f"unknown layer code {ch!r} at {i}"
            )
    # the pattern string is read once, with its period; the builder works on its groups
    layer_codes = Pattern.from_list(list(pattern))
    d.kinds = layer_codes.map(codes.__getitem__)
    d.mamba_layers = layer_codes.map(lambda ch: ch == "M")
    d.mlp_only_layers = layer_codes.map(lambda ch: ch == "-")
    d.moe_only_layers = layer_codes.map(lambda ch: ch == "E")
    d.attn_only = True
    if "E" in layer_codes.present():
        d.experts = c.pos("n_routed_experts")
        d.expert_intermediate = c.pos("moe_intermediate_size")
        d.experts_per_token = c.pos("num_experts_per_tok")
        d.shared_intermediate = c.integer("moe_shared_expert_intermediate_size", 0)
        d.router_bias = True
        # LatentMoE (Nemotron-3 Super): models/nemotron_h.py NemotronHMoE, 0.13.0 on
        d.moe_latent = c.integer("moe_latent_size", 0)
    d.rotary_dim = 0  # Nemotron-H attention layers use no RoPE
    return d


def _qwen3_5(c: _Cfg, moe: bool) -> _Decoder:
    """Qwen3.5 (vllm models/qwen3_5.py on qwen3_next.py): Gated DeltaNet linear-attention layers
    and gated full-attention layers (``layer_types``), every layer followed by a sparse MoE block
    (``qwen3_5_moe_text``) or a dense MLP (``qwen3_5_text``)."""
    d = _base(c, intermediate=0, qk_norm=True, qkv_bias=c.boolean("qkv_bias", False))
    if not moe:
        d.intermediate = c.pos("intermediate_size")
    d.attn_output_gate = c.boolean("attn_output_gate", True)
    types = c.get("layer_types")
    if isinstance(types, list):
        if len(types) != d.layers:
            raise ModelConfigError(
                c.path("layer_types"), f"has {len(types)} entries for {d.layers} layers"
            )
        for i, t in enumerate(types):
            if t not in ("linear_attention", "full_attention"):
                raise ModelConfigError(c.path("layer_types"), f"unknown layer type {t!r} at {i}")
        linear = Pattern.from_list([t == "linear_attention" for t in types])
    else:
        interval = c.pos("full_attention_interval", 4)
        linear = every(d.layers, interval, offset=1).map(lambda full: not full)
    d.kinds = linear.map(lambda lin: AttnKind.MAMBA if lin else AttnKind.FULL)
    d.mamba_layers = linear
    nk, dk = c.pos("linear_num_key_heads"), c.pos("linear_key_head_dim")
    nv, dv = c.pos("linear_num_value_heads"), c.pos("linear_value_head_dim")
    ssm_dtype = c.get("mamba_ssm_dtype")
    if ssm_dtype is not None and str(ssm_dtype) not in TORCH_DTYPE_BYTES:
        raise ModelConfigError(c.path("mamba_ssm_dtype"), f"unknown dtype {ssm_dtype!r}")
    # conv state (2·nk·dk + nv·dv)/tp × (K−1), temporal state (nv/tp)·dv·dk
    # (mamba_utils.py::gated_delta_net_state_shape); the temporal state's dtype is the HF
    # config's mamba_ssm_dtype (models/config.py::Qwen3_5ForConditionalGenerationConfig sets
    # --mamba-ssm-cache-dtype from it), the conv state's the model dtype
    d.mamba = MambaState(
        conv_channels=2 * nk * dk + nv * dv,
        conv_kernel=c.pos("linear_conv_kernel_dim", 4),
        ssm_heads=nv,
        ssm_head_dim=dv,
        ssm_state=dk,
        ssm_dtype_bytes=TORCH_DTYPE_BYTES[str(ssm_dtype)] if ssm_dtype is not None else None,
        gdn=True,
    )
    d.gdn = True
    if moe:
        d.experts = c.pos("num_experts")
        d.expert_intermediate = c.pos("moe_intermediate_size")
        d.experts_per_token = c.pos("num_experts_per_tok")
        d.shared_intermediate = c.integer("shared_expert_intermediate_size", 0)
        d.shared_gate = bool(d.shared_intermediate)
        # Qwen3_5DecoderLayer: every layer of qwen3_5_moe_text is a sparse MoE block
        d.moe_layers = Pattern.constant(True, d.layers)
    rope = c.get("rope_parameters") or c.get("rope_scaling")
    partial = c.get("partial_rotary_factor")
    if partial is None and isinstance(rope, Mapping):
        partial = rope.get("partial_rotary_factor")
    d.rotary_dim = int(d.head_dim * float(partial if partial is not None else 1.0))
    if c.integer("mtp_num_hidden_layers", 0):
        d.mtp_layers = c.integer("mtp_num_hidden_layers", 0)
        d.notes.append(
            "MTP layers (mtp_num_hidden_layers) are only loaded with speculative decoding; "
            "not counted"
        )
    d.notes.append(
        "Gated DeltaNet state per sequence excludes the extra conv columns speculative "
        "decoding adds (K-1+num_spec)"
    )
    return d
