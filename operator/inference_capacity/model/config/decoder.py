"""From a Hugging Face ``config.json`` to :class:`ModelShape`.

Each supported ``model_type`` maps onto one generic decoder description (:class:`_Decoder`) that
the builder turns into tensors and per-layer attention specs. Tensor inventories follow vLLM's
model implementations (``vllm/model_executor/models/<family>.py``), which is what gets loaded on
the GPU. Defaults are those of the transformers config class, used only where the field is
optional there; a field the ledger needs and no default exists for is a
:class:`ModelConfigError` naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...vocab import DTYPE_ALIASES, DTYPE_BYTES, DTYPE_CHOICES, TORCH_DTYPE_BYTES
from ..errors import ModelConfigError
from ..limits import check_config
from ..quant import parse_quantization
from ..shapes import (
    AttnKind,
    Group,
    LayerAttention,
    MambaState,
    ModelShape,
    Quantization,
    RopeCache,
    Split,
    Stage,
    Tensor,
)

_MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


class _Cfg:
    """Typed access to a (possibly nested) config dict that names missing fields."""

    def __init__(self, data: Mapping[str, Any], prefix: str = "") -> None:
        self.data = data
        self.prefix = prefix

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def path(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def integer(self, key: str, default: int | None = None) -> int:
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise ModelConfigError(self.path(key), "missing (required by the ledger)")
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise ModelConfigError(self.path(key), f"expected an integer, got {value!r}")
        if value < 0:
            raise ModelConfigError(self.path(key), f"must be >= 0, got {value}")
        return int(value)

    def pos(self, key: str, default: int | None = None) -> int:
        value = self.integer(key, default)
        if value <= 0:
            raise ModelConfigError(self.path(key), f"must be > 0, got {value}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        return default if value is None else bool(value)

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value


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
    attn_sinks: bool = False  # gpt-oss: one learned sink per head
    gated_mlp: bool = True
    mlp_bias: bool = False
    norms_per_layer: int = 2
    norm_bias: bool = False
    final_norm: bool = True
    lm_head_bias: bool = False
    learned_positions: int = 0  # OPT: rows of the learned position embedding
    # attention kind of each layer; default all FULL
    kinds: list[AttnKind] | None = None
    window: int = 0
    # MoE
    experts: int = 0
    expert_intermediate: int = 0
    shared_intermediate: int = 0
    shared_gate: bool = False  # Qwen2-MoE: sigmoid gate on the shared expert
    experts_per_token: int = 0
    moe_layers: set[int] = field(default_factory=set)
    expert_bias: bool = False
    router_bias: bool = False
    # MLA
    mla: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope: int = 0
    qk_rope: int = 0
    v_head: int = 0
    # Mamba2 layers (Nemotron-H): index -> state
    mamba: MambaState | None = None
    mamba_layers: set[int] = field(default_factory=set)
    mlp_only_layers: set[int] = field(default_factory=set)  # layers without attention
    attn_only: bool = False  # attention layers carry no MLP (Nemotron-H "*" layers)
    moe_only_layers: set[int] = field(default_factory=set)
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


def _rope_factor_len(cfg: _Cfg, model_type: str) -> int:
    """vLLM's derived max_model_len (config/model.py::_get_and_verify_max_len)."""
    lens = [cfg.integer(k) for k in _MAX_LEN_KEYS if cfg.has(k)]
    if not lens:
        raise ModelConfigError(cfg.path("max_position_embeddings"), "missing")
    derived = min(lens)
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if isinstance(rope, Mapping) and "factor" in rope and not model_type.startswith("gemma3"):
        rope_type = str(rope.get("rope_type", rope.get("type", "")))
        if rope_type not in ("su", "longrope", "llama3", "mrope", "default", ""):
            if rope_type == "yarn":
                derived = int(rope.get("original_max_position_embeddings", derived))
            derived = int(derived * float(rope["factor"]))
    return derived


def _attn_dims(d: _Decoder, kind: AttnKind) -> tuple[int, int]:
    """(kv_heads, head_dim) of a layer of this kind."""
    if kind is AttnKind.FULL and d.full_head_dim:
        return d.full_kv_heads or d.kv_heads, d.full_head_dim
    return d.kv_heads, d.head_dim


