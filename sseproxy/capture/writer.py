"""The one thread that writes a capture store's files, in the order the event loop asked.

The event loop only queues: a chunk costs it two deque appends and no lock, no system call
and no wake of another thread (a stream's pace of chunks would pay one each). Pieces are
written within `FLUSH_SECONDS` of their arrival (a proxy killed mid-stream loses at most that
much of what it had received), at once when something waits for them (`drain`, a capture's
end). The bytes queued and not yet written are bounded for the whole store
(`MAX_QUEUED_BYTES`): a piece past it is refused, and the capture that refused it stops there
and says so in its sidecar; a slow disk costs capture data, never a byte or a moment of a
stream. The thread starts with the first job and ends after `IDLE_SECONDS` without one (a
store in a test leaves no thread behind)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import structlog

logger = structlog.get_logger("sseproxy")
# Bytes queued for the disk and not yet written, all captures together.
MAX_QUEUED_BYTES = 32 * 1024 * 1024
# How long a received piece may wait for the disk (its capture's other pieces join it).
FLUSH_SECONDS = 0.05
IDLE_SECONDS = 5.0

Job = Callable[[], None]
T = TypeVar("T")


class Writer:
    """Runs jobs one at a time on a thread of its own, in the order they were submitted, and
    flushes the spools that have pieces waiting. Its producer is one event loop's thread."""

    def __init__(
        self,
        max_queued: int | None = None,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.max_queued = MAX_QUEUED_BYTES if max_queued is None else max_queued
        self.on_error = on_error  # how a failed job is reported (default: logged from here)
        self.sent = 0  # bytes reserved, ever (the producer's thread writes it)
        self.written = 0  # bytes given back, ever (the writer's thread writes it)
        self.refused = 0  # bytes refused for the bound, ever
        self.failures = 0
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._jobs: deque[Job] = deque()
        self._dirty: deque[Spool[Any]] = deque()  # spools with pieces waiting
        self._alive = False
        self._asleep = False  # waiting with nothing to flush: a new piece wakes it

    @property
    def queued(self) -> int:
        """Bytes reserved and not yet written."""
        return self.sent - self.written

    def reserve(self, size: int) -> bool:
        """Room for `size` more bytes in the queue (False: it is full; the caller drops them).
        Given back by `release` once they are written. No lock: one producer thread."""
        if self.sent + size - self.written > self.max_queued:
            self.refused += size
            return False
        self.sent += size
        return True

    def release(self, size: int) -> None:
        self.written += size  # only the writer's thread

    def submit(self, job: Job) -> None:
        with self._lock:
            self._jobs.append(job)
            self._ensure_running()

    def dirty(self, spool: Spool[Any]) -> None:
        """`spool` has pieces waiting: flushed within FLUSH_SECONDS. A thread is woken only
        when the writer sleeps without any (once per quiet spell, not once per piece)."""
        self._dirty.append(spool)
        if self._asleep or not self._alive:
            with self._lock:
                self._ensure_running()

    def _ensure_running(self) -> None:
        """Under the lock: wake the thread, or start one."""
        if self._alive:
            self._wake.notify()
            return
        self._alive = True
        try:
            threading.Thread(target=self._run, name="sseproxy-capture", daemon=True).start()
        except RuntimeError:  # no thread to be had now: the work waits, the next submit
            self._alive = False  # tries again (a stream's chunk never sees this fail)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._jobs:
                    # asleep before looking: a piece marked dirty after the look wakes it
                    self._asleep = True
                    if self._dirty:  # pieces wait: let more of them join, unless a job comes
                        self._asleep = False
                        self._wake.wait(FLUSH_SECONDS)
                        break
                    woken = self._wake.wait(IDLE_SECONDS)
                    self._asleep = False
                    if not woken and not self._jobs and not self._dirty:
                        self._alive = False  # under the lock: new work starts a thread
                        return
                jobs = list(self._jobs)
                self._jobs.clear()
            for job in jobs:
                self._call(job)
            self._flush_dirty()

    def _call(self, job: Job) -> None:
        try:
            job()
        except Exception as exc:  # one capture's failure costs that capture only
            self.failures += 1
            if self.on_error is not None:
                self.on_error(exc)
            else:
                logger.warning("capture.failed", error=repr(exc))

    def flushed(self) -> concurrent.futures.Future[None]:
        """Done once every job submitted before it has run and every piece sent before it is
        written."""
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def mark() -> None:
            self._flush_dirty()
            if done.set_running_or_notify_cancel():  # False: its waiter gave up (cancelled)
                done.set_result(None)

        self.submit(mark)
        return done

    def _flush_dirty(self) -> None:
        while self._dirty:
            self._call(self._dirty.popleft().flush)

    async def drain(self) -> None:
        await asyncio.wrap_future(self.flushed())

    def wait(self, timeout: float | None = None) -> None:
        """`drain` for a caller without an event loop."""
        self.flushed().result(timeout)


class Spool(ABC, Generic[T]):
    """One capture's pieces on their way to its file: the loop `send`s, the writer thread
    `flush`es them all at once (one write for whatever queued meanwhile). `write` creates the
    file if the job that begins the capture has not yet run (`create` is idempotent)."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self._pending: deque[tuple[T, int]] = deque()
        self._scheduled = False
        self.failed = False  # a write failed: the capture stops there

    def send(self, item: T, size: int) -> bool:
        """Queue `item` (`size` bytes against the store's bound); False when it is full."""
        if not self.writer.reserve(size):
            return False
        self._pending.append((item, size))
        if not self._scheduled:
            self._scheduled = True
            self.writer.dirty(self)
        return True

    def flush(self) -> None:
        """On the writer thread: write every piece queued so far."""
        self._scheduled = False  # before taking: a piece sent after this schedules a flush
        items: list[T] = []
        size = 0
        while self._pending:
            item, n = self._pending.popleft()
            items.append(item)
            size += n
        if not items:
            return
        try:
            if not self.failed:
                self.write(items)
        except Exception:
            self.failed = True
            raise
        finally:
            self.writer.release(size)

    @abstractmethod
    def write(self, items: list[T]) -> None:
        """Append `items` to the capture's file (the writer thread; each subclass its format)."""
