"""The log's writer thread: queueing never waits for the output; past the bound lines are
dropped and counted exactly, then reported by one `log.records_dropped` line; every line
arrives whole and in order, however the output splits its writes."""

from __future__ import annotations

import errno
import io
import json
import os
import select
import threading
from collections.abc import Callable, Iterator

import pytest
import structlog
from prometheus_client import CollectorRegistry, generate_latest

from sseproxy.observe import log
from sseproxy.observe.log_writer import MAX_QUEUED_BYTES, DropCounter, LineWriter
from sseproxy.observe.metrics import Metrics, RecordsDropped

WAIT = 30  # seconds: a guard against hanging, never a measure

render_gap = log.gap_renderer("json", colors=False)


class Stalled:
    """An output whose reader stopped: each `write` waits for a permit (`allow`), and takes
    at most `chunk` bytes of what it is given, as a pipe may."""

    def __init__(self, chunk: int | None = None) -> None:
        self.chunk = chunk
        self.permits = threading.Semaphore(0)
        self.entered = threading.Event()
        self.data = bytearray()
        self.written = threading.Condition()
        self.calls = 0
        self.entries = 0

    def allow(self, writes: int = 1_000_000) -> None:
        self.permits.release(writes)

    def write(self, data: bytes) -> int:
        self.entered.set()
        with self.written:
            self.entries += 1
            self.written.notify_all()
        assert self.permits.acquire(timeout=WAIT), "the test never let this write through"
        taken = len(data) if self.chunk is None else min(self.chunk, len(data))
        with self.written:
            self.data += data[:taken]
            self.calls += 1
            self.written.notify_all()
        return taken

    def wait_entries(self, entries: int) -> None:
        with self.written:
            assert self.written.wait_for(lambda: self.entries >= entries, WAIT)

    def lines(self) -> list[str]:
        text = self.data.decode()
        assert text.endswith("\n")  # nothing left half-written
        return text.splitlines()


def make(output: Stalled, max_bytes: int, counter: DropCounter | None = None) -> LineWriter:
    return LineWriter(output, render_gap, max_bytes=max_bytes, counter=counter or DropCounter())


def in_thread(work: Callable[[], None]) -> None:
    """Run `work`, failing (not hanging) if it blocks."""
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive(), "queueing a line waited for the output"


def line(n: int) -> str:
    return json.dumps({"event": "request.finished", "n": n, "pad": "x" * 40})


LINE_BYTES = len(line(0)) + 1  # with its newline; every line(n) for n < 10 is as long


def gaps(lines: list[str]) -> list[dict[str, object]]:
    return [r for r in map(json.loads, lines) if r["event"] == "log.records_dropped"]


def test_queueing_returns_while_the_output_takes_nothing() -> None:
    output = Stalled()
    writer = make(output, MAX_QUEUED_BYTES)
    in_thread(lambda: [writer.write(line(n % 10)) for n in range(5000)])
    assert output.entered.wait(WAIT)
    assert output.data == b""  # the output took nothing yet...
    assert writer.flush(0) == 5000  # ...and every line waits for it
    assert writer.dropped == 0
    output.allow()
    assert writer.flush(WAIT) == 0
    assert output.lines() == [line(n % 10) for n in range(5000)]


@pytest.mark.parametrize(
    ("max_bytes", "written", "lost"),
    [
        (10 * LINE_BYTES, [*range(10), "gap"], 1),  # the ten lines fit; one byte more does not
        (10 * LINE_BYTES - 1, [*range(9), "gap"], 2),  # line 9 is one byte too many
    ],
)
def test_the_bound_at_its_value_and_one_more(
    max_bytes: int, written: list[object], lost: int
) -> None:
    """Lines of exactly the bound are all kept (the one being written counts too); a line
    that would pass it by one byte is dropped, and so is a 1-byte line after it: once lines
    are lost, the queue must drain to half the bound before it takes lines again."""
    output, counter = Stalled(), DropCounter()
    writer = make(output, max_bytes, counter)
    in_thread(lambda: [writer.write(line(n)) for n in range(10)])
    in_thread(lambda: writer.write(""))  # a 1-byte line
    assert writer.dropped == counter.total == lost
    output.allow()
    assert writer.flush(WAIT) == 0
    lines = output.lines()
    assert [json.loads(x).get("n", "gap") for x in lines] == written
    [gap] = gaps(lines)
    assert gap["dropped"] == lost
    assert gap["level"] == "warning"
    assert gap["first_dropped_at"] <= gap["last_dropped_at"]


def test_partial_writes_never_tear_a_line() -> None:
    output = Stalled(chunk=7)  # a pipe taking a few bytes at a time
    writer = make(output, 4 * LINE_BYTES)
    in_thread(lambda: [writer.write(line(n)) for n in range(10)])
    output.allow()
    assert writer.flush(WAIT) == 0
    lines = output.lines()
    assert lines[:4] == [line(n) for n in range(4)]
    assert [g["dropped"] for g in gaps(lines)] == [6]
    assert len(lines) == 5
    assert output.calls > 5 * LINE_BYTES // 7  # the premise: lines did arrive in pieces