def _attention(d: _Decoder, i: int, kind: AttnKind = AttnKind.FULL) -> list[Tensor]:
    kv_heads, head_dim = _attn_dims(d, kind)
    h, q_out, kv_out = d.hidden, d.heads * head_dim, kv_heads * head_dim
    # Qwen3-Next/3.5 attn_output_gate: qkv_proj carries heads * (1 + gate) query heads
    q_rows = q_out * (2 if d.attn_output_gate else 1)
    # K=V (Gemma 4 full layers): the checkpoint has no v_proj; vLLM's QKVParallelLinear still
    # has the V slot and loads K into it (models/gemma4.py), so the bytes are there
    v_in_ckpt = not (d.k_eq_v and kind is AttnKind.FULL)
    t = [
        Tensor("attn.q_proj", Group.ATTENTION, q_rows, h, Split.COLUMN, layer=i, quantizable=True),
        Tensor(
            "attn.k_proj",
            Group.ATTENTION,
            kv_out,
            h,
            Split.KV_HEADS,
            layer=i,
            quantizable=True,
            kv_heads=kv_heads,
        ),
        Tensor(
            "attn.v_proj",
            Group.ATTENTION,
            kv_out,
            h,
            Split.KV_HEADS,
            layer=i,
            quantizable=True,
            kv_heads=kv_heads,
            checkpoint=v_in_ckpt,
        ),
        Tensor("attn.o_proj", Group.ATTENTION, h, q_out, Split.ROW, layer=i, quantizable=True),
    ]
    if d.qkv_bias:
        t += [
            Tensor("attn.q_bias", Group.ATTENTION, q_out, 1, Split.COLUMN, layer=i),
            Tensor(
                "attn.k_bias",
                Group.ATTENTION,
                kv_out,
                1,
                Split.KV_HEADS,
                layer=i,
                kv_heads=kv_heads,
            ),
            Tensor(
                "attn.v_bias",
                Group.ATTENTION,
                kv_out,
                1,
                Split.KV_HEADS,
                layer=i,
                kv_heads=kv_heads,
            ),
        ]
    if d.o_bias:
        t.append(Tensor("attn.o_bias", Group.ATTENTION, h, 1, Split.REPLICATED, layer=i))
    if d.qk_norm:
        t += [
            Tensor("attn.q_norm", Group.NORM, head_dim, 1, Split.REPLICATED, layer=i),
            Tensor("attn.k_norm", Group.NORM, head_dim, 1, Split.REPLICATED, layer=i),
        ]
    if d.attn_sinks:
        t.append(Tensor("attn.sinks", Group.ATTENTION, d.heads, 1, Split.COLUMN, layer=i))
    return t


def _mla(d: _Decoder, i: int) -> list[Tensor]:
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
                layer=i,
                quantizable=True,
            ),
            Tensor("attn.q_a_layernorm", Group.NORM, d.q_lora_rank, 1, Split.REPLICATED, layer=i),
            Tensor(
                "attn.q_b_proj",
                Group.ATTENTION,
                n * qk_head,
                d.q_lora_rank,
                Split.COLUMN,
                layer=i,
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
                layer=i,
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
            layer=i,
            quantizable=True,
        ),
        Tensor("attn.kv_a_layernorm", Group.NORM, d.kv_lora_rank, 1, Split.REPLICATED, layer=i),
        Tensor(
            "attn.kv_b_proj",
            Group.ATTENTION,
            n * (d.qk_nope + d.v_head),
            d.kv_lora_rank,
            Split.COLUMN,
            layer=i,
            quantizable=True,
        ),
        Tensor(
            "attn.o_proj", Group.ATTENTION, h, n * d.v_head, Split.ROW, layer=i, quantizable=True
        ),
    ]
    return t


def _mlp(d: _Decoder, i: int, inter: int, group: Group, prefix: str) -> list[Tensor]:
    h = d.hidden
    if d.gated_mlp:
        t = [
            Tensor(f"{prefix}.gate_proj", group, inter, h, Split.COLUMN, layer=i, quantizable=True),
            Tensor(f"{prefix}.up_proj", group, inter, h, Split.COLUMN, layer=i, quantizable=True),
        ]
    else:
        t = [Tensor(f"{prefix}.fc1", group, inter, h, Split.COLUMN, layer=i, quantizable=True)]
    t.append(Tensor(f"{prefix}.down_proj", group, h, inter, Split.ROW, layer=i, quantizable=True))
    if d.mlp_bias:
        t += [
            Tensor(
                f"{prefix}.up_bias",
                group,
                inter * (2 if d.gated_mlp else 1),
                1,
                Split.COLUMN,
                layer=i,
            ),
            Tensor(f"{prefix}.down_bias", group, h, 1, Split.REPLICATED, layer=i),
        ]
    return t


