"""What the owned upstream leg knows, seen through the whole proxy (client -> sseproxy ->
upstream): a chunk that overruns its size line across two writes is a break the client sees
and the record names; a body written after a bodiless status never answers the next request."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest

from tests.integration.fake_upstream import AwaitClose, Send, Sleep
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"
HELLO = sse(chat_chunk("Hello"))
COMPLETE = sse(chat_chunk("Hello"), chat_chunk(finish="stop"), "[DONE]")
CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def answer(text: str) -> bytes:
    """A whole keep-alive response: a complete chat stream saying `text`."""
    body = sse(chat_chunk(text), chat_chunk(finish="stop"), "[DONE]")
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
    return head % len(body) + body


async def fetch(url: str) -> tuple[int, bytes, BaseException | None]:
    status, got = 0, b""
    try:
        async with (
            aiohttp.ClientSession() as session,
            asyncio.timeout(10),  # a hang fails the test instead of stalling it
            session.post(url, json={}, auto_decompress=False) as resp,
        ):
            status = resp.status
            async for data in resp.content.iter_any():
                got += data
    except aiohttp.ClientError as exc:
        return status, got, exc
    return status, got, None


# The size line's bytes end one write; the next starts where its CRLF must be, so the
# parser sees the overrun only then, after the client had the chunk: mid-stream, or right
# after the stream's own end ([DONE]), where the client has all the content and still raises.
OVERRUNS = {
    "mid_stream": (HELLO, b"hello"),
    "after_done": (HELLO, COMPLETE[len(HELLO) :]),
}


@pytest.mark.parametrize("case", OVERRUNS)
async def test_a_chunk_longer_than_its_size_line_split_before_the_overrun_is_a_break(
    case: str, wire, proxy_server, logs
) -> None:
    first, second = OVERRUNS[case]
    wire.steps = [
        Send(CHUNKED_HEAD + chunk(first) + b"%x\r\n" % len(second) + second),
        Sleep(0.05),
        Send(b"EXTRA\r\n0\r\n\r\n"),
        AwaitClose(),
    ]
    url = await proxy_server(wire.url)
    status, got, error = await fetch(url + PATH)
    assert (status, got) == (200, first + second)
    assert isinstance(error, aiohttp.ClientPayloadError)  # the client sees the break
    [record] = await logs.wait(1)
    assert record["state"] == "interrupted"  # the previous leg said completed after [DONE]
    assert record["interruption"]["reason"] == "upstream_protocol_error"
    assert record["http_complete"] is False


class KeepAliveUpstream:
    """Answers every request on a connection in turn. The first connection's first answer is
    `status` with a Content-Length and body bytes a bodiless status must not have (`gap` s
    after the head); every other answer is `fresh <connection>.<request>`."""

    def __init__(self, status: int, gap: float) -> None:
        self.status, self.gap = status, gap
        self.connections = 0
        self.heads: list[bytes] = []
        self.first_closed = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> KeepAliveUpstream:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        n = self.connections
        stray = answer("stale")  # a whole response: reused, it would answer the next request
        try:
            for i in range(3):
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                if n == 1 and i == 0:
                    writer.write(
                        b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n" % (self.status, len(stray))
                    )
                    if self.gap:
                        await writer.drain()
                        await asyncio.sleep(self.gap)
                    writer.write(stray)
                else:
                    writer.write(answer(f"fresh {n}.{i}"))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # the test's loop is ending
        finally:
            if n == 1:
                self.first_closed.set()
            writer.close()


@pytest.mark.parametrize("status", [204, 304])
@pytest.mark.parametrize("gap", [0.0, 0.05], ids=["with_the_head", "50ms_later"])
async def test_body_bytes_after_a_bodiless_status_never_answer_the_next_request(
    status: int, gap: float, proxy_server, logs
) -> None:
    async with KeepAliveUpstream(status, gap) as upstream:
        url = await proxy_server(upstream.url)
        first = await fetch(url + PATH)
        assert first == (status, b"", None)
        # The stray bytes poison the pooled connection: the proxy closes it.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(upstream.first_closed.wait(), 5)
        second = await fetch(url + PATH)
        fresh = answer("fresh 2.0").partition(b"\r\n\r\n")[2]
        assert second == (200, fresh, None)  # its own answer, on a new connection
        assert upstream.first_closed.is_set() and upstream.connections == 2
    first_record, second_record = await logs.wait(2)
    assert (first_record["status"], first_record["no_body_expected"]) == (status, True)
    # Bytes in the same read as the head are the response's own: the record names them.
    # Bytes that come after it ended reach an idle pooled connection: they poison it (the
    # pool counts them), but the record, written already, cannot name them.
    assert ("bytes_after_response" in first_record["anomalies"]) is (gap == 0)
    assert (second_record["status"], second_record["state"]) == (200, "completed")
