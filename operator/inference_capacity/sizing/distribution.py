"""``max-num-seqs`` from the distribution of a batch: the preemption risk vLLM's scheduler runs.

vLLM (V1) does not reserve output tokens: it admits requests while free blocks last and preempts
(recomputes) the newest running request when a decode step finds no free block. So the question
a ``--max-num-seqs`` answers is: with N sequences running, how likely is it that their KV blocks
outgrow the pool? This module computes that probability and the largest N that keeps it below a
target (``spec.policy.preemptionTarget``, default 1 %).

The model, term by term:

* **Lengths.** Each cohort's prompt and output lengths are log-normal, fitted to the given
  quantiles: the median fixes ``mu = ln p50`` exactly; ``sigma`` is the larger of the two
  one-quantile fits ``ln(p95/p50)/z95`` and ``ln(p99/p50)/z99``. Why log-normal: lengths are
  positive and right-skewed, and the log-normal is the usual fit of LLM request lengths (three
  quantiles cannot identify a heavier family). Why the larger sigma: the preemption risk lives in
  the upper tail, so the fitted tail is never lighter than either tail quantile given (one of
  them is matched exactly, the other over-stated); constant quantiles give ``sigma = 0``, i.e.
  constant lengths. Prompt and output are drawn independently; a sampled length is rounded to a
  whole token, a prompt is at least the cohort's shared prefix, and prompt + output is capped at
  ``max-model-len`` (vLLM stops a sequence there).
* **Mix.** Each request of a batch belongs to a cohort with probability its normalised weight
  (so a batch of N is a multinomial draw of cohorts, not a fixed mix). A burst mix
  (``workload.burst``) is sized the same way; the smaller N of the two wins.
* **Blocks.** A request holds, when each of its sequences has reached full length, its blocks in
  every KV group (:meth:`KvLayout.blocks_per_request`, so sliding windows are bounded and
  Mamba/GDN state is one block) minus the cohort's shared prefix, which is held once per replica
  in whole blocks (vLLM caches full blocks only). With ``n > 1`` samples the ``n`` sequences share
  the prompt's full blocks (prefix caching), and each holds the rest of its context.
* **Usable blocks.** ``(num_gpu_blocks − 1 null block) × (1 − kvSafetyFraction) − shared-prefix
  blocks``: the same budget as the conservative rule, so with constant lengths the two rules give
  the same N exactly (``floor(budget / blocks)``).
* **Probability.** Seeded Monte Carlo (:data:`SEED`, :data:`PATHS` batches): each path admits
  requests drawn from the mix in order; ``N_m`` = sequences of the requests that fit before the
  blocks exceed the usable pool. ``P(exceed at N) = #{m : N_m < N} / PATHS`` (a batch of N
  sequences counts the whole request its N-th sequence belongs to). Paths are prefix sums, so the
  estimate is monotone in N and the chosen N is the ``ceil(target × PATHS)``-th smallest ``N_m``.
  Its binomial standard error is ``sqrt(P (1 − P) / PATHS)``; resampling a finite pool adds
  about a third to it (measured over seeds against an exact convolution, tests/
  test_distribution.py).

Pure: numpy only. Each request draw is a pool of :data:`POOL` requests drawn once per mix and
resampled along the paths (a bootstrap of the request distribution).
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from ..ledger.kv import KvLayout
from ..model.shapes import AttnKind, cdiv
from .workload import Cohort, Quantiles

T = TypeVar("T")
A = TypeVar("A", bound="npt.NDArray[Any]")

#: Standard normal quantiles: Φ⁻¹(0.95), Φ⁻¹(0.99).
Z95 = 1.6448536269514722
Z99 = 2.3263478740408408
#: The Monte Carlo's fixed seed (deterministic plans), batches per estimate and request pool.
SEED = 14
PATHS = 2048
POOL = 65536
#: The default preemption target (``spec.policy.preemptionTarget``).
DEFAULT_PREEMPTION_TARGET = 0.01

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class LogNormal:
    """``ln X ~ Normal(mu, sigma²)``."""

    mu: float
    sigma: float

    @classmethod
    def fit(cls, q: Quantiles) -> LogNormal:
        """Median exactly; sigma the larger of the p95 and p99 fits (see the module doc)."""
        p50 = max(q.p50, 1)
        sigma = max(
            math.log(max(q.p95, p50) / p50) / Z95,
            math.log(max(q.p99, p50) / p50) / Z99,
            0.0,
        )
        return cls(math.log(p50), sigma)

    def quantile(self, z: float) -> float:
        return math.exp(self.mu + self.sigma * z)

    def draw(self, rng: np.random.Generator, size: int) -> IntArray:
        if self.sigma == 0.0:
            return np.full(size, round(math.exp(self.mu)), dtype=np.int64)
        return np.rint(rng.lognormal(self.mu, self.sigma, size)).astype(np.int64)


@dataclass(frozen=True, slots=True)
class RequestPool:
    """Requests drawn from one cohort mix, and what each holds on one rank's layout."""

    cohort: IntArray  # index into the cohorts
    prompt: IntArray  # tokens (≥ the cohort's shared prefix, ≤ max-model-len − 1)
    output: IntArray  # tokens (≥ 1; prompt + output ≤ max-model-len)
    seqs: IntArray  # sequences of the request (the cohort's n)
    blocks: IntArray  # blocks at full length, all its sequences, shared prefix excluded
    cached: IntArray  # prompt tokens served from the prefix cache (the shared prefix's blocks)


