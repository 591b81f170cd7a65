"""Bounds on a WebSocket session's upstream leg: the messages queued for a client that does
not read (per session, and across sessions), what inflating may hold, and the work done in
one loop callback (a read of 100,000 tiny frames or pings, or a stream of deflate bombs, is
parsed in bounded turns with the socket paused, other tasks running between them).

The leg's protocol is driven here through a fake transport (what a socket would call), so
the tests see each callback's work and the transport's pauses; the proxy-level tests at the
end check the same bounds through real sockets."""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import gc
import hashlib
import os
import socket
import struct
import zlib
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType
from yarl import URL

from sseproxy.config import load
from sseproxy.shell.app import STATE, create_app
from sseproxy.shell.budget import HeldBytes
from sseproxy.shell.pacing import MOST_PER_ITERATION
from sseproxy.shell.state import ProxyState
from sseproxy.shell.websocket import session as websocket
from sseproxy.shell.websocket import upstream as ws_upstream
from sseproxy.shell.websocket.upstream import (
    ITEM_OVERHEAD,
    ITEMS_PER_YIELD,
    MAX_EVENTS_PER_TURN,
    MAX_QUEUED_BYTES,
    TURN_INFLATED_BYTES,
    Control,
    Message,
    UpstreamSocket,
    upgrade,
)
from tests.integration.test_websocket_leg import FramingUpstream
from tests.integration.ws_upstream import WsUpstream

# Through the proxy, sessions need aiohttp 3.14 (exact text frames); the floors' older aiohttp
# refuses them (tests/integration/test_websocket_support.py), so those tests skip there.
needs_sessions = pytest.mark.skipif(
    not websocket.SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14"
)

MIB = 1024 * 1024


class FakeTransport:
    """What UpstreamSocket's socket would be, noting reading and writes."""

    def __init__(self, protocol: UpstreamSocket) -> None:
        self.protocol = protocol
        self.reading = True
        self.pauses = 0
        self.closing = False
        self.written: list[bytes] = []

    def pause_reading(self) -> None:
        assert self.reading, "paused twice"
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        assert not self.reading, "resumed twice"
        self.reading = True

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    abort = close


def frame(opcode: int, payload: bytes, fin: bool = True, rsv1: bool = False) -> bytes:
    """One unmasked frame, as a server sends it."""
    first = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
    n = len(payload)
    if n < 126:
        return bytes((first, n)) + payload
    if n < 1 << 16:
        return bytes((first, 126)) + struct.pack("!H", n) + payload
    return bytes((first, 127)) + struct.pack("!Q", n) + payload


async def opened(
    deflate: bool = False, budget: HeldBytes | None = None, limit: int = 128 * MIB
) -> tuple[UpstreamSocket, FakeTransport]:
    """An upstream leg whose upgrade was accepted, as `connect` leaves it."""
    ws, request = upgrade(URL("http://upstream.test/v1/realtime"), [], deflate, [], limit)
    key = next(
        line.split(b":", 1)[1].strip()
        for line in request.split(b"\r\n")
        if line.lower().startswith(b"sec-websocket-key:")
    )
    accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    head = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    head += b"Sec-WebSocket-Accept: " + accept + b"\r\n"
    if deflate:
        head += b"Sec-WebSocket-Extensions: permessage-deflate\r\n"
    sock = UpstreamSocket(ws, budget, limit)
    transport = FakeTransport(sock)
    sock.connection_made(transport)  # type: ignore[arg-type]
    sock.data_received(head + b"\r\n")
    handshake = await asyncio.wait_for(sock.handshake, 5)
    assert handshake.status == 101
    return sock, transport


async def settle(sock: UpstreamSocket) -> None:
    """Let every scheduled parsing turn run (the relay takes nothing meanwhile)."""
    for _ in range(100_000):
        turns = sock.turns
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        if sock.turns == turns:
            return
    raise AssertionError("the parser never stopped")


class Ticker:
    """Another task on the loop: notes which parsing turn it ran after."""

    def __init__(self, sock: UpstreamSocket) -> None:
        self.sock = sock
        self.seen: list[int] = []
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            self.seen.append(self.sock.turns)
            await asyncio.sleep(0)

    def stop(self) -> set[int]:
        self.task.cancel()
        return set(self.seen)