def _moe(d: _Decoder, i: int) -> list[Tensor]:
    h, e, ie = d.hidden, d.experts, d.expert_intermediate
    rows13 = 2 * ie if d.gated_mlp else ie
    t = [
        Tensor("mlp.gate", Group.ROUTER, e, h, Split.REPLICATED, layer=i),
        Tensor(
            "mlp.experts.w13",
            Group.EXPERTS,
            rows13,
            h,
            Split.COLUMN,
            layer=i,
            experts=e,
            quantizable=True,
        ),
        Tensor(
            "mlp.experts.w2", Group.EXPERTS, h, ie, Split.ROW, layer=i, experts=e, quantizable=True
        ),
    ]
    if d.router_bias:
        t.append(Tensor("mlp.gate_bias", Group.ROUTER, e, 1, Split.REPLICATED, layer=i))
    if d.router_scale:
        # Gemma4Router.scale and Gemma4MoE.per_expert_scale (models/gemma4.py)
        t += [
            Tensor("router.scale", Group.ROUTER, h, 1, Split.REPLICATED, layer=i),
            Tensor("moe.per_expert_scale", Group.ROUTER, e, 1, Split.REPLICATED, layer=i),
        ]
    if d.expert_bias:
        t += [
            Tensor(
                "mlp.experts.w13_bias", Group.EXPERTS, rows13, 1, Split.COLUMN, layer=i, experts=e
            ),
            Tensor(
                "mlp.experts.w2_bias", Group.EXPERTS, h, 1, Split.REPLICATED, layer=i, experts=e
            ),
        ]
    if d.shared_intermediate:
        t += _mlp(d, i, d.shared_intermediate, Group.SHARED_EXPERTS, "mlp.shared_experts")
        if d.shared_gate:
            t.append(
                Tensor("mlp.shared_expert_gate", Group.ROUTER, 1, h, Split.REPLICATED, layer=i)
            )
    return t


def _mamba2(d: _Decoder, i: int) -> list[Tensor]:
    assert d.mamba is not None
    m, h = d.mamba, d.hidden
    inner = m.ssm_heads * m.ssm_head_dim
    conv_dim = inner + 2 * m.groups * m.ssm_state
    in_proj = inner + conv_dim + m.ssm_heads  # z, xBC, dt
    return [
        Tensor("mixer.in_proj", Group.MAMBA, in_proj, h, Split.COLUMN, layer=i, quantizable=True),
        Tensor("mixer.conv1d", Group.MAMBA, conv_dim, m.conv_kernel, Split.COLUMN, layer=i),
        Tensor("mixer.conv1d_bias", Group.MAMBA, conv_dim, 1, Split.COLUMN, layer=i),
        Tensor("mixer.A_log", Group.MAMBA, m.ssm_heads, 1, Split.COLUMN, layer=i, fp32=True),
        Tensor("mixer.D", Group.MAMBA, m.ssm_heads, 1, Split.COLUMN, layer=i, fp32=True),
        Tensor("mixer.dt_bias", Group.MAMBA, m.ssm_heads, 1, Split.COLUMN, layer=i),
        Tensor("mixer.norm", Group.NORM, inner, 1, Split.COLUMN, layer=i),
        Tensor("mixer.out_proj", Group.MAMBA, h, inner, Split.ROW, layer=i, quantizable=True),
    ]


def _gdn(d: _Decoder, i: int) -> list[Tensor]:
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
            layer=i,
            quantizable=True,
        ),
        Tensor(
            "linear_attn.in_proj_ba",
            Group.MAMBA,
            2 * nv,
            h,
            Split.COLUMN,
            layer=i,
            quantizable=True,
        ),
        Tensor("linear_attn.conv1d", Group.MAMBA, conv_dim, m.conv_kernel, Split.COLUMN, layer=i),
        Tensor("linear_attn.dt_bias", Group.MAMBA, nv, 1, Split.COLUMN, layer=i),
        Tensor("linear_attn.A_log", Group.MAMBA, nv, 1, Split.COLUMN, layer=i, fp32=True),
        Tensor("linear_attn.norm", Group.NORM, m.ssm_head_dim, 1, Split.REPLICATED, layer=i),
        Tensor(
            "linear_attn.out_proj", Group.MAMBA, h, value_dim, Split.ROW, layer=i, quantizable=True
        ),
    ]


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
    kinds = d.kinds or [AttnKind.FULL] * d.layers
    layers: list[LayerAttention] = []
    for i in range(d.layers):
        kind = kinds[i]
        mixer_only = i in d.mamba_layers and not d.gdn  # Nemotron-H "M": no MLP in the layer
        if i in d.mamba_layers:
            tensors += _gdn(d, i) if d.gdn else _mamba2(d, i)
            layers.append(LayerAttention(AttnKind.MAMBA, mamba=d.mamba))
        elif kind is AttnKind.MLA:
            tensors += _mla(d, i)
            layers.append(LayerAttention(AttnKind.MLA, latent_dim=d.kv_lora_rank + d.qk_rope))
        elif kind is AttnKind.NONE:
            layers.append(LayerAttention(AttnKind.NONE))
        else:
            tensors += _attention(d, i, kind)
            kv_heads, head_dim = _attn_dims(d, kind)
            layers.append(
                LayerAttention(
                    kind,
                    kv_heads=kv_heads,
                    head_dim_k=head_dim,
                    head_dim_v=head_dim,
                    window=d.window if kind is not AttnKind.FULL else 0,
                )
            )
        if mixer_only or i in d.mlp_only_layers or i in d.moe_only_layers or d.attn_only:
            n_norms = 1
        else:
            n_norms = d.norms_per_layer
        if kind is AttnKind.NONE and i in d.moe_only_layers:
            tensors += _moe(d, i)
        elif kind is AttnKind.NONE and i in d.mlp_only_layers:
            tensors += _mlp(d, i, d.intermediate, Group.MLP, "mlp")
        elif not mixer_only and not d.attn_only:
            if i in d.moe_layers:
                tensors += _moe(d, i)
            if d.intermediate and (i not in d.moe_layers or d.dense_and_moe):
                tensors += _mlp(d, i, d.intermediate, Group.MLP, "mlp")
        if d.layer_scalar:
            tensors.append(Tensor("layer_scalar", Group.NORM, 1, 1, Split.REPLICATED, layer=i))
        for k in range(n_norms):
            tensors.append(Tensor(f"norm{k}", Group.NORM, h, 1, Split.REPLICATED, layer=i))
            if d.norm_bias:
                tensors.append(Tensor(f"norm{k}_bias", Group.NORM, h, 1, Split.REPLICATED, layer=i))
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
    dense = tuple(
        i
        for i in range(d.layers)
        if d.experts and i not in d.moe_layers and i not in d.mamba_layers
    )
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
        layers=tuple(layers),
        rope_caches=ropes,
        num_experts=d.experts,
        num_shared_experts=1 if d.shared_intermediate else 0,
        experts_per_token=d.experts_per_token,
        expert_intermediate_size=d.expert_intermediate,
        dense_layers=dense,
        quantization=quant,
        is_multimodal=multimodal,
        notes=tuple(d.notes),
        mtp_layers=d.mtp_layers,
    )


