"""DeepSeek-V4's packed KV cache (issue 21), as vLLM 0.24.0/0.25.0 plan it for the
``fp8_ds_mla`` layout (``ledger/kv_dsv4.py`` cites each function). Every number is derived here
from those functions; the GH200 case is a public vLLM error message."""

from __future__ import annotations

import pytest

from inference_capacity.ledger.kv_dsv4 import dsv4_layout, dsv4_page_bytes
from inference_capacity.units import GiB

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


def test_refuses_what_vllm_refuses() -> None:
    with pytest.raises(ValueError, match="compress ratios \\[8\\]"):
        dsv4_layout({1: 2, 8: 4}, head_dim=512, index_head_dim=128, window=128)
    with pytest.raises(ValueError, match="without a compressed layer"):
        dsv4_layout({1: 4}, head_dim=512, index_head_dim=128, window=128)
