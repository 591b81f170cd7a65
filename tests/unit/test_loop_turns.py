"""The bulk work each loop iteration may start (shell/pacing.py, `LoopTurns`), on a fake clock: what one
iteration lets through, in which order, how the batch of woken steps adapts to their cost, and
a waiter that is cancelled."""

from __future__ import annotations

import asyncio

from sseproxy.shell.budget import LoopShare
from sseproxy.shell.pacing import MOST_PER_ITERATION, STEP_BUDGET_S, LoopTurns


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Iterations:
    """Counts loop iterations: a task that steps once per iteration (sleep(0) resumes in the
    next one)."""

    def __init__(self) -> None:
        self.count = 0
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)

    def stop(self) -> None:
        self._task.cancel()


async def run_steps(
    steps: int, cost: float, most: int = MOST_PER_ITERATION, first: float | None = None
) -> list[int]:
    """`steps` tasks asking at once for one step each, each step costing `cost` on the fake
    clock (the first `first`, when given); the iteration each ran in, in the order they ran."""
    clock = Clock()
    turns = LoopTurns(clock=clock, most=most)
    iterations = Iterations()
    await asyncio.sleep(0)
    ran: list[tuple[int, int]] = []

    async def step(n: int) -> None:
        await turns.wait()
        clock.now += first if n == 0 and first is not None else cost
        ran.append((n, iterations.count))

    await asyncio.gather(*(step(n) for n in range(steps)))
    iterations.stop()
    assert [n for n, _ in ran] == list(range(steps))  # first come, first served
    return [it for _, it in ran]


def per_iteration(ran: list[int]) -> list[int]:
    counts: dict[int, int] = {}
    for it in ran:
        counts[it] = counts.get(it, 0) + 1
    return [counts[it] for it in sorted(counts)]


async def test_costly_steps_run_one_per_iteration_once_the_first_iteration_is_spent() -> None:
    """300 requests at once, each step costing twice the budget: the first iteration runs one
    (the first to ask always goes on), and every later one runs one (without pacing: all 300
    in one iteration)."""
    counts = per_iteration(await run_steps(300, 2 * STEP_BUDGET_S))
    assert sum(counts) == 300
    assert max(counts) == 1


async def test_steps_within_the_budget_share_an_iteration_up_to_it() -> None:
    """Steps of a quarter budget: the first iteration takes them until it has spent the budget
    (4), and woken batches never cost more than the budget plus one step."""
    counts = per_iteration(await run_steps(200, STEP_BUDGET_S / 4))
    assert sum(counts) == 200
    assert counts[0] == 4
    assert max(counts) <= 8  # a batch doubles only after an iteration under half the budget


async def test_free_steps_are_woken_in_batches_of_at_most_most() -> None:
    """Steps that cost nothing: batches double, up to `most` (at the bound) and never one more;
    the work still goes on at full speed (few iterations for many steps)."""
    counts = per_iteration(await run_steps(1000, 0.0, most=64, first=STEP_BUDGET_S))
    assert sum(counts) == 1000 and counts[0] == 1  # the first spent the first iteration
    assert max(counts[1:]) == 64  # woken batches reach the bound
    assert all(c <= 64 for c in counts[1:])
    assert len(counts) < 30  # 1000 steps, not 1000 iterations


async def test_woken_steps_stop_at_the_budget_even_in_a_batch_grown_on_cheap_ones() -> None:
    """100 free steps grow the batch to `most`; the 100 after them cost a quarter budget each:
    an iteration runs 4 of them (4 quarters reach the budget) and never a fifth, the rest of
    its batch waiting again at the front, in order (before, the grown batch ran them all in
    one iteration: 8 reads of 1.5 ms each under bench.fairness's ledger-ids)."""
    clock = Clock()
    turns = LoopTurns(clock=clock)
    iterations = Iterations()
    await asyncio.sleep(0)
    ran: list[tuple[int, int]] = []

    async def step(n: int) -> None:
        await turns.wait()
        clock.now += STEP_BUDGET_S if n == 0 else 0.0 if n < 100 else STEP_BUDGET_S / 4
        ran.append((n, iterations.count))

    await asyncio.gather(*(step(n) for n in range(200)))
    iterations.stop()
    assert [n for n, _ in ran] == list(range(200))  # first come, first served
    cheap = per_iteration([it for n, it in ran if 0 < n < 100])
    costly = per_iteration([it for n, it in ran if n >= 100])
    assert max(cheap) >= 32  # the batch grew
    assert max(costly) == 4
    assert sum(costly) == 100


