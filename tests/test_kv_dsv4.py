"""DeepSeek-V4's packed KV cache (issue 21), as vLLM 0.24.0/0.25.0 plan it for the
``fp8_ds_mla`` layout (``ledger/kv_dsv4.py`` cites each function). Every number is derived here
from those functions; the GH200 case is a public vLLM error message."""

from __future__ import annotations

import pytest

from inference_capacity.engines.vllm import (
    EngineSettings,
    SettingsError,
    StartupPrediction,
    predict_startup,
)
from inference_capacity.hardware import get_gpu
from inference_capacity.ledger.kv_dsv4 import dsv4_layout, dsv4_page_bytes
from inference_capacity.ledger.weights import weight_breakdown
from inference_capacity.model import load_model
from inference_capacity.model.catalog import load_config
from inference_capacity.model.shapes import ModelShape
from inference_capacity.units import GiB

H200 = get_gpu("H200")

#: deepseek-ai/DeepSeek-V4-Flash config.json (huggingface.co, not reachable from here):
#: ``compress_ratios`` [0, 0, 4, 128, 4, …, 128, 4, 0] — 44 entries for 43 layers plus the MTP
#: layer, as public copies of the config quote it (e.g. the DeepSeek-V4-Flash fixtures of
#: rtp-llm's dsv4_checkpoint_inventory test: ``[0, 0, 4, *([128, 4] * 20), 0]``); head_dim 512,
#: index_head_dim 128, sliding_window 128, num_hidden_layers 43
FLASH_RATIOS = [0, 0, 4, *([128, 4] * 20), 0]
FLASH_LAYERS = 43


def flash_counts() -> dict[int, int]:
    """Layers by effective ratio: ``DeepseekV4Attention.compress_ratio = max(1, ratio)`` for the
    43 decoder layers (the MTP entry is not a decoder layer)."""
    out: dict[int, int] = {}
    for r in FLASH_RATIOS[:FLASH_LAYERS]:
        out[max(1, r)] = out.get(max(1, r), 0) + 1
    return out


def test_flash_layer_counts() -> None:
    assert len(FLASH_RATIOS) == 44
    assert flash_counts() == {1: 2, 4: 21, 128: 20}


def test_page_bytes_follow_the_specs() -> None:
    p = dsv4_page_bytes(flash_counts(), head_dim=512, index_head_dim=128)
    # MLAAttentionSpec fp8_ds_mla: (256 // r) rows × 584 B, rounded up to 576 B
    assert p["c4"] == 37_440  # 64 × 584 = 37,376 → 65 × 576
    assert p["c128"] == 1_728  # 2 × 584 = 1,168 → 3 × 576
    # DeepseekV4SWACache: 64 rows × 584 B → 37,440
    assert p["swa"] == 37_440
    # indexer keys: 64 rows × (128 + 128 // 128 × 4) = 8,448 → 15 × 576
    assert p["c4_indexer"] == 8_640
    # CompressorStateCache: block 4 × 2·2·512 fp32 = 32,768 → 57 × 576; block 8 × 2·1·512 fp32
    assert p["c4_state"] == 32_832
    assert p["c128_state"] == 32_832
    # the indexer's compressor: 4 × 2·2·128 × 4 = 8,192 → 15 × 576
    assert p["c4_indexer_state"] == 8_640


def test_flash_groups_and_packed_block() -> None:
    lay = dsv4_layout(flash_counts(), head_dim=512, index_head_dim=128, window=128)
    # layer tuples before padding: full 21 (21 C4, 21 indexer, 20 C128), SWA 43, C4 states 21,
    # C128 states 20; _approximate_gcd([21, 43, 21, 20], lower_bound=21) = 22 (padding
    # 1 + 1 + 1 + 2 = 5, the least); the 43 SWA layers split into cdiv(43, 22) = 2 groups
    shapes = [(len(g.pages), g.block_size, g.window) for g in lay.groups]
    assert shapes == [(62, 256, 0), (22, 64, 128), (21, 64, 128), (42, 4, 8), (20, 8, 128)]
    # state pages of 32,832 B are padded to the next MLA page, 37,440
    assert set(lay.groups[3].pages) == {37_440, 8_640}
    assert set(lay.groups[4].pages) == {37_440}
    # _get_kv_cache_config_packed: slots per page = the most layers of that page in a group
    assert lay.slots == ((37_440, 22), (8_640, 21), (1_728, 20))
    assert lay.bytes_per_block == 22 * 37_440 + 21 * 8_640 + 20 * 1_728 == 1_039_680


