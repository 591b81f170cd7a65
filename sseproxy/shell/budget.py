"""The bytes the proxy holds for clients that have not taken them yet, across all streams.

Each relay holds at most its per-client mark; this is the cap across clients. Above it, a
relay whose client still holds bytes pauses its upstream (the slowest readers stop first: a
client that keeps up holds nothing and goes on), so many clients that stop reading pin a
bounded amount of memory, never one mark each without limit.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


class HeldBytes:
    """The proxy's total of held bytes, kept by the relays (`change`), against `cap`.

    WebSocket sessions assembling a large message also wait here: past the cap, only the
    `holder` (one session at a time) goes on growing one; the others `wait` to be called back
    once the total is back under the cap or the holder is done."""

    __slots__ = ("cap", "holder", "peak", "share", "total", "waiting")

    def __init__(self, cap: int, share: int = 256 * 1024) -> None:
        self.cap = cap
        self.share = LoopShare(share)  # WebSocket work per loop iteration, all sessions
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


class LoopShare:
    """The bytes of WebSocket messages all sessions together handle in one loop iteration.

    Each session's turn is bounded, but 200 sessions whose turns are all ready run in the same
    iteration, and a health check waits for every one of them (several times: it needs a few
    iterations). Past `per_iteration`, a turn or a relay waits (`wait`, `turn`) for a later
    iteration, first come first served: each iteration lets the next waiter go on (the first
    to spend in an iteration always goes on, so work never stops). Waiters are called back,
    never polled: 200 sessions polling every iteration cost the loop more than their work."""

    __slots__ = ("_reset_due", "_waiters", "per_iteration", "spent")

    def __init__(self, per_iteration: int) -> None:
        self.per_iteration = per_iteration
        self.spent = 0
        self._reset_due: object | None = None  # the loop whose next iteration resets `spent`
        self._waiters: deque[Callable[[], None]] = deque()

    def spend(self, size: int) -> None:
        loop = asyncio.get_running_loop()
        if self._reset_due is not loop:  # (a loop that ended before its reset: start over)
            self.spent = 0
            self._reset_due = loop
            loop.call_soon(self._reset)
        self.spent += size

    def spent_out(self) -> bool:
        """Whether work must wait now: this iteration's share is spent, or others wait."""
        if self._waiters:
            return True
        return self.spent >= self.per_iteration and self._reset_due is asyncio.get_running_loop()

    def wait(self, callback: Callable[[], None]) -> None:
        """Call `callback` once it is the caller's turn, in a later loop iteration."""
        loop = asyncio.get_running_loop()
        if self._reset_due is not loop:  # nothing spent in this iteration: a turn is due
            self.spent = 0
            self._reset_due = loop
            loop.call_soon(self._reset)
        self._waiters.append(callback)

    async def turn(self) -> None:
        """Returns once it is the caller's turn (raises CancelledError while waiting)."""
        waiter = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not waiter.done():
                waiter.set_result(None)

        self.wait(wake)
        await waiter

    def _reset(self) -> None:
        self.spent = 0
        self._reset_due = None
        if self._waiters:
            # The next waiter goes on in the next iteration; the reset after it lets the next
            # one go (also when it had nothing left to do and spent nothing).
            loop = asyncio.get_running_loop()
            loop.call_soon(self._waiters.popleft())
            self._reset_due = loop
            loop.call_soon(self._reset)
