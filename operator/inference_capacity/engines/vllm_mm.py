"""vLLM's multimodal encoder profile: what ``--limit-mm-per-prompt`` and ``--skip-mm-profiling``
do to the activation peak that vLLM subtracts from the KV budget.

Each multimodal architecture's profile is in one of three classes (:func:`profile_sizing`,
the one place that decides): **sized** by the formula below from its :class:`VisionTower`
(Gemma 3's SigLIP), **calibrated** inside a constant fitted on a startup log that ran the profile
(:data:`CALIBRATED_PROFILES`: Llama 4, inside ``MOE_WORKSPACE_HIDDEN_COPIES`` fitted on
``vllm-startup-041``), or **unknown** (every other tower): resolve.py refuses the last unless
the profile is text-only. The formula is derived from vLLM's code (0.11–0.33), not calibrated
on a log (no startup log of a model with a sized tower is in shared/data):

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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..model import ModelShape, VisionTower
from ..units import GiB
from .versions import Era

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
    log: str  # the point of shared/data/vllm-startup-logs.jsonl
    point: str  # what that start ran
    moe_only: bool  # the constant is only counted for MoE models (moe_workspace)

    def note(self, architecture: str) -> str:
        return (
            f"the multimodal encoder profile of {architecture} is not sized by formula: it is "
            f"inside {self.constant}, fitted on {self.log} ({self.point}), which ran it "
            "(in-sample, one point); elsewhere it scales as that constant does"
        )


#: encoder profiles calibrated, by architecture. Llama 4: vllm-startup-041 (Llama-4-Scout TP4,
#: 0.19.0) ran profile_run's encoder step with the image limit unset; MOE_WORKSPACE_HIDDEN_COPIES
#: was fitted on its activation residual over the dense terms (+0.31 GiB), so its predicted
#: activation (3.19 GiB logged, +0.10 % in benchmarks.accuracy) already holds that profile.
#: Maverick has the same tower (vision_config identical to Scout's) and the same constant.
CALIBRATED_PROFILES: Final[Mapping[str, Calibration]] = {
    "Llama4ForConditionalGeneration": Calibration(
        "MOE_WORKSPACE_HIDDEN_COPIES",
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
    if shape.vision_tower is not None:
        return ProfileSizing.SIZED
    return ProfileSizing.UNKNOWN


def parse_limit_mm_per_prompt(text: str) -> dict[str, int]:
    """The item count per modality of ``--limit-mm-per-prompt`` (JSON), as
    ``MultiModalConfig._validate_limit_per_prompt`` reads it: ``{"image": 2}``, or
    ``{"video": {"count": 1, "num_frames": 32, "width": 512, "height": 512}}``, or both mixed.
    ValueError naming the flag for anything vLLM would refuse. The size options only shrink the
    dummy item (``_get_dummy_images`` clips to the processor's largest size); the towers sized
    here resize every image to a fixed resolution, so only the count matters."""
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


#: the options form ({"image": {"count": 1, "width": 512}}) came with vLLM PR #25631 (merged
#: after the 0.11.0 branch; 0.11.1 has it): an older vLLM takes counts only
LIMIT_OPTIONS_FROM: Final = (0, 11, 1)


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
    mlp = 2 * tower.hidden + 2 * -(-tower.intermediate // shard)
    attn = 2 * tower.hidden + 4 * -(-tower.hidden // shard)
    return max(mlp, attn)


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

    The batched pixels are counted once, in the model dtype (``SiglipVisionEmbeddings`` casts
    them to the patch embedding's dtype; a float32 copy from the processor alongside would add
    two bytes per element, 3·896²·2 B ≈ 4.8 MB per Gemma 3 image). The projector's pooled
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
    pixels = crops * tower.channels * tower.image_size**2 * dtype_bytes
    peak = crops * tower.patches_per_crop * vit_layer_peak_per_patch(tower, tp) * dtype_bytes
    outputs = items * tower.tokens_per_item * tower.output_hidden * dtype_bytes
    return EncoderProfile(
        tower.modality,
        items,
        tower.tokens_per_item,
        encoder_budget(tower.tokens_per_item, max_num_batched_tokens),
        pixels,
        peak,
        outputs,
    )
