"""The upstream connection protocol, fed bytes with a fake transport: how a response ends
(decided from parser facts and the connection's loss, never from exception text), when the
body reaches the receiver, and when the connection may carry another request."""

from __future__ import annotations

import asyncio
import errno

import pytest

from sseproxy.core import EndReason
from sseproxy.shell.upstream import Framing, UpstreamEnd, UpstreamFailed, UpstreamResponse
from sseproxy.shell.upstream.connection import PoolStats, UpstreamConnection


class FakeTransport(asyncio.Transport):
    def __init__(self, protocol: UpstreamConnection) -> None:
        super().__init__()
        self.protocol = protocol
        self.written = b""
        self.paused = False
        self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        if not self.aborted:
            self.aborted = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)


class Receiver:
    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.ends: list[UpstreamEnd] = []

    def on_body(self, chunk: bytes) -> None:
        self.body.append(chunk)

    def on_end(self, end: UpstreamEnd) -> None:
        self.ends.append(end)


class Setup:
    def __init__(self) -> None:
        self.stats = PoolStats()
        self.conn = UpstreamConnection(asyncio.get_running_loop(), self.stats)
        self.transport = FakeTransport(self.conn)
        self.conn.connection_made(self.transport)
        self.released: list[bool] = []
        self.conn.on_done = lambda conn, reusable: self.released.append(reusable)
        self.receiver = Receiver()

    async def respond(self, *reads: bytes, method: str = "GET") -> UpstreamResponse:
        exchange = self.conn.start(b"REQ", self.receiver, no_body=method == "HEAD")
        for data in reads:
            self.conn.data_received(data)
        head = await exchange.head
        return UpstreamResponse(exchange, head)


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_body_that_came_with_the_head_reaches_the_receiver_only_after_the_head() -> None:
    s = Setup()
    exchange = s.conn.start(b"REQ", s.receiver, no_body=False)
    s.conn.data_received(HEAD + b"5\r\nhello\r\n")
    assert exchange.head.done() and s.receiver.body == []  # the relay sets up first
    await exchange.head
    await settle()
    assert s.receiver.body == [b"hello"]
    s.conn.data_received(b"0\r\n\r\n")
    assert s.receiver.ends == [UpstreamEnd(complete=True, reason=EndReason.UPSTREAM_CLOSED)]
    assert s.released == [True] and s.transport.written == b"REQ"


async def test_a_response_paused_before_its_first_body_gets_it_on_resume() -> None:
    s = Setup()
    exchange = s.conn.start(b"REQ", s.receiver, no_body=False)
    s.conn.data_received(HEAD + b"5\r\nhello\r\n")
    response = UpstreamResponse(exchange, await exchange.head)
    response.pause_reading()
    s.conn.data_received(b"0\r\n\r\n")  # a read already under way
    await settle()
    assert s.receiver.body == [] and s.transport.paused
    response.resume_reading()
    await settle()
    assert s.receiver.body == [b"hello"] and s.receiver.ends[0].complete
    assert response.ended == s.receiver.ends[0] and not s.transport.paused


class PausingReceiver(Receiver):
    """A relay that pauses its upstream at its first body piece (its client holds too much)."""

    def __init__(self) -> None:
        super().__init__()
        self.response: UpstreamResponse | None = None

    def on_body(self, chunk: bytes) -> None:
        super().on_body(chunk)
        assert self.response is not None
        self.response.pause_reading()


