"""The generic decoder-only transformer (:class:`_Decoder`) every family maps onto, the shared
layer construction (attention, MLA, MLP, MoE, Mamba2, Gated DeltaNet) and the builder that turns
a decoder into tensors and attention specs, one set per group of identical layers
(:func:`_build`; per-layer attributes are :class:`~..layerset.Pattern` values, so building costs
the number of distinct layers, not the layer count). Tensor inventories follow
vLLM's model implementations (``vllm/model_executor/models/<family>.py``), which is what gets
loaded on the GPU. :func:`_base` reads the fields every family shares."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ModelConfigError
from ..layerset import LayerSet, Pattern, zip_patterns
from ..shapes import (
    AttnKind,
    Group,
    LayerAttention,
    LayerGroup,
    MambaState,
    ModelShape,
    Quantization,
    RopeCache,
    Split,
    Stage,
    Tensor,
)
from .access import _Cfg, _rope_factor_len


@dataclass
class _Decoder:
    """A generic decoder-only transformer, enough for every family we support."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    tie: bool
    max_pos: int
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3, Gemma 3)
    qk_norm_tp: bool = False  # MiniMax-M2: q/k RMSNorm over all heads, sharded like q and k
    attn_sinks: bool = False  # gpt-oss: one learned sink per head
    gated_mlp: bool = True
    mlp_bias: bool = False
    norms_per_layer: int = 2
    norm_bias: bool = False
    final_norm: bool = True
    lm_head_bias: bool = False
    learned_positions: int = 0  # OPT: rows of the learned position embedding
    # attention kind of each layer; default all FULL
    kinds: Pattern[AttnKind] | None = None
    window: int = 0
    # MoE
    experts: int = 0
    expert_intermediate: int = 0
    shared_intermediate: int = 0
    shared_gate: bool = False  # Qwen2-MoE: sigmoid gate on the shared expert
    experts_per_token: int = 0
    moe_layers: Pattern[bool] | None = None  # None: no layer
    expert_bias: bool = False
    router_bias: bool = False
    router_fp32: bool = False  # MiniMax-M2: router weight and routing bias in float32
    #: Nemotron-H LatentMoE (``moe_latent_size``): the routed experts work in this latent width
    #: instead of the hidden size, between a hidden → latent and a latent → hidden projection
    moe_latent: int = 0
    #: each layer's MLP intermediate size where the layers differ (Nemotron-NAS); None: one size
    ffn_sizes: Pattern[int] | None = None
    # MLA
    mla: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope: int = 0
    qk_rope: int = 0
    v_head: int = 0
    # Mamba2 layers (Nemotron-H): index -> state
    mamba: MambaState | None = None
    mamba_layers: Pattern[bool] | None = None
    mlp_only_layers: Pattern[bool] | None = None  # layers without attention
    attn_only: bool = False  # attention layers carry no MLP (Nemotron-H "*" layers)
    moe_only_layers: Pattern[bool] | None = None
    rotary_dim: int = 0
    rope_positions: int = 0
    rope_fp32: bool = False
    ropes: list[RopeCache] = field(default_factory=list)  # several caches (overrides the above)
    # full-attention layers with their own geometry (Gemma 4 global layers); 0: as other layers
    full_kv_heads: int = 0
    full_head_dim: int = 0
    k_eq_v: bool = False  # full layers: V reuses K's projection (vLLM still allocates a V slot)
    attn_output_gate: bool = False  # Qwen3-Next/3.5: q projection doubled for a sigmoid gate
    gdn: bool = False  # mamba_layers are Gated DeltaNet mixers, followed by the layer's MLP/MoE
    dense_and_moe: bool = False  # Gemma 4: the MoE block runs alongside the dense MLP
    router_scale: bool = False  # Gemma 4: router input scale (hidden) + per-expert scale
    layer_scalar: bool = False  # Gemma 4: one learned scalar per layer
    notes: list[str] = field(default_factory=list)
    mtp_layers: int = 0  # num_nextn_predict_layers / mtp_num_hidden_layers (speculative only)


