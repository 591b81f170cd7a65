"""The analysis each loop turn may do, across all streams.

The tap analyses one slice (`core.encoding.SLICE_BYTES`) per `pump()`, so one call is short.
But when many streams hold a backlog (300 clients that stopped reading, each with the rest of
a large read; or as many handlers finishing a compressed body's analysis after their clients
left), one slice each in the same loop turn adds up to hundreds of milliseconds before the
loop polls again, and healthz waits that long. Every slice is therefore taken through the
proxy's `AnalysisTurns`: a turn spends at most about TURN_BUDGET_S on analysis (at least one
slice), and the streams waiting for a slice are served first come, first served in the turns
after. Forwarding never waits here: only analysis does.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from sseproxy.core import StreamTap

# Seconds of analysis one loop turn may spend across all streams before the rest waits for
# later turns: a health check needs a few turns, so a turn's analysis is kept near what a
# slice of real events costs (~1 ms; `bench.fairness` measured 5 ms turns as 20 ms healthz
# p99 under a gzip bomb); a turn with time left takes more, so analysis still keeps up.
TURN_BUDGET_S = 0.001


class AnalysisTurns:
    """Hands out slices of analysis, within TURN_BUDGET_S per loop turn, in order of asking."""

    __slots__ = ("_armed", "_clock", "_loop", "_waiters", "budget", "spent")

    def __init__(
        self, budget: float = TURN_BUDGET_S, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.budget = budget
        self.spent = 0.0  # seconds of analysis in the current turn
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._armed = False  # a new turn is scheduled
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def pump(self, tap: StreamTap) -> int:
        """One slice of `tap`'s backlog, in this loop turn if it has time left, else in a later
        one; returns the content deltas it completed (raises CancelledError while waiting)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop (tests): nothing of the old one carries over
            self._loop, self._armed, self._waiters, self.spent = loop, False, deque(), 0.0
        if self.spent >= self.budget or self._waiters:  # nobody overtakes a stream that waits
            waiter = loop.create_future()
            self._waiters.append(waiter)
            self._arm(loop)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_next()  # it was this one's turn: pass it on
                raise
        start = self._clock()
        try:
            return tap.pump()
        finally:
            self.spent += self._clock() - start
            self._arm(loop)
            if self.spent < self.budget:
                self._wake_next()

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._armed:
            self._armed = True
            loop.call_soon(self._new_turn)

    def _new_turn(self) -> None:
        self._armed = False
        self.spent = 0.0
        self._wake_next()

    def _wake_next(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
