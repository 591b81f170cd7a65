"""A request body is bounded the same whether it arrived whole before the handler ran (read
without waiting) or arrives while the proxy reads it (read under `request_timeout`)."""

from __future__ import annotations

import asyncio

from sseproxy.shell.app import STATE
from tests.integration.fake_upstream import Script, Send
from tests.integration.test_bounds_shell import COMPLETE, PATH, split_response, until

CHUNKED_HEAD = (
    f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    "Transfer-Encoding: chunked\r\n\r\n"
).encode()


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def answer(reader: asyncio.StreamReader) -> int:
    async with asyncio.timeout(10):
        data = await reader.read(65536)
    return split_response(data)[0]


async def test_a_body_arriving_in_pieces_is_bounded_as_it_arrives(make_proxy, logs) -> None:
    client = await make_proxy(max_request_body_bytes=100)
    state = client.app[STATE]
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(CHUNKED_HEAD + chunk(b"x" * 60))
    await until(lambda: state.body_bytes == 60, "the proxy holds the first piece")
    writer.write(chunk(b"x" * 41) + b"0\r\n\r\n")  # one byte over
    assert await answer(reader) == 413
    writer.close()
    [record] = await logs.wait(1)
    assert record["status"] == 413
    await until(lambda: state.body_bytes == 0, "everything given back")


async def test_a_body_that_arrived_whole_is_bounded_in_total(make_proxy, logs) -> None:
    client = await make_proxy(max_total_request_body_bytes=100)
    state = client.app[STATE]
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(CHUNKED_HEAD + chunk(b" " * 101) + b"0\r\n\r\n")  # no Content-Length
    assert await answer(reader) == 503
    writer.close()
    [record] = await logs.wait(1)
    assert record["error"]["type"] == "sseproxy_overloaded"
    assert state.body_bytes == 0


async def test_a_body_that_arrived_whole_is_forwarded_as_it_was(upstream, make_proxy) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(COMPLETE)]))
    client = await make_proxy(max_request_body_bytes=100)
    body = b'{"stream": true, "pad": "' + b"p" * 73 + b'"}'  # exactly the limit
    assert len(body) == 100
    resp = await client.post(PATH, data=body)
    assert (resp.status, await resp.read()) == (200, COMPLETE)
    [seen] = fake.seen
    assert seen.body == body