# ---------------------------------------------------------------------------------------------
# families


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
    return d


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
        d.kinds = [AttnKind.SLIDING] * d.layers
        d.window = int(sw)
    return d


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
    mlp_only = set(c.get("mlp_only_layers", []) or [])
    d.moe_layers = {i for i in range(d.layers) if i not in mlp_only and (i + 1) % step == 0}
    if not qwen3:
        d.shared_intermediate = c.integer("shared_expert_intermediate_size", 0)
        d.shared_gate = bool(d.shared_intermediate)
    return d


def _mixtral(c: _Cfg) -> _Decoder:
    d = _mistral(c)
    d.experts = c.pos("num_local_experts")
    d.expert_intermediate = d.intermediate
    d.experts_per_token = c.pos("num_experts_per_tok")
    d.moe_layers = set(range(d.layers))
    return d


def _deepseek(c: _Cfg) -> _Decoder:
    d = _base(c, mla=True)
    d.q_lora_rank = c.integer("q_lora_rank", 0)
    d.kv_lora_rank = c.pos("kv_lora_rank")
    d.qk_nope = c.pos("qk_nope_head_dim")
    d.qk_rope = c.pos("qk_rope_head_dim")
    d.v_head = c.pos("v_head_dim")
    d.head_dim = d.qk_nope + d.qk_rope
    d.kinds = [AttnKind.MLA] * d.layers
    d.experts = c.integer("n_routed_experts", 0)
    if d.experts:
        d.expert_intermediate = c.pos("moe_intermediate_size")
        d.experts_per_token = c.pos("num_experts_per_tok")
        d.shared_intermediate = c.integer("n_shared_experts", 0) * d.expert_intermediate
        first = c.integer("first_k_dense_replace", 0)
        freq = c.pos("moe_layer_freq", 1)
        d.moe_layers = {i for i in range(d.layers) if i >= first and i % freq == 0}
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


def _gemma(c: _Cfg, version: int, model_type: str) -> _Decoder:
    merged = c
    d = _base(merged, tie=True, norms_per_layer=4, qk_norm=version == 3)
    d.tie = True
    window = merged.pos("sliding_window", 4096)
    d.window = window
    pattern = 2 if version == 2 else int(merged.get("sliding_window_pattern", 6))
    types = merged.get("layer_types")
    if isinstance(types, list) and len(types) == d.layers:
        d.kinds = [AttnKind.SLIDING if "sliding" in t else AttnKind.FULL for t in types]
    else:
        # Gemma 2: even layers slide; Gemma 3: every `pattern`-th layer is global
        d.kinds = [
            AttnKind.FULL if (i + 1) % pattern == 0 else AttnKind.SLIDING for i in range(d.layers)
        ]
        if version == 2:
            d.kinds = [AttnKind.SLIDING if i % 2 == 0 else AttnKind.FULL for i in range(d.layers)]
    if version == 3:
        d.rope_positions = d.max_pos
    return d


def _gpt_oss(c: _Cfg) -> _Decoder:
    d = _base(c, qkv_bias=True, o_bias=True, attn_sinks=True, expert_bias=True, router_bias=True)
    d.experts = c.pos("num_local_experts")
    d.expert_intermediate = c.pos("intermediate_size")
    d.experts_per_token = c.pos("num_experts_per_tok")
    d.moe_layers = set(range(d.layers))
    d.window = c.pos("sliding_window")
    types = c.get("layer_types")
    if not isinstance(types, list) or len(types) != d.layers:
        raise ModelConfigError(c.path("layer_types"), "gpt-oss needs one entry per layer")
    d.kinds = [AttnKind.SLIDING if "sliding" in t else AttnKind.FULL for t in types]
    rope = c.get("rope_scaling")
    if isinstance(rope, Mapping) and "factor" in rope:
        d.rope_positions = int(
            rope.get("original_max_position_embeddings", d.max_pos) * float(rope["factor"])
        )
        d.rope_fp32 = True
    return d


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


