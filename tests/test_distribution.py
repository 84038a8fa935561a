"""max-num-seqs from the distribution of a batch (issue 14, point 1).

Reference layout as in test_sizing.py: Llama-3.1-8B, TP1, bf16, block 16 → one full-attention
group, a block is 16 tokens (2 MiB). Every expected number is derived in the comment beside it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference_capacity.ledger.kv import kv_layout, layers_on_rank
from inference_capacity.model import load_model
from inference_capacity.model.shapes import cdiv
from inference_capacity.sizing.distribution import (
    PATHS,
    Z95,
    Z99,
    DistributionSizing,
    LogNormal,
    size_by_distribution,
)
from inference_capacity.sizing.workload import Cohort, Quantiles, Workload, size_max_num_seqs

LLAMA8B = load_model("meta-llama/Llama-3.1-8B-Instruct")
LAYOUT = kv_layout(
    layers_on_rank(LLAMA8B, 1, 0), tp=1, kv_bytes=2, model_dtype_bytes=2, block_size=16
)
GEMMA2 = load_model("google/gemma-2-9b-it")  # alternating sliding (4096) / full layers
GEMMA_LAYOUT = kv_layout(
    layers_on_rank(GEMMA2, 1, 0), tp=1, kv_bytes=2, model_dtype_bytes=2, block_size=16
)
BLOCKS = 29_371  # an H100's pool for Llama-3.1-8B (test_sizing.py)


def q(p: int) -> Quantiles:
    return Quantiles(p, p, p)


def dist(cohorts: tuple[Cohort, ...], **kw: object) -> DistributionSizing:
    args: dict[str, object] = {
        "burst_weights": None,
        "layout": LAYOUT,
        "num_blocks": BLOCKS,
        "max_model_len": 32768,
        "safety_fraction": 0.10,
        "cap": 1 << 20,
        "target": 0.01,
        "default_max_num_seqs": 1024,
    }
    args.update(kw)
    return size_by_distribution(cohorts, **args)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the log-normal fit


def test_lognormal_fit_matches_the_median_and_the_heavier_tail() -> None:
    # p50 1000, p95 2000, p99 4000: sigma from p95 = ln 2 / 1.6449 = 0.4214, from p99 =
    # ln 4 / 2.3263 = 0.5959; the larger wins, so p99 is matched exactly and p95 over-stated:
    # 1000 × exp(0.5959 × 1.6449) = 2,665.
    fit = LogNormal.fit(Quantiles(1000, 2000, 4000))
    assert fit.mu == pytest.approx(math.log(1000))
    assert fit.sigma == pytest.approx(math.log(4) / Z99)
    assert fit.quantile(Z99) == pytest.approx(4000)
    assert fit.quantile(Z95) == pytest.approx(2665, abs=1)
    # a p95-heavy tail: p95 matched, p99 over-stated
    fit = LogNormal.fit(Quantiles(100, 400, 500))
    assert fit.sigma == pytest.approx(math.log(4) / Z95)
    assert fit.quantile(Z95) == pytest.approx(400)
    assert fit.quantile(Z99) > 500
    assert LogNormal.fit(q(700)).sigma == 0.0  # constant lengths


# ------------------------------------------------------- constant lengths: today's rule exactly


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 12_000),
    st.integers(1, 4_000),
    st.sampled_from([0, 15, 16, 500, 1024]),
    st.floats(0.0, 0.5),
    st.integers(200, 60_000),
    st.booleans(),
)
def test_constant_lengths_reproduce_the_conservative_rule(
    prompt: int, output: int, shared: int, safety: float, blocks: int, gemma: bool
) -> None:
    layout = GEMMA_LAYOUT if gemma else LAYOUT
    cohort = Cohort("c", 1.0, q(prompt), q(output), shared)
    old = size_max_num_seqs(Workload((cohort,)), layout, blocks, 8192, safety, 1 << 20)
    new = dist(
        (cohort,), layout=layout, num_blocks=blocks, max_model_len=8192, safety_fraction=safety
    )
    assert new.max_num_seqs == old.max_num_seqs
    assert new.probability(new.max_num_seqs) == 0.0
    assert new.probability(new.max_num_seqs + 1) == 1.0


def test_n_samples_share_the_prompts_full_blocks() -> None:
    # prompt 1000 → 62 full blocks (992 tokens) shared by the 4 samples; each sample's context
    # 1200 → 75 blocks, 75 − 62 = 13 of its own: a request holds 62 + 4 × 13 = 114 blocks for 4
    # sequences. Budget (29,371 − 1) × 0.9 = 26,433 → 231 requests (26,334) → 924 sequences.
    d = dist((Cohort("c", 1.0, q(1000), q(200), n=4),))
    assert d.max_num_seqs == 4 * (26_433 // 114) == 924
    assert d.blocks_per_seq == pytest.approx(114 / 4)
    single = dist((Cohort("c", 1.0, q(1000), q(200)),))
    assert single.max_num_seqs == 26_433 // 75 == 352


# ----------------------------------------------------- a log-normal cohort: the Monte Carlo


def _rounded_lognormal_pmf(fit: LogNormal, top: int) -> np.ndarray:
    """P(rint(X) = k), k = 0..top, from the log-normal CDF (Φ by erf)."""
    edges = np.arange(top + 2, dtype=np.float64) - 0.5
    edges[0] = 1e-300
    z = (np.log(edges) - fit.mu) / fit.sigma
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
    return np.diff(cdf)


def exact_probability(prompt: Quantiles, output: Quantiles, budget: float, n: int) -> float:
    """P(Σ_{i≤n} cdiv(P_i + O_i, 16) > budget) by convolution, independently of the Monte Carlo:
    rounded log-normal PMFs of prompt (≥ 0) and output (≥ 1: mass at 0 moved to 1), their
    convolution for the context, blocks = cdiv(context, 16), then the n-fold sum."""
    top = 20_000  # both tails beyond this are < 1e-6 for the quantiles used below
    pp = _rounded_lognormal_pmf(LogNormal.fit(prompt), top)
    po = _rounded_lognormal_pmf(LogNormal.fit(output), top)
    po[1] += po[0]
    po[0] = 0.0
    ctx = np.convolve(pp, po)
    ctx[1] += ctx[0]
    ctx[0] = 0.0
    blocks = np.bincount(-(-np.arange(len(ctx)) // 16), weights=ctx)
    size = 1 << math.ceil(math.log2(len(blocks) * n + 1))
    total = np.fft.irfft(np.fft.rfft(blocks, size) ** n, size)
    return float(1.0 - total[: int(math.floor(budget)) + 1].sum())


def test_monte_carlo_agrees_with_an_exact_convolution() -> None:
    prompt, output = Quantiles(1000, 3000, 5000), Quantiles(150, 500, 900)
    d = dist((Cohort("chat", 1.0, prompt, output),))
    n = d.max_num_seqs
    budget = d.budget_blocks
    assert budget == pytest.approx((BLOCKS - 1) * 0.9)
    for batch in (n - 10, n, n + 5, n + 15):
        exact = exact_probability(prompt, output, budget, batch)
        mc = d.probability(batch)
        se = math.sqrt(max(exact * (1 - exact), 1e-4) / PATHS)
        assert abs(mc - exact) <= 3 * se, (batch, mc, exact, se)
    # the chosen batch is below the target and the next one reaches it
    assert d.probability(n) < 0.01 <= d.probability(n + 1)
    assert exact_probability(prompt, output, budget, n) < 0.02


def test_distribution_beats_p95_reservations_when_sums_concentrate() -> None:
    # the p95 of a sum of N is far below N × p95: the conservative rule reserves 2,000 + 500
    # tokens → 157 blocks per sequence → 26,433 // 157 = 168; the distribution admits more
    prompt, output = Quantiles(800, 2000, 3000), Quantiles(100, 500, 800)
    cohort = Cohort("chat", 1.0, prompt, output)
    old = size_max_num_seqs(Workload((cohort,)), LAYOUT, BLOCKS, 32768, 0.10, 1 << 20)
    assert old.max_num_seqs == 26_433 // cdiv(2500, 16) == 168
    d = dist((cohort,))
    assert d.max_num_seqs > old.max_num_seqs
    assert d.probability(old.max_num_seqs) == 0.0


def test_probability_is_monotone_and_deterministic() -> None:
    cohorts = (
        Cohort("chat", 0.7, Quantiles(1000, 2000, 4000), Quantiles(80, 200, 500), 500),
        Cohort("rag", 0.3, Quantiles(6000, 12000, 20000), Quantiles(200, 500, 1000)),
    )
    a = dist(cohorts)
    ps = [a.probability(n) for n in range(1, 400)]
    assert ps == sorted(ps)
    # the same inputs give the same numbers; so does asking a different pool first (the
    # simulation is cached and grown in fixed chunks)
    dist(cohorts, num_blocks=90_000)
    b = dist(cohorts)
    assert a.max_num_seqs == b.max_num_seqs
    assert a.preemption_probability == b.preemption_probability


def test_burst_mix_sizes_for_the_worse() -> None:
    chat = Cohort("chat", 0.8, Quantiles(1000, 2000, 4000), Quantiles(80, 200, 500))
    rag = Cohort("rag", 0.2, Quantiles(6000, 12000, 20000), Quantiles(200, 500, 1000))
    steady = dist((chat, rag))
    burst = dist((chat, rag), burst_weights=(0.4, 0.6))  # more long requests in the burst hour
    assert burst.binding_mix == "burst"
    assert burst.max_num_seqs < steady.max_num_seqs
    assert burst.probability(burst.max_num_seqs) < 0.01
    # a burst that is the steady mix changes nothing
    same = dist((chat, rag), burst_weights=(0.8, 0.2))
    assert same.max_num_seqs == steady.max_num_seqs


def test_probability_at_vllm_default_and_the_cap() -> None:
    d = dist((Cohort("c", 1.0, Quantiles(1000, 2000, 4000), Quantiles(80, 200, 500)),), cap=64)
    assert d.max_num_seqs == 64
    assert d.preemption_probability == d.probability(64) == 0.0
    # 1,024 sequences of ~1,200 tokens (~75 blocks) need ~77,000 blocks of a 26,433 budget
    assert d.preemption_probability_at_default == 1.0


def test_bad_inputs_name_the_field() -> None:
    c = (Cohort("c", 1.0, q(10), q(10)),)
    with pytest.raises(ValueError, match="preemptionTarget"):
        dist(c, target=0.5)
    with pytest.raises(ValueError, match="workload.cohorts"):
        dist(())


def test_a_simulation_does_not_read_another_callers_longer_paths() -> None:
    """The draws of a pool are shared by every caller, the simulation (how far its paths are
    grown) is the caller's: a fit after another caller grew the same pool to a far larger
    budget equals the fit of a caller that is first, bit for bit."""
    from inference_capacity.sizing.distribution import Simulations, clear_cache

    chat = Cohort("chat", 1.0, Quantiles(1000, 2000, 4000), Quantiles(200, 500, 1000))
    args = ((chat,), (1.0,), LAYOUT, 8192)
    clear_cache()
    first = Simulations().get(*args)
    alone = first.fit(2_000.0, 4096).copy()
    clear_cache()
    other = Simulations().get(*args)
    other.fit(60_000.0, 1 << 20)  # grows the shared draws far past what 2,000 blocks need
    mine = Simulations().get(*args)
    assert mine.length < other.length
    np.testing.assert_array_equal(mine.fit(2_000.0, 4096), alone)
    assert mine.length == first.length


# --------------------------------------------------------------------------- memory held (issue 22)


def test_a_finished_plan_keeps_the_numbers_not_the_simulation() -> None:
    """A plan's sizing is detached: the fit per path (its probabilities) stays, the simulation
    (tens of MB of draws) and the request pool (3 MB) do not, and reading the simulation after
    the plan is made is a clear error, not a silent re-draw."""
    from inference_capacity.engines.vllm import EngineSettings
    from inference_capacity.hardware import get_gpu
    from inference_capacity.planner import PlanInput, make_plan

    chat = Cohort("chat", 1.0, Quantiles(1000, 2000, 4000), Quantiles(200, 500, 1000))
    inp = PlanInput(
        LLAMA8B,
        get_gpu("H100-SXM-80GB"),
        engine=EngineSettings(version="0.19.0", max_model_len=8192),
        workload=Workload((chat,)),
    )
    plan = make_plan(inp)
    d = plan.distribution
    assert d is not None
    live = dist((chat,), max_model_len=8192, num_blocks=plan.prediction.num_gpu_blocks)
    for kept, full in zip(d.mixes, live.mixes, strict=True):
        assert kept.paths.sim is None and kept.pool is None
        with pytest.raises(RuntimeError, match="detached"):
            _ = kept.paths.simulation
        assert full.paths.sim is not None and full.pool is not None
    # the same probabilities as the sizing the plan was made from
    for n in (1, d.max_num_seqs, d.max_num_seqs + 50, 4 * d.max_num_seqs):
        assert d.probability(n) == live.probability(n)


def test_rejected_fraction_counts_the_pool_requests_longer_than_the_length() -> None:
    """What a shorter --max-model-len rejects (the what-if lever), read off the sorted lengths a
    detached sizing keeps: equal to counting the pool's requests directly."""
    chat = Cohort("chat", 1.0, Quantiles(1000, 2000, 4000), Quantiles(200, 500, 1000))
    m = dist((chat,), max_model_len=8192).mixes[0]
    assert m.pool is not None
    total = m.pool.prompt + m.pool.output
    for limit in (0, 1500, 2500, 4096, 5000, 8192):
        want = float((total > limit).mean())
        assert m.rejected_fraction(limit) == pytest.approx(want, abs=1e-12)
    assert 0.0 < m.rejected_fraction(4096) < 0.5  # p99 4000 + 1000 is past 4,096


def test_pools_are_held_between_plans_only_as_asked() -> None:
    """``keep_pools(0)`` (the operator): a pool's draws are dropped once no simulation uses
    them; ``keep_pools(n)``: the n most recently used stay. The fit does not depend on it."""
    import gc

    from inference_capacity.sizing import distribution as D

    chat = Cohort("chat", 1.0, Quantiles(1000, 2000, 4000), Quantiles(200, 500, 1000))
    other = Cohort("rag", 1.0, Quantiles(3000, 4000, 6000), Quantiles(100, 200, 400))
    try:
        D.clear_cache()
        D.keep_pools(0)
        cold = dist((chat,)).mixes[0].paths.fit.copy()
        gc.collect()
        assert len(D._DRAWS) == 0 and not D._RECENT
        D.keep_pools(1)
        dist((chat,))
        dist((other,))
        gc.collect()
        assert len(D._DRAWS) == 1 and len(D._RECENT) == 1  # the most recent: "rag"
        np.testing.assert_array_equal(dist((chat,)).mixes[0].paths.fit, cold)
        with pytest.raises(ValueError, match="pools kept"):
            D.keep_pools(-1)
    finally:
        D.keep_pools(D._KEEP)
        D.clear_cache()
