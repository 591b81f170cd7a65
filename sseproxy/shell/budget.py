"""The bytes the proxy holds for clients that have not taken them yet, across all streams.

Each relay holds at most its per-client mark; this is the cap across clients. Above it, a
relay whose client still holds bytes pauses its upstream (the slowest readers stop first: a
client that keeps up holds nothing and goes on), so many clients that stop reading pin a
bounded amount of memory, never one mark each without limit.
"""

from __future__ import annotations


class HeldBytes:
    """The proxy's total of held bytes, kept by the relays (`change`), against `cap`."""

    __slots__ = ("cap", "peak", "total")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.total = 0
        self.peak = 0  # the highest total seen (tests and the load bench read it)

    def change(self, delta: int) -> None:
        total = self.total = self.total + delta
        if total > self.peak:
            self.peak = total

    def over(self) -> bool:
        return self.total > self.cap