def _llama4(c: _Cfg) -> _Decoder:
    d = _base(c, qk_norm=False)
    d.experts = c.pos("num_local_experts")
    d.expert_intermediate = c.pos("intermediate_size")
    d.intermediate = c.pos("intermediate_size_mlp")
    d.experts_per_token = c.pos("num_experts_per_tok")
    step = c.pos("interleave_moe_layer_step", 1)
    d.moe_layers = {i for i in range(d.layers) if (i + 1) % step == 0}
    d.shared_intermediate = d.expert_intermediate
    chunk = c.integer("attention_chunk_size", 0)
    no_rope = c.get("no_rope_layers")
    if chunk:
        d.window = chunk
        if isinstance(no_rope, list) and len(no_rope) == d.layers:
            d.kinds = [AttnKind.CHUNKED if int(r) else AttnKind.FULL for r in no_rope]
        else:
            # every 4th layer is a global NoPE layer (Llama4TextConfig.no_rope_layer_interval)
            d.kinds = [
                AttnKind.FULL if (i + 1) % 4 == 0 else AttnKind.CHUNKED for i in range(d.layers)
            ]
    return d


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
        ssm_dtype_bytes=4 if ssm_dtype == "float32" else None,
        groups=ngroups,
        chunk_size=c.integer("chunk_size", 0) or c.integer("mamba_chunk_size", 0),
    )
    kinds: list[AttnKind] = []
    for i, ch in enumerate(pattern):
        if ch == "M":
            d.mamba_layers.add(i)
            kinds.append(AttnKind.MAMBA)
        elif ch == "*":
            kinds.append(AttnKind.FULL)
        elif ch == "-":
            d.mlp_only_layers.add(i)
            kinds.append(AttnKind.NONE)
        elif ch == "E":
            d.moe_only_layers.add(i)
            kinds.append(AttnKind.NONE)
        else:
            raise ModelConfigError(
                c.path("hybrid_override_pattern"), f"unknown layer code {ch!r} at {i}"
            )
    d.kinds = kinds
    d.attn_only = True
    if d.moe_only_layers:
        d.experts = c.pos("n_routed_experts")
        d.expert_intermediate = c.pos("moe_intermediate_size")
        d.experts_per_token = c.pos("num_experts_per_tok")
        d.shared_intermediate = c.integer("moe_shared_expert_intermediate_size", 0)
        d.router_bias = True
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
    else:
        interval = c.pos("full_attention_interval", 4)
        types = [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(d.layers)
        ]
    kinds: list[AttnKind] = []
    for i, t in enumerate(types):
        if t == "linear_attention":
            kinds.append(AttnKind.MAMBA)
            d.mamba_layers.add(i)
        elif t == "full_attention":
            kinds.append(AttnKind.FULL)
        else:
            raise ModelConfigError(c.path("layer_types"), f"unknown layer type {t!r} at {i}")
    d.kinds = kinds
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
    )
    d.gdn = True
    if moe:
        d.experts = c.pos("num_experts")
        d.expert_intermediate = c.pos("moe_intermediate_size")
        d.experts_per_token = c.pos("num_experts_per_tok")
        d.shared_intermediate = c.integer("shared_expert_intermediate_size", 0)
        d.shared_gate = bool(d.shared_intermediate)
        # Qwen3_5DecoderLayer: every layer of qwen3_5_moe_text is a sparse MoE block
        d.moe_layers = set(range(d.layers))
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
    d.kinds = [AttnKind.SLIDING if "sliding" in str(t) else AttnKind.FULL for t in types]
    d.window = c.pos("sliding_window")
    d.full_head_dim = c.pos("global_head_dim") if c.has("global_head_dim") else d.head_dim
    d.k_eq_v = c.boolean("attention_k_eq_v", False)
    # Gemma4DecoderLayer: num_global_key_value_heads only on K=V full layers
    d.full_kv_heads = c.pos("num_global_key_value_heads", d.kv_heads) if d.k_eq_v else d.kv_heads
    if c.boolean("enable_moe_block", False) or c.boolean("use_second_mlp_block", False):
        d.experts = c.pos("num_experts")
        d.expert_intermediate = c.pos("moe_intermediate_size")
        d.experts_per_token = c.pos("top_k_experts")
        d.moe_layers = set(range(d.layers))
        d.dense_and_moe = True
        d.router_scale = True
        d.norms_per_layer = 7  # + post_feedforward_layernorm_1/_2, pre_feedforward_layernorm_2
    d.layer_scalar = True
    # one rope cache per layer type: Gemma4RotaryEmbedding ("proportional") caches the whole
    # head (rotary_dim = head_size, non-rotated pairs as cos 1 / sin 0)
    d.ropes = []
    if AttnKind.SLIDING in d.kinds:
        d.ropes.append(RopeCache(d.max_pos, d.head_dim))
    if AttnKind.FULL in d.kinds:
        d.ropes.append(RopeCache(d.max_pos, d.full_head_dim))
    d.rotary_dim = d.head_dim
    if d.k_eq_v:
        d.notes.append(
            "Gemma 4 K=V full layers: vLLM allocates a V slot in qkv_proj (loaded from K) and "
            "caches K and V separately (V is normed differently), so both are counted"
        )
    return d


