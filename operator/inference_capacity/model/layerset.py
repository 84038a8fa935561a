"""Decoder layers in groups (issue 13): a set of layer indices as a few arithmetic progressions,
and a per-layer pattern as a prefix plus a repeating cycle.

A model of 1,024 identical layers is one :class:`LayerSet` ``range(0, 1024)``; a Gemma-2 of
alternating sliding and full layers is two, ``range(0, n, 2)`` and ``range(1, n, 2)``. Counting
the layers of a set inside a pipeline stage (vLLM's ``get_pp_indices`` gives each stage a
contiguous span of indices) is O(1) per progression, so the ledger's cost depends on the number
of distinct layer kinds and runs, not on the number of layers.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V", bound=Hashable)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _clip(r: range, span: range) -> range:
    """The elements of ``r`` (step ≥ 1) inside the contiguous ``span``, as a range (O(1))."""
    lo = max(0, _cdiv(span.start - r.start, r.step))
    hi = max(0, _cdiv(span.stop - r.start, r.step))
    return r[lo:hi]


@dataclass(frozen=True, slots=True)
class LayerSet:
    """Layer indices: disjoint ranges (each with step ≥ 1), in the order they were built."""

    runs: tuple[range, ...] = ()
    count: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", sum(len(r) for r in self.runs))

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __iter__(self) -> Iterator[int]:
        """Every index, ascending (O(layers): for inspection and tests, not the ledger)."""
        return heapq.merge(*self.runs)

    def __contains__(self, i: object) -> bool:
        return any(i in r for r in self.runs)

    def count_in(self, span: range) -> int:
        """How many of these layers lie in the contiguous ``span`` (a pipeline stage)."""
        return sum(len(_clip(r, span)) for r in self.runs)

    def within(self, span: range) -> LayerSet:
        return LayerSet(tuple(c for r in self.runs if (c := _clip(r, span))))

    def first(self) -> int | None:
        return min((r[0] for r in self.runs if r), default=None)

    def last(self) -> int | None:
        return max((r[-1] for r in self.runs if r), default=None)

    def union(self, other: LayerSet) -> LayerSet:
        """Both sets (disjoint), adjacent contiguous runs merged."""
        runs = sorted((r for r in (*self.runs, *other.runs) if r), key=lambda r: r[0])
        out: list[range] = []
        for r in runs:
            prev = out[-1] if out else None
            if (
                prev is not None
                and (prev.step == 1 or len(prev) == 1)
                and (r.step == 1 or len(r) == 1)
                and prev[-1] + 1 == r[0]
            ):
                out[-1] = range(prev[0], r[-1] + 1)
            else:
                out.append(range(r[0], r[-1] + 1) if len(r) == 1 else r)
        return LayerSet(tuple(out))


@dataclass(frozen=True, slots=True)
class Pattern(Generic[K]):
    """A value per layer: ``prefix`` for the first layers, then ``cycle`` repeated to ``length``.

    Config arrays (``layer_types``, ``hybrid_override_pattern``) are read into one with
    :meth:`from_list` (which finds their period); rules such as "every 4th layer" are built
    periodic directly, so nothing after the parse walks the layers one by one."""

    length: int
    prefix: tuple[K, ...]
    cycle: tuple[K, ...]

    def __post_init__(self) -> None:
        if len(self.prefix) > self.length or (not self.cycle and len(self.prefix) < self.length):
            raise ValueError("a pattern's prefix and cycle must cover its length")

    @staticmethod
    def constant(value: K, length: int) -> Pattern[K]:
        return Pattern(length, (), (value,))

    @staticmethod
    def periodic(cycle: Sequence[K], length: int, prefix: Sequence[K] = ()) -> Pattern[K]:
        if len(prefix) >= length:
            return Pattern(length, tuple(prefix[:length]), ())
        return Pattern(length, tuple(prefix), tuple(cycle))

    @staticmethod
    def from_list(values: Sequence[K]) -> Pattern[K]:
        """The per-layer list with its smallest period found (KMP failure function, O(n))."""
        n = len(values)
        if n == 0:
            return Pattern(0, (), ())
        fail = [0] * n
        k = 0
        for i in range(1, n):
            while k and values[i] != values[k]:
                k = fail[k - 1]
            if values[i] == values[k]:
                k += 1
            fail[i] = k
        period = n - fail[-1]
        return Pattern(n, (), tuple(values[:period]))

    def at(self, i: int) -> K:
        p = len(self.prefix)
        return self.prefix[i] if i < p else self.cycle[(i - p) % len(self.cycle)]

    def present(self) -> set[K]:
        """The values some layer holds."""
        return set(self.prefix) | set(self.cycle[: max(0, self.length - len(self.prefix))])

    def with_values(self, indices: Iterable[int], value: K) -> Pattern[K]:
        """This pattern with ``value`` at ``indices`` (an index list from the config): the
        prefix grows to the last index, the cycle keeps its phase."""
        idx = sorted({i for i in indices if 0 <= i < self.length})
        if not idx:
            return self
        p = max(len(self.prefix), idx[-1] + 1)
        prefix = [self.at(i) for i in range(p)]
        for i in idx:
            prefix[i] = value
        c = len(self.cycle)
        cycle = tuple(self.at(p + j) for j in range(c)) if c and p < self.length else ()
        return Pattern.periodic(cycle, self.length, prefix)

    def map(self, f: Callable[[K], V]) -> Pattern[V]:
        prefix, cycle = tuple(f(v) for v in self.prefix), tuple(f(v) for v in self.cycle)
        return Pattern(self.length, prefix, cycle)

    def groups(self) -> dict[K, LayerSet]:
        """Each distinct value and the layers holding it, in order of first appearance."""
        p, c, n = len(self.prefix), len(self.cycle), self.length
        runs: dict[K, list[range]] = {}
        start = 0
        for i in range(1, p + 1):
            if i == p or self.prefix[i] != self.prefix[start]:
                runs.setdefault(self.prefix[start], []).append(range(start, i))
                start = i
        if p < n:
            residues: dict[K, list[int]] = {}
            for j, v in enumerate(self.cycle):
                residues.setdefault(v, []).append(j)
            for v, js in residues.items():
                if len(js) == c:
                    runs.setdefault(v, []).append(range(p, n))
                else:
                    runs.setdefault(v, []).extend(r for j in js if (r := range(p + j, n, c)))
        return {v: LayerSet().union(LayerSet(tuple(rs))) for v, rs in runs.items()}


def zip_patterns(patterns: Sequence[Pattern[Any]]) -> Pattern[tuple[Any, ...]]:
    """The per-layer tuple of several patterns of one length: the longest prefix, then the
    least common multiple of the cycles (spelt out to the end where that is no shorter)."""
    n = patterns[0].length
    p = max(len(x.prefix) for x in patterns)
    c = math.lcm(*(len(x.cycle) or 1 for x in patterns))
    if p + c >= n:
        return Pattern(n, tuple(tuple(x.at(i) for x in patterns) for i in range(n)), ())
    prefix = tuple(tuple(x.at(i) for x in patterns) for i in range(p))
    cycle = tuple(tuple(x.at(i) for x in patterns) for i in range(p, p + c))
    return Pattern(n, prefix, cycle)
