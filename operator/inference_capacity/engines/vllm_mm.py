"""vLLM's multimodal encoder profile: what ``--limit-mm-per-prompt`` and ``--skip-mm-profiling``
do to the activation peak that vLLM subtracts from the KV budget.

Each multimodal architecture's profile is in one of three classes (:func:`profile_sizing`,
the one place that decides): **sized** by the formula below from its :class:`VisionTower`
(Gemma 3's SigLIP; Qwen2-VL / Qwen2.5-VL once the image processor's ``max_pixels`` sizes the
dummy image, :func:`size_dynamic_tower`), **calibrated** inside a constant fitted on a startup
log that ran the profile
(:data:`CALIBRATED_PROFILES`: Llama 4, ``LLAMA4_ENCODER_PROFILE_GIB`` fitted on
``vllm-startup-041``), or **unknown** (every other tower): resolve.py refuses the last unless
the profile is text-only. The formula is derived from vLLM's code (0.11–0.33), not calibrated
on a log (no startup log of a model with a sized tower is in tests/data/vllm-startup-logs.jsonl):

* ``v1/worker/gpu_model_runner.py::GPUModelRunner.profile_run``: unless
  ``skip_mm_profiling``, and when the encoder budget is non-zero, it picks the modality with
  the most tokens per item (``get_modality_with_max_tokens``), builds ``max_items_per_batch``
  copies of that modality's largest dummy item (``_get_mm_dummy_batch``), runs the encoder on
  them in one call (``get_multimodal_embeddings`` / ``embed_multimodal``) and keeps the outputs
  in ``encoder_cache`` while ``_dummy_run`` (the text forward) and the dummy sampler run; the
  cache is cleared afterwards. The torch peak is therefore the larger of the encoder step and
  the text step plus the outputs.
* ``v1/core/encoder_cache_manager.py::compute_mm_encoder_budget``: the compute budget
  (``max_num_encoder_input_tokens`` / ``max_num_batched_encoder_embeds``) and the cache size
  both default to ``max_num_batched_tokens`` and are raised to the largest item.
* ``MultiModalBudget._get_max_items`` (``v1/worker/utils.py``, later
  ``multimodal/budget.py``): ``max(1, min(budget // tokens, max_num_reqs × per_prompt))`` with
  ``per_prompt = max(1, min(limit, max_model_len // tokens))`` and, without chunked prefill,
  ``max_num_reqs = min(max_num_seqs, max_num_batched_tokens // tokens)``.
* ``config/multimodal.py::MultiModalConfig.limit_per_prompt``: a count per modality (999 when
  unset) or, from 0.11.1, an options object (``count`` plus ``width``/``height``,
  ``num_frames`` for video, ``length`` for audio; other keys are refused, ``extra="forbid"``).
* ``--skip-mm-profiling`` (``MultiModalConfig.skip_mm_profiling``, PR #22950, from 0.10.2):
  ``profile_run`` logs "Skipping memory profiling for multimodal encoder" and runs none.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from ..model import ModelShape, VisionTower
from ..units import GiB
from .versions import Era, Version
from .vllm_rules import VllmRules

#: the eras whose encoder profile is modelled: the V1 runner's profile_run with MultiModalBudget
#: (0.11–0.33); before, a multimodal plan is refused unless the profile is text-only
MM_PROFILE_ERAS: Final = frozenset({Era.V1_NO_CG, Era.V1_CG, Era.V1_CONSUMED})
#: MultiModalConfig.get_limit_per_prompt: a modality the flag does not name allows 999 items
DEFAULT_MM_LIMIT: Final = 999
#: the option keys each modality's dummy options accept (config/multimodal.py: BaseDummyOptions
#: count; ImageDummyOptions width/height; VideoDummyOptions num_frames/width/height;
#: AudioDummyOptions length)
_OPTION_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "image": frozenset({"count", "width", "height"}),
    "video": frozenset({"count", "num_frames", "width", "height"}),
    "audio": frozenset({"count", "length"}),
}
_BASE_KEYS: Final = frozenset({"count"})


class ProfileSizing(enum.Enum):
    """How the ledger accounts for a multimodal model's encoder profile."""

    SIZED = "sized"  # encoder_profile: the tower's forward over vLLM's dummy batch
    CALIBRATED = "calibrated"  # inside a constant fitted on a log that ran it (not added again)
    UNKNOWN = "unknown"  # not modelled: resolve.py refuses it unless the profile is text-only