# -- the work per callback -------------------------------------------------------------------


async def test_100000_tiny_fragments_in_one_read_are_parsed_in_bounded_turns() -> None:
    sock, transport = await opened()
    n = 100_000
    wire = frame(0x1, b"a", fin=False) + frame(0x0, b"", fin=False) * (n - 2) + frame(0x0, b"z")
    sock.data_received(wire)
    # the callback stopped early: the message is not whole yet, and the socket waits
    assert not sock.items
    assert sock.most_events <= MAX_EVENTS_PER_TURN
    assert not transport.reading
    ticker = Ticker(sock)
    message = await asyncio.wait_for(sock.next(), 30)
    turns = ticker.stop()
    assert message == Message(True, b"az")
    assert sock.most_events <= MAX_EVENTS_PER_TURN
    assert sock.turns >= n // MAX_EVENTS_PER_TURN
    # the other task ran between the turns (all but the first, run before it started), not
    # once before and once after them all
    assert len(turns) >= n // MAX_EVENTS_PER_TURN - 1
    assert transport.reading  # everything read was parsed: the socket is read again


async def test_100000_pings_in_one_read_are_queued_up_to_the_bound_then_the_socket_waits() -> None:
    sock, transport = await opened()
    n = 100_000
    sock.data_received(frame(0x9, b"") * n)
    assert len(sock.items) <= MAX_EVENTS_PER_TURN
    await settle(sock)
    # a ping counts its objects: the queue's bound holds for a flood of empty pings
    assert sock.queued <= MAX_QUEUED_BYTES + ITEM_OVERHEAD
    assert len(sock.items) == MAX_QUEUED_BYTES // ITEM_OVERHEAD + 1
    assert not transport.reading and sock.paused
    # every ping reaches the relay, in order, none dropped
    got = [await asyncio.wait_for(sock.next(), 30) for _ in range(n)]
    assert got == [Control("ping", b"")] * n
    assert sock.most_events <= MAX_EVENTS_PER_TURN
    assert transport.reading and sock.queued == 0


async def test_a_stream_of_deflate_bombs_inflates_one_turn_at_a_time_within_the_queue() -> None:
    sock, transport = await opened(deflate=True)
    size = TURN_INFLATED_BYTES  # each message: 256 KiB of one byte, a few hundred bytes on the wire
    deflater = zlib.compressobj(wbits=-15)
    wire = b""
    for i in range(40):
        body = deflater.compress(bytes((65 + i % 26,)) * size) + deflater.flush(zlib.Z_SYNC_FLUSH)
        wire += frame(0x2, body[:-4], rsv1=True)
    assert len(wire) < 100_000
    sock.data_received(wire)
    assert len(sock.items) == 1  # one turn: TURN_INFLATED_BYTES inflated, then the loop
    await settle(sock)
    # the queue's bound, plus the one message that crossed it: never the 40 MiB inflated
    assert sock.queued <= MAX_QUEUED_BYTES + size + ITEM_OVERHEAD
    assert not transport.reading
    got = [await asyncio.wait_for(sock.next(), 30) for _ in range(40)]
    assert [m.data == bytes((65 + i % 26,)) * size for i, m in enumerate(got)] == [True] * 40
    assert sock.queued == 0 and transport.reading


async def test_each_turn_hands_at_most_its_inflated_bytes_then_the_loop_runs() -> None:
    sock, _ = await opened(deflate=True)
    deflater = zlib.compressobj(wbits=-15)
    wire = b""
    for _ in range(8):  # small messages: a turn ends at TURN_INFLATED_BYTES, not at one message
        body = deflater.compress(b"x" * (64 * 1024)) + deflater.flush(zlib.Z_SYNC_FLUSH)
        wire += frame(0x1, body[:-4], rsv1=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ws_upstream, "TURN_INFLATED_BYTES", 3 * 64 * 1024)
        sock.data_received(wire)
        assert len(sock.items) == 3  # at the bound: the turn ends
        ticker = Ticker(sock)
        got = [await asyncio.wait_for(sock.next(), 10) for _ in range(8)]
        turns = ticker.stop()
    assert got == [Message(True, b"x" * (64 * 1024))] * 8
    assert sock.turns == 1 + 3  # the answer's, then 3 + 3 + 2 messages
    assert len(turns) >= 2  # the other task ran between the later turns


