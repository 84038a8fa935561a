"""Weight bytes per rank: TP shards, PP stages, quantization payload + scales, rope caches, LoRA.

This is what vLLM's "Model loading took X GiB" measures: torch-allocated bytes after loading the
rank's shard (``utils/mem_utils.py::DeviceMemoryProfiler`` around ``load_model``:
``max_memory_allocated()`` after minus before). Llama-3.1-8B in bf16: 8,030,261,248 params × 2 B +
the rope cache 131072 × 128 × 2 B = 16,094,076,928 B = 14.9888 GiB, exactly the logged figure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..memo import ValueMemo
from ..model.quant import copies_by_format, quantized_bytes
from ..model.shapes import Group, ModelShape, Quantization, Split, Stage, Tensor, cdiv

#: vLLM's Marlin MXFP4 MoE backend rounds hidden to 256 and the per-partition expert
#: intermediate size to 128 (fused_moe/oracle/mxfp4.py::
#: mxfp4_round_up_hidden_size_and_intermediate_size, 0.20.0, 0.24.0–0.28.0); the other backends'
#: rounding is picked by engines/vllm.py::mxfp4_layout.
MXFP4_HIDDEN_ALIGN = 256
MXFP4_INTER_ALIGN = 128

#: The Triton (OAI ``triton_kernels``) Hopper swizzle, as vLLM's ``_swizzle_mxfp4``
#: (quantization/utils/mxfp4_utils.py, 0.20.0/0.24.0–0.28.0) calls it with
#: ``make_default_matmul_mxfp4_w_layout(mx_axis=1)`` / ``..._w_scale_layout(mx_axis=1,
#: num_warps=8)``: ``HopperMXValueLayout.swizzle_data`` pads the (2I or H) rows to 16 and the
#: packed bytes (H/2 or I/2) to 32; ``HopperMXScaleLayout.swizzle_data`` pads the scale rows
#: (2I for w13, H for w2) to ``2·num_warps·2·8`` = 256 and the scale groups to 2
#: (triton_kernels tensor_details/layout_details/hopper_{value,scale}.py, the class-based
#: layouts with ``mx_axis`` that vLLM's call signature takes; pinned by vLLM's cmake
#: triton_kernels.cmake: v3.6.0 in 0.20, v3.5.1 in 0.24–0.28)
TRITON_HOPPER_VALUE_ROWS = 16
TRITON_HOPPER_VALUE_BYTES = 32
TRITON_HOPPER_SCALE_ROWS = 2 * 8 * 2 * 8
TRITON_HOPPER_SCALE_GROUPS = 2
#: MXFP4 block: one E8M0 scale byte per 32 values (OCP MX; ``mxfp4_block = 32`` in
#: ``GptOssMxfp4MoEMethod.create_weights``)
MXFP4_BLOCK = 32


@dataclass(frozen=True, slots=True)
class Mxfp4Layout:
    """How one vLLM MXFP4 MoE backend stores gpt-oss's experts (bytes of w13 and w2).

    ``GptOssMxfp4MoEMethod.maybe_roundup_sizes`` (quantization/mxfp4.py, 0.24.0–0.28.0; the
    same rounding in 0.20.0) rounds ``hidden_size`` and ``intermediate_size_per_partition``
    (``intermediate_size // moe_tp``, fused_moe/config.py) with
    ``mxfp4_round_up_hidden_size_and_intermediate_size`` before ``create_weights`` allocates
    w13 ``E × 2I × H/2`` and w2 ``E × H × I/2`` uint8 plus uint8 scales ``E × 2I × H/32`` and
    ``E × H × I/32``. The rounding is of the per-partition size: at TP8 gpt-oss's 360 becomes
    384 (Marlin), not 2944 / 8 = 368.
    """

    backend: str
    hidden_align: int
    inter_align: int
    #: Triton on Hopper: values and scales re-laid by the triton_kernels swizzle (above)
    hopper_swizzle: bool = False
    #: scale groups pre-padded to this multiple before the swizzle (``_swizzle_mxfp4``'s SM90
    #: "pad K (num scale groups) to 0 mod 4", 0.26.0–0.28.0; absent in 0.25.0)
    scale_group_align: int = 1
    #: the checkpoint-layout scales stay registered beside the swizzled copy (the Triton branch
    #: of ``convert_gpt_oss_weight_to_mxfp4_moe_kernel_format`` deletes only w13/w2_weight in
    #: 0.20.0 and 0.24.0; from 0.25.0 it deletes the scales too)
    keeps_checkpoint_scales: bool = False


#: the legacy full-size padding (DeepSeek-V4's experts; gpt-oss before it was read per backend)
MARLIN_LAYOUT = Mxfp4Layout("marlin", MXFP4_HIDDEN_ALIGN, MXFP4_INTER_ALIGN)


def _round_up(n: int, m: int) -> int:
    return cdiv(n, m) * m


def mxfp4_expert_bytes(layout: Mxfp4Layout, hidden: int, inter_per_rank: int) -> tuple[int, int]:
    """(w13, w2) bytes of one gpt-oss expert on one rank, values plus E8M0 scales.

    Marlin (``prepare_moe_mxfp4_layer_for_marlin``) and TRTLLM (the shuffled stacks of
    ``convert_gpt_oss_weight_to_mxfp4_moe_kernel_format``) keep the element counts of
    ``create_weights``; Triton on Hopper adds the swizzle padding (module constants)."""
    h = _round_up(hidden, layout.hidden_align)
    i = _round_up(inter_per_rank, layout.inter_align)
    if not layout.hopper_swizzle:
        w13 = 2 * i * (h // 2) + 2 * i * (h // MXFP4_BLOCK)
        w2 = h * (i // 2) + h * (i // MXFP4_BLOCK)
        return w13, w2

    def values(rows: int, packed: int) -> int:
        return _round_up(rows, TRITON_HOPPER_VALUE_ROWS) * _round_up(
            packed, TRITON_HOPPER_VALUE_BYTES
        )

    def scales(rows: int, groups: int) -> int:
        g = _round_up(_round_up(groups, layout.scale_group_align), TRITON_HOPPER_SCALE_GROUPS)
        kept = rows * groups if layout.keeps_checkpoint_scales else 0
        return _round_up(rows, TRITON_HOPPER_SCALE_ROWS) * g + kept

    w13 = values(2 * i, h // 2) + scales(2 * i, h // MXFP4_BLOCK)
    w2 = values(h, i // 2) + scales(h, i // MXFP4_BLOCK)
    return w13, w2


def pp_layer_range(num_layers: int, pp: int, stage: int) -> range:
    """The layers of one stage, vLLM's ``get_pp_indices`` (distributed/utils.py, 0.6–0.33):
    ``num_layers // pp`` each, the remainder one each to the stages just before the last. O(1),
    so a stage of a 1,024-layer model costs what a stage of a 32-layer one does."""
    per, rem = divmod(num_layers, pp)
    first_extra = pp - 1 - rem  # stages first_extra .. pp-2 hold one more layer
    start = stage * per + max(0, min(stage, pp - 1) - first_extra)
    extra = 1 if first_extra <= stage <= pp - 2 else 0
    return range(start, start + per + extra)


def pp_layer_ranges(num_layers: int, pp: int) -> list[range]:
    """Every stage's layers (:func:`pp_layer_range`)."""
    return [pp_layer_range(num_layers, pp, s) for s in range(pp)]


def copies_on_stage(tensor: Tensor, stage: int, pp: int, layers: range, tie: bool) -> int:
    """Copies of ``tensor`` the stage holding ``layers`` loads."""
    if tensor.stage is Stage.LAYER:
        return 0 if tensor.layers is None else tensor.layers.count_in(layers)
    if tensor.stage in (Stage.FIRST, Stage.ENCODER):
        # tied embeddings: the last stage needs the same matrix for its lm_head
        return int(
            stage == 0
            or (
                tie
                and stage == pp - 1
                and tensor.group is Group.EMBEDDING
                and tensor.name == "embed_tokens"
            )
        )
    return int(stage == pp - 1)


@dataclass(frozen=True, slots=True)
class WeightBreakdown:
    """Bytes of one rank's weights, by tensor group, plus rope caches and LoRA slots."""

    by_group: dict[str, int]
    rope_cache: int
    lora: int
    quantized_params: int
    unquantized_params: int
    #: safetensors headers − config-derived tensors, this rank's share (0 without headers)
    header_correction: int = 0
    header_note: str = ""

    @property
    def total(self) -> int:
        return sum(self.by_group.values()) + self.rope_cache + self.lora + self.header_correction


def _mxfp4_rank_bytes(t: Tensor, hidden: int, ttp: int, layout: Mxfp4Layout) -> int:
    """One rank's bytes of an MXFP4 expert tensor (w13: 2I × H, w2: H × I), the per-partition
    intermediate size rounded as :class:`Mxfp4Layout` says."""
    r, c = t.shape_per_rank(ttp)
    w13, w2 = mxfp4_expert_bytes(layout, hidden, c if r == hidden else r // 2)
    return (w2 if r == hidden else w13) * t.experts


#: architectures whose vLLM class lists ``embedding_modules = {"embed_tokens": ...,
#: "lm_head": ...}``, which makes both LoRA targets by default (``lora/utils.py::
#: get_supported_lora_modules``; llama.py (Mistral inherits it), qwen3.py, qwen3_moe.py,
#: mixtral.py, nemotron_h.py in the 0.20.0, 0.25.0 and 0.33.0 sources)
VOCAB_LORA_ARCHITECTURES = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "MixtralForCausalLM",
        "NemotronHForCausalLM",
    }
)