@dataclass(frozen=True, slots=True)
class Calibration:
    """A fitted constant of engines/vllm.py that absorbed an encoder profile, and the log."""

    constant: str
    gib: float  # the constant's value: what the profile adds to the activation peak
    log: str  # the point of tests/data/vllm-startup-logs.jsonl
    point: str  # what that start ran
    moe_only: bool  # fitted on a MoE start, counted for the MoE checkpoints only

    def note(self, architecture: str) -> str:
        return (
            f"the multimodal encoder profile of {architecture} is not sized by formula: it is "
            f"{self.constant} = {self.gib} GiB, fitted on {self.log} ({self.point}), which ran "
            "it (in-sample, one point); other settings get the same bytes"
        )


#: Llama 4's encoder profile: the activation residual of vllm-startup-041 (Llama-4-Scout TP4,
#: 0.19.0, the image limit unset, so profile_run ran the encoder step) over its text terms,
#: the fused-MoE buffer from the code among them (engines/vllm.py::moe_workspace): 3.19 GiB
#: logged − 3.037 predicted. Until 2026-12-07 a fitted MoE-workspace constant held it.
LLAMA4_ENCODER_PROFILE_GIB = 0.153

#: encoder profiles calibrated, by architecture. Maverick has the same tower (vision_config
#: identical to Scout's) and the same constant.
CALIBRATED_PROFILES: Final[Mapping[str, Calibration]] = {
    "Llama4ForConditionalGeneration": Calibration(
        "LLAMA4_ENCODER_PROFILE_GIB",
        LLAMA4_ENCODER_PROFILE_GIB,
        "vllm-startup-041",
        "Llama-4-Scout-17B-16E-Instruct, TP4, vLLM 0.19.0, H100 80GB, max-model-len 8192, "
        "8192 batched tokens, image limit unset",
        moe_only=True,
    ),
}


def calibration(shape: ModelShape) -> Calibration | None:
    """The fitted constant that holds ``shape``'s encoder profile, or None."""
    cal = CALIBRATED_PROFILES.get(shape.architecture)
    if cal is None or (cal.moe_only and not shape.is_moe):
        return None
    return cal


def profile_sizing(shape: ModelShape) -> ProfileSizing | None:
    """The class of ``shape``'s encoder profile; None for a text model. A calibrated
    architecture stays calibrated even if a tower is read for it (no double counting)."""
    if not shape.is_multimodal:
        return None
    if calibration(shape) is not None:
        return ProfileSizing.CALIBRATED
    if shape.vision_tower is not None and shape.vision_tower.sized:
        return ProfileSizing.SIZED
    return ProfileSizing.UNKNOWN


def parse_limit_mm_per_prompt(text: str) -> dict[str, int]:
    """The item count per modality of ``--limit-mm-per-prompt`` (JSON), as
    ``MultiModalConfig._validate_limit_per_prompt`` reads it: ``{"image": 2}``, or
    ``{"video": {"count": 1, "num_frames": 32, "width": 512, "height": 512}}``, or both mixed.
    ValueError naming the flag for anything vLLM would refuse. The size options only shrink the
    dummy item (``_get_dummy_images`` clips to the processor's largest size): Gemma 3 resizes
    every image to a fixed resolution, so only the count matters there; for Qwen2(.5)-VL
    :func:`image_options` hands the image width/height to :func:`size_dynamic_tower`."""
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--limit-mm-per-prompt: not a JSON object ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ValueError("--limit-mm-per-prompt: not a JSON object")
    out: dict[str, int] = {}
    for modality, limit in value.items():
        if isinstance(limit, dict):
            allowed = _OPTION_KEYS.get(modality, _BASE_KEYS)
            extra = sorted(set(limit) - allowed)
            if extra:
                raise ValueError(
                    f"--limit-mm-per-prompt: {modality!r} takes {', '.join(sorted(allowed))}, "
                    f"not {', '.join(extra)}"
                )
            for key, v in limit.items():
                if key != "count" and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                    raise ValueError(
                        f"--limit-mm-per-prompt: {modality}.{key} must be an integer > 0"
                    )
            count = limit.get("count", DEFAULT_MM_LIMIT)
        else:
            count = limit
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"--limit-mm-per-prompt: the count for {modality!r} must be >= 0")
        out[str(modality)] = count
    return out