_FAMILIES: dict[str, Callable[[_Cfg], _Decoder]] = {
    "llama": _llama,
    "mistral": _mistral,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen2_moe": lambda c: _qwen_moe(c, qwen3=False),
    "qwen3_moe": lambda c: _qwen_moe(c, qwen3=True),
    "mixtral": _mixtral,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,
    "gemma2": lambda c: _gemma(c, 2, "gemma2"),
    "gemma3_text": lambda c: _gemma(c, 3, "gemma3_text"),
    "gpt_oss": _gpt_oss,
    "phi": _phi,
    "phi3": lambda c: _base(c),
    "opt": _opt,
    "llama4_text": _llama4,
    "nemotron_h": _nemotron_h,
    "qwen2_5_vl": _qwen2,
    "qwen2_vl": _qwen2,
    "mllama_text_model": _llama,
    "qwen3_5_moe_text": lambda c: _qwen3_5(c, moe=True),
    "qwen3_5_text": lambda c: _qwen3_5(c, moe=False),
    "gemma4_text": _gemma4,
}

#: multimodal wrappers: the text model sits under ``text_config``
_WRAPPERS = {
    "gemma3",
    "gemma4",
    "llama4",
    "mllama",
    "kimi_k25",
    "kimi_vl",
    "qwen3_5",
    "qwen3_5_moe",
}

#: families we know of but cannot size yet, with the reason (an error, never a guess)
_UNSUPPORTED = {
    "qwen3_next": "Qwen3-Next (gated DeltaNet hybrid) is not modelled yet",
}

#: transformers config-class defaults for fields a family's config.json may omit
_DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers Gemma3TextConfig (the 4B/27B configs omit these)
    "gemma3_text": dict(
        vocab_size=262208,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=256,
        max_position_embeddings=131072,
        num_hidden_layers=26,
        intermediate_size=9216,
        hidden_size=2304,
        sliding_window=4096,
        sliding_window_pattern=6,
    ),
}

SUPPORTED_MODEL_TYPES = tuple(sorted(set(_FAMILIES) | _WRAPPERS))


def _vision_tensors(vc: Mapping[str, Any] | None) -> list[Tensor]:
    """A ViT-style encoder, replicated on every rank of the first stage (an estimate:
    embeddings, per-layer attention + MLP, norms; projector excluded)."""
    if not vc:
        return []
    h = int(vc.get("hidden_size", 0) or 0)
    layers = int(vc.get("num_hidden_layers", vc.get("depth", 0)) or 0)
    inter = int(vc.get("intermediate_size", 0) or 0)
    if not (h and layers and inter):
        return []
    per_layer = 4 * h * h + 4 * h + 2 * h * inter + inter + h + 4 * h
    patch = int(vc.get("patch_size", 14) or 14)
    chans = int(vc.get("num_channels", vc.get("in_chans", 3)) or 3)
    # vLLM shards the vision towers it implements (SigLIP, Llama 4, Qwen2.5-VL, Mllama) over TP
    return [
        Tensor("vision.layers", Group.VISION, per_layer, layers, Split.COLUMN, stage=Stage.ENCODER),
        Tensor(
            "vision.patch_embed",
            Group.VISION,
            h,
            chans * patch * patch,
            Split.REPLICATED,
            stage=Stage.ENCODER,
        ),
    ]


