"""The analysis budget per loop turn across all streams (shell/turns.py), on a fake clock:
what one turn may spend, who goes first, and a waiter that is cancelled."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sseproxy.shell.turns import TURN_BUDGET_S, AnalysisTurns

SLICE_COST = 0.001  # what each fake slice costs on the fake clock


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeTap:
    """A backlog of `slices` slices; each pump costs SLICE_COST on `clock` and is logged with
    the loop turn it ran in."""

    def __init__(self, name: str, slices: int, clock: Clock, turns: list[int], log: list[Any]):
        self.name, self.left, self.clock, self.turn, self.log = name, slices, clock, turns, log

    @property
    def backlog(self) -> bool:
        return self.left > 0

    def pump(self) -> int:
        self.left -= 1
        self.clock.now += SLICE_COST
        self.log.append((self.turn[0], self.name))
        return 0


async def count_turns(turn: list[int], stop: asyncio.Event) -> None:
    """Counts loop turns: one step per turn (each sleep(0) resumes in the next one)."""
    while not stop.is_set():
        turn[0] += 1
        await asyncio.sleep(0)


async def drain(turns: AnalysisTurns, tap: FakeTap) -> None:
    while tap.backlog:
        await turns.pump(tap)  # type: ignore[arg-type]


async def run_streams(streams: int, slices: int) -> list[Any]:
    clock, turn = Clock(), [0]
    log: list[Any] = []
    turns = AnalysisTurns(clock=clock)
    stop = asyncio.Event()
    counter = asyncio.create_task(count_turns(turn, stop))
    await asyncio.sleep(0)
    taps = [FakeTap(f"s{n}", slices, clock, turn, log) for n in range(streams)]
    await asyncio.gather(*(drain(turns, tap) for tap in taps))
    stop.set()
    await counter
    return log


def per_turn(log: list[Any]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for turn, _ in log:
        counts[turn] = counts.get(turn, 0) + 1
    return counts


async def test_one_turn_spends_at_most_its_budget_and_one_slice_across_300_streams() -> None:
    """300 streams with a backlog of 4 slices each: no loop turn runs more slices than the
    budget pays for plus the one that crosses it (without the shared budget: 300 in one)."""
    log = await run_streams(300, 4)
    assert len(log) == 1200  # every slice was analysed
    most = max(per_turn(log).values())
    assert most <= round(TURN_BUDGET_S / SLICE_COST) + 1


async def test_the_streams_that_wait_are_served_in_order() -> None:
    log = await run_streams(20, 3)
    firsts = list(dict.fromkeys(name for _, name in log))  # each stream's first slice
    assert firsts == [f"s{n}" for n in range(20)]  # in the order they asked


@pytest.mark.parametrize("budget_slices", [1, 5])
async def test_a_cancelled_waiter_passes_its_turn_on(budget_slices: int) -> None:
    clock, turn = Clock(), [0]
    log: list[Any] = []
    turns = AnalysisTurns(budget=budget_slices * SLICE_COST, clock=clock)
    taps = [FakeTap(f"s{n}", 3, clock, turn, log) for n in range(4)]
    tasks = [asyncio.create_task(drain(turns, tap)) for tap in taps]
    await asyncio.sleep(0)
    tasks[1].cancel()  # waiting for its turn, or holding it
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
    assert isinstance(results[1], asyncio.CancelledError)
    assert [tap.left for i, tap in enumerate(taps) if i != 1] == [0, 0, 0]
