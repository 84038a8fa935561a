"""Vision towers of the multimodal wrappers, on the first stage (``Stage.ENCODER``): a generic
ViT estimate and the towers vLLM implements for Qwen3.5 (Qwen3-VL), Gemma 4 and Kimi-VL
(MoonViT); and :func:`encoder_tower`, the towers whose encoder *profile* is sized (Gemma 3's
SigLIP)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..shapes import Group, Split, Stage, Tensor, VisionTower
from .access import _Cfg


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
    if model_type in ("qwen3_5", "qwen3_5_moe", "qwen3_vl", "qwen3_vl_moe"):
        return _qwen3_vl_vision(vc)
    if model_type in ("qwen2_vl", "qwen2_5_vl"):
        return _qwen_vl_vision(model_type, vc)
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


def encoder_tower(
    model_type: str, arch: str, config: Mapping[str, Any], text_hidden: int
) -> VisionTower | None:
    """The tower of vLLM's multimodal encoder profile, where its dummy input follows from the
    config alone; None where it does not (the plan refuses those unless profiling is off)."""
    vc = config.get("vision_config")
    if model_type == "gemma3" and isinstance(vc, Mapping):
        return _gemma3_siglip(arch, config, vc, text_hidden)
    if model_type in QWEN_DYNAMIC_TOWERS and isinstance(vc, Mapping):
        return _qwen_vl_tower(model_type, arch, vc, text_hidden)
    return None


def deepstack_levels(model_type: str, config: Mapping[str, Any]) -> int:
    """Qwen3-VL's deepstack levels: ``Qwen3VLForConditionalGeneration.__init__`` (and
    ``Qwen3VLMoeForConditionalGeneration``'s; models/qwen3_vl.py and qwen3_vl_moe.py, 0.12.0
    and 0.21.0) sets ``deepstack_num_level = len(vision_config.deepstack_visual_indexes)``
    and, with the tower built, allocates one zeroed ``(max_num_batched_tokens,
    text hidden_size)`` tensor per level (the model dtype, on the device). Qwen3.5's wrappers
    have their own ``__init__`` without them (qwen3_5.py, 0.21.0; their configs list no
    deepstack index either): 0."""
    if model_type not in ("qwen3_vl", "qwen3_vl_moe"):
        return 0
    vc = config.get("vision_config")
    indexes = vc.get("deepstack_visual_indexes") if isinstance(vc, Mapping) else None
    return len(indexes) if isinstance(indexes, list) else 0


#: the Qwen3-VL-style wrappers (their towers keep ``encoder_metadata`` through the blocks)
QWEN3_TOWERS = frozenset({"qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"})
#: the wrappers whose dummy image follows a Qwen2-VL-style processor's pixel bounds
#: (``Qwen2VLProcessingInfo.get_image_size_with_most_features``): Qwen2-VL, Qwen2.5-VL, and
#: Qwen3-VL / Qwen3.5 (``Qwen3VLProcessingInfo`` subclasses it; ``Qwen3_5ProcessingInfo`` and
#: ``Qwen3_5MoeProcessingInfo`` subclass that, models/qwen3_vl.py and qwen3_5.py, 0.24.0)
QWEN_DYNAMIC_TOWERS = frozenset(
    {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"}
)


def _gemma3_siglip(
    arch: str, config: Mapping[str, Any], vc: Mapping[str, Any], text_hidden: int
) -> VisionTower | None:
    """Gemma 3's SigLIP tower (vllm models/gemma3_mm.py, siglip.py; 0.11–0.33).

    ``Gemma3ProcessingInfo.get_num_image_tokens`` is ``(num_crops + 1) × image_seq_length``;
    the dummy image (``get_image_size_with_most_features``, 50 × 50·max_crops) gets no crops
    while pan-and-scan is off (the processor default, ``do_pan_and_scan`` unset), so one item
    is one ``image_size``² crop and ``mm_tokens_per_image`` (the processor's
    ``image_seq_length``, 256) embeddings after ``Gemma3MultiModalProjector``'s average pool.
    SigLIP's qkv/fc1 are column- and out/fc2 row-parallel (``SiglipAttention``, ``SiglipMLP``)."""
    if str(vc.get("model_type", "siglip_vision_model")) != "siglip_vision_model":
        return None
    h = int(vc.get("hidden_size", 0) or 0)
    inter = int(vc.get("intermediate_size", 0) or 0)
    layers = int(vc.get("num_hidden_layers", 0) or 0)
    heads = int(vc.get("num_attention_heads", 0) or 0)
    size = int(vc.get("image_size", 0) or 0)
    patch = int(vc.get("patch_size", 0) or 0)
    tokens = int(config.get("mm_tokens_per_image", 256) or 0)
    if not (h and inter and layers and heads and size and patch and tokens and text_hidden):
        return None
    return VisionTower(
        architecture=arch,
        tower="siglip",
        modality="image",
        tokens_per_item=tokens,
        crops_per_item=1,
        image_size=size,
        channels=int(vc.get("num_channels", 3) or 3),
        patches_per_crop=(size // patch) ** 2,
        hidden=h,
        intermediate=inter,
        layers=layers,
        heads=heads,
        output_hidden=text_hidden,
        tp_sharded=True,
        pixels_per_crop=int(vc.get("num_channels", 3) or 3) * size * size,
        # SiglipMLP: fc1's output and the activation's; SiglipAttention: qkv (3) and its output
        mlp_copies=2,
        attn_copies=4,
        output_tokens_per_item=tokens,
    )


def _qwen_vl_dims(model_type: str, vc: Mapping[str, Any]) -> tuple[int, int, int, int, int] | None:
    """(hidden, intermediate, depth, heads, out) of a Qwen2-VL / Qwen2.5-VL vision config.
    Qwen2-VL (``Qwen2VLVisionConfig``): ``embed_dim``, ``mlp_ratio`` × embed_dim, ``hidden_size``
    is the merger's output; Qwen2.5-VL (``Qwen2_5_VLVisionConfig``): ``hidden_size``,
    ``intermediate_size``, ``out_hidden_size``."""
    if model_type == "qwen2_vl":
        h = int(vc.get("embed_dim", 0) or 0)
        inter = int(h * float(vc.get("mlp_ratio", 0) or 0))
        out = int(vc.get("hidden_size", 0) or 0)
    else:
        h = int(vc.get("hidden_size", 0) or 0)
        inter = int(vc.get("intermediate_size", 0) or 0)
        out = int(vc.get("out_hidden_size", 0) or 0)
    depth = int(vc.get("depth", 0) or 0)
    heads = int(vc.get("num_heads", 0) or 0)
    if not (h and inter and out and depth and heads):
        return None
    return h, inter, depth, heads, out


def _qwen_vl_grid(vc: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """(patch, spatial merge, temporal patch, channels) of a Qwen2(.5)-VL vision config."""
    return (
        int(vc.get("patch_size", vc.get("spatial_patch_size", 14)) or 14),
        int(vc.get("spatial_merge_size", 2) or 2),
        int(vc.get("temporal_patch_size", 2) or 2),
        int(vc.get("in_channels", vc.get("in_chans", 3)) or 3),
    )


def _qwen_vl_vision(model_type: str, vc: Mapping[str, Any]) -> list[Tensor]:
    """Qwen2-VL / Qwen2.5-VL vision tower, ``visual`` (vllm models/qwen2_vl.py
    ``Qwen2VisionTransformer``, qwen2_5_vl.py ``Qwen2_5_VisionTransformer``; 0.11–0.33):
    Conv3d patch embed without bias (h × c·t·p²); per block two norms (LayerNorm with bias in
    Qwen2-VL: 4h; RMSNorm in Qwen2.5-VL: 2h), ``qkv`` (3h² + 3h, bias) and ``proj`` (h² + h,
    RowParallelLinear's bias), the MLP (Qwen2-VL fc1/fc2 with biases: 2hi + i + h; Qwen2.5-VL
    gate_up/down with biases: 3hi + 2i + h); the patch merger: ``ln_q`` (LayerNorm 2h /
    RMSNorm h), ``mlp.0`` (4h)² + 4h and ``mlp.2`` out·4h + out (m = merge² = 4). Sharded over
    TP (QKVParallelLinear, Merged/ColumnParallelLinear, RowParallelLinear)."""
    dims = _qwen_vl_dims(model_type, vc)
    if dims is None:
        return []
    h, inter, depth, _, out = dims
    patch, merge, tps, chans = _qwen_vl_grid(vc)
    qwen2 = model_type == "qwen2_vl"
    norms = 4 * h if qwen2 else 2 * h
    mlp = 2 * h * inter + inter + h if qwen2 else 3 * h * inter + 2 * inter + h
    per_block = norms + 3 * h * h + 3 * h + h * h + h + mlp
    hm = h * merge * merge
    enc = Stage.ENCODER
    return [
        Tensor("vision.blocks", Group.VISION, per_block, depth, Split.COLUMN, stage=enc),
        Tensor(
            "vision.patch_embed",
            Group.VISION,
            h,
            chans * tps * patch * patch,
            Split.REPLICATED,
            stage=enc,
        ),
        Tensor(
            "vision.merger",
            Group.VISION,
            1,
            (2 if qwen2 else 1) * h + hm * hm + hm,
            Split.COLUMN,
            stage=enc,
        ),
        Tensor("vision.merger.out", Group.VISION, out, hm + 1, Split.ROW, stage=enc),
    ]


def _qwen_vl_tower(
    model_type: str, arch: str, vc: Mapping[str, Any], text_hidden: int
) -> VisionTower | None:
    """Qwen2-VL / Qwen2.5-VL / Qwen3-VL / Qwen3.5's tower, not yet sized: its dummy image
    follows from the image processor's pixel bounds
    (``Qwen2VLProcessingInfo.get_image_size_with_most_features``), which the config does not
    hold; engines/vllm_mm.py::size_dynamic_tower sizes it. The block's MLP peak: Qwen2.5-VL's
    gate_up output (2i) and SiluAndMul's (i), 3 copies; Qwen2-VL's fc1 output and QuickGELU's,
    and Qwen3-VL's ``linear_fc1`` output and its GELU's (``Qwen3_VisionMLP.forward``,
    models/qwen3_vl.py 0.24.0), 2. The attention peak: qkv (3h), the contiguous q/k copy and
    its rotated copy (2h each, ``Qwen2_5_VisionAttention.forward``, which ``Qwen3_VisionBlock``
    uses too) and the attention output (h): 8 copies. Attention is ``MMEncoderAttention``
    (flash-attention varlen over ``cu_seqlens``; the window/full split of
    ``fullatt_block_indexes`` changes only the sequence boundaries): no patches² scores.
    Qwen3-VL's interpolated position embeddings and rotary tables (``prepare_encoder_metadata``:
    h + head_dim per patch, live through the blocks) are ``kept_per_patch``."""
    dims = _qwen_vl_dims(model_type, vc)
    if dims is None or not text_hidden:
        return None
    h, inter, depth, heads, out = dims
    patch, merge, tps, chans = _qwen_vl_grid(vc)
    return VisionTower(
        architecture=arch,
        tower=model_type,
        modality="image",
        tokens_per_item=0,
        crops_per_item=1,
        image_size=0,
        channels=chans,
        patches_per_crop=0,
        hidden=h,
        intermediate=inter,
        layers=depth,
        heads=heads,
        output_hidden=out,
        tp_sharded=True,
        pixels_per_crop=0,
        mlp_copies=3 if model_type == "qwen2_5_vl" else 2,
        attn_copies=8,
        output_tokens_per_item=0,
        patch_size=patch,
        merge_size=merge,
        temporal_patch_size=tps,
        float32_pixels=True,
        kept_per_patch=h + h // heads if model_type in QWEN3_TOWERS else 0,
    )


#: ``get_supported_mm_limits`` of vLLM's processing info per wrapper (models/gemma3_mm.py,
#: mllama.py, mllama4.py, kimi_vl.py: image; qwen2_vl.py, qwen2_5_vl.py: image and video;
#: 0.11–0.33). Any other multimodal model: every modality vLLM defines, so a text-only profile
#: needs each named at 0.
_MM_MODALITIES: dict[str, tuple[str, ...]] = {
    "gemma3": ("image",),
    "mllama": ("image",),
    "llama4": ("image",),
    "kimi_vl": ("image",),
    "qwen2_vl": ("image", "video"),
    "qwen2_5_vl": ("image", "video"),
    # Qwen3VLProcessingInfo inherits Qwen2VLProcessingInfo.get_supported_mm_limits
    # {"image", "video"}; Qwen3_5(Moe)ProcessingInfo subclass it (qwen3_5.py, 0.25.0)
    "qwen3_vl": ("image", "video"),
    "qwen3_vl_moe": ("image", "video"),
    "qwen3_5": ("image", "video"),
    "qwen3_5_moe": ("image", "video"),
}
ALL_MODALITIES: tuple[str, ...] = ("audio", "image", "video")


def mm_modalities(model_type: str, config: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The modalities vLLM's processor accepts (``get_supported_mm_limits``). Gemma 4
    (gemma4_mm.py, 0.25.0): image and video, audio only when ``audio_config`` is set."""
    if model_type == "gemma4":
        has_audio = bool(config and config.get("audio_config"))
        return ("audio", "image", "video") if has_audio else ("image", "video")
    return _MM_MODALITIES.get(model_type, ALL_MODALITIES)
