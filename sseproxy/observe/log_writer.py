"""Log lines written by a thread that owns the output, so that an output nobody reads (a
paused `sseproxy | less`, a stalled log shipper) blocks that thread and never the event loop.

Lines wait in a queue bounded by bytes. Past the bound a line is dropped and counted, and lines
keep being dropped until the output has taken half the bound back: a reader that stays stuck
costs one gap, not a gap between every line that happens to fit. Then one line (rendered by the
caller's `render_gap`) says how many were lost, where they were lost. Each line is written
whole or not at all, in the order it was queued.
"""

from __future__ import annotations

import collections
import contextlib
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

# Bytes of log lines waiting for the output. A request's record is 1-1.5 KB: 16 MiB holds
# over 10,000 records, minutes of them at the rates a proxy serves (about two minutes at 100
# requests a second), while a reader that never comes back costs at most this much memory.
MAX_QUEUED_BYTES = 16 * 1024 * 1024


class RawOutput(Protocol):
    """What the writer needs of its output: `io.RawIOBase.write`'s contract, the number of
    bytes taken (possibly fewer than given), or None when a non-blocking output is full."""

    def write(self, data: bytes, /) -> int | None: ...


class DropCounter:
    """Lines never written, for the whole process (`sseproxy_records_dropped_total`): the
    metrics read it, so the log need not know the server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total = 0

    def add(self, count: int = 1) -> None:
        with self._lock:
            self._total += count

    @property
    def total(self) -> int:
        return self._total


DROPPED = DropCounter()


@dataclass(slots=True)
class Gap:
    """Lines lost in a row, and when the first and the last of them were (time.time_ns)."""

    dropped: int
    first_ns: int
    last_ns: int

    def merge(self, other: Gap) -> None:
        self.dropped += other.dropped
        self.first_ns = min(self.first_ns, other.first_ns)
        self.last_ns = max(self.last_ns, other.last_ns)


@dataclass(frozen=True, slots=True)
class _Item:
    """A line's bytes (counted against the bound), or a gap to render when its turn comes."""

    data: bytes
    gap: Gap | None = None


class LineWriter:
    """A bounded queue of lines and the daemon thread that writes them to `output`.

    `write` never blocks on the output and never raises. The bytes held count a line until
    it has been written, the one being written included: `max_bytes` bounds the memory.
    """

    def __init__(
        self,
        output: RawOutput,
        render_gap: Callable[[Gap], str],
        *,
        max_bytes: int = MAX_QUEUED_BYTES,
        encoding: str = "utf-8",
        errors: str = "strict",
        report: Callable[[BaseException], None] = lambda exc: None,
        fileno: int | None = None,
        counter: DropCounter = DROPPED,
    ) -> None:
        self._output = output
        self._render_gap = render_gap
        self._max_bytes = max_bytes
        self._encoding, self._errors = encoding, errors
        self._report = report
        self._fileno = fileno  # to wait on when a non-blocking output is full
        self.counter = counter
        self._cond = threading.Condition(threading.Lock())
        self._queue: collections.deque[_Item] = collections.deque()
        self._held = 0
        self._gap: Gap | None = None
        self._failing = False  # the last write failed: no gap line until a line is queued
        self._closed = False
        self.dropped = 0  # this writer's own count
        self._thread = threading.Thread(target=self._run, name="sseproxy-log", daemon=True)
        self._thread.start()

    # The caller's side (the event loop).

    def write(self, line: str) -> None:
        """Queue `line` (a newline is added); past the bound it is dropped and counted."""
        try:
            data = (line + "\n").encode(self._encoding, self._errors)
        except Exception as exc:  # text the output cannot carry: reported once, as any failure
            self._report(exc)
            with self._cond:
                self._lose(Gap(1, time.time_ns(), time.time_ns()))
            return
        with self._cond:
            # while lines are being lost, the queue must drain to half the bound first
            limit = self._max_bytes if self._gap is None else self._max_bytes // 2
            if self._closed or self._held + len(data) > limit:
                now = time.time_ns()
                self._lose(Gap(1, now, now))
                return
            if self._gap is not None:  # the gap's line goes where the lines were lost
                self._queue.append(_Item(b"", self._gap))
                self._gap = None
            self._queue.append(_Item(data))
            self._held += len(data)
            self._cond.notify()

    def flush(self, timeout: float) -> int:
        """Wait up to `timeout` seconds for every queued line to be written; the number of
        lines that were not (queued ones, and lost ones no gap line reported yet)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            if self._done():
                return 0
            queued = sum(1 for item in self._queue if item.gap is None)
            lost = sum(item.gap.dropped for item in self._queue if item.gap is not None)
            return queued + lost + (self._gap.dropped if self._gap is not None else 0)

    def close(self) -> None:
        """No more lines: the thread ends once it has written those queued (never waited for)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # The writer thread's side.

    def _done(self) -> bool:
        return not self._queue and (self._gap is None or self._failing)

    def _lose(self, gap: Gap) -> None:
        """Count lost lines (the lock is held)."""
        if self._gap is None:
            self._gap = gap
        else:
            self._gap.merge(gap)
        self.dropped += gap.dropped
        self.counter.add(gap.dropped)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    if self._gap is not None and not self._failing:
                        # the output took every line queued: say how many were lost
                        self._queue.append(_Item(b"", self._gap))
                        self._gap = None
                        break
                    self._cond.notify_all()  # flush() waits for an empty queue
                    if self._closed:
                        return
                    self._cond.wait()
                item = self._queue[0]
            ok = self._write_item(item)
            with self._cond:
                self._queue.popleft()
                self._held -= len(item.data)
                self._failing = not ok
                if not ok:
                    if item.gap is not None:  # not reported: still lost, still to report
                        if self._gap is None:
                            self._gap = item.gap
                        else:
                            self._gap.merge(item.gap)
                    else:
                        now = time.time_ns()
                        self._lose(Gap(1, now, now))

    def _write_item(self, item: _Item) -> bool:
        data = item.data
        if item.gap is not None:
            try:
                data = (self._render_gap(item.gap) + "\n").encode(self._encoding, "replace")
            except Exception as exc:
                self._report(exc)
                return False
        try:
            self._write_all(data)
        except Exception as exc:  # a broken pipe, a closed file, a full disk
            self._report(exc)
            return False
        return True

    def _write_all(self, data: bytes) -> None:
        """Every byte of `data`: a pipe may take part of it, a non-blocking one none."""
        while data:
            written = self._output.write(data)
            if written is None:  # non-blocking and full: wait until it takes bytes again
                if self._fileno is None:
                    time.sleep(0.01)
                else:
                    with contextlib.suppress(InterruptedError):
                        select.select([], [self._fileno], [])
                continue
            data = data[written:]