def _attn_dims(d: _Decoder, kind: AttnKind) -> tuple[int, int]:
    """(kv_heads, head_dim) of a layer of this kind."""
    if kind is AttnKind.FULL and d.full_head_dim:
        return d.full_kv_heads or d.kv_heads, d.full_head_dim
    return d.kv_heads, d.head_dim


def _attention(d: _Decoder, ls: LayerSet, kind: AttnKind = AttnKind.FULL) -> list[Tensor]:
    kv_heads, head_dim = _attn_dims(d, kind)
    h, q_out, kv_out = d.hidden, d.heads * head_dim, kv_heads * head_dim
    # Qwen3-Next/3.5 attn_output_gate: qkv_proj carries heads * (1 + gate) query heads
    q_rows = q_out * (2 if d.attn_output_gate else 1)
    # K=V (Gemma 4 full layers): the checkpoint has no v_proj; vLLM's QKVParallelLinear still
    # has the V slot and loads K into it (models/gemma4.py), so the bytes are there
    v_in_ckpt = not (d.k_eq_v and kind is AttnKind.FULL)
    t = [
        Tensor(
            "attn.q_proj", Group.ATTENTION, q_rows, h, Split.COLUMN, layers=ls, quantizable=True
        ),
        Tensor(
            "attn.k_proj",
            Group.ATTENTION,
            kv_out,
            h,
            Split.KV_HEADS,
            layers=ls,
            quantizable=True,
            kv_heads=kv_heads,
        ),
        Tensor(
            "attn.v_proj",
            Group.ATTENTION,
            kv_out,
            h,
            Split.KV_HEADS,
            layers=ls,
            quantizable=True,
            kv_heads=kv_heads,
            checkpoint=v_in_ckpt,
        ),
        Tensor("attn.o_proj", Group.ATTENTION, h, q_out, Split.ROW, layers=ls, quantizable=True),
    ]
    if d.qkv_bias:
        t += [
            Tensor("attn.q_bias", Group.ATTENTION, q_out, 1, Split.COLUMN, layers=ls),
            Tensor(
                "attn.k_bias",
                Group.ATTENTION,
                kv_out,
                1,
                Split.KV_HEADS,
                layers=ls,
                kv_heads=kv_heads,
            ),
            Tensor(
                "attn.v_bias",
                Group.ATTENTION,
                kv_out,
                1,
                Split.KV_HEADS,
                layers=ls,
                kv_heads=kv_heads,
            ),
        ]
    if d.o_bias:
        t.append(Tensor("attn.o_bias", Group.ATTENTION, h, 1, Split.REPLICATED, layers=ls))
    if d.qk_norm:
        t += [
            Tensor("attn.q_norm", Group.NORM, head_dim, 1, Split.REPLICATED, layers=ls),
            Tensor("attn.k_norm", Group.NORM, head_dim, 1, Split.REPLICATED, layers=ls),
        ]
    if d.qk_norm_tp:
        # MiniMaxText01RMSNormTP(head_dim * total heads): weight of hidden / tp per rank
        t += [
            Tensor("attn.q_norm", Group.NORM, q_out, 1, Split.COLUMN, layers=ls),
            Tensor(
                "attn.k_norm",
                Group.NORM,
                kv_out,
                1,
                Split.KV_HEADS,
                layers=ls,
                kv_heads=kv_heads,
            ),
        ]
    if d.attn_sinks:
        t.append(Tensor("attn.sinks", Group.ATTENTION, d.heads, 1, Split.COLUMN, layers=ls))
    return t


