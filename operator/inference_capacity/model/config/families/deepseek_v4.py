"""DeepSeek-V4 (``model_type deepseek_v4``): compressed sparse attention per layer
(``compress_ratios``: 0 a sliding window only, 4 compressed with the Lightning indexer, 128
heavily compressed), hyper-connections (``hc_mult`` residual streams), hash-routed leading MoE
layers, FP8-block linears and FP4 (MXFP4) routed experts.

Its tensors follow vLLM 0.24.0/0.25.0 ``models/deepseek_v4/nvidia/model.py`` (the CUDA model):

* ``attention.py::DeepseekV4Attention``: ``fused_wqa_wkv`` (hidden → q_lora_rank + head_dim,
  replicated), ``q_norm``, ``wq_b`` (column, q_lora_rank → heads·head_dim), ``kv_norm``,
  ``wo_a`` (column, heads·head_dim/o_groups → o_groups·o_lora_rank), ``wo_b`` (row), the fp32
  ``attn_sink`` per head; ratio > 1 adds a ``DeepseekCompressor`` (``compressor.py``: an
  unquantized ``fused_wkv_wgate`` hidden → 2·coff·head_dim, fp32 ``ape`` ratio × coff·head_dim,
  a norm; coff = 2 at ratio 4); ratio 4 adds ``DeepseekV4Indexer`` (replicated ``wq_b``
  q_lora_rank → index_n_heads·index_head_dim, unquantized ``weights_proj`` hidden →
  index_n_heads, and its own compressor of head ``index_head_dim``).
* ``DeepseekV4MoE``: the router ``gate`` (experts × hidden), ``tid2eid`` (vocab × top-k int32)
  on the first ``num_hash_layers`` layers and the fp32 ``e_score_correction_bias`` on the
  others (``noaux_tc``), the routed experts, and a ``DeepseekV4MLP`` shared expert whose
  intermediate size is rounded up to whole 128-blocks per TP rank.
* ``DeepseekV4DecoderLayer``: two norms and the fp32 hyper-connection mixers ``hc_{attn,ffn}_fn``
  ((2 + hc)·hc × hc·hidden), ``_base`` ((2 + hc)·hc) and ``_scale`` (3); the model adds
  ``hc_head_fn`` (hc × hc·hidden), ``hc_head_base`` and ``hc_head_scale``.
* ``common/rope.py::build_deepseek_v4_rope``: ``rope_theta`` for window-only layers and
  ``compress_rope_theta`` for compressed ones, ``deepseek_yarn`` (fp32 cos/sin of
  original_max_position_embeddings × factor positions, ``qk_rope_head_dim`` wide): two caches.

The quantization is ``quant_config.py::DeepseekV4FP8Config`` (vLLM renames the checkpoint's
``fp8`` to ``deepseek_v4_fp8``): FP8 128×128 blocks for the linears, with e8m0 (1 B) scales when
``expert_dtype`` is ``fp4`` (``is_scale_e8m0``; ``fp8.py`` creates ``weight_scale_inv`` in
``float8_e8m0fnu``) and fp32 ones for ``fp8`` experts; routed experts ``Mxfp4MoEMethod`` (fp4)
or FP8 blocks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import ModelConfigError
from ...layerset import LayerSet, Pattern
from ...quant import MXFP4_EXPERTS
from ...shapes import (
    AttnKind,
    Dsv4Dims,
    Group,
    LayerAttention,
    LayerGroup,
    ModelShape,
    Quantization,
    RopeCache,
    Split,
    Stage,
    Tensor,
)
from ..access import _Cfg, _rope_factor_len

#: ``DeepseekV4MLP``: block-FP8 shards the shared expert in whole 128-blocks
FP8_BLOCK = 128


def dsv4_quantization(c: _Cfg) -> Quantization | None:
    """``DeepseekV4FP8Config`` for the checkpoint's ``fp8`` quantization_config (None: bf16)."""
    q = c.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, Mapping) or str(q.get("quant_method", "")).lower() not in (
        "fp8",
        "deepseek_v4_fp8",
    ):
        method = q.get("quant_method") if isinstance(q, Mapping) else q
        raise ModelConfigError(
            "quantization_config.quant_method",
            f"DeepSeek-V4 with {method!r}: only its FP8 (deepseek_v4_fp8) checkpoints are modelled",
        )
    if q.get("moe_quant_algo"):
        raise ModelConfigError(
            "quantization_config.moe_quant_algo",
            f"{q.get('moe_quant_algo')!r} experts (ModelOptNvFp4FusedMoE) are not modelled",
        )
    block = q.get("weight_block_size") or [FP8_BLOCK, FP8_BLOCK]
    expert = str(c.get("expert_dtype") or "fp4")
    if expert not in ("fp4", "fp8"):
        raise ModelConfigError("expert_dtype", f"{expert!r}: vLLM accepts fp4 and fp8")
    linear = Quantization(
        method="fp8",
        weight_bits=8,
        block=(int(block[0]), int(block[1])),
        scale_bytes=1 if expert == "fp4" else 4,
        float_format=True,
    )
    experts = MXFP4_EXPERTS if expert == "fp4" else linear
    return Quantization(
        method="deepseek_v4_fp8",
        weight_bits=8,
        block=linear.block,
        scale_bytes=linear.scale_bytes,
        float_format=True,
        layer_formats=(("ffn.experts", experts), ("*", linear)),
    )


