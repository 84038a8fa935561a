"""A small memo keyed on hashable immutable values, safe to share between threads.

The pure core memoises what a plan computes several times (a model's weights per rank, its
latency terms) across plans: the key is the value the result is a function of (a frozen
:class:`~inference_capacity.model.shapes.ModelShape` and the plan's integers), never an object's
``id()``, so an equal key always has the same result, whichever thread or plan made it. Only
the dictionary's reads and writes hold the lock; the value is made outside it (two threads may
both make it, and get equal values).

Pure: standard library only, the bottom layer of the package.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["ValueMemo"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ValueMemo(Generic[K, V]):
    """At most ``size`` results by key (the oldest made forgotten first)."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a memo holds at least one entry, got {size}")
        self.size = size
        self._values: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value for ``key``, made by ``make`` the first time."""
        with self._lock:
            if key in self._values:
                return self._values[key]
        value = make()
        with self._lock:
            if key not in self._values:
                while len(self._values) >= self.size:
                    del self._values[next(iter(self._values))]
                self._values[key] = value
            return self._values[key]

    def clear(self) -> None:
        with self._lock:
            self._values.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)