async def test_the_relay_lets_other_tasks_run_while_the_queue_is_never_empty() -> None:
    sock, _ = await opened()
    sock.data_received(frame(0x2, b"m") * 500)
    ran = 0

    async def other() -> None:
        nonlocal ran
        while True:
            ran += 1
            await asyncio.sleep(0)

    task = asyncio.ensure_future(other())
    await asyncio.sleep(0)
    before = ran
    for _ in range(500):
        await sock.next()
    task.cancel()
    # the 500 items were all queued: the relay waited on nothing, yet others ran between
    assert ran - before >= 500 // ITEMS_PER_YIELD - 1


# -- the queue of one session ----------------------------------------------------------------


@pytest.mark.parametrize("extra", [0, 1])
async def test_the_socket_is_paused_only_past_the_queue_bound(extra: int) -> None:
    sock, transport = await opened()
    payload = b"q" * (MAX_QUEUED_BYTES - ITEM_OVERHEAD + extra)
    sock.data_received(frame(0x2, payload))
    await settle(sock)
    assert sock.queued == MAX_QUEUED_BYTES + extra
    assert transport.reading is (extra == 0)
    assert sock.paused is (extra == 1)
    assert await sock.next() == Message(False, payload)
    assert transport.reading and not sock.paused


async def test_a_paused_socket_keeps_the_rest_of_its_read_and_its_end_for_later() -> None:
    sock, transport = await opened()
    big = b"b" * MAX_QUEUED_BYTES
    # one read: a message over the bound, then more messages and the close, then the end
    sock.data_received(frame(0x2, big) + frame(0x1, b"after") + frame(0x8, b"\x03\xe8bye"))
    sock.eof_received()
    sock.connection_lost(None)
    await settle(sock)
    assert not transport.reading and len(sock.items) == 1  # the rest waits, unparsed
    assert await sock.next() == Message(False, big)
    assert await sock.next() == Message(True, b"after")
    assert await sock.next() == Control("close", b"", 1000, "bye")
    assert await asyncio.wait_for(sock.next(), 5) is None


# -- all sessions together -------------------------------------------------------------------


@pytest.mark.parametrize("extra", [0, 1])
async def test_sessions_stop_reading_when_their_total_passes_the_cap(extra: int) -> None:
    budget = HeldBytes(cap=2 * (1000 + ITEM_OVERHEAD) - extra)
    (a, ta), (b, tb) = await opened(budget=budget), await opened(budget=budget)
    a.data_received(frame(0x2, b"a" * 1000))
    b.data_received(frame(0x2, b"b" * 1000))
    assert budget.total == 2 * (1000 + ITEM_OVERHEAD)
    # at the cap both read on; one byte past it, the session that crossed it waits
    assert (ta.reading, tb.reading) == (True, extra == 0)
    c, tc = await opened(budget=budget)
    c.data_received(frame(0x2, b"c"))
    assert not tc.reading  # past the cap either way: holding anything, it waits
    # a session holding nothing is not stopped by the others
    d, td = await opened(budget=budget)
    assert td.reading
    assert await b.next() == Message(False, b"b" * 1000)
    # past the cap, the message being written to its client still counts: the session reads
    # again once it was written (the relay asks for the next), not when it was taken
    assert tb.reading is (extra == 0)
    taker = asyncio.ensure_future(b.next())
    await asyncio.sleep(0)
    assert tb.reading  # it holds nothing: reading again
    taker.cancel()
    for sock in (a, b, c, d):
        sock.abort()
    assert budget.total == 0


async def test_the_queue_stops_counting_when_the_session_ends() -> None:
    budget = HeldBytes(cap=10 * MIB)
    sock, _ = await opened(budget=budget)
    sock.data_received(frame(0x2, b"x" * 5000) * 3)  # the relay takes none yet
    assert budget.total == 3 * (5000 + ITEM_OVERHEAD)
    assert await sock.next() == Message(False, b"x" * 5000)
    # still counted while the relay writes it to the client, until it asks for the next
    assert budget.total == 3 * (5000 + ITEM_OVERHEAD)
    assert await sock.next() == Message(False, b"x" * 5000)
    assert budget.total == 2 * (5000 + ITEM_OVERHEAD)
    sock.abort()
    assert budget.total == 0
    await sock.next()  # taking what is left after the end no longer counts
    assert budget.total == 0