def effective_ratios(c: _Cfg, layers: int) -> list[int]:
    """``DeepseekV4Attention.compress_ratio = max(1, compress_ratios[i])`` for the decoder
    layers (the entries past ``num_hidden_layers`` are the MTP layers')."""
    raw = c.get("compress_ratios")
    if not isinstance(raw, Sequence) or isinstance(raw, str) or len(raw) < layers:
        raise ModelConfigError(
            "compress_ratios", f"DeepSeek-V4 needs one entry per layer ({layers})"
        )
    out = []
    for i, r in enumerate(raw[:layers]):
        if isinstance(r, bool) or not isinstance(r, int) or r not in (0, 1, 4, 128):
            raise ModelConfigError(
                f"compress_ratios[{i}]", f"{r!r}: vLLM's compressor supports 0, 4 and 128"
            )
        out.append(max(1, r))
    return out


def _layer_tensors(c: _Cfg, ratio: int, hashed: bool, ls: LayerSet) -> list[Tensor]:
    h = c.pos("hidden_size")
    heads, hd = c.pos("num_attention_heads"), c.pos("head_dim")
    ql, ol, og = c.pos("q_lora_rank"), c.pos("o_lora_rank"), c.pos("o_groups")
    e, ie, k = (
        c.pos("n_routed_experts"),
        c.pos("moe_intermediate_size"),
        c.pos("num_experts_per_tok"),
    )
    hc = c.pos("hc_mult")
    A, N, R = Group.ATTENTION, Group.NORM, Split.REPLICATED

    def t(name: str, g: Group, rows: int, cols: int, split: Split, **kw: Any) -> Tensor:
        return Tensor(name, g, rows, cols, split, layers=ls, **kw)

    out = [
        t("attn.fused_wqa_wkv", A, ql + hd, h, R, quantizable=True),
        t("attn.q_norm", N, ql, 1, R),
        t("attn.wq_b", A, heads * hd, ql, Split.COLUMN, quantizable=True),
        t("attn.kv_norm", N, hd, 1, R),
        t("attn.wo_a", A, og * ol, heads * hd // og, Split.COLUMN, quantizable=True),
        t("attn.wo_b", A, h, og * ol, Split.ROW, quantizable=True),
        t("attn.attn_sink", A, heads, 1, Split.COLUMN, fp32=True),
    ]

    def compressor(prefix: str, head: int) -> list[Tensor]:
        coff = 2 if ratio == 4 else 1
        return [
            t(f"{prefix}.fused_wkv_wgate", A, 2 * coff * head, h, R),
            t(f"{prefix}.ape", A, ratio, coff * head, R, fp32=True),
            t(f"{prefix}.norm", N, head, 1, R),
        ]

    if ratio > 1:
        out += compressor("attn.compressor", hd)
    if ratio == 4:
        ih, ihd = c.pos("index_n_heads"), c.pos("index_head_dim")
        out += [
            t("attn.indexer.wq_b", A, ih * ihd, ql, R, quantizable=True),
            t("attn.indexer.weights_proj", A, ih, h, R),
        ]
        out += compressor("attn.indexer.compressor", ihd)
    out += [
        t("ffn.gate", Group.ROUTER, e, h, R),
        t("ffn.experts.w13", Group.EXPERTS, 2 * ie, h, Split.COLUMN, experts=e, quantizable=True),
        t("ffn.experts.w2", Group.EXPERTS, h, ie, Split.ROW, experts=e, quantizable=True),
    ]
    if hashed:
        out.append(t("ffn.gate.tid2eid", Group.ROUTER, c.pos("vocab_size"), k, R, fp32=True))
    elif c.get("topk_method") == "noaux_tc":
        out.append(t("ffn.gate.e_score_correction_bias", Group.ROUTER, e, 1, R, fp32=True))
    shared = c.integer("n_shared_experts", 0) * ie
    if shared:
        out += [
            t(
                "ffn.shared_experts.gate_up_proj",
                Group.SHARED_EXPERTS,
                2 * shared,
                h,
                Split.COLUMN,
                quantizable=True,
            ),
            t(
                "ffn.shared_experts.down_proj",
                Group.SHARED_EXPERTS,
                h,
                shared,
                Split.ROW,
                quantizable=True,
            ),
        ]
    mix = (2 + hc) * hc
    out += [
        t("attn_norm", N, h, 1, R),
        t("ffn_norm", N, h, 1, R),
        t("hc_attn_fn", N, mix, hc * h, R, fp32=True),
        t("hc_ffn_fn", N, mix, hc * h, R, fp32=True),
        t("hc_attn_base", N, mix, 1, R, fp32=True),
        t("hc_ffn_base", N, mix, 1, R, fp32=True),
        t("hc_attn_scale", N, 3, 1, R, fp32=True),
        t("hc_ffn_scale", N, 3, 1, R, fp32=True),
    ]
    return out


def deepseek_v4_shape(config: Mapping[str, Any], name: str, dtype: str) -> ModelShape:
    """The :class:`ModelShape` of a DeepSeek-V4 config.json (its text model)."""
    c = _Cfg(config)
    n = c.pos("num_hidden_layers")
    h, vocab = c.pos("hidden_size"), c.pos("vocab_size")
    if c.get("hidden_act", "silu") != "silu":
        raise ModelConfigError("hidden_act", "DeepseekV4MLP supports silu only")
    if c.integer("num_key_value_heads", 1) != 1:
        raise ModelConfigError("num_key_value_heads", "DeepSeek-V4 attention has one KV head")
    ratios = effective_ratios(c, n)
    hashed = c.integer("num_hash_layers", 0)
    hd, window = c.pos("head_dim"), c.pos("sliding_window")
    ihd = c.pos("index_head_dim") if 4 in ratios else 0
    by_kind = Pattern.from_list([(r, i < hashed) for i, r in enumerate(ratios)]).groups()
    tensors = [Tensor("embed_tokens", Group.EMBEDDING, vocab, h, Split.VOCAB, stage=Stage.FIRST)]
    specs: dict[LayerAttention, LayerSet] = {}
    for (r, is_hash), ls in sorted(by_kind.items(), key=lambda kv: kv[1].first() or 0):
        tensors += _layer_tensors(c, r, is_hash, ls)
        spec = LayerAttention(
            AttnKind.MLA,
            latent_dim=hd,
            window=window,
            compress_ratio=r,
            index_head_dim=ihd if r == 4 else 0,
        )
        specs[spec] = specs[spec].union(ls) if spec in specs else ls
    hc = c.pos("hc_mult")
    tensors += [
        Tensor("norm", Group.NORM, h, 1, Split.REPLICATED, stage=Stage.LAST),
        Tensor("hc_head_fn", Group.NORM, hc, hc * h, Split.REPLICATED, fp32=True, stage=Stage.LAST),
        Tensor("hc_head_base", Group.NORM, hc, 1, Split.REPLICATED, fp32=True, stage=Stage.LAST),
        Tensor("hc_head_scale", Group.NORM, 1, 1, Split.REPLICATED, fp32=True, stage=Stage.LAST),
    ]
    tie = c.boolean("tie_word_embeddings", False)
    if not tie:
        tensors.append(Tensor("lm_head", Group.LM_HEAD, vocab, h, Split.VOCAB, stage=Stage.LAST))
    rope = c.get("rope_scaling") or c.get("rope_parameters")
    rope_dim = c.pos("qk_rope_head_dim")
    positions = c.pos("max_position_embeddings", 1048576)
    if isinstance(rope, Mapping) and "factor" in rope:
        orig = int(rope.get("original_max_position_embeddings", positions))
        positions = int(orig * float(rope["factor"]))
    thetas = {
        c.get("rope_theta", 10000.0) if r == 1 else c.get("compress_rope_theta") for r in ratios
    }
    ropes = tuple(RopeCache(positions, rope_dim, fp32=True) for _ in sorted(map(str, thetas)))
    groups = tuple(
        sorted((LayerGroup(a, ls) for a, ls in specs.items()), key=lambda g: g.layers.first() or 0)
    )
    mtp = c.integer("num_nextn_predict_layers", 0)
    notes = ["DeepSeek-V4: KV as vLLM packs it (ledger/kv_dsv4.py, vLLM 0.24–0.33, fp8_ds_mla)"]
    if mtp:
        notes.append("MTP (next-n) layers are only loaded with speculative decoding; not counted")
    return ModelShape(
        name=name,
        model_type="deepseek_v4",
        architecture=str((c.get("architectures") or ["DeepseekV4ForCausalLM"])[0]),
        hidden_size=h,
        num_layers=n,
        num_attention_heads=c.pos("num_attention_heads"),
        num_kv_heads=1,
        head_dim=hd,
        vocab_size=vocab,
        intermediate_size=c.pos("moe_intermediate_size"),
        tie_word_embeddings=tie,
        max_position_embeddings=c.pos("max_position_embeddings", 1048576),
        derived_max_model_len=_rope_factor_len(c, "deepseek_v4"),
        dtype=dtype,
        tensors=tuple(tensors),
        layer_groups=groups,
        rope_caches=ropes,
        num_experts=c.pos("n_routed_experts"),
        num_shared_experts=c.integer("n_shared_experts", 0),
        experts_per_token=c.pos("num_experts_per_tok"),
        expert_intermediate_size=c.pos("moe_intermediate_size"),
        quantization=dsv4_quantization(c),
        notes=tuple(notes),
        mtp_layers=mtp,
        # DeepseekV4Model.__init__ reads both whatever the ratios (its scratch and top-k buffers)
        dsv4=Dsv4Dims(hc, c.pos("index_n_heads"), c.pos("index_topk")),
    )