def _mla(d: _Decoder, ls: LayerSet) -> list[Tensor]:
    h, n = d.hidden, d.heads
    qk_head = d.qk_nope + d.qk_rope
    t: list[Tensor] = []
    if d.q_lora_rank:
        t += [
            Tensor(
                "attn.q_a_proj",
                Group.ATTENTION,
                d.q_lora_rank,
                h,
                Split.REPLICATED,
                layers=ls,
                quantizable=True,
            ),
            Tensor("attn.q_a_layernorm", Group.NORM, d.q_lora_rank, 1, Split.REPLICATED, layers=ls),
            Tensor(
                "attn.q_b_proj",
                Group.ATTENTION,
                n * qk_head,
                d.q_lora_rank,
                Split.COLUMN,
                layers=ls,
                quantizable=True,
            ),
        ]
    else:
        t.append(
            Tensor(
                "attn.q_proj",
                Group.ATTENTION,
                n * qk_head,
                h,
                Split.COLUMN,
                layers=ls,
                quantizable=True,
            )
        )
    t += [
        Tensor(
            "attn.kv_a_proj_with_mqa",
            Group.ATTENTION,
            d.kv_lora_rank + d.qk_rope,
            h,
            Split.REPLICATED,
            layers=ls,
            quantizable=True,
        ),
        Tensor("attn.kv_a_layernorm", Group.NORM, d.kv_lora_rank, 1, Split.REPLICATED, layers=ls),
        Tensor(
            "attn.kv_b_proj",
            Group.ATTENTION,
            n * (d.qk_nope + d.v_head),
            d.kv_lora_rank,
            Split.COLUMN,
            layers=ls,
            quantizable=True,
        ),
        Tensor(
            "attn.o_proj", Group.ATTENTION, h, n * d.v_head, Split.ROW, layers=ls, quantizable=True
        ),
    ]
    return t


def _mlp(d: _Decoder, ls: LayerSet, inter: int, group: Group, prefix: str) -> list[Tensor]:
    h = d.hidden
    if d.gated_mlp:
        t = [
            Tensor(
                f"{prefix}.gate_proj", group, inter, h, Split.COLUMN, layers=ls, quantizable=True
            ),
            Tensor(f"{prefix}.up_proj", group, inter, h, Split.COLUMN, layers=ls, quantizable=True),
        ]
    else:
        t = [Tensor(f"{prefix}.fc1", group, inter, h, Split.COLUMN, layers=ls, quantizable=True)]
    t.append(Tensor(f"{prefix}.down_proj", group, h, inter, Split.ROW, layers=ls, quantizable=True))
    if d.mlp_bias:
        t += [
            Tensor(
                f"{prefix}.up_bias",
                group,
                inter * (2 if d.gated_mlp else 1),
                1,
                Split.COLUMN,
                layers=ls,
            ),
            Tensor(f"{prefix}.down_bias", group, h, 1, Split.REPLICATED, layers=ls),
        ]
    return t


