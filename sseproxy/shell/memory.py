"""Gives memory back to the system once WebSocket sessions, or responses whose clients stopped
reading, have ended (issue 28, point 4).

What sessions and responses held is freed when they end (the session drops the frames a
cancelled write left, see `websocket.session`), but glibc's malloc keeps freed memory in its
heaps for reuse (1 MiB messages fall under its mmap threshold once it has risen): after 200
stalled clients left, RSS stayed at 450 MB with 12 MB in use; after 300 HTTP clients that
stopped reading left, at 160 MB. A burst of such ends is followed by one `malloc_trim(0)`
(glibc only) in a worker thread: it walks every heap, 10-90 ms, and ctypes lets the loop run
meanwhile. No cyclic collection is forced: a full one took 35-60 ms on the loop after 200
sessions, and RSS came back as far without it (58 MB with it, 60 MB without; idle 51 MB).
"""

from __future__ import annotations

import asyncio
import ctypes
import platform
import time
from collections.abc import Callable

# After the last session ended, wait this long: 200 clients that leave together cost one return.
RETURN_DELAY = 1.0
# At most one return this often: sessions that end one by one do not trim each time.
RETURN_INTERVAL = 30.0


def malloc_trim() -> Callable[[], int] | None:
    """glibc's `malloc_trim(0)` (returns 1 when memory was given back), or None where the C
    library has none (musl, macOS)."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: int(trim(0))


def next_delay(now: float, last: float | None) -> float:
    """Seconds from `now` until a return may run, given the last one's start (None: never)."""
    if last is None:
        return RETURN_DELAY
    return max(RETURN_DELAY, last + RETURN_INTERVAL - now)


class MemoryReturn:
    """One per proxy: `ended()` when a session (or a response held for its client) ended; a
    return follows (see the module)."""

    def __init__(
        self, trim: Callable[[], int] | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.trim = trim
        self.clock = clock
        self.last: float | None = None  # when the last return started
        self.returns = 0  # returns done (tests read it)
        self._handle: asyncio.TimerHandle | None = None
        self._running: asyncio.Task[None] | None = None

    def ended(self) -> None:
        loop = asyncio.get_running_loop()
        if self._handle is not None:
            self._handle.cancel()  # later: the burst goes on
        self._handle = loop.call_later(next_delay(self.clock(), self.last), self._start)

    def _start(self) -> None:
        self._handle = None
        if self._running is not None and not self._running.done():
            return  # (a return is under way: it will see this session's memory too)
        self._running = asyncio.get_running_loop().create_task(self.run())

    async def run(self) -> None:
        """Trim the heaps in a worker thread."""
        self.last = self.clock()
        if self.trim is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.trim)
        self.returns += 1

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