def vocab_lora_bytes(
    shape: ModelShape,
    first_stage: bool,
    last_stage: bool,
    max_loras: int,
    max_rank: int,
    dtype_bytes: int,
) -> int:
    """The embedding and lm_head LoRA slots (vLLM 0.20–0.33, read in 0.20.0/0.24.0/0.25.0/
    0.26.0/0.33.0): ``VocabParallelEmbeddingWithLoRA.create_lora_weights`` holds A of
    ``max_loras × vocab × rank`` and B of ``max_loras × hidden × rank``,
    ``LogitsProcessorWithLoRA.create_lora_weights`` A of ``max_loras × rank × hidden`` and B of
    ``max_loras × vocab × rank``, all unsharded (the full ``org_vocab_size`` / ``vocab_size``) in
    the LoRA dtype, on the stages holding the embedding and the lm_head."""
    if max_loras <= 0 or shape.architecture not in VOCAB_LORA_ARCHITECTURES:
        return 0
    pair = max_loras * max_rank * (shape.vocab_size + shape.hidden_size) * dtype_bytes
    return pair * (int(first_stage) + int(last_stage))


def lora_bytes(
    shape: ModelShape,
    tp: int,
    layers: range,
    max_loras: int,
    max_rank: int,
    dtype_bytes: int,
    ep: int = 1,
    moe_tp: int = 0,
) -> int:
    """LoRA slots vLLM allocates at load time for every wrapped linear of this rank.

    Dense linears (lora/layers/base_linear.py): ``max_loras × rank × (in_shard + out_shard)``.
    Fused MoE (lora/layers/fused_moe.py::FusedMoEWithLoRA, in the 0.13–0.33 wheels): per local
    expert, w13 has one A (rank × H) and one B (I/tp × rank) per slice (gate, up) and w2 one A
    (rank × I/tp) and one B (H × rank): ``max_loras × E_local × rank × (3H + 3I/tp)``. With
    expert parallelism each rank holds ``E / ep`` whole experts. Elements in the LoRA dtype
    (``--lora-dtype auto``: the model dtype).
    """
    if max_loras <= 0:
        return 0
    total = 0
    for t in shape.tensors:
        copies = t.layers.count_in(layers) if t.layers is not None else 0
        if not t.quantizable or not copies:
            continue
        if t.experts > 1:
            tt = _expert_parallel(t, ep) if ep > 1 else t
            r, c = tt.shape_per_rank(moe_tp if moe_tp > 0 and ep <= 1 else tp)
            slices = 2 if t.name.endswith("w13") else 1
            # column-parallel w13: A per slice is rank × c (= H), B is r (= 2I/tp) × rank
            # row-parallel w2: A is rank × c (= I/tp), B is r (= H) × rank
            total += copies * max_loras * tt.experts * max_rank * (slices * c + r) * dtype_bytes
            continue
        r, c = t.shape_per_rank(tp)
        # column-parallel: A is full-in x rank, B is rank x out_shard; row-parallel: the reverse
        total += copies * max_loras * max_rank * (r + c) * dtype_bytes
    return total