def _moe(d: _Decoder, ls: LayerSet) -> list[Tensor]:
    h, e, ie = d.hidden, d.experts, d.expert_intermediate
    eh = d.moe_latent or h  # the experts' width (FusedMoE hidden_size)
    rows13 = 2 * ie if d.gated_mlp else ie
    # the experts' module: under the MLP (Qwen/DeepSeek/Mixtral ``mlp.experts``), or beside a
    # dense MLP (Gemma 4: ``layers.N.moe.experts`` in vLLM's gemma4.py, ``layers.N.experts`` in
    # the checkpoint, 0.26.0), where an exclusion of ``layers.N.mlp*`` names the dense MLP only
    # (nvidia/Gemma-4-26B-A4B-NVFP4 keeps its MLP, router and attention in bf16, experts NVFP4)
    ex = "moe.experts" if d.dense_and_moe else "mlp.experts"
    t = [
        Tensor("mlp.gate", Group.ROUTER, e, h, Split.REPLICATED, layers=ls, fp32=d.router_fp32),
        Tensor(
            f"{ex}.w13",
            Group.EXPERTS,
            rows13,
            eh,
            Split.COLUMN,
            layers=ls,
            experts=e,
            quantizable=True,
        ),
        Tensor(
            f"{ex}.w2",
            Group.EXPERTS,
            eh,
            ie,
            Split.ROW,
            layers=ls,
            experts=e,
            quantizable=True,
        ),
    ]
    if d.moe_latent:
        # NemotronHMoE (models/nemotron_h.py, 0.14.0–0.21.0): fc1_latent_proj / fc2_latent_proj
        # are ReplicatedLinear (every TP rank holds both; 0.13.0's fc1 was column-parallel, so
        # there this over-counts by (1 − 1/tp) of it), bias per mlp_bias
        lat = d.moe_latent
        rep = Split.REPLICATED
        t += [
            Tensor("mlp.fc1_latent_proj", Group.MLP, lat, h, rep, layers=ls, quantizable=True),
            Tensor("mlp.fc2_latent_proj", Group.MLP, h, lat, rep, layers=ls, quantizable=True),
        ]
        if d.mlp_bias:
            t += [
                Tensor("mlp.fc1_latent_proj_bias", Group.MLP, lat, 1, rep, layers=ls),
                Tensor("mlp.fc2_latent_proj_bias", Group.MLP, h, 1, rep, layers=ls),
            ]
    if d.router_bias:
        t.append(
            Tensor(
                "mlp.gate_bias", Group.ROUTER, e, 1, Split.REPLICATED, layers=ls, fp32=d.router_fp32
            )
        )
    if d.router_scale:
        # Gemma4Router.scale and Gemma4MoE.per_expert_scale (models/gemma4.py)
        t += [
            Tensor("router.scale", Group.ROUTER, h, 1, Split.REPLICATED, layers=ls),
            Tensor("moe.per_expert_scale", Group.ROUTER, e, 1, Split.REPLICATED, layers=ls),
        ]
    if d.expert_bias:
        t += [
            Tensor(f"{ex}.w13_bias", Group.EXPERTS, rows13, 1, Split.COLUMN, layers=ls, experts=e),
            Tensor(f"{ex}.w2_bias", Group.EXPERTS, eh, 1, Split.REPLICATED, layers=ls, experts=e),
        ]
    if d.shared_intermediate:
        t += _mlp(d, ls, d.shared_intermediate, Group.SHARED_EXPERTS, "mlp.shared_experts")
        if d.shared_gate:
            t.append(
                Tensor("mlp.shared_expert_gate", Group.ROUTER, 1, h, Split.REPLICATED, layers=ls)
            )
    return t


def _mamba2(d: _Decoder, ls: LayerSet) -> list[Tensor]:
    assert d.mamba is not None
    m, h = d.mamba, d.hidden
    inner = m.ssm_heads * m.ssm_head_dim
    conv_dim = inner + 2 * m.groups * m.ssm_state
    in_proj = inner + conv_dim + m.ssm_heads  # z, xBC, dt
    return [
        Tensor("mixer.in_proj", Group.MAMBA, in_proj, h, Split.COLUMN, layers=ls, quantizable=True),
        Tensor("mixer.conv1d", Group.MAMBA, conv_dim, m.conv_kernel, Split.COLUMN, layers=ls),
        Tensor("mixer.conv1d_bias", Group.MAMBA, conv_dim, 1, Split.COLUMN, layers=ls),
        Tensor("mixer.A_log", Group.MAMBA, m.ssm_heads, 1, Split.COLUMN, layers=ls, fp32=True),
        Tensor("mixer.D", Group.MAMBA, m.ssm_heads, 1, Split.COLUMN, layers=ls, fp32=True),
        Tensor("mixer.dt_bias", Group.MAMBA, m.ssm_heads, 1, Split.COLUMN, layers=ls),
        Tensor("mixer.norm", Group.NORM, inner, 1, Split.COLUMN, layers=ls),
        Tensor("mixer.out_proj", Group.MAMBA, h, inner, Split.ROW, layers=ls, quantizable=True),
    ]


