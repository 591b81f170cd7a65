"""Upstream trailers through the whole proxy: recorded always; forwarded, as the last chunk's
trailer section, only to a client that sent `TE: trailers`, only the fields the upstream
announced in `Trailer` and may travel after the content, and only where the accelerator can
end a response (the documented aiohttp path has no trailer API)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest

from sseproxy.shell.upstream import LIMITS
from tests.integration.fake_upstream import AwaitClose, Close, Reset, Send
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"
# How long a kept-alive connection is watched for the proxy's close.
KEEP_ALIVE_PROBE_S = 0.2
EVENTS = sse(chat_chunk("Hello"), chat_chunk(finish="stop"), "[DONE]")
USAGE = b'X-Usage: {"output_tokens": 5}\r\n'
CHECKSUM = b"x-checksum: abc\r\n"
# Announced and sent, but never to travel after the content (RFC 9110 6.5.1) or hop-by-hop.
FORBIDDEN = (
    b"Authorization: Bearer sk-trailer-secret\r\n"
    b"Set-Cookie: s=1\r\n"
    b"Transfer-Encoding: gzip\r\n"
    b"Connection: close\r\n"
    b"X-Sseproxy-Request-Id: forged\r\n"
)
ANNOUNCED = (
    b"Trailer: X-Usage, x-checksum, Authorization, Set-Cookie, Transfer-Encoding, Connection,"
    b" X-Sseproxy-Request-Id\r\n"
)


def chunked_response(trailers: bytes, *, announce: bytes = ANNOUNCED) -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        + announce
        + b"\r\n"
    )
    return head + b"%x\r\n%b\r\n" % (len(EVENTS), EVENTS) + b"0\r\n" + trailers + b"\r\n"


def request(te: bytes | None, extra: bytes = b"") -> bytes:
    if te is not None:
        extra += b"TE: " + te + b"\r\n"
    return (
        b"POST %s HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n" % PATH.encode()
        + extra
        + b"Content-Length: 2\r\n\r\n{}"
    )


@dataclass
class Seen:
    """One response as a keep-alive client read it by its framing, and what followed."""

    head: list[bytes]  # lower-cased lines
    data: bytes  # the chunks' data
    end: bytes  # the trailer section after the last chunk's size line, its empty line included
    closed: bool  # the proxy closed the connection after the response


async def read_chunked(reader: asyncio.StreamReader) -> Seen:
    head = await reader.readuntil(b"\r\n\r\n")
    data = b""
    while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
        data += (await reader.readexactly(size + 2))[:-2]
    end = b""
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
        end += line
    try:
        closed = await asyncio.wait_for(reader.read(1), KEEP_ALIVE_PROBE_S) == b""
    except TimeoutError:
        closed = False
    return Seen(head.lower().split(b"\r\n"), data, end + b"\r\n", closed)


async def exchange(
    wire: Any,
    proxy_server: Any,
    upstream: bytes,
    te: bytes | None,
    extra: bytes = b"",
    then: Any = None,
) -> Seen:
    wire.steps = [Send(upstream), then or AwaitClose()]
    url = await proxy_server(wire.url, allow_inject=bool(extra))
    reader, writer = await asyncio.open_connection("127.0.0.1", urlsplit(url).port)
    try:
        writer.write(request(te, extra))
        async with asyncio.timeout(10):
            return await read_chunked(reader)
    finally:
        writer.close()


async def test_announced_trailers_reach_a_client_that_sent_te_trailers_byte_exact(
    relay_mode: str, wire: Any, proxy_server: Any, logs: Any
) -> None:
    unannounced = b"X-Late: 1\r\n"
    upstream = chunked_response(USAGE + FORBIDDEN + CHECKSUM + unannounced)
    seen = await exchange(wire, proxy_server, upstream, b"trailers")
    assert seen.data == EVENTS
    [record] = await logs.wait(1)
    assert (record["state"], record["http_complete"]) == ("completed", True)
    assert set(record["trailers"]) == {
        "x-usage",
        "x-checksum",
        "authorization",
        "set-cookie",
        "transfer-encoding",
        "connection",
        "x-sseproxy-request-id",
        "x-late",
    }
    assert record["trailers"]["x-usage"] == '{"output_tokens": 5}'
    assert "sk-trailer-secret" not in json.dumps(record)
    if relay_mode == "accelerated":
        # Exactly the two announced fields that may travel, as sent; the head said both, and
        # that the connection closes after them (aiohttp's own end must not follow).
        assert seen.end == USAGE + CHECKSUM + b"\r\n"
        assert b"trailer: x-usage, x-checksum" in seen.head
        assert b"connection: close" in seen.head and seen.closed
        assert record["trailers_forwarded"] == ["x-usage", "x-checksum"]
    else:  # the documented path: recorded, not forwarded; the connection stays
        assert seen.end == b"\r\n"
        assert not any(line.startswith(b"trailer:") for line in seen.head)
        assert not seen.closed
        assert record["trailers_forwarded"] == []


@pytest.mark.parametrize("te", [None, b"gzip", b"trailersx"])
async def test_without_te_trailers_the_client_gets_none_and_the_record_has_them(
    relay_mode: str, te: bytes | None, wire: Any, proxy_server: Any, logs: Any
) -> None:
    seen = await exchange(wire, proxy_server, chunked_response(USAGE), te)
    assert (seen.data, seen.end, seen.closed) == (EVENTS, b"\r\n", False)
    assert not any(line.startswith(b"trailer:") for line in seen.head)
    [record] = await logs.wait(1)
    assert record["state"] == "completed"
    assert (record["trailers"], record["trailers_forwarded"]) == (
        {"x-usage": '{"output_tokens": 5}'},
        [],
    )


async def test_trailers_no_trailer_field_announced_are_recorded_not_forwarded(
    wire: Any, proxy_server: Any, logs: Any
) -> None:
    upstream = chunked_response(USAGE, announce=b"")
    seen = await exchange(wire, proxy_server, upstream, b"trailers")
    assert (seen.data, seen.end, seen.closed) == (EVENTS, b"\r\n", False)
    [record] = await logs.wait(1)
    assert (record["trailers"], record["trailers_forwarded"]) == (
        {"x-usage": '{"output_tokens": 5}'},
        [],
    )


async def test_a_drill_rewrites_the_body_so_its_response_carries_no_trailers(
    relay_mode: str, wire: Any, proxy_server: Any, logs: Any
) -> None:
    drill = b"x-sseproxy-inject: rechunk=1\r\n"
    seen = await exchange(wire, proxy_server, chunked_response(USAGE), b"trailers", drill)
    assert (seen.data, seen.end, seen.closed) == (EVENTS, b"\r\n", False)
    assert not any(line.startswith(b"trailer:") for line in seen.head)
    [record] = await logs.wait(1)
    assert record["trailers_forwarded"] == [] and record["injected"] == ["rechunk=1"]


async def test_a_body_without_trailers_records_none(
    relay_mode: str, wire: Any, proxy_server: Any, logs: Any
) -> None:
    seen = await exchange(wire, proxy_server, chunked_response(b""), b"trailers")
    assert (seen.data, seen.end) == (EVENTS, b"\r\n")  # announced, none came: the last chunk
    [record] = await logs.wait(1)
    assert record["state"] == "completed"
    assert "trailers" not in record and "trailers_forwarded" not in record


@pytest.mark.parametrize(
    ("trailers", "complete"),
    [
        (b"x-n: 1\r\n" * LIMITS.trailer_fields, True),
        (b"x-n: 1\r\n" * (LIMITS.trailer_fields + 1), False),
        (b"x-big: " + b"v" * (LIMITS.trailer_bytes - len(b"x-big")) + b"\r\n", True),
        (b"x-big: " + b"v" * (LIMITS.trailer_bytes - len(b"x-big") + 1) + b"\r\n", False),
    ],
    ids=["fields-at-bound", "fields-over", "bytes-at-bound", "bytes-over"],
)
async def test_trailers_are_bounded_in_count_and_size(
    trailers: bytes, complete: bool, wire: Any, proxy_server: Any, logs: Any
) -> None:
    announce = b"Trailer: x-n, x-big\r\n"
    upstream = chunked_response(trailers, announce=announce)
    if complete:
        seen = await exchange(wire, proxy_server, upstream, b"trailers")
        assert seen.data == EVENTS
    else:  # the client's transfer is broken, as the record says: no last chunk
        with pytest.raises(asyncio.IncompleteReadError):
            await exchange(wire, proxy_server, upstream, b"trailers")
    [record] = await logs.wait(1)
    assert record["http_complete"] is complete
    if complete:
        assert record["state"] == "completed" and len(record["trailers"]) == 1
    else:
        assert record["interruption"]["reason"] == "upstream_protocol_error"
        assert "trailers" not in record


@pytest.mark.parametrize("end", [Close(), Reset()], ids=["close", "reset"])
@pytest.mark.parametrize(
    "cut",
    [b"", b"X-Usage: 5\r\n", b"X-Usage: 5"],
    ids=["at-last-chunk", "after-a-field", "mid-field"],
)
async def test_an_upstream_cut_in_the_trailer_section_reaches_the_client_as_a_cut(
    relay_mode: str, wire: Any, proxy_server: Any, logs: Any, cut: bytes, end: Any
) -> None:
    # the last chunk came, its trailer section never ended: the response is not complete,
    # and the client must not be handed a clean end it could take for one
    whole = chunked_response(USAGE)
    upstream = whole[: whole.rindex(b"0\r\n") + 3] + cut
    with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
        await exchange(wire, proxy_server, upstream, b"trailers", then=end)
    [record] = await logs.wait(1)
    assert record["state"] == "interrupted"
    assert record["http_complete"] is False
    assert not record.get("trailers_forwarded")  # nothing went to the client as a trailer
