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

from .errors import ModelConfigError
from .quant import parse_quantization
from .shapes import (
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
    notes: list[str] = field(default_factory=list)


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


def _attention(d: _Decoder, i: int) -> list[Tensor]:
    h, q_out, kv_out = d.hidden, d.heads * d.head_dim, d.kv_heads * d.head_dim
    t = [
        Tensor("attn.q_proj", Group.ATTENTION, q_out, h, Split.COLUMN, layer=i, quantizable=True),
        Tensor(
            "attn.k_proj",
            Group.ATTENTION,
            kv_out,
            h,
            Split.KV_HEADS,
            layer=i,
            quantizable=True,
            kv_heads=d.kv_heads,
        ),
        Tensor(
            "attn.v_proj",
            Group.ATTENTION,
            kv_out,
            h,
            Split.KV_HEADS,
            layer=i,
            quantizable=True,
            kv_heads=d.kv_heads,
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
                kv_heads=d.kv_heads,
            ),
            Tensor(
                "attn.v_bias",
                Group.ATTENTION,
                kv_out,
                1,
                Split.KV_HEADS,
                layer=i,
                kv_heads=d.kv_heads,
            ),
        ]
    if d.o_bias:
        t.append(Tensor("attn.o_bias", Group.ATTENTION, h, 1, Split.REPLICATED, layer=i))
    if d.qk_norm:
        t += [
            Tensor("attn.q_norm", Group.NORM, d.head_dim, 1, Split.REPLICATED, layer=i),
            Tensor("attn.k_norm", Group.NORM, d.head_dim, 1, Split.REPLICATED, layer=i),
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
        if i in d.mamba_layers:
            tensors += _mamba2(d, i)
            layers.append(LayerAttention(AttnKind.MAMBA, mamba=d.mamba))
        elif kind is AttnKind.MLA:
            tensors += _mla(d, i)
            layers.append(LayerAttention(AttnKind.MLA, latent_dim=d.kv_lora_rank + d.qk_rope))
        elif kind is AttnKind.NONE:
            layers.append(LayerAttention(AttnKind.NONE))
        else:
            tensors += _attention(d, i)
            layers.append(
                LayerAttention(
                    kind,
                    kv_heads=d.kv_heads,
                    head_dim_k=d.head_dim,
                    head_dim_v=d.head_dim,
                    window=d.window if kind is not AttnKind.FULL else 0,
                )
            )
        if i in d.mamba_layers or i in d.mlp_only_layers or i in d.moe_only_layers or d.attn_only:
            n_norms = 1
        else:
            n_norms = d.norms_per_layer
        if kind is AttnKind.NONE and i in d.moe_only_layers:
            tensors += _moe(d, i)
        elif kind is AttnKind.NONE and i in d.mlp_only_layers:
            tensors += _mlp(d, i, d.intermediate, Group.MLP, "mlp")
        elif i not in d.mamba_layers and not d.attn_only:
            if i in d.moe_layers:
                tensors += _moe(d, i)
            elif d.intermediate:
                tensors += _mlp(d, i, d.intermediate, Group.MLP, "mlp")
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
    if d.rotary_dim:
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
}

#: multimodal wrappers: the text model sits under ``text_config``
_WRAPPERS = {"gemma3", "llama4", "mllama", "kimi_k25"}

#: families we know of but cannot size yet, with the reason (an error, never a guess)
_UNSUPPORTED = {
    "gemma4": "Gemma 4 (K=V global attention, per-layer inputs) is not modelled yet",
    "gemma4_text": "Gemma 4 (K=V global attention, per-layer inputs) is not modelled yet",
    "qwen3_5_moe": "Qwen3.5 (gated DeltaNet hybrid) is not modelled yet",
    "qwen3_5_moe_text": "Qwen3.5 (gated DeltaNet hybrid) is not modelled yet",
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


def resolve_dtype(config_dtype: str | None, requested: str) -> str:
    """vLLM's ``--dtype auto``: the checkpoint dtype, float32 served as bfloat16."""
    if requested not in ("auto", "bfloat16", "float16", "float32", "half", "bf16", "fp16"):
        raise ModelConfigError("dtype", f"unknown dtype {requested!r}")
    aliases = {"half": "float16", "fp16": "float16", "bf16": "bfloat16"}
    if requested != "auto":
        return aliases.get(requested, requested)
    dt = (config_dtype or "bfloat16").replace("torch.", "")
    if dt in ("float32", "float"):
        return "bfloat16"
    if dt not in ("bfloat16", "float16"):
        return "bfloat16"
    return dt


def shape_from_config(
    config: Mapping[str, Any], name: str = "custom", quantization: str | None = None
) -> ModelShape:
    """Derive the :class:`ModelShape` of a Hugging Face ``config.json``."""
    if not isinstance(config, Mapping):
        raise ModelConfigError("config.json", "expected a JSON object")
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
        vision = _vision_tensors(config.get("vision_config"))
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