def _expert_parallel(t: Tensor, ep: int) -> Tensor:
    """With expert parallelism each rank holds ``E / ep`` whole experts instead of a TP slice."""
    return replace(t, split=Split.REPLICATED, experts=cdiv(t.experts, ep))


#: memo of weight_breakdown by value (the shape and the arguments): a plan predicts the same
#: weights several times (probe, chosen utilization, chosen max-num-seqs) and sweeps reuse one
#: shape for many points; shared by every thread (:class:`~inference_capacity.memo.ValueMemo`)
_MEMO: ValueMemo[tuple[Any, ...], WeightBreakdown] = ValueMemo(512)


def weight_breakdown(
    shape: ModelShape,
    tp: int,
    pp: int,
    stage: int,
    dtype_bytes: int,
    quant: Quantization | None,
    max_loras: int = 0,
    max_lora_rank: int = 16,
    ep: int = 1,
    moe_tp: int = 0,
    mxfp4: Mxfp4Layout = MARLIN_LAYOUT,
    vocab_lora: bool = False,
) -> WeightBreakdown:
    """One rank's weights. ``ep`` > 1: experts split over ``ep`` ranks (--enable-expert-parallel,
    ep = tp × dp), everything else as TP says. ``moe_tp``: the TP size the routed experts are
    sharded over without expert parallelism (0: ``tp``); vLLM flattens TP across DP
    (fused_moe/config.py::FusedMoEParallelConfig.make and flatten_tp_across_dp_and_pcp,
    0.20.0/0.25.0: ``tp_size = dp × pcp × tp`` when ``use_ep`` is False), so with
    ``--data-parallel-size`` and no EP each rank holds 1/(tp·dp) of every expert.
    ``vocab_lora``: with LoRA, add the embedding/lm_head slots (:func:`vocab_lora_bytes`)."""
    moe_tp = moe_tp if moe_tp > 0 and ep <= 1 else tp
    args = (
        tp,
        pp,
        stage,
        dtype_bytes,
        quant,
        max_loras,
        max_lora_rank,
        ep,
        moe_tp,
        mxfp4,
        vocab_lora,
    )
    return _MEMO.get((shape, *args), lambda: _weight_breakdown(shape, *args))


