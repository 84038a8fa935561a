"""The distribution sizing's vectorised pieces against their plain definitions (issue 14: the
sizing was made faster without changing a number it computes)."""

from __future__ import annotations

import numpy as np
import pytest

from inference_capacity.ledger.kv import KvGroup, KvLayout
from inference_capacity.model.shapes import AttnKind
from inference_capacity.sizing.distribution import _blocks_of


def layout(*groups: KvGroup, block_size: int = 16) -> KvLayout:
    return KvLayout(groups, 1, 1, block_size, 1, 0)


@pytest.mark.parametrize(
    "groups",
    [
        (KvGroup(AttnKind.FULL, 32, 1, 16),),
        (KvGroup(AttnKind.MLA, 27, 1, 16),),
        (KvGroup(AttnKind.FULL, 8, 1, 16), KvGroup(AttnKind.SLIDING, 8, 1, 16, 4096)),
        (KvGroup(AttnKind.FULL, 12, 1, 16), KvGroup(AttnKind.CHUNKED, 36, 1, 16, 8192)),
        (KvGroup(AttnKind.SLIDING, 5, 1, 16, 1), KvGroup(AttnKind.SLIDING, 5, 1, 16, 17)),
        (KvGroup(AttnKind.FULL, 4, 1, 64), KvGroup(AttnKind.MAMBA, 28, 1, 64, 0, 1 << 20)),
        (KvGroup(AttnKind.CHUNKED, 4, 1, 48, 100), KvGroup(AttnKind.SLIDING, 4, 1, 48, 1000)),
    ],
)
def test_blocks_of_is_the_scalar_blocks_per_request(groups: tuple[KvGroup, ...]) -> None:
    for bs in {16, groups[0].block_size}:
        lay = layout(*groups, block_size=bs)
        tokens = np.concatenate([np.arange(0, 20_000), np.array([131_071, 131_072, 1 << 20])])
        tokens = tokens.astype(np.int64)
        expected = [lay.blocks_per_request(-(-int(t) // bs) * bs, 0) for t in tokens]
        assert _blocks_of(lay, tokens).tolist() == expected
