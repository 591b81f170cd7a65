"""A log output nobody reads (a paused `sseproxy | less`, a stalled log shipper) never stalls
forwarding: records wait in a bounded queue for the writer thread, the rest are dropped and
counted (`sseproxy_records_dropped_total`), and one `log.records_dropped` line says how many
once the output takes lines again."""

from __future__ import annotations

import asyncio
import json
import os
import select
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sseproxy.observe import log
from tests.integration.conftest import LogCapture
from tests.integration.fake_upstream import Script, Send
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"
COMPLETE = sse(chat_chunk("Hello, "), chat_chunk("world"), chat_chunk(finish="stop"), "[DONE]")
REQUESTS = 1000
# Records waiting for the writer thread: a few dozen; the pipe (64 KiB) holds as many again.
QUEUE_BYTES = 32 * 1024
TIMEOUT = 60  # seconds: a guard against hanging (a loop blocked on the output), never a measure


class UnreadPipe:
    """stdout as a pipe nobody reads. If the proxy has not answered within TIMEOUT, a
    watchdog closes the read end: a loop blocked writing to it gets EPIPE and goes on, so the
    test fails on `rescued` instead of hanging."""

    def __init__(self) -> None:
        self.fd, self.write_fd = os.pipe()
        self.rescued = False
        self._watchdog = threading.Timer(TIMEOUT, self._rescue)
        self._watchdog.start()

    def _rescue(self) -> None:
        self.rescued = True
        os.close(self.fd)

    def answered(self) -> None:
        self._watchdog.cancel()
        self._watchdog.join()

    def close(self) -> None:
        self.answered()
        if not self.rescued:
            os.close(self.fd)


@pytest.fixture
def unread_pipe(logs: LogCapture) -> Iterator[UnreadPipe]:
    """The log on an unread pipe; back on the test's capture afterwards."""
    pipe = UnreadPipe()
    stream = os.fdopen(pipe.write_fd, "w", encoding="utf-8")
    log.configure("json", "info", stream, cache=False, max_queue_bytes=QUEUE_BYTES)
    try:
        yield pipe
    finally:
        if not pipe.rescued:
            os.set_blocking(pipe.fd, False)
        log.configure("json", "debug", logs.stream, cache=False)  # waits for the writer, bounded
        pipe.close()  # a writer thread still blocked gets EPIPE and ends
        stream.close()


def read_until(fd: int, done: Any, timeout: float = TIMEOUT) -> list[dict[str, Any]]:
    """The records in the pipe, read as the writer thread writes them, until `done(records)`."""
    os.set_blocking(fd, False)
    deadline = time.monotonic() + timeout
    data = b""
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"the log output stopped after {len(data.splitlines())} lines"
        if select.select([fd], [], [], remaining)[0]:
            data += os.read(fd, 1 << 20)
        end = data.rfind(b"\n") + 1
        records = [json.loads(line) for line in data[:end].splitlines()]  # each line whole
        if done(records):
            assert data[end:] == b""
            return records


def dropped(records: list[dict[str, Any]]) -> int:
    return sum(r["dropped"] for r in records if r["event"] == "log.records_dropped")


def kept(records: list[dict[str, Any]]) -> int:
    return sum(1 for r in records if r["event"] == "request.finished" and r["path"] == PATH)


def metric(text: str) -> float:
    [value] = [
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("sseproxy_records_dropped_total ")
    ]
    return value


async def test_an_unread_log_output_never_stalls_requests_or_healthz(
    upstream: Any, make_proxy: Any, unread_pipe: UnreadPipe
) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(COMPLETE)]))
    client = await make_proxy()
    before = metric(await (await client.get("/_sseproxy/metrics")).text())
    async with asyncio.timeout(TIMEOUT):
        for _ in range(REQUESTS):
            resp = await client.post(PATH, json={})
            assert await resp.read() == COMPLETE
            assert resp.status == 200
        health = await client.get("/_sseproxy/healthz")
        assert health.status == 200
        assert (await health.json())["status"] == "ok"
        exposition = await (await client.get("/_sseproxy/metrics")).text()
    unread_pipe.answered()
    assert not unread_pipe.rescued, "the proxy waited for its log output's reader"

    records = await asyncio.to_thread(
        read_until, unread_pipe.fd, lambda rs: kept(rs) + dropped(rs) >= REQUESTS
    )
    # every request is a record written or a record counted as dropped, none twice
    assert kept(records) + dropped(records) == REQUESTS
    assert 0 < kept(records) < REQUESTS  # the premise: the bound was reached
    assert metric(exposition) - before == REQUESTS - kept(records)
    # One gap line each time the output fell behind: usually one; more when the writer thread
    # caught up before the pipe was full (a busy machine runs it late), each after the last
    gaps = [r for r in records if r["event"] == "log.records_dropped"]
    assert gaps
    for gap, later in zip(gaps, [*gaps[1:], None], strict=True):
        assert gap["level"] == "warning"
        assert gap["first_dropped_at"] <= gap["last_dropped_at"] <= gap["timestamp"]
        if later is not None:
            assert gap["last_dropped_at"] < later["first_dropped_at"]