def test_the_gap_line_stands_where_the_lines_were_lost() -> None:
    """The output drains to half the bound, lines fit again: the gap is reported before
    them; the queue fills up again, and a second gap says so."""
    output = Stalled()
    writer = make(output, 4 * LINE_BYTES)
    in_thread(lambda: [writer.write(line(n)) for n in range(6)])  # 0-3 kept, 4 and 5 lost
    output.allow(3)
    output.wait_entries(4)  # lines 0-2 written, line 3 under way: half the bound is free
    assert writer.flush(0) == 1 + 2  # line 3 queued, 4 and 5 lost and not reported yet
    in_thread(lambda: [writer.write(line(n)) for n in range(6, 10)])  # 9: no room again
    output.allow()
    assert writer.flush(WAIT) == 0
    lines = output.lines()
    assert [json.loads(x).get("n", "gap") for x in lines] == [0, 1, 2, 3, "gap", 6, 7, 8, "gap"]
    assert [g["dropped"] for g in gaps(lines)] == [2, 1]


def test_while_lines_are_lost_none_is_taken_until_half_the_bound_is_free() -> None:
    """A reader that takes a line now and then (a stuck `less` paged once) costs one gap,
    not a gap between every line that happens to fit."""
    output = Stalled()
    writer = make(output, 4 * LINE_BYTES)
    in_thread(lambda: [writer.write(line(n)) for n in range(5)])  # 0-3 kept, 4 lost
    output.allow(1)
    output.wait_entries(2)  # line 0 written: one line's room, less than half the bound
    in_thread(lambda: [writer.write(line(n)) for n in range(5, 8)])  # all three lost
    assert writer.dropped == 4
    output.allow(2)
    output.wait_entries(4)  # lines 1 and 2 written too, 3 under way: half the bound is free
    in_thread(lambda: writer.write(line(8)))
    output.allow()
    assert writer.flush(WAIT) == 0
    lines = output.lines()
    assert [json.loads(x).get("n", "gap") for x in lines] == [0, 1, 2, 3, "gap", 8]
    assert [g["dropped"] for g in gaps(lines)] == [4]


class Failing:
    """An output that fails its first `failures` writes, then takes everything."""

    def __init__(self, failures: int, exc: OSError) -> None:
        self.failures, self.exc = failures, exc
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        if self.failures:
            self.failures -= 1
            raise self.exc
        self.data += data
        return len(data)


def test_lines_an_output_refused_are_counted_and_reported_when_it_takes_lines_again() -> None:
    output = Failing(3, OSError(errno.ENOSPC, "No space left on device"))
    reported: list[BaseException] = []
    counter = DropCounter()
    writer = LineWriter(output, render_gap, report=reported.append, counter=counter)
    for n in range(4):
        writer.write(line(n))
        assert writer.flush(WAIT) == 0  # nothing the writer could still write
        assert writer.dropped == min(n + 1, 2)
    lines = output.data.decode().splitlines()
    # writes: line 0 fails; the gap line before line 1 fails, then line 1; the gap line
    # before line 2 (two lost) is written, then lines 2 and 3.
    assert [json.loads(x).get("n", "gap") for x in lines] == ["gap", 2, 3]
    assert [g["dropped"] for g in gaps(lines)] == [2]
    assert counter.total == writer.dropped == 2
    assert len(reported) == 3 and all(isinstance(exc, OSError) for exc in reported)


def test_a_flush_that_runs_out_of_time_says_what_was_not_written() -> None:
    output = Stalled()
    writer = make(output, 3 * LINE_BYTES)
    in_thread(lambda: [writer.write(line(n)) for n in range(5)])
    assert writer.flush(0.05) == 5  # 3 queued (one of them being written), 2 lost
    output.allow()
    assert writer.flush(WAIT) == 0


def test_the_drop_count_is_a_prometheus_counter_at_zero_from_startup() -> None:
    counter = DropCounter()
    registry = CollectorRegistry()
    registry.register(RecordsDropped(counter))
    assert "sseproxy_records_dropped_total 0.0\n" in generate_latest(registry).decode()
    counter.add(7)
    assert "sseproxy_records_dropped_total 7.0\n" in generate_latest(registry).decode()
    assert "# TYPE sseproxy_records_dropped_total counter" in Metrics().exposition().decode()


@pytest.fixture
def unread_pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    log.configure("json", "info", io.StringIO(), cache=False)
    while select.select([read_fd], [], [], 0.5)[0]:  # let the writer thread end its lines
        os.read(read_fd, 1 << 20)
    os.close(read_fd)
    os.close(write_fd)


def test_finish_waits_a_bounded_time_and_says_on_stderr_how_many_lines_were_lost(
    unread_pipe: tuple[int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    _, write_fd = unread_pipe
    stream = os.fdopen(write_fd, "w", closefd=False)
    log.configure("json", "info", stream, cache=False, max_queue_bytes=64 * 1024)
    logger = structlog.get_logger("t")
    in_thread(lambda: [logger.info("request.finished", n=n, pad="x" * 900) for n in range(400)])
    left: list[int] = []
    in_thread(lambda: left.append(log.finish(0.2)))
    # 400 records of ~1 KB: the pipe took at most 64 KiB of them, the queue as many
    assert 400 - 2 * 64 <= left[0] < 400
    err = capsys.readouterr().err
    assert f"sseproxy: {left[0]} log lines could not be written" in err
    assert "within 0.2 s" in err
    assert log.finish(0.2) == 0  # once: the writer is stopped
