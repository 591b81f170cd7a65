"""Bounds against one bad client: the time to send a request, stream slots taken only once a
request was read, request body bytes across all requests in flight, and `Expect`."""

from __future__ import annotations

import asyncio
import json
import zlib

from sseproxy.shell.app import STATE
from tests.integration.fake_upstream import Script, Send
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"
COMPLETE = sse(chat_chunk("Hi"), chat_chunk(finish="stop"), "[DONE]")


def head(length: int, extra: str = "") -> bytes:
    return (
        f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{extra}\r\n"
    ).encode()


async def until(condition, what: str) -> None:
    """Wait for a state the proxy reaches by itself (a bounded wait, not a timing)."""
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.005)


def split_response(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head_, _, body = data.partition(b"\r\n\r\n")
    lines = head_.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


async def test_a_client_that_never_finishes_its_body_gets_408(make_proxy, logs) -> None:
    client = await make_proxy(request_timeout=0.3)
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(head(100) + b"{")  # 1 of 100 bytes, then silence
    async with asyncio.timeout(10):
        status, headers, _ = split_response(await reader.readuntil(b"\r\n\r\n"))
        body = await reader.readexactly(int(headers["content-length"]))
    writer.close()
    assert headers["connection"] == "close"
    assert status == 408
    assert json.loads(body)["error"]["type"] == "sseproxy_request_timeout"
    [record] = await logs.wait(1)
    assert (record["status"], record["state"]) == (408, "http_error")
    assert record["request_id"] == headers["x-sseproxy-request-id"]
    assert client.app[STATE].body_bytes == 0  # what it held is given back


async def test_a_stream_slot_is_taken_only_once_the_body_was_read(
    upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(COMPLETE)]))
    client = await make_proxy(max_concurrent_streams=1)
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(head(2) + b"{")  # holds a connection, half a body
    await writer.drain()
    resp = await client.post(PATH, json={})  # the only slot is still free
    assert (resp.status, await resp.read()) == (200, COMPLETE)
    writer.write(b"}")  # the slow one finishes, and is served in its turn
    async with asyncio.timeout(10):
        answer = await reader.readuntil(b"[DONE]\n\n")
    writer.close()
    assert split_response(answer)[0] == 200
    assert [r["status"] for r in await logs.wait(2)] == [200, 200]


async def test_request_bodies_in_flight_are_bounded_in_total(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(COMPLETE)]))
    client = await make_proxy(max_total_request_body_bytes=1000)
    state = client.app[STATE]
    _reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(head(900) + b" " * 600)
    await until(lambda: state.body_bytes == 600, "the proxy holds 600 body bytes")
    resp = await client.post(PATH, data=b" " * 401)  # 600 + 401 > 1000
    assert resp.status == 503
    assert (await resp.json())["error"]["type"] == "sseproxy_overloaded"
    resp = await client.post(PATH, data=b" " * 400)  # 600 + 400 fits
    assert (resp.status, await resp.read()) == (200, COMPLETE)
    writer.close()
    await until(lambda: state.body_bytes == 0, "everything given back")
    assert [r["status"] for r in await logs.wait(3)][:2] == [503, 200]


async def test_expect_100_continue_is_answered_here_and_never_forwarded(
    upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(COMPLETE)]))
    client = await make_proxy(idle_timeout=5)
    async with asyncio.timeout(10):
        resp = await client.post(PATH, data=b'{"stream": true}', expect100=True)
        assert (resp.status, await resp.read()) == (200, COMPLETE)
    [seen] = fake.seen
    assert "Expect" not in seen.headers
    assert seen.body == b'{"stream": true}'


async def test_one_byte_over_the_body_limit_is_413(make_proxy, logs) -> None:
    client = await make_proxy(max_request_body_bytes=100)
    resp = await client.post(PATH, data=b"x" * 101)
    assert resp.status == 413
    assert (await resp.json())["error"]["type"] == "sseproxy_request_too_large"
    assert "x-sseproxy-request-id" in resp.headers
    resp = await client.post(PATH, data=b"x" * 101, chunked=True)  # no Content-Length
    assert resp.status == 413
    assert [r["status"] for r in await logs.wait(2)] == [413, 413]


async def test_a_gzip_bomb_never_delays_the_clients_end(upstream, make_proxy, logs) -> None:
    """A small gzip body that expands to 100 MB: the client gets every compressed byte and the
    end of its response first; the analysis runs afterwards in slices, under its budget."""
    fake, _ = upstream
    event = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
    block = event * (1024 * 1024 // len(event))
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = b"".join([*(compressor.compress(block) for _ in range(100)), compressor.flush()])
    headers = {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}
    pieces = [Send(bomb[i : i + 16384]) for i in range(0, len(bomb), 16384)]
    fake.script(PATH, Script(pieces, headers=headers))
    client = await make_proxy()
    resp = await client.post(PATH, json={}, auto_decompress=False)
    assert await resp.read() == bomb  # the whole chunked body, its end included
    assert logs.records() == []  # ... while the analysis of the backlog was still going on
    # 64 MiB of events analysed: ~5 s on an idle 2-core machine, ~15 s on a loaded one.
    [record] = await logs.wait(1, timeout=40)
    assert (record["state"], record["http_complete"]) == ("unconfirmed", True)
    assert record["anomalies"]["analysis_budget_exceeded"] == 1
    assert record["bytes"] == len(bomb)
