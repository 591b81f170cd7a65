"""The one thread that writes a capture store's files, in the order the event loop asked.

The event loop only queues (a lock held for a deque append, never for I/O): a slow disk costs
capture data, never a byte or a moment of a stream. The bytes queued and not yet written are
bounded for the whole store (`MAX_QUEUED_BYTES`); a piece past it is refused, and the capture
that refused it stops there and says so in its sidecar. The thread starts with the first job
and ends after `IDLE_SECONDS` without one (a store in a test leaves no thread behind)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

import structlog

logger = structlog.get_logger("sseproxy")
# Bytes queued for the disk and not yet written, all captures together.
MAX_QUEUED_BYTES = 32 * 1024 * 1024
IDLE_SECONDS = 5.0

Job = Callable[[], None]
T = TypeVar("T")


class Writer:
    """Runs jobs one at a time on a thread of its own, in the order they were submitted."""

    def __init__(
        self,
        max_queued: int | None = None,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.max_queued = MAX_QUEUED_BYTES if max_queued is None else max_queued
        self.on_error = on_error  # how a failed job is reported (default: logged from here)
        self.queued = 0  # bytes reserved and not yet written (under _lock)
        self.refused = 0  # bytes refused for the bound, ever
        self.failures = 0
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._jobs: deque[Job] = deque()
        self._alive = False

    def reserve(self, size: int) -> bool:
        """Room for `size` more bytes in the queue (False: it is full; the caller drops them).
        Given back by `release` once they are written."""
        with self._lock:
            if self.queued + size > self.max_queued:
                self.refused += size
                return False
            self.queued += size
            return True

    def release(self, size: int) -> None:
        with self._lock:
            self.queued -= size

    def submit(self, job: Job) -> None:
        with self._lock:
            self._jobs.append(job)
            if self._alive:
                self._wake.notify()
                return
            self._alive = True
            try:
                threading.Thread(target=self._run, name="sseproxy-capture", daemon=True).start()
            except RuntimeError:  # no thread to be had now: the job waits, the next submit
                self._alive = False  # tries again (a stream's chunk never sees this fail)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._jobs:
                    self._wake.wait(IDLE_SECONDS)
                    if not self._jobs:
                        self._alive = False  # under the lock: a submit now starts a new thread
                        return
                job = self._jobs.popleft()
            try:
                job()
            except Exception as exc:  # one capture's failure costs that capture only
                self.failures += 1
                if self.on_error is not None:
                    self.on_error(exc)
                else:
                    logger.warning("capture.failed", error=repr(exc))

    def flushed(self) -> concurrent.futures.Future[None]:
        """Done once every job submitted before it has run."""
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def mark() -> None:
            if done.set_running_or_notify_cancel():  # False: its waiter gave up (cancelled)
                done.set_result(None)

        self.submit(mark)
        return done

    async def drain(self) -> None:
        await asyncio.wrap_future(self.flushed())

    def wait(self, timeout: float | None = None) -> None:
        """`drain` for a caller without an event loop."""
        self.flushed().result(timeout)


class Spool(Generic[T]):
    """One capture's pieces on their way to its file: the loop `send`s, the writer thread
    `flush`es them all at once (one write for whatever queued meanwhile)."""

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
            self.writer.submit(self.flush)
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

    def write(self, items: list[T]) -> None:
        raise NotImplementedError