def _qwen3_vl_vision(vc: Mapping[str, Any]) -> list[Tensor]:
    """Qwen3-VL vision tower (vllm models/qwen3_vl.py, used by Qwen3.5): Conv3d patch embed
    (temporal × spatial patch, with bias), learned position table, ViT blocks (qkv/proj and
    fc1/fc2 with biases, two LayerNorms), patch merger (LayerNorm, fc1 h·m² → h·m², fc2 →
    out_hidden_size) and one deepstack merger per ``deepstack_visual_indexes`` entry."""
    h = int(vc.get("hidden_size", 0) or 0)
    depth = int(vc.get("depth", vc.get("num_hidden_layers", 0)) or 0)
    inter = int(vc.get("intermediate_size", 0) or 0)
    if not (h and depth and inter):
        return []
    patch = int(vc.get("patch_size", 16) or 16)
    tps = int(vc.get("temporal_patch_size", 2) or 2)
    chans = int(vc.get("in_channels", vc.get("num_channels", 3)) or 3)
    npos = int(vc.get("num_position_embeddings", 0) or 0)
    out = int(vc.get("out_hidden_size", h) or h)
    hm = h * int(vc.get("spatial_merge_size", 2) or 2) ** 2
    per_layer = 4 * h * h + 4 * h + 2 * h * inter + inter + h + 4 * h
    enc = Stage.ENCODER
    t = [
        Tensor("vision.layers", Group.VISION, per_layer, depth, Split.COLUMN, stage=enc),
        Tensor(
            "vision.patch_embed",
            Group.VISION,
            h,
            chans * tps * patch * patch + 1,
            Split.REPLICATED,
            stage=enc,
        ),
    ]
    if npos:
        t.append(Tensor("vision.pos_embed", Group.VISION, npos, h, Split.REPLICATED, stage=enc))
    deepstack = vc.get("deepstack_visual_indexes") or []
    for k in range(1 + len(deepstack)):
        norm = h if k == 0 else hm  # deepstack mergers norm after the shuffle
        t += [
            Tensor(
                f"vision.merger{k}.norm", Group.VISION, 2 * norm, 1, Split.REPLICATED, stage=enc
            ),
            Tensor(f"vision.merger{k}.fc1", Group.VISION, hm, hm + 1, Split.COLUMN, stage=enc),
            Tensor(f"vision.merger{k}.fc2", Group.VISION, out, hm, Split.ROW, stage=enc),
            Tensor(f"vision.merger{k}.fc2_bias", Group.VISION, out, 1, Split.REPLICATED, stage=enc),
        ]
    return t


