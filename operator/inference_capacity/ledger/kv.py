"""KV cache: bytes per token, pages, vLLM's KV-cache groups, blocks, tokens and concurrency.

Formulas follow vLLM's ``v1/kv_cache_interface.py`` (page sizes per spec) and
``v1/core/kv_cache_utils.py`` (blocks, "GPU KV cache size", "Maximum concurrency"). Full
attention: ``2 × kv_heads_per_rank × head_dim × bytes`` per token per layer
(Llama-3.1-8B bf16: 32 × 2 × 8 × 128 × 2 = 131,072 B = 128 KiB per token). MLA stores one latent
``kv_lora_rank + qk_rope_head_dim`` per token, replicated on every TP rank. Sliding-window and
chunked layers hold at most ``window + in-flight`` tokens per request. Mamba/linear layers hold a
constant state per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..model.shapes import AttnKind, LayerAttention, ModelShape, cdiv
from ..vocab import KV_DTYPE_BYTES
from .kv_dsv4 import Dsv4Layout, Planning, dsv4_layout, dsv4_token_bytes
from .weights import pp_layer_range

#: formats whose page is not ``elements × bytes`` (v1/kv_cache_interface.py, read in 0.20,
#: 0.26 and 0.33; 0.28 the same bytes through the backends' ``customize_spec``): per-token-head
#: formats add one fp32 scale per head for K and for V (``AttentionSpec.page_size_bytes``
#: + 2·B·Hkv·4), ``int4_per_token_head`` (0.25+) packs two values per byte before its scales
#: (``real_page_size_bytes``: head_size // 2); ``fp8_ds_mla`` stores 656 B per token for
#: DeepSeek's 512 + 64 latent (512 fp8 values, 4 fp32 tile scales, 64 bf16 rope values);
#: ``nvfp4`` packs two values per byte with one fp8 scale per 16 values.
KV_FORMATS = {
    "fp8_per_token_head": "per_token_head",
    "int8_per_token_head": "per_token_head",
    "int4_per_token_head": "per_token_head_int4",
    "fp8_ds_mla": "ds_mla",
    "nvfp4": "nvfp4",
}
#: the formats that pack standard attention's K and V (values and scales in one page row), whose
#: bytes per token :func:`token_bytes` gives for any layer kind a standard backend serves
PACKED_FORMATS = frozenset({"per_token_head", "per_token_head_int4", "nvfp4"})
FP8_DS_MLA_TOKEN_BYTES = 656


def kv_token_format(kv_cache_dtype: str) -> str:
    """The page layout of a KV dtype: "" (plain) or a key of the formats above."""
    return KV_FORMATS.get(kv_cache_dtype, "")


def token_bytes(layer: LayerAttention, tp: int, kv_bytes: int, kv_format: str = "") -> int:
    """KV bytes of one token in ``layer`` on one rank, in the page layout of ``kv_format``."""
    if layer.compress_ratio:
        return dsv4_token_bytes(layer.compress_ratio, layer.index_head_dim)
    base = layer.token_bytes(tp, kv_bytes)
    if not kv_format or base == 0:
        return base
    if layer.kind is AttnKind.MLA:
        return FP8_DS_MLA_TOKEN_BYTES if kv_format == "ds_mla" else base
    if kv_format == "per_token_head":
        return base + 2 * max(1, layer.kv_heads // tp) * 4
    if kv_format == "per_token_head_int4":
        return layer.token_bytes(tp, 1) // 2 + 2 * max(1, layer.kv_heads // tp) * 4
    if kv_format == "nvfp4":
        elements = layer.token_bytes(tp, 1)
        return elements // 2 + elements // 16
    return base


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    if kv_cache_dtype not in KV_DTYPE_BYTES:
        raise ValueError(
            f"kv_cache_dtype: unknown {kv_cache_dtype!r}; one of {', '.join(KV_DTYPE_BYTES)}"
        )
    return KV_DTYPE_BYTES[kv_cache_dtype] or model_dtype_bytes


@dataclass(frozen=True, slots=True)
class KvGroup:
    """One vLLM KV-cache group: layers of one kind sharing a block table."""

    kind: AttnKind
    layers: int  # real layers in the group (the last group of a kind may be padded)
    page_bytes: int  # bytes of one block of one layer
    block_size: int
    window: int = 0
    state_bytes: int = 0  # Mamba: per-sequence state of one layer (before padding)

    def blocks_per_request(
        self, max_model_len: int, in_flight_tokens: int, mamba_blocks: int
    ) -> int:
        """Blocks one request of ``max_model_len`` tokens needs in this group."""
        if self.kind in (AttnKind.FULL, AttnKind.MLA):
            return cdiv(max_model_len, self.block_size)
        if self.kind is AttnKind.SLIDING:
            tokens = min(self.window - 1 + in_flight_tokens, max_model_len)
            return cdiv(tokens, self.block_size) + 1
        if self.kind is AttnKind.CHUNKED:
            return cdiv(min(self.window + in_flight_tokens, max_model_len), self.block_size)
        return mamba_blocks


@dataclass(frozen=True, slots=True)
class KvLayout:
    """The KV cache of one rank: groups, page size and the bytes of one block."""

    groups: tuple[KvGroup, ...]
    group_size: int  # layers per group (after padding)
    bytes_per_block: int  # what one block id costs across all groups' layers
    block_size: int
    bytes_per_token: int  # logical KV bytes per token of context on this rank (full layers)
    state_bytes_per_sequence: int  # Mamba/linear state per request on this rank
    #: DeepSeek-V4's packed layout (ledger/kv_dsv4.py), which answers the per-request
    #: questions below in vLLM's own terms; None for every other model
    packed: Dsv4Layout | None = None

    @property
    def num_groups(self) -> int:
        return len(self.groups)

    def num_blocks(self, available_bytes: int) -> int:
        if self.bytes_per_block == 0 or available_bytes <= 0:
            return 0
        return available_bytes // self.bytes_per_block

    def blocks_per_request(
        self, max_model_len: int, in_flight_tokens: int, mamba_blocks: int = 1
    ) -> int:
        if self.packed is not None:
            return self.packed.blocks_per_request(max_model_len, in_flight_tokens)
        return sum(
            g.blocks_per_request(max_model_len, in_flight_tokens, mamba_blocks) for g in self.groups
        )

    @property
    def start_check_reserved(self) -> int:
        """Bytes vLLM's start check leaves out of the KV memory (DeepSeek-V4 from 0.29: the
        null block, :attr:`~.kv_dsv4.Dsv4Layout.start_check_reserved`); 0 otherwise."""
        return self.packed.start_check_reserved if self.packed is not None else 0

    def bytes_for_request(
        self, max_model_len: int, in_flight_tokens: int, mamba_blocks: int = 1
    ) -> int:
        """KV bytes one request of ``max_model_len`` tokens needs (vLLM's start check)."""
        if self.packed is not None:
            return self.packed.bytes_for_request(max_model_len, in_flight_tokens)
        return self.group_size * sum(
            g.page_bytes * g.blocks_per_request(max_model_len, in_flight_tokens, mamba_blocks)
            for g in self.groups
        )


def _layer_key(layer: LayerAttention) -> tuple[AttnKind, int]:
    return layer.kind, layer.window


#: layers as (attention spec, how many layers have it), in the order vLLM meets the specs
Layers = Sequence[tuple[LayerAttention, int]]


def layers_on_rank(shape: ModelShape, pp: int, stage: int) -> list[tuple[LayerAttention, int]]:
    """The stage's layers, grouped: (spec, count) per distinct spec (O(distinct layers))."""
    return shape.groups_in(pp_layer_range(shape.num_layers, pp, stage))


def kv_layout(
    layers: Layers,
    tp: int,
    kv_bytes: int,
    model_dtype_bytes: int,
    block_size: int,
    hybrid_manager: bool = True,
    align: int | None = None,
    kv_format: str = "",
    dsv4_planning: Planning = "padded",
) -> KvLayout:
    """Group this rank's layers as vLLM does and size one block.

    ``dsv4_planning``: the release's DeepSeek-V4 planner (:func:`~.kv_dsv4.dsv4_layout`).

    ``align``: the unit a hybrid model's block size is raised in (default ``block_size``);
    Mamba "all" prefix-caching mode needs multiples of ``lcm(chunk_size, block_size)``.

    ``hybrid_manager`` False (V0, or vLLM before the hybrid allocator): every attention layer is
    treated as full attention with one shared block table.
    """
    cached = [
        (layer, n)
        for layer, n in layers
        if n > 0
        and layer.shares_kv_with is None
        and layer.kind not in (AttnKind.NONE, AttnKind.CROSS)
    ]
    per_token = sum(n * token_bytes(layer, tp, kv_bytes, kv_format) for layer, n in cached)
    state = sum(
        n * layer.mamba.bytes_per_sequence(tp, model_dtype_bytes)
        for layer, n in cached
        if layer.mamba is not None
    )
    if not cached:
        return KvLayout((), 0, 0, block_size, 0, 0)
    if any(layer.compress_ratio for layer, _ in cached):
        return _dsv4_kv_layout(
            cached, kv_bytes, per_token, hybrid_manager, kv_format, dsv4_planning
        )
    if not hybrid_manager:
        attn = [(layer, n) for layer, n in cached if layer.kind is not AttnKind.MAMBA]
        n_attn = sum(n for _, n in attn)
        page = sum(n * token_bytes(layer, tp, kv_bytes, kv_format) for layer, n in attn)
        page *= block_size
        group = KvGroup(AttnKind.FULL, n_attn, page // max(1, n_attn), block_size)
        return KvLayout((group,), n_attn, page, block_size, per_token, state)
    by_kind: dict[tuple[AttnKind, int], list[tuple[LayerAttention, int]]] = {}
    for layer, n in cached:
        by_kind.setdefault(_layer_key(layer), []).append((layer, n))
    attn_1tok = max(
        (
            token_bytes(layer, tp, kv_bytes, kv_format)
            for layer, _ in cached
            if layer.kind is not AttnKind.MAMBA
        ),
        default=0,
    )
    block = block_size
    mamba_page = max(
        (
            layer.mamba.bytes_per_sequence(tp, model_dtype_bytes)
            for layer, _ in cached
            if layer.mamba is not None
        ),
        default=0,
    )
    if mamba_page and attn_1tok:
        # platforms/interface.py::_align_hybrid_block_size: raise the attention block size until
        # an attention page is at least a Mamba page; pad the Mamba page to it
        unit = align or block_size
        needed = unit * cdiv(mamba_page, unit * attn_1tok)
        block = max(block, needed)
    if len(by_kind) == 1:
        (kind, window), members = next(iter(by_kind.items()))
        count = sum(n for _, n in members)
        pages = {token_bytes(layer, tp, kv_bytes, kv_format) for layer, _ in members}
        page = (attn_1tok * block) if kind is not AttnKind.MAMBA else mamba_page
        if len(pages) > 1:  # same type, different sizes: one group, page = sum of pages
            total = sum(n * token_bytes(layer, tp, kv_bytes, kv_format) for layer, n in members)
            total *= block
            group = KvGroup(kind, count, total // count, block, window)
            return KvLayout((group,), count, total, block, per_token, state)
        group = KvGroup(kind, count, page, block, window, mamba_page)
        return KvLayout((group,), count, page * count, block, per_token, state)
    page = attn_1tok * block if attn_1tok else mamba_page
    counts = [sum(n for _, n in v) for v in by_kind.values()]
    lo, hi = min(counts), max(counts)
    group_size = hi if hi < 1.5 * lo else lo  # kv_cache_utils: the 1.5 rule (0.21+)
    groups: list[KvGroup] = []
    for ((kind, window), members), count in zip(by_kind.items(), counts, strict=True):
        # kv_cache_utils.py::unify_kv_cache_spec_page_size: a layer with a smaller page holds
        # proportionally more tokens per block (Gemma-4: full layers 2 × 512 vs sliding
        # 8 × 256 heads, so full blocks hold 32 tokens where sliding ones hold 16)
        tok = max(token_bytes(layer, tp, kv_bytes, kv_format) for layer, _ in members)
        g_block = block
        if kind is not AttnKind.MAMBA and tok and attn_1tok % tok == 0:
            g_block = block * (attn_1tok // tok)
        # vLLM's groups of group_size layers each, the last one holding the rest
        mamba = mamba_page if kind is AttnKind.MAMBA else 0
        full, rest = divmod(count, group_size)
        groups += [KvGroup(kind, group_size, page, g_block, window, mamba)] * full
        if rest:
            groups.append(KvGroup(kind, rest, page, g_block, window, mamba))
    return KvLayout(tuple(groups), group_size, page * group_size, block, per_token, state)


def _dsv4_kv_layout(
    cached: Layers,
    kv_bytes: int,
    per_token: int,
    hybrid_manager: bool,
    kv_format: str,
    planning: Planning = "padded",
) -> KvLayout:
    """DeepSeek-V4: vLLM's packed layout, for the fp8_ds_mla format its FlashMLA backend takes
    (an fp8 ``--kv-cache-dtype``, which ``_resolve_dsv4_kv_cache_dtype`` rewrites to it)."""
    if not all(layer.compress_ratio for layer, _ in cached):
        raise ValueError("DeepSeek-V4 layers mixed with other attention layers")
    if kv_bytes != 1 or kv_format not in ("", "ds_mla"):
        raise ValueError(
            "DeepSeek-V4 KV cache: only the fp8_ds_mla layout (--kv-cache-dtype fp8) is modelled"
        )
    if not hybrid_manager:
        raise ValueError("DeepSeek-V4 without the hybrid KV cache manager is not modelled")
    counts: dict[int, int] = {}
    for layer, n in cached:
        counts[layer.compress_ratio] = counts.get(layer.compress_ratio, 0) + n
    first = cached[0][0]
    index_head = max(layer.index_head_dim for layer, _ in cached)
    packed = dsv4_layout(counts, first.latent_dim, index_head, first.window, planning=planning)
    groups = tuple(
        KvGroup(
            AttnKind.SLIDING if g.window else AttnKind.MLA,
            len(g.pages),
            g.page_sum // len(g.pages),
            g.block_size,
            g.window,
        )
        for g in packed.groups
    )
    n = max(len(g.pages) for g in packed.groups)
    block = packed.groups[0].block_size
    return KvLayout(groups, n, packed.bytes_per_block, block, per_token, 0, packed)


def kv_bytes_per_token(
    shape: ModelShape,
    tp: int,
    kv_bytes: int,
    pp: int = 1,
    stage: int | None = None,
    kv_format: str = "",
) -> int:
    """Logical KV bytes per token of context: on one rank (``stage`` given) or over the whole
    model at this TP (all stages summed), counting every attention layer's full per-token cost."""
    stages = range(pp) if stage is None else [stage]
    return sum(
        n * token_bytes(layer, tp, kv_bytes, kv_format)
        for s in stages
        for layer, n in layers_on_rank(shape, pp, s)
        if layer.kind not in (AttnKind.NONE, AttnKind.CROSS, AttnKind.MAMBA)
    )