# the options form ({"image": {"count": 1, "width": 512}}) came in 0.11.1: the rulebook's
# VllmRules.mm_limit_options


def uses_options(text: str) -> bool:
    """Whether a valid ``--limit-mm-per-prompt`` value uses the options form anywhere."""
    value = json.loads(text)
    return isinstance(value, dict) and any(isinstance(v, dict) for v in value.values())


def text_only(limits: Mapping[str, int] | None, modalities: tuple[str, ...]) -> bool:
    """Every modality the model accepts at 0: vLLM's budget has no active modality
    (``compute_mm_encoder_budget`` returns 0, 0) and ``profile_run`` runs no encoder. A
    modality the flag does not name allows 999 items; unset (None) is 999 for each."""
    if limits is None:
        return False
    return all(limits.get(m, DEFAULT_MM_LIMIT) == 0 for m in modalities)


def encoder_budget(tokens_per_item: int, max_num_batched_tokens: int) -> int:
    """``min(compute budget, cache size)``; both default to ``max_num_batched_tokens`` and are
    raised to the largest item (``compute_mm_encoder_budget``)."""
    return max(max_num_batched_tokens, tokens_per_item)


def max_items_per_batch(
    tokens_per_item: int,
    limit: int,
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    chunked_prefill: bool,
) -> int:
    """``MultiModalBudget._get_max_items``: the dummy items the profile batches."""
    if tokens_per_item <= 0 or limit <= 0:
        return 0
    by_encoder = encoder_budget(tokens_per_item, max_num_batched_tokens) // tokens_per_item
    per_prompt = max(1, min(limit, max_model_len // tokens_per_item))
    reqs = max_num_seqs
    if not chunked_prefill:
        reqs = min(reqs, max_num_batched_tokens // tokens_per_item)
    return max(1, min(by_encoder, reqs * per_prompt))


@dataclass(frozen=True, slots=True)
class EncoderProfile:
    """The encoder step of vLLM's profile run on one rank of the first pipeline stage. Bytes."""

    modality: str
    items: int
    tokens_per_item: int
    budget: int  # encoder budget, tokens (the "Encoder cache will be initialized" log line)
    pixel_bytes: int  # the batched dummy pixels on the device
    tower_peak: int  # transient activations of the tower over the whole batch
    outputs: int  # embeddings kept in encoder_cache during the text forward

    @property
    def encoder_step(self) -> int:
        return self.pixel_bytes + self.tower_peak

    def extra_over(self, text_peak: int) -> int:
        """What the profile adds to a text-only activation peak ``text_peak``: the torch peak is
        ``max(encoder step, text step + outputs)``."""
        return max(self.encoder_step, text_peak + self.outputs) - text_peak

    def describe(self) -> str:
        return (
            f"{self.items} {self.modality} items × {self.tokens_per_item} tokens (encoder "
            f"budget {self.budget}): encoder step {self.encoder_step / GiB:.2f} GiB, "
            f"outputs kept {self.outputs / GiB:.2f} GiB"
        )


def vit_layer_peak_per_patch(tower: VisionTower, tp: int) -> int:
    """Elements live per patch at the peak of one ViT encoder layer (``SiglipEncoderLayer``
    in inference mode): the residual and the LayerNorm output (hidden each) while the MLP holds
    fc1's output and the activation's (intermediate / tp each; fc1 is column-parallel). The
    attention half holds qkv (3·hidden / tp) and its output (hidden / tp) instead, which is
    smaller whenever intermediate > 2·hidden. Attention runs through vLLM's
    ``MultiHeadAttention`` (flash-attention / memory-efficient SDPA): no patches² scores."""
    shard = tp if tower.tp_sharded else 1
    mlp = 2 * tower.hidden + tower.mlp_copies * -(-tower.intermediate // shard)
    attn = 2 * tower.hidden + tower.attn_copies * -(-tower.hidden // shard)
    return max(mlp, attn) + tower.kept_per_patch


def encoder_profile(
    shape: ModelShape,
    limits: Mapping[str, int] | None,
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    chunked_prefill: bool,
    tp: int,
    dtype_bytes: int,
) -> EncoderProfile | None:
    """The encoder step vLLM's profile runs for ``shape``'s tower, or None when it runs none
    (a text model, every modality at 0, a calibrated profile, or a tower this module does not
    size: the caller refuses those).

    The batched pixels are counted in the model dtype (``SiglipVisionEmbeddings`` casts them
    to the patch embedding's dtype; the processor's float32 copy alongside, 3·896²·4 B ≈ 9.6 MB
    per Gemma 3 image, is left out), and for the Qwen dynamic-resolution towers
    (``VisionTower.float32_pixels``: 65,536 patches × 1536 elements × 4 B = 0.375 GiB for one
    Qwen3.5 image at 16.8 Mpx) the float32 copy as well. The projector's pooled
    outputs (``items × tokens × text hidden``) are what ``encoder_cache`` holds."""
    tower = shape.vision_tower
    if tower is None or profile_sizing(shape) is not ProfileSizing.SIZED:
        return None
    if text_only(limits, shape.mm_modalities):
        return None
    limit = DEFAULT_MM_LIMIT if limits is None else limits.get(tower.modality, DEFAULT_MM_LIMIT)
    items = max_items_per_batch(
        tower.tokens_per_item,
        limit,
        max_model_len,
        max_num_seqs,
        max_num_batched_tokens,
        chunked_prefill,
    )
    if items == 0:
        return None
    crops = items * tower.crops_per_item
    pixels = crops * tower.pixels_per_crop * (dtype_bytes + (4 if tower.float32_pixels else 0))
    peak = crops * tower.patches_per_crop * vit_layer_peak_per_patch(tower, tp) * dtype_bytes
    outputs = items * tower.output_tokens_per_item * tower.output_hidden * dtype_bytes
    return EncoderProfile(
        tower.modality,
        items,
        tower.tokens_per_item,
        encoder_budget(tower.tokens_per_item, max_num_batched_tokens),
        pixels,
        peak,
        outputs,
    )


# --- Qwen2-VL / Qwen2.5-VL: the dummy image of a dynamic-resolution processor ------------------

# Qwen2VLProcessingInfo.get_image_size_with_most_features factorises the patch count from 0.13
# (closest_factor_pair, aspect ratio <= 200): the rulebook's VllmRules.mm_factorised_dummy
_MAX_ASPECT: Final = 200
#: --mm-processor-kwargs keys that only move the processor's pixel bounds (_get_vision_info:
#: size | {"shortest_edge": min_pixels, "longest_edge": max_pixels})
PIXEL_KWARGS: Final = frozenset({"min_pixels", "max_pixels"})


@dataclass(frozen=True, slots=True)
class ImagePixels:
    """What bounds a Qwen2(.5)-VL dummy image: the processor's pixel bounds (min_pixels may be
    unknown) and the options form's width/height caps (``_get_dummy_images`` takes
    ``min(target, override)``, multimodal/processing/dummy_inputs.py 0.15, 0.20)."""

    max_pixels: int
    min_pixels: int | None
    width: int | None
    height: int | None
    source: str


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """The Qwen2-VL image processor's resize (transformers image_processing_qwen2_vl.py
    ``smart_resize``, which vLLM's ``_get_vision_info`` calls): round each side to ``factor``,
    then scale down into ``max_pixels`` or up to ``min_pixels``. ValueError past 200:1."""
    if max(height, width) / min(height, width) > _MAX_ASPECT:
        raise ValueError(f"aspect ratio {max(height, width) / min(height, width):.0f} > 200")
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def most_features_size(max_pixels: int, unit: int, version: Version) -> tuple[int, int]:
    """(height, width) of ``get_image_size_with_most_features`` (models/qwen2_vl.py): from 0.13
    the patch count ``max_pixels // unit²`` factorised into the closest pair with an aspect
    ratio <= 200 (fewer patches until one is); 0.11–0.12 ``_get_vision_info`` of a 9999999²
    image, i.e. smart_resize's square (min_pixels cannot bind at that size)."""
    if not VllmRules.for_version(version).mm_factorised_dummy:
        return smart_resize(9_999_999, 9_999_999, unit, 0, max_pixels)
    for n in range(max_pixels // (unit * unit), 0, -1):
        d = math.isqrt(n)
        while n % d:
            d -= 1
        if (n // d) / d <= _MAX_ASPECT:
            return unit * d, unit * (n // d)
    raise ValueError(f"max_pixels {max_pixels} is below one {unit}x{unit} unit")


#: ``target_num_frames`` of the dummy video and ``num_frames`` of ``get_max_video_tokens``
QWEN3_DUMMY_VIDEO_FRAMES: Final = 2


def video_smart_resize(
    num_frames: int,
    height: int,
    width: int,
    temporal_factor: int,
    factor: int,
    min_pixels: int,
    max_pixels: int,
) -> tuple[int, int]:
    """Qwen3-VL's video resize (transformers models/qwen3_vl/video_processing_qwen3_vl.py
    ``smart_resize``, 5.6.2, which vLLM's ``Qwen3VLProcessingInfo._get_vision_info`` calls for
    videos): the pixel bounds count every (temporally padded) frame."""
    if max(height, width) / min(height, width) > _MAX_ASPECT:
        raise ValueError(f"aspect ratio {max(height, width) / min(height, width):.0f} > 200")
    h = round(height / factor) * factor
    w = round(width / factor) * factor
    t = math.ceil(num_frames / temporal_factor) * temporal_factor
    if t * h * w > max_pixels:
        beta = math.sqrt(num_frames * height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif t * h * w < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def qwen3_video_tokens(
    tower: VisionTower,
    video_processor: Mapping[str, Any],
    kwargs: Mapping[str, Any],
    version: Version,
) -> int:
    """Tokens of one Qwen3-VL / Qwen3.5 dummy video (``get_max_video_tokens``, 0.20–0.28): the
    frame size with the most features under the video processor's ``size.longest_edge`` //
    ``temporal_patch_size`` (``mm_kwargs["size"]`` is not modelled), then
    :func:`video_smart_resize` of 2 frames within ``size`` with ``--mm-processor-kwargs``
    min/max_pixels merged over it (``_get_vision_info``); 2 frames are one temporal patch.
    ValueError when the bounds are missing or not positive integers."""
    size = video_processor.get("size")
    size = size if isinstance(size, Mapping) else {}
    hi, lo = size.get("longest_edge"), size.get("shortest_edge")
    for v in (hi, lo):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(
                "the video processor's size.longest_edge and size.shortest_edge must be "
                f"positive integers, got {size!r}"
            )
    assert isinstance(hi, int) and isinstance(lo, int)
    unit = tower.patch_size * tower.merge_size
    tps = tower.temporal_patch_size
    height, width = most_features_size(hi // tps, unit, version)
    max_px = int(kwargs.get("max_pixels", hi))
    min_px = int(kwargs.get("min_pixels", lo))
    rh, rw = video_smart_resize(QWEN3_DUMMY_VIDEO_FRAMES, height, width, tps, unit, min_px, max_px)
    grid_t = max(-(-QWEN3_DUMMY_VIDEO_FRAMES // tps), 1)
    return grid_t * (rh // tower.patch_size) * (rw // tower.patch_size) // tower.merge_size**2


def profiled_modality(tokens: Mapping[str, int]) -> str:
    """``MultiModalBudget.get_modality_with_max_tokens`` (multimodal/encoder_budget.py,
    0.24.0): the most tokens per item, ties to the later name (``max`` by (tokens, name))."""
    return max(tokens.items(), key=lambda kv: (kv[1], kv[0]))[0]


def size_dynamic_tower(tower: VisionTower, px: ImagePixels, version: Version) -> VisionTower:
    """The tower with its dummy image sized. ``tokens_per_item`` is ``get_max_image_tokens``
    (the largest image: the unit of ``_get_max_items``, options ignored, 0.15/0.20 read);
    the item the profile batches is ``_get_dummy_images``'s, capped by the options' width and
    height, then smart_resize'd: its patches (``grid_h × grid_w``, grid_t 1: an image is one
    temporal patch), pixels (patches × c·t·p², the processor's flattened patches) and
    embeddings (patches / merge²). ValueError where the capped image needs an unknown
    min_pixels."""
    unit = tower.patch_size * tower.merge_size
    h, w = most_features_size(px.max_pixels, unit, version)
    tokens = (h // tower.patch_size) * (w // tower.patch_size) // tower.merge_size**2
    ch, cw = min(h, px.height or h), min(w, px.width or w)
    if (ch, cw) != (h, w) and px.min_pixels is None:
        raise ValueError(
            "the options form shrinks the dummy image, and the processor's min_pixels is not "
            "known (give it in --mm-processor-kwargs)"
        )
    rh, rw = smart_resize(ch, cw, unit, px.min_pixels or 0, px.max_pixels)
    patches = (rh // tower.patch_size) * (rw // tower.patch_size)
    return replace(
        tower,
        tokens_per_item=tokens,
        patches_per_crop=patches,
        pixels_per_crop=patches * tower.channels * tower.temporal_patch_size * tower.patch_size**2,
        output_tokens_per_item=patches // tower.merge_size**2,
        image_size=max(rh, rw),
    )


def processor_pixels(
    preprocessor: Mapping[str, Any] | None, kwargs: Mapping[str, Any], options: Mapping[str, Any]
) -> ImagePixels | None:
    """The pixel bounds vLLM's Qwen2(.5)-VL processor uses: the repository's
    ``preprocessor_config.json`` (``max_pixels``/``min_pixels``, else ``size.longest_edge``/
    ``shortest_edge``), overridden by ``--mm-processor-kwargs`` (``_get_vision_info``),
    with the options form's image width/height; None when max_pixels is unknown."""
    hi: Any = None
    lo: Any = None
    where = []
    if preprocessor is not None:
        size = preprocessor.get("size")
        size = size if isinstance(size, Mapping) else {}
        # Qwen2VLImageProcessor.__init__ (transformers): max_pixels/min_pixels, when given,
        # override size; vLLM 0.13 reads ``image_processor.max_pixels or size["longest_edge"]``
        hi = preprocessor.get("max_pixels", size.get("longest_edge"))
        lo = preprocessor.get("min_pixels", size.get("shortest_edge"))
        if hi is not None:
            where.append("preprocessor_config.json")
    if kwargs.get("max_pixels") is not None:
        hi = kwargs["max_pixels"]
        where.append("--mm-processor-kwargs")
    if kwargs.get("min_pixels") is not None:
        lo = kwargs["min_pixels"]
    for v in (hi, lo):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise ValueError(f"pixel bound {v!r} is not a positive integer")
    if hi is None:
        return None
    width, height = options.get("width"), options.get("height")
    return ImagePixels(int(hi), lo, width, height, " and ".join(where))


def image_options(text: str | None) -> dict[str, Any]:
    """The image options object of ``--limit-mm-per-prompt`` ({} for a count or unset)."""
    if text is None:
        return {}
    value = json.loads(text).get("image")
    return dict(value) if isinstance(value, dict) else {}


#: architectures whose vision tower vLLM does not build when every modality's limit is 0, so
#: its weights are not loaded: models/qwen2_vl.py, qwen2_5_vl.py, qwen3_vl.py
#: ``__init__`` (0.11–0.14: ``self.visual = None`` unless the image or video limit is
#: non-zero; 0.15–0.33: ``_mark_tower_model(vllm_config, {"image", "video"})``, whose
#: ``no_init_weights`` swaps the children for ``StageMissingLayer`` when every limit is 0,
#: models/interfaces.py). From 0.15 most other wrappers use _mark_tower_model too; those are
#: not modelled here (their weights stay counted: over-predicted, the safe side).
#: Qwen3-VL's shapes carry their text model's type (``qwen3_vl_text`` / ``qwen3_vl_moe_text``:
#: model/config/dispatch.py names a wrapper's shape after its text model).
TOWER_SKIPPED_AT_ZERO: Final = frozenset(
    {"qwen2_vl", "qwen2_5_vl", "qwen3_vl_text", "qwen3_vl_moe_text"}
)


def tower_built(shape: ModelShape, limits: Mapping[str, int] | None, era: Era) -> bool:
    """Whether vLLM builds (and loads) ``shape``'s vision tower (see TOWER_SKIPPED_AT_ZERO)."""
    if shape.model_type not in TOWER_SKIPPED_AT_ZERO or era not in MM_PROFILE_ERAS:
        return True
    return not text_only(limits, shape.mm_modalities)
