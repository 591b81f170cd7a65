"""The bulk work each loop iteration may start, across all HTTP exchanges.

Each step of the proxy's own work is short: admitting a request, relaying one read to its
client, building one record. But 300 requests that arrive at once are 300 admissions in the
same loop iteration, then 300 relays whose first reads are ready together, then 300 records
when their clients leave: hundreds of milliseconds before the loop polls again, and a health
check needs a few polls. `LoopTurns` bounds that: a step starts at once while the current
iteration has run for less than its budget and nobody waits; otherwise it waits, first come
first served, for a later iteration. Each new iteration lets through a batch of waiting steps
(at least one), halved after an iteration of woken steps that ran over the budget and doubled
after one that used less than half of it, so a burst spreads over iterations with other work
(healthz) between them, and the work still goes on at full speed when it is alone. The budget
binds woken steps too: once those of an iteration have spent it, the rest of its batch goes
back to the front of the queue, in order (a batch grown on cheap steps, then woken for costly
ones, ran 8 reads of 1.5 ms each in one iteration).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

# Wall time an iteration may have spent on gated steps before the next step waits (measured
# from the iteration's first step: what else ran meanwhile counts too). Like the analysis'
# turns (`turns.TURN_BUDGET_S`), about what healthz itself costs.
STEP_BUDGET_S = 0.001
# Waiting steps let through by one new iteration at most, however cheap the last ones were.
MOST_PER_ITERATION = 64


class LoopTurns:
    """Hands out steps of bulk work within `budget` seconds per loop iteration, FIFO."""

    __slots__ = (
        "_clock",
        "_loop",
        "_requeued",
        "_resumed",
        "_started",
        "_waiters",
        "_woke",
        "batch",
        "budget",
        "most",
        "waited",
    )

    def __init__(
        self,
        budget: float = STEP_BUDGET_S,
        most: int = MOST_PER_ITERATION,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.budget = budget
        self.most = most
        self.waited = 0  # steps that had to wait (tests and benchmarks read it)
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started: float | None = None  # the current iteration's first step
        self._woke = 0  # of which waiters woken by the last iteration
        self._resumed: float | None = None  # when the first woken step of this iteration ran
        self._requeued = 0  # woken steps of this iteration sent back to the queue's front
        # Waiters the next iteration lets through: halved when an iteration of woken steps
        # ran over the budget, doubled when it used less than half (a step's cost varies).
        self.batch = 1
        self._waiters: deque[asyncio.Future[None]] = deque()

    def free(self) -> bool:
        """Whether a step may run now, in this iteration; for callbacks, which cannot wait:
        on False they hand the step to a task that does."""
        self._begin(asyncio.get_running_loop())
        assert self._started is not None
        return not self._waiters and self._clock() - self._started < self.budget

    async def wait(self) -> None:
        """Returns when a step may run: at once, or in a later iteration, in order of asking
        (raises CancelledError while waiting)."""
        if self.free():
            return
        self.waited += 1
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiters.append(waiter)
        while True:
            try:
                await waiter
            except asyncio.CancelledError:
                if not waiter.done():
                    self._waiters.remove(waiter)
                raise
            if self._resumed is None:  # the first woken step of this iteration always runs
                self._resumed = self._clock()
                return
            if self._clock() - self._resumed < self.budget:
                return
            # The woken steps before this one spent the budget: back to the front, in order.
            waiter = loop.create_future()
            self._waiters.insert(self._requeued, waiter)
            self._requeued += 1

    def _begin(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._loop:  # a new loop (tests): nothing of the old one carries over
            self._loop, self._started, self._waiters = loop, None, deque()
            self._woke, self.batch, self._resumed, self._requeued = 0, 1, None, 0
        if self._started is None:
            self._started = self._clock()
            loop.call_soon(self._end_iteration)  # after this iteration's other callbacks

    def _end_iteration(self) -> None:
        started, woke = self._started, self._woke
        self._started, self._woke, self._resumed, self._requeued = None, 0, None, 0
        waiters = self._waiters
        if started is None or self._loop is None:
            return
        if woke:  # the iteration ran steps woken by the last one: did they fit the budget?
            elapsed = self._clock() - started
            if elapsed > self.budget:
                self.batch = max(1, self.batch // 2)
            elif elapsed < self.budget / 2:
                self.batch = min(self.most, self.batch * 2)
        if not waiters:
            return
        woken = 0
        while waiters and woken < self.batch:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                woken += 1
        # The woken steps run in the next iteration: it is measured from now, and it ends
        # (scheduled after them) by letting the next waiters through.
        self._begin(self._loop)
        self._woke = woken
