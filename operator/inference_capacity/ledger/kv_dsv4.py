"""DeepSeek-V4's KV cache as vLLM plans it: five kinds of per-layer cache, grouped into
``UniformTypeKVCacheSpecs`` groups and packed into one tensor per (slot, page size).

Read in the vLLM 0.24.0 and 0.25.0 sources (identical for the ``fp8_ds_mla`` layout, the one
FlashMLA uses on SM90/SM100, the default DeepSeek-V4 backend there):

* ``models/deepseek_v4/attention.py::DeepseekV4Attention`` — ``compress_ratio =
  max(1, compress_ratios[layer])``; a layer with ratio > 1 has a compressed MLA cache
  (``get_kv_cache_spec``: ``MLAAttentionSpec(block_size, head_size=head_dim, compress_ratio,
  alignment=576, model_version="deepseek_v4")``); ratio 4 adds the Lightning indexer;
  ``_resolve_dsv4_kv_cache_dtype`` requires an fp8 KV cache for the ``fp8_ds_mla`` layout.
* ``v1/kv_cache_interface.py::MLAAttentionSpec.real_page_size_bytes`` — ``fp8_ds_mla`` for
  DeepSeek-V4: ``storage_block_size × 584`` (448 B NoPE + 128 B RoPE + 8 B scale), with
  ``storage_block_size = block_size // compress_ratio``; ``_apply_alignment_padding`` rounds
  a page up to the alignment. ``SlidingWindowMLASpec`` likewise, with the element-size formula
  ``storage_block_size × heads × head_size × dtype`` outside ``fp8_ds_mla``.
* ``v1/attention/backends/mla/sparse_swa.py::DeepseekV4SWACache`` — every layer's raw window:
  ``SlidingWindowMLASpec(block_size=64, head_size=head_dim, sliding_window, 576)``.
* ``models/deepseek_v4/compressor.py::CompressorStateCache`` — per compressor, float32 state of
  ``2 × coff × head_dim`` (``coff = 2`` for ratio 4, else 1), ``block_size`` 4 (ratio 4) or 8
  (ratio 128), ``sliding_window = coff × ratio``, 576-B alignment under ``fp8_ds_mla``. The
  main attention has one (head_dim 512), the ratio-4 indexer another (``index_head_dim``).
* ``models/deepseek_v4/attention.py::DeepseekV4Indexer`` — its key cache is an
  ``MLAAttentionSpec`` of ``index_head_dim + index_head_dim // 128 × 4`` uint8 per row, ratio 4.
* ``v1/core/kv_cache_utils.py`` — ``group_and_unify_kv_cache_specs`` (the MLA specs in one
  group, the sliding ones by (block_size, window)), ``_get_kv_cache_groups_uniform_groups``
  (``_approximate_gcd`` layer tuples, sliding pages padded to the nearest larger MLA page,
  groups split to the tuple count), ``_get_kv_cache_config_packed`` (``num_blocks =
  available // Σ page × slots``), ``get_max_concurrency_for_kv_cache_config`` (the logged
  concurrency and ``GPU KV cache size``) and ``_max_memory_usage_bytes_from_groups`` (the
  start check and the estimated maximum length).

vLLM 0.27.1 and 0.28.0 (read against 0.26.0; 0.27.0 not read, taken as 0.27.1) keep every
spec above, the grouping keys, ``_approximate_gcd`` and the start check, and change three
things (:func:`dsv4_layout`'s ``planning="group_stride"``):

* ``_get_kv_cache_groups_uniform_groups`` no longer pads a sliding page to an MLA page ("The
  packed block planner overlays groups, so their page sizes do not need to match"): each kind
  keeps its own aligned page;
* ``_get_kv_cache_config_packed`` divides the memory by ``_get_packed_kv_cache_layout``'s
  block stride, the largest group's sum of pages (the groups overlay one another in a block),
  not by Σ page × slots over the page sizes;
* ``get_max_concurrency_for_kv_cache_config`` counts a request's blocks as Σ over the groups
  of ``cdiv(max_memory_usage_bytes, page_size_bytes)``, each group's own pages, unweighted.

vLLM 0.29.0–0.33.0 (read: 0.29.0, 0.30.0, 0.31.0, 0.32.0, 0.33.0) keep the specs, the block
stride and the count of a request's blocks, and replace the grouping and the start check
(``planning="packed_groups"``):

* ``_get_packed_kv_cache_groups`` (v1/core/kv_cache_utils.py 0.29–0.32; v1/core/
  kv_cache_planning.py 0.33, the BLHNC layout DeepSeek-V4's indexer backend declares) buckets
  the specs greedily by ``UniformTypeKVCacheSpecs.is_uniform_type`` (the MLA caches and the
  indexer keys together; each sliding kind by its block size and window); a bucket with as
  many layers of each page size ("balanced") repeats one layer of each, and the balanced
  buckets split into ``cdiv(layers per page size, repeats)`` groups with ``repeats =
  _approximate_gcd(their layers per page size, lower bound the largest balanced bucket that
  mixes page sizes)``; an unbalanced bucket stays whole. Flash gets the 0.27 groups back;
  other layer mixes may not;
* ``get_kv_cache_configs`` reserves the null block the block pool holds back: the start check
  and the length estimate weigh ``bytes per block × Σ_g pages_g`` (``_max_memory_usage_bytes_
  from_groups``) against the memory less one block.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ..model.shapes import cdiv

#: ``MLAAttentionSpec.real_page_size_bytes``: fp8_ds_mla row of DeepSeek-V4 (448 + 128 + 8 B)
DS_MLA_ROW_BYTES = 584
#: ``_apply_alignment_padding`` under fp8_ds_mla (FlashMLA packing)
DS_MLA_ALIGNMENT = 576
#: ``DeepseekV4SWACache.block_size``
SWA_BLOCK_SIZE = 64
#: ``DeepseekV4Indexer.quant_block_size``: one fp32 scale per 128 fp8 key values
INDEXER_QUANT_BLOCK = 128
#: vLLM's planner of a release (:func:`dsv4_layout`): ``padded`` 0.24–0.26, ``group_stride``
#: 0.27–0.28, ``packed_groups`` 0.29–0.33
Planning = Literal["padded", "group_stride", "packed_groups"]
#: the kernel block size of the DeepSeek-V4 FlashMLA backend (``sparse_mla.py``
#: ``get_supported_kernel_block_sizes`` → [256]; vLLM logs "Setting kv cache block size to 256")
DSV4_BLOCK_SIZE = 256
FP32_BYTES = 4


def dsv4_token_bytes(ratio: int, index_head_dim: int) -> int:
    """Logical KV bytes per token of context of one layer (before paging and alignment): one
    fp8_ds_mla row per ``ratio`` tokens, plus the indexer's key row at ratio 4; a window-only
    layer (ratio 1) holds nothing beyond its window. For reporting; the pool is
    :func:`dsv4_layout`'s."""
    if ratio <= 1:
        return 0
    row = cdiv(DS_MLA_ROW_BYTES, ratio)
    if index_head_dim:
        row += cdiv(index_head_dim + index_head_dim // INDEXER_QUANT_BLOCK * FP32_BYTES, ratio)
    return row


def _round_up(x: int, unit: int) -> int:
    return cdiv(x, unit) * unit


def _state_block(ratio: int) -> int:
    """``CompressorStateCache``: block size 4 for ratio 4, 8 for ratio 128."""
    if ratio == 4:
        return 4
    if ratio == 128:
        return 8
    raise ValueError(f"DeepSeek-V4 compress ratio {ratio}: vLLM supports 4 and 128 only")


def _coff(ratio: int) -> int:
    return 2 if ratio == 4 else 1


@dataclass(frozen=True, slots=True)
class Dsv4Group:
    """One KV-cache group: its layers' pages (after padding), block size and window."""

    pages: tuple[int, ...]  # page bytes of each layer in the group
    block_size: int
    window: int = 0  # 0: full (the compressed MLA caches)

    @property
    def page_sum(self) -> int:
        return sum(self.pages)

    @property
    def layer_tuples(self) -> int:
        """``UniformTypeKVCacheSpecs.get_num_layer_tuples``: the most common page's count."""
        return Counter(self.pages).most_common(1)[0][1]

    def max_pages(self, max_model_len: int, batched_tokens: int) -> int:
        """``UniformTypeKVCacheSpecs.max_memory_usage_pages``: a request's blocks in this group
        (``FullAttentionSpec``/``SlidingWindowSpec.max_memory_usage_bytes`` over the page)."""
        if not self.window:
            return cdiv(max_model_len, self.block_size)
        tokens = min(self.window - 1 + batched_tokens, max_model_len)
        return cdiv(tokens, self.block_size) + 1


@dataclass(frozen=True, slots=True)
class Dsv4Layout:
    """The packed KV layout of one rank."""

    groups: tuple[Dsv4Group, ...]
    #: Σ page × slots over the page-size buckets (≤ 0.26); the largest group's page sum (0.27+)
    bytes_per_block: int
    slots: tuple[tuple[int, int], ...]  # (page bytes, slots), largest page first
    #: 0.27+: a request's blocks are the groups' page counts summed, unweighted
    blocks_summed: bool = False
    #: 0.29+: the start check weighs bytes per block × a request's blocks against the memory
    #: less the null block
    null_block_reserved: bool = False

    @property
    def start_check_reserved(self) -> int:
        """Bytes the start check and the length estimate leave out of the memory: one block
        from 0.29 (the block pool's null block), else nothing."""
        return self.bytes_per_block if self.null_block_reserved else 0

    def num_blocks(self, available: int) -> int:
        return max(0, available) // self.bytes_per_block

    def blocks_per_request(self, max_model_len: int, batched_tokens: int) -> int:
        """``get_max_concurrency_for_kv_cache_config``: ``cdiv(n × Σ_g pages_g × page_sum_g,
        page_sum_0 × n)`` with n the largest group's layer count (≤ 0.26); ``Σ_g pages_g``
        (0.27+, :attr:`blocks_summed`)."""
        if self.blocks_summed:
            return sum(g.max_pages(max_model_len, batched_tokens) for g in self.groups)
        n = max(len(g.pages) for g in self.groups)
        need = n * sum(g.max_pages(max_model_len, batched_tokens) * g.page_sum for g in self.groups)
        return cdiv(need, self.groups[0].page_sum * n)

    def bytes_for_request(self, max_model_len: int, batched_tokens: int) -> int:
        """``_max_memory_usage_bytes_from_groups`` (the start check): every group reserves the
        largest tuple count of slots of one full layer tuple's bytes per page (≤ 0.28); bytes
        per block × a request's blocks (0.29+, :attr:`null_block_reserved`)."""
        if self.null_block_reserved:
            return self.bytes_per_block * self.blocks_per_request(max_model_len, batched_tokens)
        tuple_bytes = sum(set(self.groups[0].pages))
        tuples = max(g.layer_tuples for g in self.groups)
        return sum(
            tuples * g.max_pages(max_model_len, batched_tokens) * tuple_bytes for g in self.groups
        )


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """``kv_cache_utils._approximate_gcd``: the d ≥ lower_bound with the least upward padding,
    ties to the larger d."""
    best_d, best_pad = lower_bound, -1
    for d in range(max(1, lower_bound), max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad < 0 or pad <= best_pad:
            best_d, best_pad = d, pad
    return best_d


def dsv4_page_bytes(
    ratio_counts: Mapping[int, int],
    head_dim: int,
    index_head_dim: int,
    block_size: int = DSV4_BLOCK_SIZE,
) -> dict[str, int]:
    """The aligned page bytes of each kind of cache (fp8_ds_mla layout)."""
    a = DS_MLA_ALIGNMENT
    pages = {"swa": _round_up(SWA_BLOCK_SIZE * DS_MLA_ROW_BYTES, a)}
    for r in sorted(x for x in ratio_counts if x > 1):
        pages[f"c{r}"] = _round_up((block_size // r) * DS_MLA_ROW_BYTES, a)
        pages[f"c{r}_state"] = _round_up(_state_block(r) * 2 * _coff(r) * head_dim * FP32_BYTES, a)
        if r == 4:
            row = index_head_dim + index_head_dim // INDEXER_QUANT_BLOCK * FP32_BYTES
            pages["c4_indexer"] = _round_up((block_size // r) * row, a)
            pages["c4_indexer_state"] = _round_up(
                _state_block(r) * 2 * _coff(r) * index_head_dim * FP32_BYTES, a
            )
    return pages


def dsv4_layout(
    ratio_counts: Mapping[int, int],
    head_dim: int,
    index_head_dim: int,
    window: int,
    block_size: int = DSV4_BLOCK_SIZE,
    planning: Planning = "padded",
) -> Dsv4Layout:
    """Group and pack one rank's DeepSeek-V4 caches as vLLM does.

    ``ratio_counts``: layers per effective compress ratio (1: sliding window only; 4: CSA with
    the indexer; 128: HCA). Ratios other than 1, 4 and 128 are refused, as vLLM does.
    ``planning``: the release's planner (:data:`Planning`; the module docstring): ``padded``
    (≤ 0.26), ``group_stride`` (0.27–0.28: unpadded sliding pages, the largest group's page sum
    a block, a request's blocks summed over the groups), ``packed_groups`` (0.29+: that, with
    0.29's grouping and start check)."""
    group_stride = planning != "padded"
    bad = sorted(r for r, n in ratio_counts.items() if n and r not in (1, 4, 128))
    if bad:
        raise ValueError(f"DeepSeek-V4 compress ratios {bad}: vLLM supports 0/1, 4 and 128")
    counts = {r: n for r, n in ratio_counts.items() if n > 0}
    if not any(r > 1 for r in counts):
        raise ValueError("DeepSeek-V4 without a compressed layer: vLLM's grouping needs one")
    p = dsv4_page_bytes(counts, head_dim, index_head_dim, block_size)
    n4, n128 = counts.get(4, 0), counts.get(128, 0)
    # the full group's (page, layers) kinds: the C4 caches and their indexer keys, the C128 ones
    full_kinds = [(p[k], n) for k, n in (("c4", n4), ("c4_indexer", n4), ("c128", n128)) if n]
    full = [pg for pg, n in full_kinds for _ in range(n)]
    full_group = Dsv4Group(tuple(full), block_size)
    # the sliding specs by (block_size, window), each a list of (page, layers) kinds
    sliding: list[tuple[int, int, list[tuple[int, int]]]] = [
        (SWA_BLOCK_SIZE, window, [(p["swa"], sum(counts.values()))])
    ]
    if n4:
        sliding.append((4, 8, [(p["c4_state"], n4), (p["c4_indexer_state"], n4)]))
    if n128:
        sliding.append((8, 128, [(p["c128_state"], n128)]))
    # vLLM keys sliding groups by (block_size, window) only: a sliding window equal to a
    # state group's would merge them; refuse rather than guess
    if len({(b, w) for b, w, _ in sliding}) != len(sliding):
        raise ValueError(f"DeepSeek-V4 sliding_window {window} collides with a compressor state")
    if planning == "packed_groups":
        packed = _packed_groups([(block_size, 0, full_kinds), *sliding])
        stride = max(g.page_sum for g in packed)
        return Dsv4Layout(tuple(packed), stride, (), blocks_summed=True, null_block_reserved=True)
    # get_num_layer_tuples of each group before the padding
    tuple_counts = [full_group.layer_tuples] + [
        _count(kinds).most_common(1)[0][1] for _, _, kinds in sliding
    ]
    n_tuples = _approximate_gcd(tuple_counts, lower_bound=tuple_counts[0])
    full_pages = sorted(set(full))
    groups = [full_group]
    for b, w, kinds in sliding:
        padded: dict[int, int] = {}
        for pg, n in kinds:
            if group_stride:  # 0.27+: each kind keeps its own page
                padded[pg] = padded.get(pg, 0) + n
                continue
            bigger = [x for x in full_pages if x >= pg]
            if not bigger:
                raise ValueError(f"DeepSeek-V4: a {pg} B sliding page exceeds every MLA page")
            padded[min(bigger)] = padded.get(min(bigger), 0) + n
        per_size = set(padded.values())
        if len(per_size) != 1:
            raise ValueError("DeepSeek-V4: unequal layer counts per page in a sliding group")
        layers = per_size.pop()
        k = cdiv(layers, n_tuples)
        for i in range(k):
            in_group = len(range(i, layers, k))
            pages = tuple(pg for pg in padded for _ in range(in_group))
            groups.append(Dsv4Group(pages, b, w))
    slots: dict[int, int] = {}
    for g in groups:
        for pg, n in Counter(g.pages).items():
            slots[pg] = max(slots.get(pg, 0), n)
    per_block = sum(pg * n for pg, n in slots.items())
    if group_stride:  # _get_packed_kv_cache_layout: the groups overlay one another in a block
        per_block = max(g.page_sum for g in groups)
    ordered = tuple(sorted(slots.items(), reverse=True))
    return Dsv4Layout(tuple(groups), per_block, ordered, blocks_summed=group_stride)


def _packed_groups(buckets: list[tuple[int, int, list[tuple[int, int]]]]) -> list[Dsv4Group]:
    """vLLM 0.29+'s ``_get_packed_kv_cache_groups`` over the uniform-type buckets (block size,
    window (0: full), its (page, layers) kinds): a balanced bucket (as many layers of each page
    size) repeats one layer of each page size and splits into ``cdiv(its layers per page size,
    repeats)`` groups, the i-th taking repeats i, i + k, …; an unbalanced one stays whole."""
    sized: list[tuple[int, int, dict[int, int]]] = []
    for b, w, kinds in buckets:
        per: dict[int, int] = {}
        for pg, n in kinds:
            per[pg] = per.get(pg, 0) + n
        sized.append((b, w, per))

    def balanced(per: dict[int, int]) -> bool:
        return len(set(per.values())) == 1

    floor = max(
        (max(per.values()) for _, _, per in sized if balanced(per) and len(per) > 1), default=0
    )
    if not floor:
        # no balanced bucket mixing page sizes: 0.30–0.32 then cap the sliding buckets by
        # another rule, not read
        raise ValueError(
            "DeepSeek-V4 without ratio-4 layers: vLLM 0.29+'s grouping of it is not modelled"
        )
    repeats = _approximate_gcd([max(per.values()) for _, _, per in sized if balanced(per)], floor)
    groups: list[Dsv4Group] = []
    for b, w, per in sized:
        if not balanced(per):
            pages = tuple(pg for pg, n in per.items() for _ in range(n))
            groups.append(Dsv4Group(pages, b, w))
            continue
        layers = next(iter(per.values()))
        k = cdiv(layers, repeats)
        for i in range(k):
            in_group = len(range(i, layers, k))
            groups.append(Dsv4Group(tuple(pg for pg in per for _ in range(in_group)), b, w))
    return groups


def _count(kinds: list[tuple[int, int]]) -> Counter[int]:
    c: Counter[int] = Counter()
    for pg, n in kinds:
        c[pg] += n
    return c