def _gdn(d: _Decoder, ls: LayerSet) -> list[Tensor]:
    """Gated DeltaNet mixer (vllm layers/mamba/gdn/qwen_gdn_linear_attn.py): in_proj_qkvz and
    in_proj_ba merged column-parallel, conv1d column-parallel without bias, dt_bias and A_log
    (float32) split by value heads, a gated RMSNorm over head_v_dim (replicated), out_proj
    row-parallel."""
    assert d.mamba is not None
    m, h = d.mamba, d.hidden
    value_dim = m.ssm_heads * m.ssm_head_dim  # nv * dv
    conv_dim = m.conv_channels  # 2 * nk * dk + nv * dv
    nv = m.ssm_heads
    return [
        Tensor(
            "linear_attn.in_proj_qkvz",
            Group.MAMBA,
            conv_dim + value_dim,
            h,
            Split.COLUMN,
            layers=ls,
            quantizable=True,
        ),
        Tensor(
            "linear_attn.in_proj_ba",
            Group.MAMBA,
            2 * nv,
            h,
            Split.COLUMN,
            layers=ls,
            quantizable=True,
        ),
        Tensor("linear_attn.conv1d", Group.MAMBA, conv_dim, m.conv_kernel, Split.COLUMN, layers=ls),
        Tensor("linear_attn.dt_bias", Group.MAMBA, nv, 1, Split.COLUMN, layers=ls),
        Tensor("linear_attn.A_log", Group.MAMBA, nv, 1, Split.COLUMN, layers=ls, fp32=True),
        Tensor("linear_attn.norm", Group.NORM, m.ssm_head_dim, 1, Split.REPLICATED, layers=ls),
        Tensor(
            "linear_attn.out_proj",
            Group.MAMBA,
            h,
            value_dim,
            Split.ROW,
            layers=ls,
            quantizable=True,
        ),
    ]


def _layer_tensors(
    d: _Decoder,
    kind: AttnKind,
    mamba: bool,
    moe: bool,
    mlp_only: bool,
    moe_only: bool,
    ls: LayerSet,
    ffn: int = 0,
) -> tuple[list[Tensor], LayerAttention]:
    """The tensors of the layers ``ls`` (one distinct kind of layer: its mixer, its MLP or
    experts, its norms) and their attention; ``ffn``: their MLP's intermediate size where the
    layers differ (0: the model's)."""
    h = d.hidden
    inter = ffn or d.intermediate
    tensors: list[Tensor] = []
    mixer_only = mamba and not d.gdn  # Nemotron-H "M": no MLP in the layer
    if mamba:
        tensors += _gdn(d, ls) if d.gdn else _mamba2(d, ls)
        spec = LayerAttention(AttnKind.MAMBA, mamba=d.mamba)
    elif kind is AttnKind.MLA:
        tensors += _mla(d, ls)
        spec = LayerAttention(
            AttnKind.MLA, head_dim_v=d.kv_lora_rank, latent_dim=d.kv_lora_rank + d.qk_rope
        )
    elif kind is AttnKind.NONE:
        spec = LayerAttention(AttnKind.NONE)
    else:
        tensors += _attention(d, ls, kind)
        kv_heads, head_dim = _attn_dims(d, kind)
        spec = LayerAttention(
            kind,
            kv_heads=kv_heads,
            head_dim_k=head_dim,
            head_dim_v=head_dim,
            window=d.window if kind is not AttnKind.FULL else 0,
        )
    if mixer_only or mlp_only or moe_only or d.attn_only:
        n_norms = 1
    else:
        n_norms = d.norms_per_layer
    if kind is AttnKind.NONE and moe_only:
        tensors += _moe(d, ls)
    elif kind is AttnKind.NONE and mlp_only:
        tensors += _mlp(d, ls, inter, Group.MLP, "mlp")
    elif not mixer_only and not d.attn_only:
        if moe:
            tensors += _moe(d, ls)
        if inter and (not moe or d.dense_and_moe):
            tensors += _mlp(d, ls, inter, Group.MLP, "mlp")
    if d.layer_scalar:
        tensors.append(Tensor("layer_scalar", Group.NORM, 1, 1, Split.REPLICATED, layers=ls))
    for k in range(n_norms):
        tensors.append(Tensor(f"norm{k}", Group.NORM, h, 1, Split.REPLICATED, layers=ls))
        if d.norm_bias:
            tensors.append(Tensor(f"norm{k}_bias", Group.NORM, h, 1, Split.REPLICATED, layers=ls))
    return tensors, spec