async def test_reads_held_before_the_relay_took_them_stop_at_its_pause_and_follow_on_resume() -> (
    None
):
    """uvloop (libuv) reads a readable socket up to 32 times in one poll: several reads may be
    held before the relay takes the response. A relay that pauses at the first gets nothing
    more until it resumes (it counts what it holds against the per-client mark and the proxy's
    cap; delivering all of them held 80 MB for 50 stalled clients under a 4 MiB cap)."""
    s = Setup()
    receiver = PausingReceiver()
    exchange = s.conn.start(b"REQ", receiver, no_body=False)
    s.conn.data_received(HEAD + b"5\r\nhello\r\n")
    response = receiver.response = UpstreamResponse(exchange, await exchange.head)
    response.pause_reading()
    for piece in (b"5\r\nwor", b"ld\r\n", b"1\r\n!\r\n", b"0\r\n\r\n"):
        s.conn.data_received(piece)  # reads under way
    resumes = 0
    while not receiver.ends and resumes < 10:
        before = len(receiver.body)
        response.resume_reading()
        await settle()
        resumes += 1
        assert len(receiver.body) - before <= 1  # one held read per resume: it paused again
    assert resumes == 5  # the four held reads, one at a time, then the end
    assert b"".join(receiver.body) == b"helloworld!" and receiver.ends[0].complete
    assert not s.transport.paused  # back in the pool, reading: a stray byte is seen at once


async def test_a_read_that_comes_while_the_relay_has_not_taken_the_head_pauses_the_socket() -> None:
    """While reads are held (the relay has not taken the response yet) the socket is paused
    after each: a kernel buffer that filled meanwhile is not read whole into memory (uvloop
    reads up to 32 times per poll: 300 waiting responses held 1.6 GB in bench.fairness)."""
    s = Setup()
    exchange = s.conn.start(b"REQ", s.receiver, no_body=False)
    s.conn.data_received(HEAD + b"5\r\nhello\r\n")
    s.conn.data_received(b"5\r\nworld\r\n")
    assert s.transport.paused and s.receiver.body == []
    await exchange.head
    await settle()
    assert s.receiver.body == [b"hello", b"world"] and not s.transport.paused


@pytest.mark.parametrize(
    "exc", [ConnectionResetError(errno.ECONNRESET, "reset"), BrokenPipeError(errno.EPIPE, "pipe")]
)
async def test_a_reset_mid_body_is_upstream_reset(exc: OSError) -> None:
    s = Setup()
    await s.respond(HEAD + b"5\r\nhello\r\n")
    await settle()
    s.conn.connection_lost(exc)
    (end,) = s.receiver.ends
    assert (end.complete, end.reason) == (False, EndReason.UPSTREAM_RESET)
    assert s.released == [False]


async def test_a_clean_close_mid_chunked_is_upstream_closed_and_incomplete() -> None:
    s = Setup()
    await s.respond(HEAD + b"5\r\nhello\r\n")
    await settle()
    s.conn.connection_lost(None)
    (end,) = s.receiver.ends
    assert (end.complete, end.reason) == (False, EndReason.UPSTREAM_CLOSED)
    assert "before the body's end" in end.cause


async def test_the_close_of_a_close_delimited_body_is_its_complete_end() -> None:
    s = Setup()
    await s.respond(b"HTTP/1.0 200 OK\r\n\r\ndata: a\n\n")
    await settle()
    s.conn.connection_lost(None)
    assert s.receiver.body == [b"data: a\n\n"]
    assert s.receiver.ends == [UpstreamEnd(complete=True, reason=EndReason.UPSTREAM_CLOSED)]
    assert s.released == [False]  # ended by the close: nothing to reuse


async def test_a_framing_error_mid_body_ends_it_as_a_protocol_error_and_closes() -> None:
    s = Setup()
    await s.respond(HEAD + b"5\r\nhello")
    await settle()
    s.conn.data_received(b"X\r\n")
    (end,) = s.receiver.ends
    assert (end.complete, end.reason) == (False, EndReason.UPSTREAM_PROTOCOL_ERROR)
    assert s.transport.aborted and s.released == [False]


@pytest.mark.parametrize(
    "wire,reason",
    [
        (b"HTTP/1.1 101 Switching\r\nupgrade: h2c\r\n\r\n", EndReason.UPSTREAM_PROTOCOL_ERROR),
        (b"HTTP/1.1 200 OK\r\nx: \x01\r\n\r\n", EndReason.UPSTREAM_PROTOCOL_ERROR),
        (b"NOT HTTP\r\n\r\n", EndReason.UPSTREAM_PROTOCOL_ERROR),
    ],
)
async def test_a_refused_head_fails_the_request_before_any_byte(
    wire: bytes, reason: EndReason
) -> None:
    s = Setup()
    with pytest.raises(UpstreamFailed) as failed:
        await s.respond(wire)
    assert failed.value.reason is reason
    assert s.receiver.body == [] and s.receiver.ends == [] and s.transport.aborted


