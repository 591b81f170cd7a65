"""One HTTP response never holds the event loop: its analysis runs a bounded slice per loop
turn, also after its client has left, and forwarding never waits for it. Shown by what else
runs meanwhile (other tasks, healthz), never by timing."""

from __future__ import annotations

import asyncio
import zlib
from typing import Any

from sseproxy.core.encoding import SLICE_BYTES
from sseproxy.core.tap import DEFAULT_MAX_DECODED_BYTES
from sseproxy.shell.app import STATE
from sseproxy.shell.turns import AnalysisTurns
from tests.integration.fake_upstream import Script, Send
from tests.integration.test_slow_readers import blocks, stalled_client

PATH = "/v1/chat/completions"
# Blank lines: the cheapest bytes to compress (1000:1) and among the costliest to analyse.
EXPANDED = 4 * 1024 * 1024


def blank_line_bomb(size: int = EXPANDED) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"\n" * (1024 * 1024)
    return b"".join(
        [*(compressor.compress(block) for _ in range(size // len(block))), compressor.flush()]
    )


class Ticker:
    """A task that counts the loop turns it is given."""

    def __init__(self) -> None:
        self.turns = 0
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.turns += 1
            await asyncio.sleep(0)

    def stop(self) -> None:
        self._task.cancel()


async def read_then_close(port: int, length: int) -> bytes:
    """POST, read the chunked response to its last chunk, then close the connection (the
    proxy cancels the handler, as when a real client leaves after its answer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Content-Length: 2\r\n\r\n{}".encode()
        )
        async with asyncio.timeout(30):
            data = await reader.readuntil(b"\r\n0\r\n\r\n")
        assert len(data) > length
        return data
    finally:
        writer.close()


async def test_a_gzip_bomb_is_analysed_between_other_tasks_after_its_client_left(
    upstream: Any, make_proxy: Any, logs: Any
) -> None:
    """4 MiB of blank lines in a 4 KB gzip body: the client gets it whole and leaves; the
    analysis then takes one loop turn per slice (~256 of them), so another task runs
    between them and healthz is answered before the record is written. Before, the
    cancelled handler closed the tap, which analysed the whole backlog in one call."""
    fake, _ = upstream
    bomb = blank_line_bomb()
    headers = {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}
    fake.script(PATH, Script([Send(bomb)], headers=headers))
    client = await make_proxy()
    await read_then_close(client.port, len(bomb))
    ticker = Ticker()
    try:
        health = await asyncio.wait_for(client.get("/_sseproxy/healthz"), 30)
        assert health.status == 200
        assert logs.records() == []  # answered while the analysis was still going on
        [record] = await logs.wait(1, timeout=120)
    finally:
        ticker.stop()
    assert ticker.turns >= EXPANDED // SLICE_BYTES // 2  # a turn for others between slices
    assert record["bytes"] == len(bomb) and record["events"] == 0


async def test_a_paused_upstream_is_resumed_when_its_client_reads_not_when_analysis_ends(
    upstream: Any, make_proxy: Any, logs: Any, monkeypatch: Any
) -> None:
    """A 512 KB gzip body of blank lines (512 MiB expanded: ~4,000 slices under the budget)
    to a client with a small mark: the upstream is paused while the client holds its bytes;
    once the client has read them the upstream resumes, whatever is left to analyse. The
    client has the whole body while only a part of the analysis is done (a relay that
    analysed its backlog before relieving its client would end it only after all of it)."""
    fake, _ = upstream
    bomb = blank_line_bomb(512 * 1024 * 1024)
    headers = {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}
    fake.script(
        PATH,
        Script([Send(bomb[i : i + 65536]) for i in range(0, len(bomb), 65536)], headers=headers),
    )
    client = await make_proxy(max_client_held_bytes=16 * 1024)
    slices = 0
    pump = AnalysisTurns.pump

    async def counted(self: AnalysisTurns, tap: Any) -> int:
        nonlocal slices
        slices += 1
        return await pump(self, tap)

    monkeypatch.setattr(AnalysisTurns, "pump", counted)
    resp = await client.post(PATH, json={}, auto_decompress=False)
    assert await asyncio.wait_for(resp.read(), 60) == bomb
    assert slices < DEFAULT_MAX_DECODED_BYTES // SLICE_BYTES // 4
    assert logs.records() == []


async def test_healthz_is_answered_while_300_clients_that_stopped_reading_hold_streams(
    upstream: Any, make_proxy: Any, logs: Any
) -> None:
    """300 clients that never read their streams: healthz is answered throughout (a generous
    timeout, no latency asserted) and counts them, and every stream ends with its client."""
    fake, _ = upstream
    fake.script(PATH, Script([Send(b) for b in blocks(32)]))  # 2 MB each
    streams = 300
    client = await make_proxy(
        max_client_held_bytes=64 * 1024, max_held_bytes=4 * 1024 * 1024, max_concurrent_streams=400
    )
    socks = [await stalled_client(client.server.port, 2) for _ in range(streams)]
    try:
        async with asyncio.timeout(60):
            while client.app[STATE].active < streams:
                await asyncio.sleep(0.05)
        for _ in range(5):
            health = await asyncio.wait_for(client.get("/_sseproxy/healthz"), 30)
            assert health.status == 200
            assert (await health.json())["active_streams"] == streams
            await asyncio.sleep(0.1)
    finally:
        for sock in socks:
            sock.close()
    records = await logs.wait(streams, timeout=60)
    assert {r["interruption"]["reason"] for r in records} == {"client_disconnected"}