def test_concurrency_at_1m() -> None:
    lay = dsv4_layout(flash_counts(), head_dim=512, index_head_dim=128, window=128)
    L, T = 1_048_576, 8192
    # get_max_concurrency_for_kv_cache_config: Σ_g max pages × the group's page sum, over the
    # full group's page sum (1,002,240):
    #   full cdiv(L, 256) = 4096; SWA cdiv(127 + T, 64) + 1 = 131 (two groups);
    #   C4 states cdiv(7 + T, 4) + 1 = 2051; C128 states cdiv(127 + T, 8) + 1 = 1041
    need = 4096 * 1_002_240 + 131 * (823_680 + 786_240) + 2051 * 967_680 + 1041 * 748_800
    assert lay.blocks_per_request(L, T) == -(-need // 1_002_240) == 7065
    # so 7 GiB of KV hold 7 GiB // 1,039,680 B = 7229 blocks: 1.02 requests of 1M tokens
    # (the "~1 M KV tokens in 7 GiB" on H20 TP2)
    blocks = lay.num_blocks(7 * GiB)
    assert blocks == 7229
    assert int(blocks / 7065 * L) == 1_072_916


def test_gh200_start_check_matches_the_public_error() -> None:
    """vllm-project/vllm#44376 (comment of 2026-06-03, DeepSeek-V4-Flash, 2×GH200, TP2 + EP,
    LLM(max_model_len=30000, kv_cache_dtype="fp8", block_size=256); the LLM class defaults
    max_num_batched_tokens to 16384 on a GPU of ≥ 70 GiB): "(6.66 GiB KV cache is needed, which
    is larger than the available KV cache memory (5.44 GiB). Based on the available memory, the
    estimated maximum model length is 13528." """
    lay = dsv4_layout(flash_counts(), head_dim=512, index_head_dim=128, window=128)
    T = 16384
    # _max_memory_usage_bytes_from_groups: 22 tuples × 47,808 B (37,440 + 8,640 + 1,728) per
    # page, pages 118 + 2 × 259 + 4099 + 2065 = 6800 → 7,152,076,800 B = 6.66 GiB
    needed = lay.bytes_for_request(30_000, T)
    assert needed == 6800 * 22 * 47_808
    assert round(needed / GiB, 2) == 6.66
    # estimate_max_model_len: the largest length whose need fits; 13528 fits and 13529 does
    # not for any available memory in [5,841,563,904, 5,843,667,456) B, which prints 5.44 GiB
    fits, over = lay.bytes_for_request(13_528, T), lay.bytes_for_request(13_529, T)
    assert fits == 5_841_563_904 and over == 5_843_667_456
    assert round(fits / GiB, 2) == round((over - 1) / GiB, 2) == 5.44


def test_h20_title_of_vllm_51041() -> None:
    """vllm-project/vllm#51041 (H20, official vLLM 0.26.0, DeepSeek-V4-Flash-0731 — the same 43
    decoder layers and ratios — TP2, fp8 → fp8_ds_mla, max_model_len 121344,
    max_num_batched_tokens 8192): "KV cache holds only 150K tokens in 7.7 GiB". At 0.26 a
    sliding group holds ``max_in_flight_tokens`` = 2 × 8192 (async scheduling, V1 runner, PP 1;
    engines/vllm.py::in_flight_tokens) beyond its window."""
    lay = dsv4_layout(flash_counts(), head_dim=512, index_head_dim=128, window=128)
    L, in_flight = 121_344, 2 * 8192
    need = lay.blocks_per_request(L, in_flight)
    # full cdiv(L, 256) = 474; SWA cdiv(16511, 64) + 1 = 259; C4 states cdiv(16391, 4) + 1 =
    # 4099; C128 states cdiv(16511, 8) + 1 = 2065
    pages = 474 * 1_002_240 + 259 * (823_680 + 786_240) + 4099 * 967_680 + 2065 * 748_800
    assert need == -(-pages // 1_002_240) == 6391
    blocks = lay.num_blocks(int(7.7 * GiB))
    tokens = int(blocks / need * L)
    assert blocks == 7952  # int(7.7 GiB) // 1,039,680
    assert tokens == int(7952 / 6391 * L) == 150_982  # "150K tokens in 7.7 GiB"


def test_refuses_what_vllm_refuses() -> None:
    with pytest.raises(ValueError, match="compress ratios \\[8\\]"):
        dsv4_layout({1: 2, 8: 4}, head_dim=512, index_head_dim=128, window=128)
    with pytest.raises(ValueError, match="without a compressed layer"):
        dsv4_layout({1: 4}, head_dim=512, index_head_dim=128, window=128)


# --- the model and its plan -------------------------------------------------------------------


def flash() -> ModelShape:
    """The catalog entry (catalog/models/SOURCES.md says where the config.json comes from)."""
    return load_model("deepseek-ai/DeepSeek-V4-Flash")


def test_flash_config_is_the_counted_one() -> None:
    _, cfg = load_config("deepseek-ai/DeepSeek-V4-Flash")
    assert cfg["compress_ratios"] == FLASH_RATIOS
    assert cfg["num_hidden_layers"] == FLASH_LAYERS


def test_flash_parameters_match_the_model_card() -> None:
    """The model card (huggingface.co/deepseek-ai/DeepSeek-V4-Flash): 284B total parameters."""
    s = flash()
    assert round(s.num_parameters / 1e9) == 284
    # layers by (effective ratio): 2 window-only, 21 CSA (with the indexer), 20 HCA
    kinds = {g.attention.compress_ratio: g.layers.count for g in s.layer_groups}
    assert kinds == {1: 2, 4: 21, 128: 20}


def test_flash_experts_are_mxfp4_per_rank() -> None:
    """Mxfp4MoEMethod: e2m1 payload (½ B) + one e8m0 scale per 32 values; w13 column-split
    (2 × 2048 rows over TP), w2 row-split (2048 columns over TP); 256 experts × 43 layers."""
    s = flash()
    assert s.quantization is not None
    w = weight_breakdown(s, 2, 1, 0, 2, s.quantization)
    per_expert = 2048 * 4096 * 17 // 32 + 4096 * 1024 * 17 // 32  # (½ + 1/32) B per value
    assert w.by_group["experts"] == 43 * 256 * per_expert
    # the FP8 linears: 1 B per value + one 1-B e8m0 scale per 128×128 block (is_scale_e8m0);
    # wo_b at TP2: 4096 × 4096 per rank → 16 MiB + 32 × 32 B
    from inference_capacity.model.quant import quantized_bytes, tensor_format

    wo_b = next(t for t in s.tensors if t.name == "attn.wo_b")
    fmt = tensor_format(s.quantization, wo_b)
    assert fmt is not None and fmt.block == (128, 128)
    r, c = wo_b.shape_per_rank(2)
    assert (r, c) == (4096, 4096)
    assert quantized_bytes(fmt, r, c, 1) == 4096 * 4096 + 32 * 32


def _plan(
    version: str = "0.25.0", kv: str = "fp8", block_size: int | None = None
) -> StartupPrediction:
    settings = EngineSettings(
        version=version, kv_cache_dtype=kv, max_model_len=1_048_576, block_size=block_size
    )
    return predict_startup(flash(), H200.total_bytes, H200.name, 2, 1, settings)


def test_flash_plans_on_h200_tp2_with_the_packed_layout() -> None:
    p = _plan()
    assert p.starts
    r = p.ranks[p.binding_rank]
    # _get_kv_cache_config_packed: available // 1,039,680 B per block
    assert r.layout.bytes_per_block == 1_039_680
    assert p.num_gpu_blocks == r.available_kv // 1_039_680
    assert r.layout.block_size == 256
    # GPU KV cache size = concurrency × L, concurrency = blocks / 7065 (test_concurrency_at_1m;
    # max_num_batched_tokens at 0.25's OpenAI-server default on H200: 8192)
    need = r.layout.blocks_per_request(1_048_576, 8192)
    assert need == 7065
    assert p.max_concurrency == pytest.approx(p.num_gpu_blocks / need)
    assert p.kv_cache_tokens == int(p.num_gpu_blocks / need * 1_048_576)


@pytest.mark.parametrize(
    ("version", "kv", "block_size", "match"),
    [
        ("0.19.0", "fp8", None, "no DeepSeek-V4"),
        ("0.22.0", "fp8", None, "read for 0.24–0.33 only"),
        ("0.28.0", "auto", None, "only supports fp8 kv-cache"),
        ("0.29.0", "auto", None, "only supports fp8 kv-cache"),
        ("0.33.0", "bfloat16", None, "only supports fp8 kv-cache"),
        ("0.25.0", "auto", None, "only supports fp8 kv-cache"),
        ("0.25.0", "fp8", 64, "256 only"),
    ],
)
def test_flash_refusals_name_the_reason(
    version: str, kv: str, block_size: int | None, match: str
) -> None:
    with pytest.raises(SettingsError, match=match):
        _plan(version, kv, block_size)


# --- vLLM 0.27.1 / 0.28.0 (ledger/kv_dsv4.py's docstring: the packing read against 0.26.0) ----


def test_027_packs_by_the_largest_group() -> None:
    """0.27.1 and 0.28.0: ``_get_kv_cache_groups_uniform_groups`` keeps each sliding kind's own
    page, ``_get_packed_kv_cache_layout``'s block stride is the largest group's page sum and
    ``get_max_concurrency_for_kv_cache_config`` sums the groups' page counts."""
    old = dsv4_layout(flash_counts(), head_dim=512, index_head_dim=128, window=128)
    new = dsv4_layout(
        flash_counts(), head_dim=512, index_head_dim=128, window=128, planning="group_stride"
    )
    # the full MLA group: 21 C4 pages + 21 indexer pages + 20 C128 pages
    assert new.bytes_per_block == 21 * 37_440 + 21 * 8_640 + 20 * 1_728 == 1_002_240
    assert new.bytes_per_block == max(g.page_sum for g in new.groups)
    # the C4 compressor-state group keeps its 32,832 and 8,640 B pages (0.26 padded both up to
    # MLA pages: 37,440 and 8,640)
    states = [g for g in new.groups if g.window == 8]
    assert states and set(states[0].pages) == {32_832, 8_640}
    # the groups: full, the SWA layers split in two (22 + 21), the C4 and the C128 states
    assert [len(g.pages) for g in new.groups] == [62, 22, 21, 42, 20]
    # blocks a request needs at 65,536 tokens with 2 × 8,192 in flight: 256 full + 2 × 259 SWA
    # (cdiv(127 + 16,384, 64) + 1) + 4,099 C4 states (cdiv(7 + 16,384, 4) + 1) + 2,065 C128
    # states (cdiv(127 + 16,384, 8) + 1)
    L, in_flight = 65_536, 2 * 8192
    assert new.blocks_per_request(L, in_flight) == 256 + 2 * 259 + 4099 + 2065 == 6938
    # at 60 GiB: 64,280 blocks (61,965 at 0.26's 1,039,680 B a block); tokens = blocks / need × L
    blocks = new.num_blocks(60 * GiB)
    assert blocks == 60 * GiB // 1_002_240 == 64_280
    assert old.num_blocks(60 * GiB) == 61_965
    assert int(blocks / 6938 * L) == 607_185
    # the start check (_max_memory_usage_bytes_from_groups) is the same text: the same bytes
    for length in (30_000, 65_536, 1_048_576):
        assert new.bytes_for_request(length, 16_384) == old.bytes_for_request(length, 16_384)


def test_model_buffers_by_version() -> None:
    """DeepseekV4Model.__init__'s buffers (models/deepseek_v4/nvidia/model.py), in "Model loading
    took": at T = 8,192 and TP2, 0.26 holds the top-k indices (8,192 × 512 int32, 16 MiB) and the
    MTP hidden buffer (8,192 × hc_mult 4 × hidden 4,096 bf16, 256 MiB); 0.27.1 drops the latter
    without a speculator and adds DeepseekV4EagerScratchPool: the padded q (8,192 × 64 heads ×
    512 bf16, 512 MiB) and the largest aux view set, the MXFP4 indexer q (8,192 × 64 × 64 B +
    8,192 × 64 × 4 B + 8,192 × 64 fp32 = 36 MiB)."""
    from inference_capacity.engines.vllm import dsv4_model_buffer_bytes
    from inference_capacity.engines.vllm_rules import VllmRules

    shape = flash()
    T = 8192
    topk = T * 512 * 4
    r26, r27, r28 = (VllmRules.for_version(v) for v in ("0.26.0", "0.27.1", "0.28.0"))
    assert dsv4_model_buffer_bytes(shape, r26, T, 2, True, 2) == topk + T * 4 * 4096 * 2
    assert dsv4_model_buffer_bytes(shape, r26, T, 2, False, 2) == topk
    scratch = T * 64 * 512 * 2 + (T * 64 * 64 + T * 64 * 4 + T * 64 * 4)
    assert dsv4_model_buffer_bytes(shape, r27, T, 2, True, 2) == topk + scratch
    assert dsv4_model_buffer_bytes(shape, r28, T, 2, True, 2) == topk + scratch
    assert (topk + scratch) / GiB == pytest.approx(0.551, abs=0.001)
    # every other model: none
    assert dsv4_model_buffer_bytes(load_model("Qwen/Qwen3-8B"), r27, T, 1, True, 2) == 0


@pytest.mark.parametrize("version", ["0.27.1", "0.28.0"])
def test_flash_plans_on_027_and_028(version: str) -> None:
    p = _plan(version)
    assert p.starts
    r = p.ranks[p.binding_rank]
    assert r.layout.bytes_per_block == 1_002_240
    assert p.num_gpu_blocks == r.available_kv // 1_002_240
    T = p.settings.max_num_batched_tokens
    need = r.layout.blocks_per_request(1_048_576, 2 * T)
    # full cdiv(1,048,576, 256) = 4,096, and the sliding groups as at 65,536 tokens
    assert need == 4096 + 2 * (-(-(127 + 2 * T) // 64) + 1) + (-(-(7 + 2 * T) // 4) + 1) + (
        -(-(127 + 2 * T) // 8) + 1
    )
    assert p.kv_cache_tokens == int(p.num_gpu_blocks / need * 1_048_576)
    # the buffers are weights ("Model loading took"), and 0.28.0 runs DeepSeek-V4 on the V2
    # runner by default (config/vllm.py DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES)
    assert r.weights.by_group["dsv4_buffers"] == T * 512 * 4 + T * 64 * 512 * 2 + T * 64 * 72
    assert p.settings.v2_runner is (version == "0.28.0")


def test_more_than_128_query_heads_a_rank_is_refused() -> None:
    """flashmla.py::get_padded_num_q_heads (0.24.0–0.28.0): 'DeepseekV4 FlashMLA does not support
    {n} heads (FP8 decode kernel requires h_q in {64, 128})' beyond 128 heads a rank."""
    from dataclasses import replace

    wide = replace(flash(), num_attention_heads=256)
    s = EngineSettings(version="0.27.1", kv_cache_dtype="fp8", max_model_len=65_536)
    with pytest.raises(SettingsError, match="256 query heads a rank"):
        predict_startup(wide, H200.total_bytes, H200.name, 1, 1, s)
    # at TP2 each rank holds 128: planned
    assert predict_startup(wide, H200.total_bytes, H200.name, 2, 1, s) is not None


# --- vLLM 0.29.0–0.33.0 (ledger/kv_dsv4.py's docstring: _get_packed_kv_cache_groups) -----------


def test_029_groups_flash_as_027_and_reserves_the_null_block() -> None:
    """0.29–0.33's grouping gives Flash the 0.27 groups, block stride and request blocks; the
    start check weighs bytes per block × a request's blocks (1,002,240 × 6,938 = 6,953,541,120 B
    at 65,536 tokens, 7,297,221,888 before) against the memory less one block (the null block),
    so at 6 GiB the estimated length is 15,656 where the 0.28 rule gives 14,916."""
    kw = dict(head_dim=512, index_head_dim=128, window=128)
    old = dsv4_layout(flash_counts(), planning="group_stride", **kw)  # type: ignore[arg-type]
    new = dsv4_layout(flash_counts(), planning="packed_groups", **kw)  # type: ignore[arg-type]
    assert [len(g.pages) for g in new.groups] == [len(g.pages) for g in old.groups]
    assert new.bytes_per_block == old.bytes_per_block == 1_002_240
    L, T = 65_536, 16_384
    assert new.blocks_per_request(L, T) == old.blocks_per_request(L, T) == 6938
    assert new.bytes_for_request(L, T) == 1_002_240 * 6938 == 6_953_541_120
    assert old.bytes_for_request(L, T) == 22 * 6938 * 47_808 == 7_297_221_888
    assert new.start_check_reserved == 1_002_240 and old.start_check_reserved == 0

    def estimate(layout: object, available: int) -> int:  # _estimate_max_model_len_from_groups
        lo, hi = 0, L
        avail = available - layout.start_check_reserved  # type: ignore[attr-defined]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if layout.bytes_for_request(mid, T) <= avail:  # type: ignore[attr-defined]
                lo = mid
            else:
                hi = mid - 1
        return lo

    assert estimate(new, 6 * GiB) == 15_656
    assert estimate(old, 6 * GiB) == 14_916


def test_029_grouping_differs_for_other_layer_mixes() -> None:
    """A mix with more ratio-128 layers than ratio-4 ones (10 and 30, two window-only): the MLA
    bucket (37,440 × 10, 8,640 × 10, 1,728 × 30) is unbalanced and stays whole; the balanced
    buckets are the 42 SWA layers, the C4 states (10 of each page: the floor) and the 30 C128
    states, so repeats = _approximate_gcd([42, 10, 30], 10) = 11 (padding 2 + 1 + 3): SWA in
    cdiv(42, 11) = 4 groups of 11, 11, 10, 10, the C128 states in 3 of 10. 0.27/0.28 keyed the
    split on the MLA group's 30 (SWA in two of 21, the states whole)."""
    kw = dict(head_dim=512, index_head_dim=128, window=128)
    counts = {1: 2, 4: 10, 128: 30}
    new = dsv4_layout(counts, planning="packed_groups", **kw)  # type: ignore[arg-type]
    old = dsv4_layout(counts, planning="group_stride", **kw)  # type: ignore[arg-type]
    shape = [(len(g.pages), g.block_size, g.window) for g in new.groups]
    assert shape == [
        (50, 256, 0),
        (11, 64, 128),
        (11, 64, 128),
        (10, 64, 128),
        (10, 64, 128),
        (20, 4, 8),
        (10, 8, 128),
        (10, 8, 128),
        (10, 8, 128),
    ]
    assert [len(g.pages) for g in old.groups] == [50, 21, 21, 20, 30]
    # the block: the largest group, now the MLA one: 10 × 37,440 + 10 × 8,640 + 30 × 1,728
    assert new.bytes_per_block == 512_640
    assert old.bytes_per_block == 30 * 32_832  # the C128 states' group
    with pytest.raises(ValueError, match="without ratio-4 layers"):
        dsv4_layout({1: 2, 128: 20}, planning="packed_groups", **kw)  # type: ignore[arg-type]


def test_030_takes_auto_as_fp8_and_0_33_plans_by_default() -> None:
    """_resolve_dsv4_kv_cache_dtype: 0.30.0–0.33.0 take ``auto`` as fp8 (fp8_ds_mla); 0.29 still
    asserts. The default release (0.33.0) plans DeepSeek-V4-Flash without flags: no eager
    scratch pool (eager_scratch.py is gone in 0.29), the top-k indices buffer alone."""
    for version in ("0.30.0", "0.33.0"):
        auto, fp8 = _plan(version, "auto"), _plan(version, "fp8")
        assert auto.starts and auto.settings.kv_cache_dtype == "fp8"
        assert auto.kv_cache_tokens == fp8.kv_cache_tokens
    p = _plan("0.33.0", "auto")
    r = p.ranks[p.binding_rank]
    assert r.layout.bytes_per_block == 1_002_240
    T = p.settings.max_num_batched_tokens
    assert r.weights.by_group["dsv4_buffers"] == T * 512 * 4
