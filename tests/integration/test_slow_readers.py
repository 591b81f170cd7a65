"""Clients that stop reading: each pins at most its mark (plus the read under way), all of them
together at most the cap, the upstreams wait instead of the proxy buffering, a client that
reads again gets every byte in order, and one that leaves releases everything at once."""

from __future__ import annotations

import asyncio
import socket
import time

from sseproxy.shell.app import STATE
from tests.integration.fake_upstream import Script, Send

PATH = "/v1/chat/completions"
MARK = 64 * 1024
# The most one read of the upstream socket hands the relay (asyncio reads up to 256 KiB):
# what can still arrive after the upstream was paused.
ONE_READ = 256 * 1024


def blocks(n: int, size: int = 65_536) -> list[bytes]:
    """n numbered SSE events of `size` bytes: any loss or reordering shows."""
    block = b"data: " + b"z" * (size - 8) + b"\n\n"
    return [block.replace(b"zzzzzz", b"%06d" % i, 1) for i in range(n)]


async def test_a_client_that_stops_reading_pins_its_mark_and_then_gets_every_byte(
    upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    body = blocks(320)  # 20 MB: more than every socket buffer on the way can hold
    fake.script(PATH, Script([Send(b) for b in body]))
    client = await make_proxy(max_client_held_bytes=MARK)
    held = client.app[STATE].held
    resp = await client.post(PATH, json={"stream": True})
    got = await resp.content.readexactly(1024)
    await asyncio.sleep(0.5)  # the client reads nothing meanwhile
    assert not fake.finished[PATH].is_set()  # the upstream waits: it was paused, not drained
    assert 0 < held.peak <= MARK + ONE_READ
    got += await resp.read()
    assert got == b"".join(body)
    [record] = await logs.wait(1)
    assert record["http_complete"] is True and record["client_bytes"] == len(got)
    assert held.peak <= MARK + ONE_READ and held.total == 0


async def test_a_client_that_leaves_while_paused_stops_the_upstream_and_releases_its_bytes(
    upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(b) for b in blocks(320)]))
    client = await make_proxy(max_client_held_bytes=MARK)
    held = client.app[STATE].held
    resp = await client.post(PATH, json={"stream": True})
    await resp.content.readexactly(1024)
    await asyncio.sleep(0.3)  # paused by now
    assert held.total > 0
    resp.close()
    [record] = await logs.wait(1)
    assert record["interruption"]["reason"] == "client_disconnected"
    assert record["http_complete"] is None  # the client left first: the proxy stopped reading
    await asyncio.wait_for(fake.disconnected[PATH].wait(), 5)  # generation stopped
    assert held.total == 0


async def stalled_client(port: int, size: int) -> socket.socket:
    """A client that sends its request and never reads (a small receive buffer)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    request = b"POST %b?n=%d HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" % (
        PATH.encode(),
        size,
    )
    await asyncio.get_running_loop().sock_sendall(sock, request)
    return sock


async def test_fifty_clients_that_stop_reading_stay_under_the_cap_and_healthz_answers(
    upstream, make_proxy, logs
) -> None:
    """50 clients on 8 MB streams that never read (more than the kernel's socket buffers on
    the way take), each allowed 1 MiB: the bytes held for all of them stay under the 4 MiB
    cap, plus at most the read under way of each stream (without the cap: 50 MiB), healthz
    answers throughout (how fast is bench.fairness's to measure, not a timed test's), and
    everything is released when they leave."""
    fake, _ = upstream
    fake.script(PATH, Script([Send(b) for b in blocks(128)]))
    cap, streams = 4 * 1024 * 1024, 50
    client = await make_proxy(max_client_held_bytes=1024 * 1024, max_held_bytes=cap)
    held = client.app[STATE].held
    port = client.server.port
    socks = [await stalled_client(port, 2) for _ in range(streams)]
    deadline = time.monotonic() + 3
    try:
        while time.monotonic() < deadline:
            resp = await asyncio.wait_for(client.get("/_sseproxy/healthz"), 10)
            assert resp.status == 200
            await asyncio.sleep(0.05)
        assert client.app[STATE].active == streams
        assert held.peak > cap // 2  # the streams did fill what they may hold
        assert held.peak <= cap + streams * ONE_READ
    finally:
        for sock in socks:
            sock.close()
    records = await logs.wait(streams, timeout=15)
    assert {r["interruption"]["reason"] for r in records} == {"client_disconnected"}
    assert held.total == 0


async def test_a_client_that_stops_reading_longer_than_the_idle_timeout_is_not_an_idle_upstream(
    upstream, make_proxy, logs
) -> None:
    """The upstream is silent only because the proxy paused it for its client: no cut."""
    fake, _ = upstream
    body = blocks(320)
    fake.script(PATH, Script([Send(b) for b in body]))
    client = await make_proxy(max_client_held_bytes=MARK, idle_timeout=0.3)
    resp = await client.post(PATH, json={"stream": True})
    got = await resp.content.readexactly(1024)
    await asyncio.sleep(1.0)  # three idle timeouts without reading
    got += await resp.read()
    assert got == b"".join(body)
    [record] = await logs.wait(1)
    assert record["http_complete"] is True and record["interruption"]["reason"] == "upstream_closed"


async def test_a_client_that_stops_reading_is_sent_little_more_than_its_mark(
    upstream, make_proxy, logs
) -> None:
    """The kernel's send buffer for a client grows by itself to megabytes (Linux: up to
    tcp_wmem's 4 MiB) and all of it is relayed and analysed before the client pushes back:
    300 such clients cost seconds of the loop's time. The proxy caps it at about the mark,
    so a client that reads nothing is sent at most about twice its mark (the kernel's, the
    proxy's) and the read under way, plus what its own receive buffer takes."""
    fake, _ = upstream
    fake.script(PATH, Script([Send(b) for b in blocks(128)]))  # 8 MB
    client = await make_proxy(max_client_held_bytes=MARK)
    held = client.app[STATE].held
    sock = await stalled_client(client.server.port, 2)
    try:
        for _ in range(100):  # until the relay has paused its upstream for the client
            await asyncio.sleep(0.05)
            if held.total > 0 and client.app[STATE].active == 1:
                break
        await asyncio.sleep(0.3)  # anything the kernel would still take, it has taken
    finally:
        sock.close()
    [record] = await logs.wait(1)
    assert record["interruption"]["reason"] == "client_disconnected"
    receive_buffer = 2 * 16 * 1024 + 64 * 1024  # what the client's kernel takes, at most
    assert 0 < record["client_bytes"] <= 2 * MARK + ONE_READ + receive_buffer