async def test_free_answers_for_the_current_iteration_only() -> None:
    clock = Clock()
    turns = LoopTurns(clock=clock)
    assert turns.free()
    clock.now += STEP_BUDGET_S  # the iteration has spent its budget
    assert not turns.free()
    await asyncio.sleep(0)  # a new iteration
    assert turns.free()


async def test_free_is_false_while_anyone_waits() -> None:
    """A callback never overtakes a step that waits (it hands its work to a task that does),
    even in an iteration that has its whole budget left."""
    clock = Clock()
    turns = LoopTurns(clock=clock)
    seen: list[tuple[str, bool]] = []

    async def spender() -> None:
        assert turns.free()
        clock.now += STEP_BUDGET_S  # this iteration is spent: the two below wait

    async def waiter(name: str) -> None:
        await turns.wait()
        seen.append((name, turns.free()))  # the clock has not moved since: budget left

    await asyncio.gather(spender(), waiter("a"), waiter("b"))
    assert turns.waited == 2
    assert seen == [("a", False), ("b", True)]  # "b" still waited while "a" ran


async def test_a_cancelled_waiter_leaves_the_queue_and_the_others_go_on() -> None:
    clock = Clock()
    turns = LoopTurns(clock=clock)
    ran: list[str] = []

    async def spender() -> None:
        assert turns.free()
        clock.now += STEP_BUDGET_S

    async def waiter(name: str) -> None:
        await turns.wait()
        ran.append(name)

    tasks = [asyncio.create_task(c) for c in (spender(), waiter("a"), waiter("b"))]
    await asyncio.sleep(0)  # all three ran once: "a" and "b" wait
    assert turns.waited == 2 and not ran
    tasks[1].cancel()
    async with asyncio.timeout(1):
        await asyncio.gather(*tasks, return_exceptions=True)
    assert tasks[1].cancelled() and ran == ["b"]


def test_a_new_loop_starts_afresh() -> None:
    """A LoopTurns used on an earlier loop (tests run each on its own) carries nothing over:
    not its spent budget, not its waiters."""
    clock = Clock()
    turns = LoopTurns(clock=clock)

    async def spend() -> None:
        assert turns.free()
        clock.now += STEP_BUDGET_S
        assert not turns.free()

    async def fresh() -> bool:
        return turns.free()

    asyncio.run(spend())
    assert asyncio.run(fresh())


async def test_sessions_waiting_for_the_shared_turn_are_called_back_one_per_iteration() -> None:
    """WebSocket sessions past the per-iteration share (shell/budget.py, LoopShare) wait in
    order and are called back, one per loop iteration, never polled: 200 sessions polling
    every iteration cost the loop more than their work (bench.fairness, ws-slow-clients)."""
    share = LoopShare(100)
    iterations = Iterations()
    await asyncio.sleep(0)
    share.spend(100)
    assert share.spent_out()
    called: list[tuple[int, int]] = []
    for n in range(50):
        share.wait(lambda n=n: called.append((n, iterations.count)))
    assert share.spent_out()  # others wait: a newcomer waits too, even with budget left
    async with asyncio.timeout(5):
        while len(called) < 50:
            await asyncio.sleep(0)
    iterations.stop()
    assert [n for n, _ in called] == list(range(50))
    assert len({it for _, it in called}) == 50  # one per iteration
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not share.spent_out()  # nobody waits, nothing spent: work goes on at once


async def test_a_cancelled_turn_does_not_stop_the_others() -> None:
    share = LoopShare(100)
    share.spend(100)
    first = asyncio.create_task(share.turn())
    second = asyncio.create_task(share.turn())
    await asyncio.sleep(0)
    first.cancel()
    async with asyncio.timeout(1):
        await second
    assert first.cancelled() and second.done()