def _gemma4_vision(vc: Mapping[str, Any], text_hidden: int) -> list[Tensor]:
    """Gemma 4 vision tower (transformers Gemma4VisionModel; vllm models/gemma4_mm.py builds it
    with AutoModel.from_config, so it is replicated on every TP rank): linear patch projection,
    2-D position table, encoder layers (q/k/v/o without bias, q/k norms, gated MLP, four
    RMSNorms), standardize bias/scale, and embed_vision's projection to the text hidden size."""
    h = int(vc.get("hidden_size", 0) or 0)
    layers = int(vc.get("num_hidden_layers", 0) or 0)
    inter = int(vc.get("intermediate_size", 0) or 0)
    heads = int(vc.get("num_attention_heads", 0) or 0)
    if not (h and layers and inter and heads):
        return []
    kv = int(vc.get("num_key_value_heads", heads) or heads)
    hd = int(vc.get("head_dim", h // heads) or h // heads)
    patch = int(vc.get("patch_size", 16) or 16)
    pos = int(vc.get("position_embedding_size", 0) or 0)
    per_layer = 2 * heads * hd * h + 2 * kv * hd * h + 3 * h * inter + 4 * h + 2 * hd
    enc, rep = Stage.ENCODER, Split.REPLICATED
    t = [
        Tensor("vision.layers", Group.VISION, per_layer, layers, rep, stage=enc),
        Tensor("vision.patch_embed", Group.VISION, h, 3 * patch * patch, rep, stage=enc),
        Tensor("vision.position_table", Group.VISION, 2 * pos, h, rep, stage=enc),
        Tensor("embed_vision.projection", Group.VISION, text_hidden, h, rep, stage=enc),
    ]
    if vc.get("standardize"):
        t.append(Tensor("vision.standardize", Group.VISION, 2 * h, 1, rep, stage=enc))
    return t


def _vision_for(model_type: str, vc: Any, text: _Cfg) -> list[Tensor]:
    if not isinstance(vc, Mapping) or not vc:
        return []
    if model_type in ("qwen3_5", "qwen3_5_moe"):
        return _qwen3_vl_vision(vc)
    if model_type == "gemma4":
        return _gemma4_vision(vc, text.integer("hidden_size", 0))
    if model_type == "kimi_vl":
        return _moonvit_vision(vc, text.integer("hidden_size", 0))
    return _vision_tensors(vc)


def _moonvit_vision(vc: Mapping[str, Any], text_hidden: int) -> list[Tensor]:
    """Kimi-VL's MoonViT tower and projector (vllm models/moonvit.py, kimi_vl.py): Conv2d patch
    embed with bias, a learned 2-D position table (init_pos_emb_height × width), ViT blocks
    (wqkv, wo, fc0, fc1 with biases, two LayerNorms), a final LayerNorm, and
    KimiVLMultiModalProjector (LayerNorm, linear m·h → m·h, linear m·h → text hidden, biases;
    m = the merge kernel's area). Kept replicated on every rank (vLLM's MoonViT linears are
    not tensor-parallel), which can only over-count."""
    h = int(vc.get("hidden_size", 0) or 0)
    depth = int(vc.get("num_hidden_layers", 0) or 0)
    inter = int(vc.get("intermediate_size", 0) or 0)
    if not (h and depth and inter):
        return []
    patch = int(vc.get("patch_size", 14) or 14)
    pos = int(vc.get("init_pos_emb_height", 64) or 64) * int(vc.get("init_pos_emb_width", 64) or 64)
    kernel = vc.get("merge_kernel_size") or [2, 2]
    m = int(kernel[0]) * int(kernel[1])
    per_layer = 4 * h * h + 4 * h + 2 * h * inter + inter + h + 4 * h
    enc, rep = Stage.ENCODER, Split.REPLICATED
    return [
        Tensor("vision.layers", Group.VISION, per_layer, depth, rep, stage=enc),
        Tensor("vision.patch_embed", Group.VISION, h, 3 * patch * patch + 1, rep, stage=enc),
        Tensor("vision.position_table", Group.VISION, pos, h, rep, stage=enc),
        Tensor("vision.final_norm", Group.VISION, 2 * h, 1, rep, stage=enc),
        Tensor(
            "mm_projector",
            Group.VISION,
            1,
            2 * h + (m * h) * (m * h) + m * h + (m * h) * text_hidden + text_hidden,
            rep,
            stage=enc,
        ),
    ]


def resolve_dtype(config_dtype: str | None, requested: str) -> str:
    """vLLM's ``--dtype auto``: the checkpoint dtype, float32 served as bfloat16."""
    if requested not in DTYPE_CHOICES:
        raise ModelConfigError("dtype", f"unknown dtype {requested!r}")
    if requested != "auto":
        return DTYPE_ALIASES.get(requested, requested)
    dt = (config_dtype or "bfloat16").replace("torch.", "")
    if dt in ("float32", "float"):
        return "bfloat16"
    if dt not in ("bfloat16", "float16"):
        # fail closed: sizing an unknown checkpoint dtype as bf16 would guess its bytes
        raise ModelConfigError(
            "torch_dtype", f"unknown dtype {dt!r}; the ledger sizes {', '.join(DTYPE_BYTES)}"
        )
    return dt


def shape_from_config(
    config: Mapping[str, Any], name: str = "custom", quantization: str | None = None
) -> ModelShape:
    """Derive the :class:`ModelShape` of a Hugging Face ``config.json``."""
    check_config(config)  # bounds on every size that drives work, before any work
    top = _Cfg(config)
    model_type = config.get("model_type")
    if not model_type:
        raise ModelConfigError("model_type", "missing")
    model_type = str(model_type)
    if model_type in _UNSUPPORTED:
        raise ModelConfigError("model_type", f"{model_type!r}: {_UNSUPPORTED[model_type]}")
    archs: Sequence[Any] = config.get("architectures") or [model_type]
    arch = str(archs[0])
    text = top
    vision: list[Tensor] = []
    multimodal = False
    if model_type in _WRAPPERS or "text_config" in config:
        tc = config.get("text_config")
        if not isinstance(tc, Mapping):
            raise ModelConfigError("text_config", f"{model_type} needs a text_config")
        text = _Cfg(tc, "text_config.")
        inner_type = str(tc.get("model_type") or f"{model_type}_text")
        if inner_type in _UNSUPPORTED:
            raise ModelConfigError(
                "text_config.model_type", f"{inner_type!r}: {_UNSUPPORTED[inner_type]}"
            )
        if model_type == "gemma3":
            inner_type = "gemma3_text"
        vision = _vision_for(model_type, config.get("vision_config"), text)
        multimodal = bool(config.get("vision_config"))
        family_type = inner_type
    else:
        family_type = model_type
        multimodal = bool(config.get("vision_config"))
        vision = _vision_tensors(config.get("vision_config"))
    builder = _FAMILIES.get(family_type)
    if builder is None:
        raise ModelConfigError(
            "model_type",
            f"unsupported model_type {family_type!r}; supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}",
        )
    if family_type in _DEFAULTS:
        merged = {**_DEFAULTS[family_type], **{k: v for k, v in text.data.items() if v is not None}}
        text = _Cfg(merged, text.prefix)
    decoder = builder(text)
    if family_type == "mllama_text_model":
        cross = set(text.get("cross_attention_layers", []) or [])
        decoder.kinds = [
            AttnKind.CROSS if i in cross else AttnKind.FULL for i in range(decoder.layers)
        ]
        decoder.vocab = decoder.vocab + 8  # MllamaTextModel embeds vocab_size + 8 tokens
    qcfg = text.get("quantization_config") or top.get("quantization_config")
    quant = parse_quantization(qcfg, quantization)
    dtype_raw = (
        text.get("torch_dtype") or text.get("dtype") or top.get("torch_dtype") or top.get("dtype")
    )
    dtype = resolve_dtype(str(dtype_raw) if dtype_raw else None, "auto")
    shape = _build(name, family_type, arch, decoder, text, dtype, quant, multimodal, vision)
    return replace(shape, model_type=model_type if model_type not in _WRAPPERS else family_type)
