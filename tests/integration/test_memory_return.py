"""Memory given back once sessions ended (shell/memory.py): one trim per burst of session ends,
at most one per interval, off the loop."""

from __future__ import annotations

import asyncio
import platform
import threading

import pytest

from sseproxy.shell import memory
from sseproxy.shell.memory import RETURN_DELAY, RETURN_INTERVAL, MemoryReturn, next_delay


def test_the_first_return_waits_only_for_the_burst_to_end() -> None:
    assert next_delay(100.0, None) == RETURN_DELAY


def test_a_return_waits_for_the_interval_since_the_last_one() -> None:
    last = 100.0
    assert next_delay(last + 1.0, last) == RETURN_INTERVAL - 1.0
    # at the interval, and past it, only the burst's delay remains
    assert next_delay(last + RETURN_INTERVAL, last) == RETURN_DELAY
    assert next_delay(last + RETURN_INTERVAL + 1.0, last) == RETURN_DELAY


async def test_a_burst_of_session_ends_costs_one_trim_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(memory, "RETURN_DELAY", 0.0)
    trimmed: list[bool] = []  # whether the trim ran on the loop's thread
    loop_thread = threading.get_ident()

    def trim() -> int:
        trimmed.append(threading.get_ident() == loop_thread)
        return 1

    returns = MemoryReturn(trim)
    for _ in range(200):
        returns.ended()
    for _ in range(500):
        if returns.returns:
            break
        await asyncio.sleep(0.01)
    assert (trimmed, returns.returns) == ([False], 1)
    # the next end comes within the interval: it waits for it (not run here)
    returns.ended()
    await asyncio.sleep(0.05)
    assert returns.returns == 1
    returns.stop()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_malloc_trim_is_found_on_glibc_and_answers() -> None:
    trim = memory.malloc_trim()
    assert trim is not None
    assert trim() in (0, 1)