def _build(
    name: str,
    model_type: str,
    arch: str,
    d: _Decoder,
    cfg: _Cfg,
    dtype: str,
    quant: Quantization | None,
    multimodal: bool,
    vision: list[Tensor],
) -> ModelShape:
    h = d.hidden
    tensors: list[Tensor] = [
        Tensor("embed_tokens", Group.EMBEDDING, d.vocab, h, Split.VOCAB, stage=Stage.FIRST)
    ]
    if d.learned_positions:
        tensors.append(
            Tensor(
                "embed_positions",
                Group.EMBEDDING,
                d.learned_positions,
                h,
                Split.REPLICATED,
                stage=Stage.FIRST,
            )
        )
    n = d.layers
    off = Pattern.constant(False, n)
    per_layer = zip_patterns(
        [
            d.kinds or Pattern.constant(AttnKind.FULL, n),
            d.mamba_layers or off,
            d.moe_layers or off,
            d.mlp_only_layers or off,
            d.moe_only_layers or off,
            d.ffn_sizes or Pattern.constant(0, n),
        ]
    )
    specs: dict[LayerAttention, LayerSet] = {}
    dense = LayerSet()
    # one pass per distinct layer (kind and flags), its tensors standing for every such layer
    for (kind, mamba, moe, mlp_only, moe_only, ffn), ls in per_layer.groups().items():
        layer, spec = _layer_tensors(d, kind, mamba, moe, mlp_only, moe_only, ls, ffn)
        tensors += layer
        specs[spec] = specs[spec].union(ls) if spec in specs else ls
        if d.experts and not moe and not mamba:
            dense = dense.union(ls)
    layer_groups = tuple(
        sorted((LayerGroup(a, ls) for a, ls in specs.items()), key=lambda g: g.layers.first() or 0)
    )
    if d.final_norm:
        tensors.append(Tensor("norm", Group.NORM, h, 1, Split.REPLICATED, stage=Stage.LAST))
        if d.norm_bias:
            tensors.append(
                Tensor("norm_bias", Group.NORM, h, 1, Split.REPLICATED, stage=Stage.LAST)
            )
    if not d.tie:
        tensors.append(Tensor("lm_head", Group.LM_HEAD, d.vocab, h, Split.VOCAB, stage=Stage.LAST))
    if d.lm_head_bias:
        tensors.append(
            Tensor("lm_head_bias", Group.LM_HEAD, d.vocab, 1, Split.VOCAB, stage=Stage.LAST)
        )
    tensors += vision
    ropes: tuple[RopeCache, ...] = ()
    if d.ropes:
        ropes = tuple(d.ropes)
    elif d.rotary_dim:
        ropes = (RopeCache(d.rope_positions or d.max_pos, d.rotary_dim, d.rope_fp32),)
    return ModelShape(
        name=name,
        model_type=model_type,
        architecture=arch,
        hidden_size=h,
        num_layers=d.layers,
        num_attention_heads=d.heads,
        num_kv_heads=d.kv_heads,
        head_dim=d.head_dim,
        vocab_size=d.vocab,
        intermediate_size=d.intermediate,
        tie_word_embeddings=d.tie,
        max_position_embeddings=d.max_pos,
        derived_max_model_len=_rope_factor_len(cfg, model_type),
        dtype=dtype,
        tensors=tuple(tensors),
        layer_groups=layer_groups,
        rope_caches=ropes,
        num_experts=d.experts,
        num_shared_experts=1 if d.shared_intermediate else 0,
        experts_per_token=d.experts_per_token,
        expert_intermediate_size=d.expert_intermediate,
        moe_latent_size=d.moe_latent,
        qk_norm_tp=d.qk_norm_tp,
        dense_layers=dense,
        quantization=quant,
        is_multimodal=multimodal,
        notes=tuple(d.notes),
        mtp_layers=d.mtp_layers,
    )


