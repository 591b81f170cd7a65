"""The bytes the proxy holds for clients that have not taken them yet, across all streams.

Each relay holds at most its per-client mark; this is the cap across clients. Above it, a
relay whose client still holds bytes pauses its upstream (the slowest readers stop first: a
client that keeps up holds nothing and goes on), so many clients that stop reading pin a
bounded amount of memory, never one mark each without limit.
"""

from __future__ import annotations

from collections.abc import Callable


class HeldBytes:
    """The proxy's total of held bytes, kept by the relays (`change`), against `cap`.

    WebSocket sessions assembling a large message also wait here: past the cap, only the
    `holder` (one session at a time) goes on growing one; the others `wait` to be called back
    once the total is back under the cap or the holder is done."""

    __slots__ = ("cap", "holder", "peak", "total", "waiting")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.total = 0
        self.peak = 0  # the highest total seen (tests and the load bench read it)
        self.holder: object | None = None
        self.waiting: list[Callable[[], None]] = []

    def change(self, delta: int) -> None:
        total = self.total = self.total + delta
        if total > self.peak:
            self.peak = total
        if delta < 0 and self.waiting and total <= self.cap:
            self._wake()

    def wait(self, callback: Callable[[], None]) -> None:
        """Call `callback` (once) when there may be room again."""
        self.waiting.append(callback)

    def let_go(self, holder: object) -> None:
        if self.holder is holder:
            self.holder = None
            self._wake()

    def _wake(self) -> None:
        waiting, self.waiting = self.waiting, []
        for callback in waiting:
            callback()

    def over(self) -> bool:
        return self.total > self.cap