# -- through the proxy -----------------------------------------------------------------------


@pytest.fixture
async def wsup(aiohttp_server: Any) -> tuple[WsUpstream, str]:
    up = WsUpstream()
    server = await aiohttp_server(up.app())
    return up, str(server.make_url("")).rstrip("/")


@pytest.fixture
def proxied(aiohttp_server: Any, logs: Any, wsup: tuple[WsUpstream, str]) -> Any:
    async def make(**overrides: Any) -> tuple[str, ProxyState]:
        app = create_app(load(None, {}, {"upstream": wsup[1], **overrides}))
        server = await aiohttp_server(app)
        return str(server.make_url("")).rstrip("/"), app[STATE]

    return make


def small_window(addr_info: Any) -> socket.socket:
    """A client socket with a small receive buffer: a client that stops reading pushes back
    after a few KiB, not the megabytes loopback's autotuning would take."""
    family, kind, proto, _, _ = addr_info
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return sock


async def session(base: str) -> Any:
    http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(socket_factory=small_window))
    try:
        ws = await http.ws_connect(
            base + "/v1/realtime", autoping=False, autoclose=False, max_msg_size=0
        )
    except BaseException:
        await http.close()
        raise
    ws.http = http
    return ws


def numbered(i: int, size: int) -> bytes:
    return i.to_bytes(4, "big") * (size // 4)


def sender(count: int, size: int, sent: list[int]) -> Any:
    async def script(ws: Any, request: Any) -> None:
        for i in range(count):
            await ws.send_bytes(numbered(i, size))
            sent.append(i)
        async for _msg in ws:
            pass

    return script


async def until(check: Any, what: str) -> None:
    for _ in range(2000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


def send_buffer_of_peer(client: socket.socket) -> int:
    """SO_SNDBUF of this process's socket at the other end of `client` (the proxy's side)."""
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            copy = os.dup(fd)
        except OSError:  # (the directory's own, closed by now)
            continue
        try:
            sock = socket.socket(fileno=copy)
        except OSError:  # not a socket
            os.close(copy)
            continue
        with sock, contextlib.suppress(OSError):  # (not connected)
            if sock.type == socket.SOCK_STREAM and (
                sock.getpeername() == client.getsockname()
                and sock.getsockname() == client.getpeername()
            ):
                return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    raise AssertionError("no socket at the other end")


@needs_sessions
async def test_a_client_that_stops_reading_holds_its_queue_then_gets_every_message_in_order(
    wsup, proxied, logs
) -> None:
    up, _ = wsup
    count, size = 64, 256 * 1024
    sent: list[int] = []
    up.script = sender(count, size, sent)
    base, state = await proxied()
    ws = await session(base)
    try:
        # the client reads nothing: the queue fills to its bound, then the upstream waits (the
        # peak: the total falls back to a few messages once the relay writes one to the client)
        await until(lambda: state.ws_held.peak > MAX_QUEUED_BYTES, "the queue filled")
        await asyncio.sleep(0.3)
        assert len(sent) < count
        # the queue's bound, the message that crossed it, the one being written to the client
        assert state.ws_held.peak <= MAX_QUEUED_BYTES + 2 * (size + ITEM_OVERHEAD)
        if os.path.isdir("/proc/self/fd"):
            # and the kernel holds at most the queue for it (Linux keeps twice what it is
            # given); left alone, loopback grew the proxy's send buffer to 4 MiB
            client = ws.get_extra_info("socket")
            assert send_buffer_of_peer(client) == 2 * websocket.CLIENT_SEND_BUFFER
            assert 2 * websocket.CLIENT_SEND_BUFFER == MAX_QUEUED_BYTES
        got = [await asyncio.wait_for(ws.receive(), 30) for _ in range(count)]
    finally:
        await ws.close()
        await ws.http.close()
    assert [m.data == numbered(i, size) for i, m in enumerate(got)] == [True] * count
    await logs.wait_sessions()
    assert state.ws_held.total == 0  # given back when the session ended


@needs_sessions
async def test_sessions_together_hold_at_most_the_cap_then_every_message_arrives(
    wsup, proxied, logs
) -> None:
    up, _ = wsup
    clients = 4
    count, size, cap = 128, 64 * 1024, 512 * 1024
    up.script = sender(count, size, [])
    base, state = await proxied(max_ws_held_bytes=cap)
    sockets = [await session(base) for _ in range(clients)]
    try:
        await until(lambda: state.ws_held.peak > cap, "the cap was reached")
        await asyncio.sleep(0.3)
        # past the cap, each session holds at most the message being written to its client
        # and one queued, never its own 1 MiB bound
        assert state.ws_held.peak <= cap + clients * 2 * (size + ITEM_OVERHEAD)
        got = [[await asyncio.wait_for(ws.receive(), 30) for _ in range(count)] for ws in sockets]
    finally:
        for ws in sockets:
            await ws.close()
            await ws.http.close()
    for messages in got:
        assert [m.data == numbered(i, size) for i, m in enumerate(messages)] == [True] * count
    await logs.wait_sessions(clients)
    assert state.ws_held.total == 0


async def test_the_relay_lets_other_tasks_run_while_the_client_sends_without_pause() -> None:
    sock, transport = await opened()
    ran = 0

    async def other() -> None:
        nonlocal ran
        while True:
            ran += 1
            await asyncio.sleep(0)

    task = asyncio.ensure_future(other())
    await asyncio.sleep(0)
    before = ran
    for i in range(500):  # the upstream's socket never pushes back: send never has to wait
        await sock.send(Message(False, i.to_bytes(2, "big")))
    task.cancel()
    assert ran - before >= 500 // ITEMS_PER_YIELD - 1
    assert len(transport.written) == 500


@needs_sessions
async def test_a_flood_of_upstream_pings_reaches_the_client_whole_and_in_order(
    proxied: Any, logs: Any
) -> None:
    # 20,000 pings in one write: 2.6 MB queued as counted, so the queue fills and drains
    # many times over, the upstream paused and resumed between; none is dropped
    n = 20_000
    upstream = FramingUpstream(b"".join(frame(0x9, i.to_bytes(4, "big")) for i in range(n)))
    await upstream.start()
    try:
        base, state = await proxied(upstream=upstream.url)
        ws = await session(base)
        try:
            got = [await asyncio.wait_for(ws.receive(), 30) for _ in range(n)]
        finally:
            await ws.close()
            await ws.http.close()
    finally:
        await upstream.stop()
    assert [(m.type, m.data) for m in got] == [
        (WSMsgType.PING, i.to_bytes(4, "big")) for i in range(n)
    ]
    [record] = await logs.wait_sessions()
    assert record["closed_by"] == "client"
    assert state.ws_held.total == 0


def compressed(data: bytes, deflater: Any = None) -> bytes:
    """One permessage-deflate message of `data`, as one frame."""
    deflater = deflater or zlib.compressobj(wbits=-15)
    body = deflater.compress(data) + deflater.flush(zlib.Z_SYNC_FLUSH)
    return frame(0x2, body[:-4], rsv1=True)


async def test_a_large_compressed_message_is_inflated_over_turns_of_the_turn_bound() -> None:
    budget = HeldBytes(1 << 40)
    sock, _ = await opened(deflate=True, budget=budget)
    deflater = zlib.compressobj(wbits=-15)
    size = 8 * TURN_INFLATED_BYTES
    sock.data_received(b"".join(compressed(b"\0" * size, deflater) for _ in range(3)))
    # one callback inflated at most its bound (websockets inflated the whole 8 MiB at once)
    assert not sock.items and budget.total <= TURN_INFLATED_BYTES
    ticker = Ticker(sock)
    got = [await asyncio.wait_for(sock.next(), 30) for _ in range(3)]
    ticker.stop()
    assert got == [Message(False, b"\0" * size)] * 3
    # the other task ran between the turns: once per MiB inflated at least (after the first)
    assert len(set(ticker.seen)) >= 3 * 8 - 1


def close_codes(written: list[bytes]) -> list[int]:
    """The status codes of the (masked, short) close frames the proxy wrote upstream."""
    codes = []
    for w in written:
        if w[:1] == b"\x88" and len(w) >= 8:
            mask, payload = w[2:6], w[6:8]
            codes.append(
                struct.unpack("!H", bytes(x ^ y for x, y in zip(payload, mask[:2], strict=True)))[0]
            )
    return codes


@pytest.mark.parametrize("extra", [0, 1])
async def test_a_compressed_message_may_inflate_to_the_limit_and_not_one_byte_more(
    extra: int,
) -> None:
    limit = 3 * MIB + 5
    budget = HeldBytes(1 << 40)
    sock, transport = await opened(deflate=True, budget=budget, limit=limit)
    sock.data_received(compressed(b"z" * (limit + extra)) + frame(0x9, b"after"))
    await settle(sock)
    if extra:
        # the session ends: 1009 to the upstream, the relay sees the end (1009 to the client)
        assert sock.too_big and await sock.next() is None
        assert close_codes(transport.written) == [1009]
        assert transport.closing
    else:
        assert await sock.next() == Message(False, b"z" * limit)
        assert await sock.next() == Control("ping", b"after")
        assert not sock.too_big
    sock.release()
    assert budget.total == 0


async def test_not_deflate_ends_the_session_with_a_protocol_error() -> None:
    sock, transport = await opened(deflate=True)
    sock.data_received(frame(0x2, b"\xff\xff\xff not deflate", rsv1=True))
    await settle(sock)
    assert await sock.next() is None and not sock.too_big
    assert close_codes(transport.written) == [1002]


@pytest.mark.parametrize("room", [True, False])
async def test_past_the_cap_one_session_at_a_time_assembles_a_large_message(room: bool) -> None:
    size = 4 * MIB
    cap = 4 * size if room else 2 * MIB
    budget = HeldBytes(cap)
    a, _ = await opened(deflate=True, budget=budget)
    b, _ = await opened(deflate=True, budget=budget)
    a.data_received(compressed(b"a" * size))
    b.data_received(compressed(b"b" * size))
    await until(lambda: len(a.items) + len(b.items) == (2 if room else 1), "a message")
    await asyncio.sleep(0.2)  # (large messages are joined in a thread)
    await settle(a)
    await settle(b)
    # past the cap, the first past it completes its message; the other waits (past its first
    # MiB) until that message was taken: both are never inflated at once (before, each was
    # inflated whole in one call)
    assert sorted([len(a.items), len(b.items)]) == ([1, 1] if room else [0, 1])
    assert budget.peak <= (2 * (size + ITEM_OVERHEAD) if room else size + 2 * MIB + ITEM_OVERHEAD)
    first, second = (a, b) if a.items else (b, a)
    expected = Message(False, (b"a" if first is a else b"b") * size)
    assert await first.next() == expected
    taker = asyncio.ensure_future(first.next())  # its message was written: it holds nothing
    got = await asyncio.wait_for(second.next(), 30)
    assert got == Message(False, (b"b" if second is b else b"a") * size)
    taker.cancel()
    a.release()
    b.release()
    assert budget.total == 0 and budget.holder is None


@needs_sessions
async def test_an_upstream_that_stops_reading_stops_the_proxy_reading_its_client(
    wsup, proxied, logs
) -> None:
    up, _ = wsup
    count, size = 64, 1024 * 1024
    gate = asyncio.Event()
    received: list[bytes] = []

    async def script(ws: Any, request: Any) -> None:
        await gate.wait()  # reads nothing until the test says so
        async for msg in ws:
            received.append(msg.data)
            if len(received) == count:
                break

    up.script = script
    base, _ = await proxied()
    ws = await session(base)
    sent = 0

    async def send_all() -> None:
        nonlocal sent
        for i in range(count):
            await ws.send_bytes(numbered(i, size))
            sent += 1

    sender_task = asyncio.ensure_future(send_all())
    try:
        last = -1
        while sent != last:  # until the client's sends stop getting anywhere
            last = sent
            await asyncio.sleep(0.5)
        # socket buffers and aiohttp's bounded reader hold some MiB, never the 64 sent
        assert sent < count
        gate.set()
        await asyncio.wait_for(sender_task, 30)
        await until(lambda: len(received) == count, "the upstream got every message")
    finally:
        sender_task.cancel()
        await ws.close()
        await ws.http.close()
    assert [data == numbered(i, size) for i, data in enumerate(received)] == [True] * count


@pytest.mark.parametrize("extra", [0, 1])
async def test_one_callback_handles_up_to_its_frame_bound_and_not_one_more(extra: int) -> None:
    sock, transport = await opened()
    turns = sock.turns
    sock.data_received(frame(0x9, b"p") * (MAX_EVENTS_PER_TURN + extra))
    assert len(sock.items) == MAX_EVENTS_PER_TURN
    assert sock.turns == turns + 1
    assert transport.reading is (extra == 0)  # one frame left: the socket waits for it
    await settle(sock)
    assert len(sock.items) == MAX_EVENTS_PER_TURN + extra
    assert sock.turns == turns + 1 + extra and transport.reading


@pytest.mark.parametrize("short", [1, 0])
async def test_one_callback_inflates_up_to_its_byte_bound_then_stops(
    short: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    bound = 64 * 1024  # under the queue's bound, so that only the turn's bound stops it
    monkeypatch.setattr(ws_upstream, "TURN_INFLATED_BYTES", bound)
    sock, _ = await opened(deflate=True)
    deflater = zlib.compressobj(wbits=-15)
    wire = b""
    for size in (bound - short, 1):
        body = deflater.compress(b"i" * size) + deflater.flush(zlib.Z_SYNC_FLUSH)
        wire += frame(0x2, body[:-4], rsv1=True)
    sock.data_received(wire)
    # one byte short of the bound, the next message comes in the same callback; at it, later
    assert len(sock.items) == (2 if short else 1)
    await settle(sock)
    assert [await sock.next(), await sock.next()] == [
        Message(False, b"i" * (bound - short)),
        Message(False, b"i"),
    ]


@needs_sessions
@pytest.mark.parametrize("extra", [0, 1])
async def test_a_message_over_the_judged_size_is_relayed_and_not_parsed(
    extra: int, wsup, proxied, logs, monkeypatch: pytest.MonkeyPatch
) -> None:
    bound = 4096  # (4 MiB by default)
    monkeypatch.setattr(websocket, "MAX_JUDGED_BYTES", bound)
    up, _ = wsup
    head = b'{"type":"response.created","response":{"id":"resp_1"}}'
    message = head + b" " * (bound + extra - len(head))

    async def script(ws: Any, request: Any) -> None:
        await ws.send_str(message.decode())
        await ws.close()

    up.script = script
    base, _ = await proxied()
    ws = await session(base)
    try:
        got = await asyncio.wait_for(ws.receive(), 30)
    finally:
        await ws.close()
        await ws.http.close()
    assert got.data == message.decode()
    [record] = await logs.wait_sessions()
    # at the bound the message opened a turn; one byte over, it was counted, not parsed
    assert record["anomalies"].get("message_not_judged", 0) == extra
    assert record["turns"] == 1 - extra
    assert record["bytes"]["upstream"] == len(message)


@pytest.mark.parametrize("extra", [0, 1])
async def test_sessions_together_handle_their_share_per_loop_iteration_then_wait(
    extra: int,
) -> None:
    k, payload = 4, 100
    budget = HeldBytes(cap=1 << 40, share=k * (payload + ITEM_OVERHEAD) + extra)
    (a, _), (b, _) = await opened(budget=budget), await opened(budget=budget)
    await asyncio.sleep(0)  # a new loop iteration: nothing spent yet
    a.data_received(frame(0x2, b"a" * payload) * (2 * k))
    b.data_received(frame(0x2, b"b"))
    # the share spent at its value; one byte more, one more frame in the same iteration
    assert len(a.items) == k + extra
    assert not b.items  # another session's turn waits for the next iteration
    await settle(a)
    await settle(b)
    assert len(a.items) == 2 * k and len(b.items) == 1
    a.abort()
    b.abort()


@pytest.fixture
def no_cyclic_gc() -> Any:
    """The proxy collects cycles rarely (server.GC_THRESHOLDS): what a cycle keeps stays."""
    was = gc.isenabled()
    gc.collect()  # (what earlier tests left in cycles)
    gc.disable()
    yield
    if was:
        gc.enable()


@needs_sessions
async def test_a_client_that_leaves_mid_write_leaves_no_message_behind(
    wsup, proxied, logs, no_cyclic_gc
) -> None:
    up, _ = wsup
    size = 256 * 1024 + 4  # a size nothing else in the test process has
    sent = [numbered(i, size) for i in range(64)]  # the upstream's own copies

    async def script(ws: Any, request: Any) -> None:
        for data in sent:
            await ws.send_bytes(data)

    up.script = script
    base, state = await proxied()
    # a raw socket, so that no message is parsed (and kept) on the client's side
    url = URL(base)
    loop = asyncio.get_running_loop()
    with small_window(socket.getaddrinfo(url.host, url.port, type=socket.SOCK_STREAM)[0]) as sock:
        sock.setblocking(False)
        await loop.sock_connect(sock, (url.host, url.port))
        key = base64.b64encode(b"0123456789abcdef").decode()
        await loop.sock_sendall(
            sock,
            f"GET /v1/realtime HTTP/1.1\r\nHost: {url.host}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode(),
        )
        assert (await loop.sock_recv(sock, 12)) == b"HTTP/1.1 101"
        # the client reads no more: messages are queued, one is being written to it
        await until(lambda: state.ws_held.peak > MAX_QUEUED_BYTES, "the queue filled")
    # gone without a close frame, mid-write
    [record] = await logs.wait_sessions()
    assert record["end_reason"] == "client_disconnected"
    await until(lambda: not state.sessions, "the session ended")
    mine = {id(b) for b in sent}
    held = [
        type(o).__name__
        for o in gc.get_objects()
        for r in gc.get_referents(o)
        if type(r) is bytes and len(r) == size and id(r) not in mine
    ]
    assert held == []
    assert state.ws_held.total == 0


async def raw_session(base: str) -> socket.socket:
    """A WebSocket client on a raw socket, upgraded and then left alone."""
    url = URL(base)
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setblocking(False)
    await loop.sock_connect(sock, (url.host, url.port))
    key = base64.b64encode(os.urandom(16)).decode()
    await loop.sock_sendall(
        sock,
        f"GET /v1/realtime HTTP/1.1\r\nHost: {url.host}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n".encode(),
    )
    assert (await loop.sock_recv(sock, 12)) == b"HTTP/1.1 101"
    return sock


@needs_sessions
async def test_sessions_whose_clients_leave_together_are_recorded_over_many_loop_iterations(
    wsup, proxied, logs, monkeypatch
) -> None:
    """Clients that leave in one go: their sessions' records are built a few per loop
    iteration (shell/pacing.py), as HTTP records are, other tasks running between them. All
    in one iteration, 200 sessions that ended together held the loop ~20 ms (bench.fairness
    ws-slow-clients, traced)."""
    up, _ = wsup

    async def script(ws: Any, request: Any) -> None:
        async for _msg in ws:
            pass

    up.script = script
    base, state = await proxied()
    iterations = 0

    async def count() -> None:
        nonlocal iterations
        while True:
            iterations += 1
            await asyncio.sleep(0)

    recorded: list[int] = []
    record = websocket._session_record

    def counted(*args: Any) -> None:
        recorded.append(iterations)
        record(*args)

    monkeypatch.setattr(websocket, "_session_record", counted)
    n = 100
    socks = [await raw_session(base) for _ in range(n)]
    ticker = asyncio.ensure_future(count())
    try:
        await until(lambda: len(state.sessions) == n, "every session open")
        for sock in socks:  # one step of this task: the proxy sees them all leave at once
            sock.close()
        records = await logs.wait_sessions(n)
    finally:
        ticker.cancel()
        for sock in socks:
            sock.close()
    assert len(records) == len(recorded) == n
    assert {r["end_reason"] for r in records} == {"client_disconnected"}
    per_iteration = collections.Counter(recorded)
    assert max(per_iteration.values()) <= MOST_PER_ITERATION  # never all of them at once
    assert len(per_iteration) >= n // MOST_PER_ITERATION + 1