def shared_prefix_blocks(c: Cohort, layout: KvLayout) -> int:
    """Blocks of the cohort's shared prefix, held once per replica: whole blocks only (vLLM
    hashes full blocks), of the prefix as far as the median prompt holds it."""
    aligned = shared_prefix_tokens(c, layout.block_size)
    return layout.blocks_per_request(aligned, 0) if aligned else 0


def shared_prefix_tokens(c: Cohort, block_size: int) -> int:
    """The cohort's shared prefix in whole blocks, as far as the median prompt holds it."""
    return (min(c.shared_prefix, c.prompt.p50) // block_size) * block_size


def _blocks_of(layout: KvLayout, tokens: IntArray) -> IntArray:
    """``layout.blocks_per_request(t, 0)`` for every entry ``t``, vectorised: the formulas of
    :meth:`KvGroup.blocks_per_request` per group (``in_flight_tokens`` 0, one Mamba block),
    evaluated on ``cdiv(t, block_size) × block_size``: every group's count depends on the tokens
    only through ``cdiv(t, block_size)`` (``cdiv(min(a, b)) = min(cdiv(a), cdiv(b))``).
    tests/test_distribution.py checks it against the scalar method for every kind."""
    bs = layout.block_size
    t = -(-tokens // bs) * bs
    out = np.zeros(t.shape, dtype=np.int64)
    for g in layout.groups:
        if g.kind in (AttnKind.FULL, AttnKind.MLA):
            out += -(-t // g.block_size)
        elif g.kind is AttnKind.SLIDING:
            out += -(-np.minimum(g.window - 1, t) // g.block_size) + 1
        elif g.kind is AttnKind.CHUNKED:
            out += -(-np.minimum(g.window, t) // g.block_size)
        else:
            out += 1
    return out


def draw_pool(
    cohorts: Sequence[Cohort],
    weights: Sequence[float],
    layout: KvLayout,
    max_model_len: int,
    rng: np.random.Generator,
    size: int = POOL,
) -> RequestPool:
    """``size`` requests of the mix ``weights`` (one per cohort, normalised)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.sum() <= 0:
        raise ValueError("workload.cohorts: weights must be positive")
    counts = rng.multinomial(size, w / w.sum()) if len(w) > 1 else np.array([size])
    parts: list[tuple[IntArray, ...]] = []
    for i, (c, m) in enumerate(zip(cohorts, counts, strict=True)):
        m = int(m)
        if m == 0:
            continue
        shared = shared_prefix_blocks(c, layout)
        aligned = shared_prefix_tokens(c, layout.block_size)
        prefix = min(c.shared_prefix, c.prompt.p50)
        prompt = np.maximum(LogNormal.fit(c.prompt).draw(rng, m), prefix)
        prompt = np.minimum(prompt, max_model_len - 1)
        output = np.maximum(LogNormal.fit(c.output).draw(rng, m), 1)
        output = np.minimum(output, max_model_len - prompt)
        ctx = np.maximum(prompt + output, 1)
        own = np.maximum(1, _blocks_of(layout, ctx) - shared)
        n = max(1, c.n)
        if n > 1:
            # n sequences share the prompt's full blocks (prefix caching); each holds the rest
            full = (prompt // layout.block_size) * layout.block_size
            common = np.maximum(0, _blocks_of(layout, full) - shared)
            own = common + n * np.maximum(1, own - common)
        parts.append(
            (
                np.full(m, i, dtype=np.int64),
                prompt,
                output,
                np.full(m, n, dtype=np.int64),
                own,
                np.full(m, aligned, dtype=np.int64),
            )
        )
    # paths draw pool entries uniformly at random, so the order of the pool does not matter
    return RequestPool(*(np.concatenate([p[j] for p in parts]) for j in range(6)))


#: Paths grow by whole chunks of requests drawn in a fixed order, so the first k chunks are the
#: same whatever was asked before (a simulation of k chunks reads the same draws whoever drew
#: them; how far it grows is its plan's own: :class:`Simulations`).
CHUNK = 64
#: Paths whose request indices the latency model reads (its ITL quantiles).
KEPT_PATHS = 512
#: Longest path simulated (requests): bounds memory (PATHS × this × 2 B of pool indices = 8 MiB,
#: 2 B (4 B for requests of over 1,023 blocks) of blocks summed inside its chunk = 8 MiB, and
#: 12 B per request drawn while a growth step gathers its blocks). A batch larger than this is
#: far beyond vLLM's defaults (256/1,024); paths that still fit there count as fitting
#: MAX_REQUESTS requests, so a larger N is reported as that (a lower bound).
MAX_REQUESTS = 2048


#: values derived from a pool and a length (a budget's fit: one integer per path) kept per pool
_KEPT = 256


class _Draws:
    """The request indices of a simulation's paths, drawn chunk by chunk in a fixed order, and
    per path the prefix sums of blocks (and sequences) at each chunk's end and of blocks inside
    each chunk: append-only and shared by every :class:`Simulation` of one pool (the expensive
    part of a simulation). Its first k chunks never change once drawn, whatever was asked
    before, so a simulation of k chunks reads the same arrays whether it drew them or another
    plan did. Thread-safe: growth holds the object's own lock; a reader only reads chunks it
    has grown to (arrays are replaced whole, never written in place)."""

    def __init__(self, pool: RequestPool, paths: int) -> None:
        self.pool = pool
        self.paths = paths
        self.rng = np.random.default_rng(SEED + 2)
        self.uniform_n = int(pool.seqs[0]) if (pool.seqs == pool.seqs[0]).all() else 0
        self.blocks32 = pool.blocks.astype(np.int32)
        #: each request's prompt + output tokens, sorted (what a shorter max-model-len rejects)
        self.lengths: IntArray = np.sort((pool.prompt + pool.output).astype(np.int32))
        if len(pool.blocks) > 1 << 16:
            raise ValueError(f"a pool of {len(pool.blocks)} requests exceeds 65,536 (uint16)")
        # (chunks, paths, CHUNK): request k of chunk c on path p is pool entry draws[c, p, k]
        self.draws = np.zeros((0, paths, CHUNK), dtype=np.uint16)
        # (chunks, paths, CHUNK): blocks of a path's requests of a chunk up to each one, in 16
        # bits where a whole chunk of the pool's largest requests fits them (half the memory)
        small = int(self.blocks32.max(initial=0)) * CHUNK < 1 << 16
        self.inner_dtype: type[np.integer[Any]] = np.uint16 if small else np.int32
        self.inner: npt.NDArray[np.integer[Any]] = np.zeros((0, paths, CHUNK), self.inner_dtype)
        # (chunks, paths): blocks (sequences) of a path's requests up to each chunk's end
        self.end_blocks = np.zeros((0, paths), dtype=np.int32)
        self.end_seqs = np.zeros((0, paths), dtype=np.int64)
        self.chunks = 0
        self._lock = threading.Lock()
        #: values derived from the first k chunks, by (key, k): the same for every simulation
        self._small: dict[tuple[object, int], object] = {}
        #: arrays along the paths, by key: (chunks, the longest made)
        self._large: dict[object, tuple[int, npt.NDArray[Any]]] = {}

    def _draw(self, chunks: int) -> npt.NDArray[np.uint16]:
        """The next ``chunks`` chunks of pool indices: ``rng.integers(0, pool, (paths, CHUNK),
        uint16)`` once per chunk. For the full 2¹⁶ pool those are the generator's raw 64-bit
        outputs read as little-endian 16-bit words, drawn at once (tests/
        test_distribution_draws.py checks the two streams are the same)."""
        n = len(self.blocks32)
        shape = (chunks, self.paths, CHUNK)
        if n == 1 << 16 and isinstance(self.rng.bit_generator, np.random.PCG64):
            raw = self.rng.bit_generator.random_raw(chunks * self.paths * CHUNK // 4)
            words: npt.NDArray[np.uint16] = raw.astype("<u8", copy=False).view("<u2")
            return words.reshape(shape)
        return np.stack(
            [self.rng.integers(0, n, size=shape[1:], dtype=np.uint16) for _ in range(chunks)]
        )

    def grow_to(self, chunks: int) -> None:
        """At least ``chunks`` chunks drawn."""
        with self._lock:
            if chunks <= self.chunks:
                return
            idx = self._draw(chunks - self.chunks)
            at = idx.astype(np.intp)
            blocks = np.take(self.blocks32, at)
            end_seqs = self.end_seqs
            if not self.uniform_n:
                seqs = np.cumsum(np.take(self.pool.seqs, at).sum(axis=2), axis=0)
                if self.chunks:
                    seqs += self.end_seqs[-1]
                end_seqs = np.concatenate([self.end_seqs, seqs]) if self.chunks else seqs
            del at
            # each request's blocks summed along its chunk, in place: a budget's fit inside a
            # chunk counts them
            np.cumsum(blocks, axis=2, out=blocks)
            ends = np.cumsum(blocks[:, :, -1], axis=0, dtype=np.int32)
            if self.chunks:
                ends += self.end_blocks[-1]
            end_blocks = np.concatenate([self.end_blocks, ends]) if self.chunks else ends
            inner = blocks.astype(self.inner_dtype, copy=False)
            del blocks
            inner = np.concatenate([self.inner, inner]) if self.chunks else inner
            draws = np.concatenate([self.draws, idx]) if self.chunks else idx
            self.draws, self.end_blocks, self.end_seqs = draws, end_blocks, end_seqs
            self.inner = inner
            self.chunks = chunks  # last: a reader of k <= chunks finds every array that long

    def kept(self, key: object, chunks: int, make: Callable[[], T]) -> T:
        """A value derived from the first ``chunks`` chunks, made once (the least recently used
        of :data:`_KEPT` forgotten first)."""
        k = (key, chunks)
        with self._lock:
            if k in self._small:
                hit = self._small.pop(k)
                self._small[k] = hit  # most recently used last
                return cast(T, hit)
        value = make()  # outside the lock: the same value whichever thread makes it
        with self._lock:
            out = self._small.setdefault(k, value)
            while len(self._small) > _KEPT:
                del self._small[next(iter(self._small))]
            return cast(T, out)

    def prefix(self, key: object, chunks: int, make: Callable[[], A]) -> A:
        """A (kept paths, requests) array along the paths' first ``chunks`` chunks whose first
        columns do not change as the paths grow (the pool index of each request, a prefix sum
        along a path): the longest made is kept and sliced (a slice of a prefix sum is the
        prefix sum of the slice, bit for bit), read-only."""
        with self._lock:
            hit = self._large.get(key)
        if hit is not None and hit[0] >= chunks:
            return cast(A, hit[1][:, : chunks * CHUNK])
        value = make()
        value.flags.writeable = False
        with self._lock:
            cur = self._large.get(key)
            if cur is None or cur[0] < chunks:
                self._large[key] = (chunks, value)
        return value


class Simulation:
    """``PATHS`` batches admitting requests drawn from a pool, grown on demand by
    :meth:`ensure` in chunks of :data:`CHUNK` requests. Kept per chunk: the pool indices drawn
    and, per path, the prefix sum of blocks (and of sequences) at the chunk's end and the
    running sum of blocks inside it (a budget's fit reads only the chunk where a path outgrows
    it).

    One simulation belongs to one plan (its length is what that plan's questions grew it to, as
    if it were the first plan of the process); the draws are shared with every simulation of
    the same pool (:class:`_Draws`), so a later plan only reads what an earlier one drew."""

    def __init__(self, pool: RequestPool, paths: int = PATHS, draws: _Draws | None = None) -> None:
        self._draws = draws if draws is not None else _Draws(pool, paths)
        self.pool = pool
        self.paths = paths
        self.uniform_n = self._draws.uniform_n
        self.blocks32 = self._draws.blocks32
        self.lengths = self._draws.lengths
        self.kept_paths = min(paths, KEPT_PATHS)
        self._chunks = 0

    @property
    def draws(self) -> npt.NDArray[np.uint16]:
        """(chunks, paths, CHUNK): request k of chunk c on path p is pool entry draws[c, p, k]."""
        return self._draws.draws[: self._chunks]

    @property
    def end_blocks(self) -> npt.NDArray[np.int32]:
        """(chunks, paths): blocks of a path's requests up to each chunk's end."""
        return self._draws.end_blocks[: self._chunks]

    @property
    def end_seqs(self) -> npt.NDArray[np.int64]:
        """(chunks, paths): sequences of a path's requests up to each chunk's end."""
        return self._draws.end_seqs[: self._chunks]

    @property
    def length(self) -> int:
        return self._chunks * CHUNK

    @property
    def index(self) -> npt.NDArray[np.uint16]:
        """(kept paths, length): the pool entry of each request of the first KEPT_PATHS paths."""

        def make() -> npt.NDArray[np.uint16]:
            kept = self.draws[:, : self.kept_paths, :].transpose(1, 0, 2)
            out: npt.NDArray[np.uint16] = kept.reshape(self.kept_paths, self.length)
            return out

        return self._draws.prefix("index", self._chunks, make)

    def _grow(self, chunks: int) -> None:
        self._draws.grow_to(self._chunks + chunks)
        self._chunks += chunks

    def seqs_at(self, column: int | IntArray) -> IntArray:
        """Sequences held by the first ``column`` requests (per path, or one column per path)."""
        if self.uniform_n:
            each = np.asarray(column, np.int64) * self.uniform_n
            return np.broadcast_to(each, (self.paths,)).copy()
        cols = np.broadcast_to(np.asarray(column, np.int64), (self.paths,))
        chunk, rest = cols // CHUNK, cols % CHUNK
        paths = np.arange(self.paths)
        out = np.where(chunk > 0, self.end_seqs[np.maximum(chunk - 1, 0), paths], 0)
        part = np.flatnonzero(rest)  # columns inside a chunk: add its first `rest` requests
        if len(part):
            seqs = self.pool.seqs[self.draws[chunk[part], part]]
            out[part] += np.where(np.arange(CHUNK) < rest[part, None], seqs, 0).sum(axis=1)
        result: IntArray = out
        return result

    @property
    def truncated(self) -> bool:
        """Paths stopped at MAX_REQUESTS (constant pools are one exact path, never cut)."""
        return self.paths > 1 and self.length >= MAX_REQUESTS

    def ensure(self, budget: float, cap: int) -> None:
        """Grow until every path outgrows ``budget`` or holds ``cap`` sequences (or, for a
        random pool, reaches MAX_REQUESTS)."""
        while True:
            if self.length and (
                (self.end_blocks[-1] > budget).all()
                or self.seqs_at(self.length).min() >= cap
                or self.truncated
            ):
                return
            mean = float(self.blocks32.mean())
            want = int(1.1 * max(budget, 0.0) / mean) + CHUNK - self.length
            chunks = cdiv(max(want, 1), CHUNK)
            if self.length:  # past the estimate: double
                chunks = max(1, min(chunks, self.length // CHUNK))
            if self.paths > 1:
                chunks = max(1, min(chunks, (MAX_REQUESTS - self.length) // CHUNK))
            self._grow(chunks)

    def fit(self, budget: float, cap: int) -> IntArray:
        """N_m: sequences of the requests that fit ``budget`` blocks, per path (at least ``cap``
        where a path never outgrows it). Read-only; made once per budget and length."""
        self.ensure(budget, cap)

        def make() -> IntArray:
            # blocks only grow along a path: whole chunks fit up to the first whose end
            # outgrows the budget; inside that one, the requests whose running sum of blocks
            # (kept when the chunk was drawn) still fits
            end_blocks = self.end_blocks
            chunk = np.count_nonzero(end_blocks <= budget, axis=0)
            fitting = chunk.astype(np.int64) * CHUNK
            part = np.flatnonzero(chunk < self._chunks)
            if len(part):
                c = chunk[part]
                base = np.where(c > 0, end_blocks[np.maximum(c - 1, 0), part], 0)
                inner = self._draws.inner[c, part]
                fitting[part] += np.count_nonzero(inner + base[:, None] <= budget, axis=1)
            out: IntArray = fitting * self.uniform_n if self.uniform_n else self.seqs_at(fitting)
            out.flags.writeable = False
            return out

        # what fits a budget depends on it and the paths' length only (not on the cap)
        return self._draws.kept(("fit", budget), self._chunks, make)

    def per_sequence(self) -> tuple[float, float]:
        """Mean blocks and mean full context (tokens) per sequence of the pool."""

        def make() -> tuple[float, float]:
            pool = self.pool
            seqs = float(pool.seqs.sum())
            ctx = (pool.prompt + pool.output) * pool.seqs
            return (float(pool.blocks.sum()) / seqs, float(ctx.sum()) / seqs)

        return self._draws.kept("per-sequence", -1, make)

    def mid_context(self) -> FloatArray:
        """Each pool request's context at a uniformly random point of its decode
        (prompt + U × output; seeded), for the latency model."""

        def make() -> FloatArray:
            u = np.random.default_rng(SEED + 1).random(len(self.pool.prompt))
            out: FloatArray = self.pool.prompt + u * self.pool.output
            return out

        return self._draws.kept("mid-context", -1, make)

    def kept_cumsum(self, key: object, values: FloatArray | Callable[[], FloatArray]) -> FloatArray:
        """Prefix sums of a per-request ``values`` (or of what it makes) along the kept paths
        (one per ``key`` and length, shared by the simulations of the pool)."""

        def make() -> FloatArray:
            v = values() if callable(values) else values
            out: FloatArray = np.cumsum(v[self.index], axis=1)
            return out

        return self._draws.prefix(("cumsum", key), self._chunks, make)

    def kept(self, key: object, make: Callable[[], T]) -> T:
        """Any value derived from the pool and the paths so far, made once per ``key`` and
        length (shared by the simulations of the pool)."""
        return self._draws.kept(key, self._chunks, make)


def block_signature(layout: KvLayout) -> tuple[tuple[object, ...], ...]:
    """What :meth:`KvLayout.blocks_per_request` depends on: each group's kind, block size and
    window (not its bytes), so layouts that differ only in bytes per block (another TP, KV dtype
    or GPU) share one simulation."""
    return tuple((g.kind, g.block_size, g.window) for g in layout.groups)


#: the draws of each pool, by value (cohorts, weights, block signature, max-model-len): shared
#: by every plan of the process that holds a simulation of it, append-only (a plan reads only the
#: chunks it grew to). Weak: a pool no simulation uses is dropped unless it is one of the
#: :data:`_KEEP` most recently used ones (tens of MB each: the per-path draws and prefix sums).
_DRAWS: weakref.WeakValueDictionary[tuple[object, ...], _Draws] = weakref.WeakValueDictionary()
#: the most recently used pools, held after their plans are done (most recently used last)
_RECENT: dict[tuple[object, ...], _Draws] = {}
_DRAWS_LOCK = threading.Lock()
#: pools held between plans (a plan uses one or two; a sweep of one model one per block
#: signature). The operator holds none (:func:`keep_pools`): each resource's plan is memoised,
#: so a pool would be kept for a plan that is not made again.
_KEEP = 4
_keep = _KEEP


def keep_pools(n: int) -> None:
    """Hold the ``n`` most recently used pools' draws between plans (0: only while a simulation
    uses them). Results do not depend on it; only the time of the next plan of that workload."""
    global _keep
    if n < 0:
        raise ValueError(f"pools kept must be >= 0, got {n}")
    with _DRAWS_LOCK:
        _keep = n
        _trim_recent()


def _trim_recent() -> None:
    while len(_RECENT) > _keep:
        del _RECENT[next(iter(_RECENT))]


def _touch(key: tuple[object, ...], draws: _Draws) -> _Draws:
    """``draws`` as the most recently used pool (held while it is among the last ``_keep``);
    call under ``_DRAWS_LOCK``."""
    _RECENT.pop(key, None)
    _RECENT[key] = draws
    _trim_recent()
    return draws


def _shared_draws(key: tuple[object, ...], make: Callable[[], _Draws]) -> _Draws:
    with _DRAWS_LOCK:
        hit = _DRAWS.get(key)
        if hit is not None:
            return _touch(key, hit)
    made = make()  # outside the lock: the same pool whichever thread draws it
    with _DRAWS_LOCK:
        out = _DRAWS.setdefault(key, made)
        return _touch(key, out)


def _draws_of(key: tuple[object, ...], layout: KvLayout) -> _Draws:
    cohorts, weights, _, max_model_len = key

    def make() -> _Draws:
        pool = draw_pool(
            cast(tuple[Cohort, ...], cohorts),
            cast(tuple[float, ...], weights),
            layout,
            cast(int, max_model_len),
            np.random.default_rng(SEED),
        )
        constant = bool((pool.blocks == pool.blocks[0]).all() and (pool.seqs == pool.seqs[0]).all())
        # constant lengths: every path is the same, so one path is exact
        return _Draws(pool, paths=1 if constant else PATHS)

    return _shared_draws(key, make)


class Simulations:
    """The simulations of one plan (or of the plans one caller makes in a row, on one thread),
    owned by the caller (the planner's :class:`PlanCache`): each grows only as its own plans
    ask, so a plan's answer never depends on what other plans (other threads) asked before; the
    draws underneath are shared (:class:`_Draws`). Not for two threads at once."""

    def __init__(self) -> None:
        self._sims: dict[tuple[object, ...], Simulation] = {}

    def get(
        self,
        cohorts: tuple[Cohort, ...],
        weights: tuple[float, ...],
        layout: KvLayout,
        max_model_len: int,
    ) -> Simulation:
        key = (cohorts, weights, block_signature(layout), max_model_len)
        sim = self._sims.pop(key, None)
        if sim is None:
            d = _draws_of(key, layout)
            sim = Simulation(d.pool, d.paths, d)
        self._sims[key] = sim  # most recently used last
        while len(self._sims) > _KEEP:
            del self._sims[next(iter(self._sims))]
        return sim


def clear_cache() -> None:
    """Forget the shared draws (a cold start; the callers' simulations keep theirs)."""
    with _DRAWS_LOCK:
        _DRAWS.clear()
        _RECENT.clear()


@dataclass(frozen=True, slots=True)
class Paths:
    """What one sizing read off a simulation. ``sim`` is None once the sizing is detached (a
    finished plan keeps the fit per path, not the simulation's draws)."""

    sim: Simulation | None
    fit: IntArray  # (paths,) N_m

    @property
    def simulation(self) -> Simulation:
        """The simulation, while the sizing is being made (not kept by a finished plan)."""
        if self.sim is None:
            raise RuntimeError("a detached sizing keeps no simulation (read it while planning)")
        return self.sim


@dataclass(frozen=True, slots=True)
class MixSizing:
    """One cohort mix (steady or burst) sized against one pool."""

    name: str  # "steady" | "burst"
    pool: RequestPool | None  # None once detached (:meth:`DistributionSizing.detached`)
    paths: Paths
    max_num_seqs: int  # largest N with P(exceed) < target (before any cap)
    lengths: IntArray  # each pool request's prompt + output tokens, sorted

    def rejected_fraction(self, max_model_len: int) -> float:
        """The fraction of the mix's requests longer than ``max_model_len`` tokens."""
        return 1.0 - float(np.searchsorted(self.lengths, max_model_len, "right")) / len(
            self.lengths
        )

    def probability(self, n: int) -> float:
        """P(the blocks of a batch of n sequences exceed the usable pool)."""
        if n <= 0:
            return 0.0
        return float(np.count_nonzero(self.paths.fit < n)) / len(self.paths.fit)


@dataclass(frozen=True, slots=True)
class DistributionSizing:
    max_num_seqs: int
    preemption_probability: float  # at max_num_seqs, the worse mix
    standard_error: float
    default_max_num_seqs: int
    preemption_probability_at_default: float
    target: float
    budget_blocks: float  # usable blocks for private (non-shared) KV
    shared_prefix_blocks: int
    blocks_per_seq: float  # mean blocks per sequence, binding mix
    tokens_per_seq: float  # mean full context per sequence, binding mix
    binding_mix: str
    mixes: tuple[MixSizing, ...] = field(default=())

    def probability(self, n: int) -> float:
        return max(m.probability(n) for m in self.mixes)

    @property
    def binding(self) -> MixSizing:
        return next(m for m in self.mixes if m.name == self.binding_mix)

    def detached(self) -> DistributionSizing:
        """The same numbers without the simulations and request pools (their draws are tens of
        MB, a pool 3 MB, and only the planning reads them): what a finished plan keeps."""
        return replace(
            self,
            mixes=tuple(replace(m, pool=None, paths=Paths(None, m.paths.fit)) for m in self.mixes),
        )


def size_by_distribution(
    cohorts: Sequence[Cohort],
    burst_weights: Sequence[float] | None,
    layout: KvLayout,
    num_blocks: int,
    max_model_len: int,
    safety_fraction: float,
    cap: int,
    target: float,
    default_max_num_seqs: int,
    simulations: Simulations | None = None,
) -> DistributionSizing:
    """The largest N (≤ cap) whose preemption probability is below ``target`` for the steady
    mix and, when given, the burst mix; with the probability at N and at vLLM's default.
    ``simulations``: the caller's (a fresh set when not given)."""
    sims = simulations if simulations is not None else Simulations()
    if not cohorts:
        raise ValueError("workload.cohorts: at least one cohort is needed to size max-num-seqs")
    if not 0.0 < target < 0.5:
        raise ValueError(f"policy.preemptionTarget must be in (0, 0.5), got {target}")
    shared = sum(shared_prefix_blocks(c, layout) for c in cohorts)
    usable = max(0, num_blocks - 1)  # BlockPool reserves one null block
    budget = usable * (1.0 - safety_fraction) - shared

    mixes_in: list[tuple[str, Sequence[float]]] = [("steady", [c.weight for c in cohorts])]
    if burst_weights is not None:
        mixes_in.append(("burst", burst_weights))
    mixes: list[MixSizing] = []
    for name, weights in mixes_in:
        sim = sims.get(tuple(cohorts), tuple(float(w) for w in weights), layout, max_model_len)
        if budget < 1:
            mixes.append(
                MixSizing(name, sim.pool, Paths(sim, np.zeros(sim.paths, np.int64)), 0, sim.lengths)
            )
            continue
        fit = sim.fit(budget, max(cap, default_max_num_seqs))
        allowed = math.ceil(target * len(fit)) - 1  # paths that may fall short of N
        n = int(np.partition(fit, allowed)[allowed])
        mixes.append(MixSizing(name, sim.pool, Paths(sim, fit), n, sim.lengths))
    binding = min(mixes, key=lambda m: m.max_num_seqs)
    chosen = max(0, min(cap, binding.max_num_seqs))
    worst = max(m.probability(chosen) for m in mixes)
    blocks_per_seq, tokens_per_seq = binding.paths.simulation.per_sequence()
    return DistributionSizing(
        max_num_seqs=chosen,
        preemption_probability=worst,
        standard_error=math.sqrt(worst * (1 - worst) / min(len(m.paths.fit) for m in mixes)),
        default_max_num_seqs=default_max_num_seqs,
        preemption_probability_at_default=max(m.probability(default_max_num_seqs) for m in mixes),
        target=target,
        budget_blocks=budget,
        shared_prefix_blocks=shared,
        blocks_per_seq=blocks_per_seq,
        tokens_per_seq=tokens_per_seq,
        binding_mix=binding.name,
        mixes=tuple(mixes),
    )