def every(n: int, step: int, offset: int = 0, start: int = 0) -> Pattern[bool]:
    """True at the layers ``i`` ≥ ``start`` of ``n`` with ``(i + offset) % step == 0`` (a
    config's "every step-th layer" rule), built periodic: O(step), not O(n)."""
    if step < 1:
        raise ValueError(f"a layer step must be >= 1, got {step}")
    start = min(start, n)
    if step >= n:  # at most one such layer: name it
        first = start + (-(start + offset)) % step
        return Pattern.constant(False, n).with_values([first], True)
    cycle = tuple((start + j + offset) % step == 0 for j in range(step))
    return Pattern.periodic(cycle, n, (False,) * start)


def config_indices(values: Any) -> list[int]:
    """The integer layer indices of a config list (``mlp_only_layers``,
    ``cross_attention_layers``); other entries name no layer."""
    if not isinstance(values, list):
        return []
    return [
        int(v)
        for v in values
        if isinstance(v, int | float) and math.isfinite(v) and float(v).is_integer()
    ]


def _base(c: _Cfg, **kw: Any) -> _Decoder:
    hidden = c.pos("hidden_size")
    heads = c.pos("num_attention_heads")
    kv = c.pos("num_key_value_heads", heads)
    head_dim = c.pos("head_dim", hidden // heads) if c.has("head_dim") else hidden // heads
    if hidden % heads and not c.has("head_dim"):
        raise ModelConfigError(c.path("head_dim"), "missing and hidden_size % heads != 0")
    d = _Decoder(
        hidden=hidden,
        layers=c.pos("num_hidden_layers"),
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        vocab=c.pos("vocab_size"),
        intermediate=c.pos("intermediate_size") if "intermediate" not in kw else 0,
        tie=c.boolean("tie_word_embeddings", False),
        max_pos=c.pos("max_position_embeddings"),
    )
    for k, v in kw.items():
        setattr(d, k, v)
    if not d.rotary_dim:
        partial = float(c.get("partial_rotary_factor", 1.0))
        d.rotary_dim = int(d.head_dim * partial)
    scaled = rope_cache_factor(c.get("rope_scaling") or c.get("rope_parameters"))
    if scaled != 1.0:
        d.rope_positions = int(d.max_pos * scaled)
    return d


#: rope types whose vLLM cache holds max_position × factor positions
#: (model_executor/layers/rotary_embedding/linear_scaling_rope.py and
#: dynamic_ntk_scaling_rope.py, ``_compute_cos_sin_cache``: ``max_len =
#: self.max_position_embeddings * scaling_factor``, 0.19.0)
_FACTOR_CACHED_ROPES = frozenset({"linear", "dynamic"})


def rope_cache_factor(rope: Any) -> float:
    """The factor a rope setting multiplies its cos/sin cache's positions by (1: none). YaRN
    and the DeepSeek variants cache the original length × factor, which their families set."""
    if not isinstance(rope, Mapping):
        return 1.0
    kind = str(rope.get("rope_type", rope.get("type", "")))
    if kind in _FACTOR_CACHED_ROPES and "factor" in rope:
        factor = float(rope["factor"])
        if not math.isfinite(factor) or factor < 1.0:
            raise ModelConfigError(
                "rope_scaling.factor", f"must be a finite number >= 1, got {factor}"
            )
        return factor
    return 1.0