def _weight_breakdown(
    shape: ModelShape,
    tp: int,
    pp: int,
    stage: int,
    dtype_bytes: int,
    quant: Quantization | None,
    max_loras: int,
    max_lora_rank: int,
    ep: int,
    moe_tp: int,
    mxfp4: Mxfp4Layout = MARLIN_LAYOUT,
    vocab_lora: bool = False,
) -> WeightBreakdown:
    layers = pp_layer_range(shape.num_layers, pp, stage)
    by_group: dict[str, int] = {}
    qparams = uparams = 0
    rope = 0
    for t in shape.tensors:
        copies = copies_on_stage(t, stage, pp, layers, shape.tie_word_embeddings)
        if not copies:
            continue
        if ep > 1 and t.experts > 1:
            t = _expert_parallel(t, ep)
        ttp = moe_tp if t.experts > 1 else tp
        b = 0
        quantized = 0
        for fmt, n in copies_by_format(quant, t, layers) if quant is not None else ():
            if fmt.method == "mxfp4" and t.experts > 1 and t.cols > 1:
                b += n * _mxfp4_rank_bytes(t, shape.hidden_size, ttp, mxfp4)
            else:
                r, c = t.shape_per_rank(ttp)
                b += n * quantized_bytes(fmt, r, c, t.experts)
            quantized += n
        qparams += quantized * t.numel_per_rank(ttp)
        if copies > quantized:
            n = t.numel_per_rank(ttp)
            b += (copies - quantized) * n * (4 if t.fp32 else dtype_bytes)
            uparams += (copies - quantized) * n
        by_group[t.group.value] = by_group.get(t.group.value, 0) + b
        if t.stage is Stage.LAYER and t.group is Group.ATTENTION:
            rope = 1  # the stage has attention: it builds the rope caches (below)
    # MLA: process_weights_after_loading derives W_UK_T / W_UV from kv_b_proj in the model
    # dtype and keeps kv_b_proj for prefill (vllm/model_executor/layers/mla / attention/mla)
    for t in shape.tensors:
        if t.name == "attn.kv_b_proj" and t.layers is not None:
            extra = t.layers.count_in(layers) * t.numel_per_rank(tp) * dtype_bytes
            if extra:
                by_group["attention"] = by_group.get("attention", 0) + extra
    if rope:
        rope = sum(
            rc.positions * rc.rotary_dim * (4 if rc.fp32 else dtype_bytes)
            for rc in shape.rope_caches
        )
    lora = lora_bytes(shape, tp, layers, max_loras, max_lora_rank, dtype_bytes, ep, moe_tp)
    if vocab_lora:
        lora += vocab_lora_bytes(
            shape, stage == 0, stage == pp - 1, max_loras, max_lora_rank, dtype_bytes
        )
    correction = _header_correction(
        shape, tp, pp, stage, dtype_bytes, quant, max(ep, moe_tp // tp), by_group
    )
    note = ""
    if correction and shape.header is not None:
        h = shape.header
        note = (
            f"safetensors headers: {h.loaded_bytes} B loaded vs {h.config_bytes} B "
            f"config-derived ({h.delta:+d} B; this rank's share)"
        )
    return WeightBreakdown(by_group, rope, lora, qparams, uparams, correction, note)


def _header_correction(
    shape: ModelShape,
    tp: int,
    pp: int,
    stage: int,
    dtype_bytes: int,
    quant: Quantization | None,
    ep: int,
    by_group: dict[str, int],
) -> int:
    """The header wins: the rank's share of (header bytes − config-derived bytes).

    At TP = PP = 1 the share is the whole difference, so the rank's tensor bytes are exactly the
    headers' loaded bytes. Sharded, the difference is spread in proportion to the rank's tensor
    bytes (rounded up). Only while the checkpoint is loaded as stored: a different runtime dtype
    or an online quantization changes every byte and the config-derived figure stands."""
    h = shape.header
    if h is None or h.delta == 0 or dtype_bytes != h.dtype_bytes or quant != h.quantization:
        return 0
    rank = sum(by_group.values())
    if tp == 1 and pp == 1 and ep == 1:
        return h.delta
    full = sum(weight_breakdown(shape, 1, 1, 0, dtype_bytes, quant).by_group.values())
    if full <= 0:
        return 0
    share = h.delta * rank
    return -((-share) // full)  # ceil