@pytest.mark.parametrize(
    "exc,reason",
    [(None, EndReason.UPSTREAM_CLOSED), (ConnectionResetError(), EndReason.UPSTREAM_RESET)],
)
async def test_a_connection_lost_before_the_head_fails_the_request(
    exc: Exception | None, reason: EndReason
) -> None:
    s = Setup()
    exchange = s.conn.start(b"REQ", s.receiver, no_body=False)
    s.conn.data_received(b"HTTP/1.1 200 OK\r\n")
    s.conn.connection_lost(exc)
    with pytest.raises(UpstreamFailed) as failed:
        await exchange.head
    assert failed.value.reason is reason and s.receiver.ends == []


@pytest.mark.parametrize(
    "wire,method",
    [
        (b"HTTP/1.1 204 No Content\r\ncontent-length: 4\r\n\r\n", "GET"),
        (b"HTTP/1.1 304 Not Modified\r\n\r\n", "GET"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n", "HEAD"),
    ],
)
async def test_body_bytes_after_a_bodiless_response_poison_its_connection(
    wire: bytes, method: str
) -> None:
    s = Setup()
    await s.respond(wire + b"late", method=method)
    await settle()
    (end,) = s.receiver.ends
    assert end.complete and end.bytes_after_end == 4 and s.receiver.body == []
    assert s.released == [False] and s.transport.aborted
    assert s.stats.poisoned == 1 and s.stats.bytes_after_response == 4


async def test_a_bodiless_response_alone_leaves_its_connection_reusable() -> None:
    s = Setup()
    await s.respond(b"HTTP/1.1 204 No Content\r\n\r\n")
    await settle()
    assert s.receiver.ends[0].complete and s.released == [True] and s.conn.usable


async def test_the_response_says_its_head() -> None:
    s = Setup()
    response = await s.respond(
        b"HTTP/1.1 201 Made\r\nX-Id: a\r\nx-id: b\r\ncontent-length: 0\r\n\r\n"
    )
    assert (response.status, response.reason, response.version) == (201, "Made", (1, 1))
    assert response.raw_headers == ((b"X-Id", b"a"), (b"x-id", b"b"), (b"content-length", b"0"))
    assert response.headers.getall("X-ID") == ["a", "b"]
    assert response.framing is Framing.NONE


async def test_any_byte_on_an_idle_connection_poisons_it() -> None:
    s = Setup()
    await s.respond(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    await settle()
    assert s.released == [True] and s.conn.usable
    s.conn.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nno")
    assert not s.conn.usable and s.transport.aborted
    assert s.stats.bytes_after_response == len(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nno")


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n",
        b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n",
    ],
)
async def test_a_response_that_closes_is_never_reused(head: bytes) -> None:
    s = Setup()
    await s.respond(head + b"ok")
    await settle()
    assert s.receiver.ends[0].complete and s.released == [False]


async def test_abort_ends_once_with_its_reason_and_closes() -> None:
    s = Setup()
    response = await s.respond(HEAD + b"5\r\nhello\r\n")
    await settle()
    response.abort(EndReason.CLIENT_DISCONNECTED, "client left")
    response.abort(EndReason.IDLE_TIMEOUT)
    s.conn.connection_lost(None)
    assert s.receiver.ends == [
        UpstreamEnd(complete=False, reason=EndReason.CLIENT_DISCONNECTED, cause="client left")
    ]
    assert s.transport.aborted and s.released == [False]


async def test_a_swapped_receiver_gets_the_body() -> None:
    s = Setup()
    response = await s.respond(HEAD + b"5\r\nhello\r\n")
    other = Receiver()
    response.set_receiver(other)
    await settle()
    s.conn.data_received(b"0\r\n\r\n")
    assert other.body == [b"hello"] and other.ends[0].complete and s.receiver.body == []
