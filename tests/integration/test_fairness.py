"""One HTTP response never holds the event loop: its analysis runs a bounded slice per loop
turn, also after its client has left, and forwarding never waits for it. Shown by what else
runs meanwhile (other tasks, healthz), never by timing."""

from __future__ import annotations

import asyncio
import socket
import zlib
from typing import Any

from sseproxy.core.encoding import SLICE_BYTES
from sseproxy.core.tap import DEFAULT_MAX_DECODED_BYTES
from sseproxy.shell import app as app_module
from sseproxy.shell.app import STATE
from sseproxy.shell.pacing import MOST_PER_ITERATION
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


async def test_200_requests_that_arrive_together_are_admitted_over_many_loop_iterations(
    upstream: Any, make_proxy: Any, logs: Any, monkeypatch: Any
) -> None:
    """200 requests written in one go (all readable at the proxy's next poll): they are
    admitted a few per loop iteration (shell/pacing.py), other tasks running between them,
    and each is answered whole and recorded as before. Without the pacing all 200 were
    admitted in one iteration (bench.fairness: 300 such requests held healthz for seconds)."""
    fake, _ = upstream
    body = blocks(4, size=1024)
    fake.script(PATH, Script([Send(b) for b in body]))
    client = await make_proxy(max_concurrent_streams=400)
    ticker = Ticker()
    admitted: list[int] = []
    admit = app_module.admit

    async def counted(*args: Any) -> Any:
        admitted.append(ticker.turns)
        return await admit(*args)

    monkeypatch.setattr(app_module, "admit", counted)
    loop = asyncio.get_running_loop()
    socks = []
    try:
        for _ in range(200):
            sock = socket.socket()
            sock.setblocking(False)
            await loop.sock_connect(sock, ("127.0.0.1", client.server.port))
            socks.append(sock)
        await asyncio.sleep(0.2)  # every connection accepted, none has sent a byte
        request = (
            f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        ).encode()
        for sock in socks:  # one step of this task: no loop iteration between them
            sock.send(request)
        answers = await asyncio.wait_for(
            asyncio.gather(*(read_to_close(loop, sock) for sock in socks)), 60
        )
    finally:
        ticker.stop()
        for sock in socks:
            sock.close()
    assert all(a.startswith(b"HTTP/1.1 200") and all(b in a for b in body) for a in answers)
    per_turn: dict[int, int] = {}
    for turn in admitted:
        per_turn[turn] = per_turn.get(turn, 0) + 1
    assert len(admitted) == 200
    assert max(per_turn.values()) <= MOST_PER_ITERATION  # never all 200 in one iteration
    assert len(per_turn) >= 200 // MOST_PER_ITERATION + 1
    assert client.app[STATE].steps.waited > 0
    records = await logs.wait(200)
    whole = len(b"".join(body))
    assert {(r["bytes"], r["client_bytes"]) for r in records} == {(whole, whole)}


async def read_to_close(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    got = b""
    while data := await loop.sock_recv(sock, 65536):
        got += data
    return got
