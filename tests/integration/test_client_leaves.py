"""A client that leaves first: the record raises no alarm about bytes it did not wait for, and
a client that closes after the last byte did not leave at all. These tests pin the shell's
part of the rule (how `end` and `http_complete` are set when the client goes), whatever relay
carries the bytes."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator

import pytest

from sseproxy.config import load
from sseproxy.shell.app import create_app
from tests.integration.raw_upstream import Body, Pause, RawScript, RawUpstream
from tests.streams import chat_chunk, sse
from tests.unit.test_transport_truth import CHAT

CHAT_PATH = "/v1/chat/completions"
USAGE = {"id": "c1", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}
WITH_USAGE = b'{"stream":true,"stream_options":{"include_usage":true}}'


@pytest.fixture
async def raw() -> AsyncIterator[RawUpstream]:
    up = RawUpstream()
    await up.start()
    yield up
    await up.stop()


async def read_until(client, path: str, marker: bytes, body: bytes = b"{}") -> bytes:
    """Read the response until `marker`, then close the connection, as an SDK that stops
    at its end marker does."""
    got = b""
    headers = {"Content-Type": "application/json"}
    async with client.post(path, data=body, headers=headers) as response:
        while marker not in got:
            piece = await response.content.readany()
            assert piece, "the body ended before the marker"
            got += piece
        response.connection.transport.abort()  # leave now, without reading on
    return got


async def test_a_client_leaving_at_done_before_the_last_chunk_raises_no_alarm(
    raw, aiohttp_client, logs
) -> None:
    """openai-python's Chat iterator returns at `[DONE]` and closes before the last chunk:
    it saw no error, so the record says nothing went wrong."""
    whole = CHAT.decided + sse(USAGE, "[DONE]")
    raw.script = RawScript([Body(whole), Pause(1)])  # the last chunk comes after it left
    client = await aiohttp_client(create_app(load(None, {}, {"upstream": raw.url})))
    got = await read_until(client, CHAT_PATH, b"[DONE]", WITH_USAGE)
    assert got == whole
    record = (await logs.wait())[0]
    assert (record["state"], record["finish_reason"], record["http_complete"]) == (
        "completed",
        "stop",
        None,  # the proxy stopped reading before the last chunk: unknown, never false
    )
    assert (record["interruption"], record["anomalies"]) == (None, {})


async def test_a_client_leaving_after_the_finish_chunk_counts_no_usage_missing(
    raw, aiohttp_client, logs
) -> None:
    """The usage chunk comes after the finish_reason chunk; a client that left in between
    did not wait for it, so its absence is no finding."""
    raw.script = RawScript([Body(CHAT.decided), Pause(1), Body(sse(USAGE, "[DONE]"))])
    client = await aiohttp_client(create_app(load(None, {}, {"upstream": raw.url})))
    await read_until(client, CHAT_PATH, b'"finish_reason": "stop"', WITH_USAGE)
    record = (await logs.wait())[0]
    assert (record["state"], record["http_complete"]) == ("completed", None)
    assert record["interruption"]["reason"] == "client_disconnected"
    assert record["anomalies"] == {"client_left_before_end": 1}


def big_chat(deltas: int) -> bytes:
    """A Chat stream of `deltas` content chunks that gzip shrinks ~100 times."""
    return sse(*[chat_chunk("token ") for _ in range(deltas)], chat_chunk(finish="stop"), "[DONE]")


@pytest.mark.parametrize("deltas", [10, 60_000], ids=["small", "large_backlog"])
async def test_a_client_that_read_a_whole_compressed_body_did_not_leave(
    deltas: int, raw, aiohttp_server, logs
) -> None:
    """curl read every Content-Length byte of a gzip body (exit 0) and closed while the proxy
    was still analysing the decompressed backlog: that close is not the client leaving, and
    the analysis after the last byte changes nothing the client saw."""
    plain = big_chat(deltas)
    body = gzip.compress(plain)
    headers = {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}
    raw.script = RawScript([Body(body)], framing=f"length:{len(body)}", headers=headers)
    server = await aiohttp_server(create_app(load(None, {}, {"upstream": raw.url})))
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    head = await reader.readuntil(b"\r\n\r\n")
    assert b"Content-Length: %d" % len(body) in head
    got = await reader.readexactly(len(body))
    writer.transport.abort()  # every byte read: leave at once, as curl does
    assert gzip.decompress(got) == plain
    record = (await logs.wait())[0]
    assert (record["state"], record["http_complete"], record["interruption"]) == (
        "completed",
        True,
        None,
    )
    assert (record["anomalies"], record["events"], record["text_chars"]) == (
        {},
        deltas + 2,
        6 * deltas,
    )
    assert "events_delivered" not in record  # only for a client that left or a break


async def test_a_client_leaving_before_the_gzip_trailer_counts_no_truncated_body(
    raw, aiohttp_client, logs
) -> None:
    """The whole stream decompresses before the gzip trailer: a client that left at `[DONE]`
    did not wait for the trailer, so its absence is no finding."""
    body = gzip.compress(CHAT.whole)
    headers = {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}
    raw.script = RawScript([Body(body[:-8]), Pause(1), Body(body[-8:])], headers=headers)
    client = await aiohttp_client(create_app(load(None, {}, {"upstream": raw.url})))
    await read_until(client, CHAT_PATH, b"[DONE]")
    record = (await logs.wait())[0]
    assert (record["state"], record["http_complete"], record["anomalies"]) == (
        "completed",
        None,
        {},
    )
