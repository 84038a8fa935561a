"""The shapes of a model, as the ledger needs them.

A model is a list of tensors (each with the rule that shards it over tensor-parallel ranks and the
pipeline stage it lives on) and a list of KV-cache specs. Everything downstream (weight bytes per
rank, KV bytes per token, block sizes) is computed from these two lists, so a formula for "how
big is a q_proj on rank 3 of TP4" exists exactly once: in :meth:`Tensor.numel_per_rank`.

Identical decoder layers are grouped (issue 13): a layer tensor stands for one copy in each of
the layers of its :class:`~.layerset.LayerSet`, and each distinct layer attention spec is listed
once with its layers (:class:`LayerGroup`), so a model's size in memory and the ledger's work
depend on its distinct layer kinds, not on its layer count.

Why tensors and not a parameter count: vLLM shards each tensor by its own rule (column, row,
vocab padded to 64, KV heads replicated when fewer than TP ranks, norms replicated), and
quantization scales depend on each tensor's shape. A single parameter count cannot answer
"bytes on rank r".
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

from .layerset import LayerSet

#: vllm/model_executor/layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE
VOCAB_PADDING = 64


def vocab_rows_per_rank(vocab: int, tp: int) -> int:
    """Rows of a vocabulary-parallel tensor (embedding, lm_head, its logits) on one TP rank:
    the vocabulary padded to :data:`VOCAB_PADDING`, split evenly (VocabParallelEmbedding)."""
    return cdiv(cdiv(vocab, VOCAB_PADDING) * VOCAB_PADDING, tp)


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers."""
    return -(-a // b)


class Split(enum.Enum):
    """How vLLM shards a tensor over tensor-parallel ranks."""

    REPLICATED = "replicated"  # norms, routers, row-parallel biases, MLA down-projections
    VOCAB = "vocab"  # rows padded to a multiple of 64, then split evenly
    COLUMN = "column"  # output rows split
    ROW = "row"  # input columns split
    KV_HEADS = "kv_heads"  # K/V projections: max(1, kv_heads // tp) heads per rank


class Stage(enum.Enum):
    """Where a tensor lives along the pipeline."""

    FIRST = "first"  # input embeddings (and learned positions)
    LAYER = "layer"  # a decoder layer: the stage that owns the layer
    LAST = "last"  # final norm and lm_head
    ENCODER = "encoder"  # vision/audio tower: first stage


class Group(enum.Enum):
    """Tensor groups, the parameter breakdown the ledger reports."""

    EMBEDDING = "embedding"
    ATTENTION = "attention"
    MLP = "mlp"
    EXPERTS = "experts"
    SHARED_EXPERTS = "shared_experts"
    ROUTER = "router"
    NORM = "norm"
    MAMBA = "mamba"
    LM_HEAD = "lm_head"
    VISION = "vision"


@dataclass(frozen=True, slots=True)
class Tensor:
    """One logical tensor (or a stack of identical ones: ``experts``), in each of ``layers``.

    ``rows`` × ``cols`` is the unsharded shape (out × in for a linear; ``cols`` = 1 for a
    vector). A decoder-layer tensor (``Stage.LAYER``) has one copy in every layer of
    ``layers``; other tensors have ``layers`` None and one copy. ``quantizable`` marks linear
    weights that a checkpoint's quantization scheme applies to (embeddings, norms, routers and
    lm_head stay in the model dtype).
    """

    name: str
    group: Group
    rows: int
    cols: int
    split: Split
    stage: Stage = Stage.LAYER
    layers: LayerSet | None = None
    experts: int = 1
    quantizable: bool = False
    kv_heads: int = 0  # for Split.KV_HEADS: rows == kv_heads * head_dim
    fp32: bool = False  # stored in float32 whatever the model dtype (e.g. Mamba A_log/D)
    # False: vLLM allocates it but the checkpoint has no such tensor (Gemma 4's V slot on K=V
    # layers, filled from K at load time); it costs bytes but is not a published parameter
    checkpoint: bool = True

    @property
    def copies(self) -> int:
        """Layers holding a copy of this tensor (1 for a tensor outside the decoder layers)."""
        return 1 if self.layers is None else self.layers.count

    @property
    def numel(self) -> int:
        """Elements of all copies."""
        return self.rows * self.cols * self.experts * self.copies

    def shape_per_rank(self, tp: int) -> tuple[int, int]:
        """(rows, cols) of one expert of this tensor on one TP rank."""
        if self.split is Split.REPLICATED:
            return self.rows, self.cols
        if self.split is Split.VOCAB:
            return vocab_rows_per_rank(self.rows, tp), self.cols
        if self.split is Split.COLUMN:
            return cdiv(self.rows, tp), self.cols
        if self.split is Split.ROW:
            return self.rows, cdiv(self.cols, tp)
        head_dim = self.rows // self.kv_heads
        return max(1, self.kv_heads // tp) * head_dim, self.cols

    def numel_per_rank(self, tp: int) -> int:
        """Elements of one copy on one TP rank."""
        r, c = self.shape_per_rank(tp)
        return r * c * self.experts


class AttnKind(enum.Enum):
    FULL = "full"
    SLIDING = "sliding"
    CHUNKED = "chunked"  # Llama 4 chunked-local attention
    MLA = "mla"
    MAMBA = "mamba"  # Mamba2 / linear attention / GDN: constant state per sequence
    CROSS = "cross"  # cross-attention to encoder states (no per-token decoder KV)
    NONE = "none"  # a layer without attention (MLP-only or MoE-only layer)


@dataclass(frozen=True, slots=True)
class MambaState:
    """Per-sequence recurrent state of one Mamba2 / GDN / linear-attention layer.

    conv state: ``conv_channels`` × (``conv_kernel`` − 1) elements, split over TP;
    SSM/temporal state: ``ssm_heads`` × ``ssm_head_dim`` × ``ssm_state`` elements, heads
    split over TP. (vllm/model_executor/layers/mamba/mamba_utils.py)

    Gated DeltaNet (Qwen3-Next / Qwen3.5, ``gated_delta_net_state_shape``) has the same two
    shapes: conv channels ``2·nk·dk + nv·dv``, temporal state ``(nv, dv, dk)``, so it is
    ``ssm_heads=nv, ssm_head_dim=dv, ssm_state=dk, groups=0``. Speculative tokens add
    ``num_spec`` conv columns per sequence where the engine says so (``spec_columns``: set by
    engines/vllm.py::_cached_layers from the version's rules).
    """

    conv_channels: int
    conv_kernel: int
    ssm_heads: int
    ssm_head_dim: int
    ssm_state: int
    conv_dtype_bytes: int | None = None  # None: the model dtype
    ssm_dtype_bytes: int | None = None  # None: the conv dtype
    groups: int = 0  # mamba2 n_groups: conv channels hold 2*ng*N of them, padded to TP
    chunk_size: int = 0  # Mamba2 scan chunk (config chunk_size / mamba_chunk_size); 0: none
    gdn: bool = False  # a Gated DeltaNet mixer (Qwen3-Next / Qwen3.5), not Mamba2
    spec_columns: int = 0  # extra conv columns: the speculative tokens (kernel - 1 + num_spec)

    def bytes_per_sequence(self, tp: int, model_dtype_bytes: int) -> int:
        conv_b = self.conv_dtype_bytes or model_dtype_bytes
        ssm_b = self.ssm_dtype_bytes or conv_b
        channels = self.conv_channels
        if self.groups:
            # ng' = ng + (tp - ng if ng % tp else 0): groups are replicated up to TP
            ng_pad = self.groups + ((tp - self.groups) if self.groups % tp else 0)
            extra = ng_pad - self.groups
            channels = self.conv_channels + 2 * extra * self.ssm_state
        conv = cdiv(channels, tp) * (self.conv_kernel - 1 + self.spec_columns) * conv_b
        ssm = cdiv(self.ssm_heads, tp) * self.ssm_head_dim * self.ssm_state * ssm_b
        return conv + ssm


@dataclass(frozen=True, slots=True)
class LayerAttention:
    """The KV-cache-relevant description of one decoder layer's attention."""

    kind: AttnKind
    kv_heads: int = 0
    head_dim_k: int = 0
    head_dim_v: int = 0
    window: int = 0  # sliding window or chunk size, tokens
    latent_dim: int = 0  # MLA: kv_lora_rank + qk_rope_head_dim
    mamba: MambaState | None = None
    shares_kv_with: int | None = None  # cross-layer KV sharing: no cache of its own
    #: DeepSeek-V4 (``kind`` MLA, ``latent_dim`` its head_dim, ``window`` its sliding window):
    #: the layer's effective compress ratio (1: the window only; 4 adds the indexer, whose key
    #: head is ``index_head_dim``); 0 for every other model. Its pages: ledger/kv_dsv4.py
    compress_ratio: int = 0
    index_head_dim: int = 0

    def token_bytes(self, tp: int, kv_dtype_bytes: int) -> int:
        """KV bytes one token occupies in this layer on one TP rank (0 for stateful layers)."""
        if self.shares_kv_with is not None:
            return 0
        if self.kind in (AttnKind.FULL, AttnKind.SLIDING, AttnKind.CHUNKED):
            heads = max(1, self.kv_heads // tp)
            return heads * (self.head_dim_k + self.head_dim_v) * kv_dtype_bytes
        if self.kind is AttnKind.MLA:
            return self.latent_dim * kv_dtype_bytes  # one latent, not split by TP
        return 0


@dataclass(frozen=True, slots=True)
class LayerGroup:
    """The decoder layers that share one attention spec."""

    attention: LayerAttention
    layers: LayerSet


@dataclass(frozen=True, slots=True)
class RopeCache:
    """vLLM's rotary cos/sin cache: a buffer of ``positions × rotary_dim`` elements.

    One cache per distinct rope configuration (vLLM memoises ``get_rope``), stored in the model
    dtype (rotary_embedding/base.py), or float32 where the implementation says so.
    """

    positions: int
    rotary_dim: int
    fp32: bool = False


@dataclass(frozen=True, slots=True)
class Quantization:
    """What the checkpoint's quantization does to linear weights.

    ``method`` names the vLLM quantization; ``weight_bits`` the payload; ``group_size`` the
    scale granularity along the input dimension (0: per output channel, -1: per tensor);
    ``block`` a 2-D block for block-wise FP8; ``scope`` which linears are quantized.
    """

    method: str
    weight_bits: int
    group_size: int = -1
    block: tuple[int, int] | None = None
    scale_bytes: int = 4
    zero_points: bool = False
    g_idx: bool = False
    scope: str = "linear"  # "linear": all quantizable linears; "experts": MoE experts only
    excluded: tuple[str, ...] = ()
    kv_cache_fp8: bool = False
    float_format: bool = False  # fp8/fp4 payload (not integer)
    #: the checkpoint's KV quantization as vLLM's ``--kv-cache-dtype auto`` reads it for
    #: ModelOpt checkpoints: "fp8", "nvfp4" or "" (engines/vllm.py::resolve_kv_cache_dtype)
    kv_cache_algo: str = ""
    #: "modelopt" for a ModelOpt checkpoint (whatever its format): vLLM resolves ``auto`` KV
    #: from the checkpoint only for ``modelopt*`` methods
    producer: str = ""
    #: ModelOpt MIXED_PRECISION: (module name as the ledger's tensors spell it, its format)
    #: per module kind; a quantizable tensor not named here stays in the model dtype
    layer_formats: tuple[tuple[str, Quantization], ...] = ()
    #: per-layer formats (model/quant.py::copies_by_format): (module kind as the ledger's
    #: tensors spell it, the layer indices, their format; None: the model dtype). An AutoRound
    #: ``extra_config`` entry with its own bits, or a ModelOpt MIXED_PRECISION module listed
    #: with different algorithms in different layers
    layer_overrides: tuple[tuple[str, tuple[int, ...], Quantization | None], ...] = ()
    #: True (ModelOpt MIXED_PRECISION): a module kind with per-layer entries is quantized only
    #: in the layers they list; False (AutoRound): the other layers keep the default format
    overrides_only: bool = False
    #: the module kinds of ``layer_formats`` the checkpoint names itself, which must name a
    #: tensor of the model (model/quant.py::unmatched_layer_formats); None: all of them. Kinds
    #: a regex matched among vLLM's module names need not exist in every model
    named_kinds: tuple[str, ...] | None = None
    #: GPTQ ``dynamic`` rules naming layers, (regex, negative, override format or None), until
    #: model/quant.py::resolve_layer_rules turns them into ``layer_overrides``
    layer_rules: tuple[tuple[str, bool, Quantization | None], ...] = ()
    #: the MTP (next-token) layers stay in the model dtype (model/quant.py::_mtp_unquantized)
    mtp_unquantized: bool = False


@dataclass(frozen=True, slots=True)
class Dsv4Dims:
    """The DeepSeek-V4 config fields its model-wide buffers are sized by
    (engines/vllm.py::dsv4_model_buffer_bytes): ``hc_mult`` (the hyper-connection streams),
    ``index_n_heads`` and ``index_topk`` (the indexer's query heads and top-k)."""

    hc_mult: int
    index_n_heads: int
    index_topk: int


@dataclass(frozen=True, slots=True)
class HeaderWeights:
    """The checkpoint's bytes from its safetensors headers, next to the config-derived figure.

    ``loaded_bytes`` is what vLLM loads (the headers' tensors less ``skipped_bytes``: cached
    rotary frequencies, multi-token-prediction layers); ``config_bytes`` what the config-derived
    tensors say the checkpoint holds. Where they differ the header wins: the ledger adds the
    difference (``delta``) to the rank's weights while the runtime dtype and quantization are
    the checkpoint's own (``dtype_bytes``, ``quantization``).
    """

    checkpoint_bytes: int
    loaded_bytes: int
    config_bytes: int
    dtype_bytes: int
    quantization: Quantization | None
    skipped_bytes: int = 0

    @property
    def delta(self) -> int:
        return self.loaded_bytes - self.config_bytes


@dataclass(frozen=True, slots=True)
class VisionTower:
    """What one image item of vLLM's multimodal encoder profile runs through, for a ViT-style
    tower whose dummy input vLLM fixes from the config (``engines/vllm_mm.py`` sizes it).

    ``tokens_per_item``: the placeholder embeddings one item takes in the language model (the
    unit of vLLM's encoder budget); ``crops_per_item`` × ``patches_per_crop`` the patch
    sequence the tower runs; ``output_hidden`` the width of the embeddings the projector hands
    to the language model (they stay in the encoder cache during the profile's text forward).
    ``tp_sharded``: the tower's linears are tensor-parallel (qkv/fc1 column, out/fc2 row).
    """

    architecture: str
    tower: str  # e.g. "siglip"
    modality: str
    tokens_per_item: int
    crops_per_item: int
    image_size: int
    channels: int
    patches_per_crop: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    output_hidden: int
    tp_sharded: bool
    pixels_per_crop: int  # pixel elements of one crop (channels × its pixels)
    mlp_copies: int  # intermediate-wide (per TP rank) copies live at a block's MLP peak
    attn_copies: int  # hidden-wide (per TP rank) copies live at a block's attention peak
    output_tokens_per_item: int  # embeddings one dummy item hands on (kept in encoder_cache)
    #: a dynamic-resolution tower (Qwen2-VL / Qwen2.5-VL): the patch, merge and temporal patch
    #: sizes; its item is sized (tokens, patches, pixels non-zero) only once the processor's
    #: pixel bounds are known (engines/vllm_mm.py::size_dynamic_tower); 0 for a fixed resolution
    patch_size: int = 0
    merge_size: int = 0
    temporal_patch_size: int = 0
    #: the processor's float32 pixels stay on the device beside the model-dtype copy the tower
    #: runs on (transformers 5.6.2 image_processing_backends.py rescale_and_normalize: float32;
    #: vLLM's _get_mm_dummy_batch moves them unchanged; Qwen3-VL ``_process_image_input``
    #: ``.type(self.visual.dtype)``, Qwen2(.5)-VL's tower ``x.to(dtype=self.dtype)``, 0.24.0)
    float32_pixels: bool = False
    #: elements per patch live through every block besides its peak: Qwen3-VL's
    #: ``prepare_encoder_metadata`` keeps the interpolated position embeddings (hidden) and the
    #: rotary cos/sin (head_dim / 2 each) in ``encoder_metadata`` (models/qwen3_vl.py 0.24.0)
    kept_per_patch: int = 0

    @property
    def sized(self) -> bool:
        return self.patches_per_crop > 0 and self.tokens_per_item > 0


@dataclass(frozen=True, slots=True)
class ModelShape:
    """Everything about a model's architecture that its memory depends on."""

    name: str
    model_type: str
    architecture: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    derived_max_model_len: int
    dtype: str  # checkpoint dtype: bfloat16 | float16 | float32
    tensors: tuple[Tensor, ...]
    #: the decoder layers by attention spec, each spec once (ordered by first layer)
    layer_groups: tuple[LayerGroup, ...]
    rope_caches: tuple[RopeCache, ...] = ()
    num_experts: int = 0
    num_shared_experts: int = 0
    experts_per_token: int = 0
    expert_intermediate_size: int = 0
    dense_layers: LayerSet = LayerSet()
    quantization: Quantization | None = None
    is_multimodal: bool = False
    notes: tuple[str, ...] = field(default=())
    #: the checkpoint's safetensors headers, where they were read (they win over the config)
    header: HeaderWeights | None = None
    mtp_layers: int = 0  # MTP (next-n) layers in the checkpoint, loaded only for speculation
    #: the vision tower whose encoder profile is sized; None for a text model, and for a
    #: multimodal one whose profile is not modelled (the plan then refuses unless the profile
    #: is text-only: --limit-mm-per-prompt with every modality 0, or --skip-mm-profiling)
    vision_tower: VisionTower | None = None
    #: the modalities vLLM's processor accepts (``get_supported_mm_limits``); every one must be
    #: at 0 for a text-only profile (an unnamed modality defaults to 999 items)
    mm_modalities: tuple[str, ...] = ()
    #: Qwen3-VL's deepstack levels (``len(vision_config.deepstack_visual_indexes)``): with its
    #: tower built the model allocates one ``max_num_batched_tokens × hidden_size`` buffer per
    #: level at load (``Qwen3VLForConditionalGeneration.deepstack_input_embeds``)
    deepstack_levels: int = 0
    #: Nemotron-H LatentMoE's expert width (``moe_latent_size``; 0: the hidden size)
    moe_latent_size: int = 0
    #: DeepSeek-V4's buffer dimensions; None for every other model
    dsv4: Dsv4Dims | None = None
    #: the q/k RMSNorm spans every head (MiniMax-M2's ``MiniMaxText01RMSNormTP``): at TP > 1 its
    #: variance is all-reduced across the ranks in every layer (the step model's extra
    #: collective, :attr:`~inference_capacity.engines.vllm_rules.VllmRules.qk_norm_allreduces`)
    qk_norm_tp: bool = False
    #: the hash of the fields above, made on first use (memo keys hash a shape often:
    #: :mod:`inference_capacity.memo`); 0 until then
    _hash: int = field(default=0, init=False, repr=False, compare=False, hash=False)

    def __hash__(self) -> int:
        h = self._hash
        if not h:
            h = hash(tuple(getattr(self, f) for f in _SHAPE_FIELDS)) or 1
            object.__setattr__(self, "_hash", h)
        return h

    @property
    def num_parameters(self) -> int:
        """Total parameters, counting tied embeddings once (as the checkpoint stores them) and
        leaving out tensors vLLM allocates that the checkpoint does not have."""
        return sum(t.numel for t in self.tensors if t.checkpoint)

    def parameters_by_group(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            if t.checkpoint:
                out[t.group.value] = out.get(t.group.value, 0) + t.numel
        return out

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        return tuple(sorted({g.attention.kind.value for g in self.layer_groups}))

    def has_kind(self, kind: AttnKind) -> bool:
        return any(g.attention.kind is kind for g in self.layer_groups)

    def groups_in(self, span: range) -> list[tuple[LayerAttention, int]]:
        """(spec, layers) of the layers in the contiguous ``span`` (a pipeline stage), in
        order of each spec's first layer there, as vLLM meets them walking the stage."""
        found = []
        for g in self.layer_groups:
            inside = g.layers.within(span)
            first = inside.first()
            if first is not None:
                found.append((first, g.attention, inside.count))
        found.sort(key=lambda x: x[0])
        return [(a, n) for _, a, n in found]

    def layer_at(self, i: int) -> LayerAttention:
        """The attention spec of layer ``i`` (O(groups))."""
        for g in self.layer_groups:
            if i in g.layers:
                return g.attention
        raise IndexError(f"{self.name}: no layer {i} of {self.num_layers}")

    def per_layer(self) -> tuple[LayerAttention, ...]:
        """The attention spec of every layer, in order (O(layers): for inspection and tests;
        the ledger works on :attr:`layer_groups`)."""
        out: list[LayerAttention | None] = [None] * self.num_layers
        for g in self.layer_groups:
            for i in g.layers:
                out[i] = g.attention
        if any(a is None for a in out):
            raise ValueError(f"{self.name}: a layer without an attention spec")
        return tuple(a for a in out if a is not None)


#: the fields a ModelShape is compared (and hashed) on
_SHAPE_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ModelShape) if f.compare)
