"""Fixed-size structures the report accumulates into: whatever a log holds, the memory a
report uses is bounded by these sizes, not by the log's length or its distinct values."""

from __future__ import annotations

import heapq
import random
from array import array
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
OTHER = "(other)"  # the key that stands for every distinct value beyond a table's bound


class BoundedTable(Generic[K, V]):
    """Rows by key, at most `limit` distinct keys: later new keys share the `other` row.
    (Model names come from request bodies: a peer can make as many as it likes.)"""

    def __init__(self, limit: int, make: Callable[[], V], other: K) -> None:
        self.limit = limit
        self.make = make
        self.other = other
        self.rows: dict[K, V] = {}
        self.overflowed = 0  # records that went to `other` for want of room

    def row(self, key: K) -> V:
        found = self.rows.get(key)
        if found is not None:
            return found
        if len(self.rows) >= self.limit:
            self.overflowed += 1
            key = self.other
            found = self.rows.get(key)
            if found is not None:
                return found
        made = self.rows[key] = self.make()
        return made

    def items(self) -> Iterator[tuple[K, V]]:
        return iter(self.rows.items())


class Count:
    """A counter that fits a BoundedTable row."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class Reservoir:
    """A uniform sample of at most `size` values (Vitter's algorithm R), with the exact count
    and maximum: percentiles are exact while `count <= size`, estimates beyond. Seeded, so a
    report of the same log in the same order is the same report."""

    __slots__ = ("count", "maximum", "rng", "size", "values")

    def __init__(self, size: int, seed: int = 0) -> None:
        self.size = size
        self.values = array("d")
        self.count = 0
        self.maximum = float("-inf")
        self.rng = random.Random(seed)

    def add(self, value: float) -> None:
        self.count += 1
        if value > self.maximum:
            self.maximum = value
        if len(self.values) < self.size:
            self.values.append(value)
            return
        slot = self.rng.randrange(self.count)
        if slot < self.size:
            self.values[slot] = value

    @property
    def exact(self) -> bool:
        return self.count <= self.size

    def quantile(self, level: float) -> float | None:
        """Linear interpolation between the closest ranks (R-7, Excel's PERCENTILE.INC,
        ClickHouse's quantileExactInclusive)."""
        ordered = sorted(self.values)
        if not ordered:
            return None
        h = (len(ordered) - 1) * level
        low = int(h)
        if low + 1 >= len(ordered):
            return ordered[-1]
        return ordered[low] + (h - low) * (ordered[low + 1] - ordered[low])


@dataclass(order=True)
class _Ranked(Generic[V]):
    rank: tuple[float, ...]
    item: V = field(compare=False)


class TopN(Generic[V]):
    """The `n` items of highest rank seen (ties: the earlier one stays)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.heap: list[_Ranked[V]] = []
        self.seen = 0

    def offer(self, rank: tuple[float, ...], make: Callable[[], V]) -> None:
        """`make` builds the item only when it makes the list."""
        self.seen += 1
        ranked_rank = (*rank, -self.seen)  # an earlier item outranks a later equal one
        if len(self.heap) < self.n:
            heapq.heappush(self.heap, _Ranked(ranked_rank, make()))
        elif ranked_rank > self.heap[0].rank:
            heapq.heapreplace(self.heap, _Ranked(ranked_rank, make()))

    def best_first(self) -> list[V]:
        return [r.item for r in sorted(self.heap, reverse=True)]


# Bucket widths for the timeline, each a multiple of the one before: merging is exact.
WIDTHS = (60, 300, 900, 3600, 4 * 3600, 86400, 7 * 86400)
# Buckets count from 0001-01-01 UTC, the earliest time a record can hold: every slot is >= 0,
# so any two times share a bucket once it is wide enough.
ORIGIN = -62135596800


class Timeline:
    """Counts per state per time bucket, at most `limit` buckets: when a log spans more, the
    buckets widen (1 min, 5 min, 15 min, 1 h, 4 h, 1 day, 1 week, then doubling)."""

    def __init__(self, limit: int, states: tuple[str, ...]) -> None:
        self.limit = limit
        self.states = states
        self.width = WIDTHS[0]
        self.buckets: dict[int, list[int]] = {}

    def add(self, epoch: float, state_index: int) -> None:
        while (slot := int((epoch - ORIGIN) // self.width)) not in self.buckets:
            if len(self.buckets) < self.limit:
                self.buckets[slot] = [0] * len(self.states)
                break
            self._widen()
        self.buckets[slot][state_index] += 1

    def start(self, slot: int) -> float:
        """A bucket's start, in seconds since the epoch."""
        return float(ORIGIN + slot * self.width)

    def _widen(self) -> None:
        old = self.width
        larger = [w for w in WIDTHS if w > old]
        self.width = larger[0] if larger else old * 2
        merged: dict[int, list[int]] = {}
        for slot, counts in self.buckets.items():
            into = merged.setdefault(slot * old // self.width, [0] * len(self.states))
            for i, n in enumerate(counts):
                into[i] += n
        self.buckets = merged
