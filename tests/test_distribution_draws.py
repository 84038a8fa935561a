"""The distribution sizing's vectorised pieces against their plain definitions (issue 14: the
sizing was made faster without changing a number it computes)."""

from __future__ import annotations

import numpy as np
import pytest

from inference_capacity.ledger.kv import KvGroup, KvLayout, kv_layout, layers_on_rank
from inference_capacity.model import load_model
from inference_capacity.model.shapes import AttnKind
from inference_capacity.sizing.distribution import (
    CHUNK,
    KEPT_PATHS,
    PATHS,
    SEED,
    RequestPool,
    Simulation,
    _blocks_of,
    size_by_distribution,
)
from inference_capacity.sizing.workload import Cohort, Quantiles

LLAMA8B = load_model("meta-llama/Llama-3.1-8B-Instruct")


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


def pool_of(blocks: np.ndarray, seqs: np.ndarray) -> RequestPool:
    zeros = np.zeros(len(blocks), dtype=np.int64)
    return RequestPool(zeros, zeros, zeros, seqs.astype(np.int64), blocks.astype(np.int64), zeros)


@pytest.mark.parametrize("size", [1 << 16, 1000])
def test_draws_are_the_generators_uint16_integers_chunk_by_chunk(size: int) -> None:
    rng = np.random.default_rng(3)
    sim = Simulation(pool_of(rng.integers(1, 300, size), np.ones(size)), paths=PATHS)
    ref = np.random.default_rng(SEED + 2)
    for chunks in (1, 3, 2):
        want = [ref.integers(0, size, size=(PATHS, CHUNK), dtype=np.uint16) for _ in range(chunks)]
        assert np.array_equal(sim._draws._draw(chunks), np.stack(want))


@pytest.mark.parametrize("n", [(1,), (1, 4)])
def test_fit_counts_the_prefix_sums_of_every_path(n: tuple[int, ...]) -> None:
    # N_m against the plain definition: the whole prefix sums of blocks and of sequences along
    # each path, budgets asked out of order (the simulation grows in between)
    rng = np.random.default_rng(5)
    blocks = rng.integers(1, 400, 1 << 16)
    seqs = rng.choice(np.array(n), 1 << 16)
    sim = Simulation(pool_of(blocks, seqs), paths=PATHS)
    for budget in (5_000.5, 60_000.0, 1.0, 20_000.0, 400_000.0):
        fit = sim.fit(budget, 1 << 20)
        order = sim.draws.transpose(1, 0, 2).reshape(PATHS, sim.length)
        cum = np.cumsum(blocks[order], axis=1)
        fitting = (cum <= budget).sum(axis=1)
        cum_seqs = np.concatenate([np.zeros((PATHS, 1), int), np.cumsum(seqs[order], 1)], 1)
        assert np.array_equal(fit, cum_seqs[np.arange(PATHS), fitting])
        assert np.array_equal(sim.seqs_at(sim.length), cum_seqs[:, -1])
        assert np.array_equal(sim.index, order[:KEPT_PATHS])


def test_a_mix_with_n_samples_sizes_as_before() -> None:
    # pinned numbers of the seeded Monte Carlo (SEED, PATHS, POOL, CHUNK) for cohorts of
    # different n, as computed before the simulation kept chunk ends instead of every prefix sum
    chat = Cohort("chat", 0.7, Quantiles(1000, 2000, 4000), Quantiles(80, 200, 500), 500)
    agent = Cohort("agent", 0.2, Quantiles(3000, 5000, 9000), Quantiles(300, 900, 2000), 1000, 4)
    layout = kv_layout(
        layers_on_rank(LLAMA8B, 1, 0), tp=1, kv_bytes=2, model_dtype_bytes=2, block_size=16
    )
    args = (layout, 29_371, 32768, 0.10, 1 << 20, 0.01, 1024)
    d = size_by_distribution((chat, agent), None, *args)
    assert (d.max_num_seqs, d.preemption_probability) == (398, 0.00927734375)
    assert d.probability(400) == 0.01220703125
    burst = size_by_distribution((chat, agent), (0.3, 0.7), *args)
    assert (burst.binding_mix, burst.max_num_seqs, burst.probability(400)) == (
        "burst",
        367,
        0.18505859375,
    )
