"""A hostile upstream, byte by byte: one response never reaches another request, a broken
framing ends the client's response at once, a head that cannot be forwarded faithfully is a
502 naming why, and whatever strings or numbers arrive, the record is written."""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp
import pytest

from tests.integration.fake_upstream import AwaitClose, Reset, Script, Send, Sleep
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"
HELLO = sse(chat_chunk("Hello"))
COMPLETE = sse(chat_chunk("Hello"), chat_chunk(finish="stop"), "[DONE]")


def response(body: bytes, *, status: bytes = b"200 OK", headers: bytes = b"") -> bytes:
    """A complete keep-alive HTTP/1.1 response with a Content-Length."""
    return (
        b"HTTP/1.1 " + status + b"\r\n" + headers + b"Content-Length: %d\r\n\r\n" % len(body) + body
    )


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


async def fetch(url: str, method: str = "POST") -> tuple[int, dict, bytes, BaseException | None]:
    got, status, headers = b"", 0, {}
    try:
        async with (
            aiohttp.ClientSession() as session,
            asyncio.timeout(10),  # a hang fails the test instead of stalling it
            session.request(method, url, json={}, auto_decompress=False) as resp,
        ):
            status, headers = resp.status, dict(resp.headers)
            async for data in resp.content.iter_any():
                got += data
    except aiohttp.ClientError as exc:
        return status, headers, got, exc
    return status, headers, got, None


async def test_a_late_second_response_never_reaches_the_next_request(
    wire, proxy_server, logs
) -> None:
    """11.1: the upstream answers, then writes a complete second response on the same
    kept-alive connection while it sits in the pool."""
    mine = response(b'"mine"', headers=b"Content-Type: application/json\r\n")
    stolen = response(b'"stolen"', headers=b"Content-Type: application/json\r\n")
    wire.steps = [Send(mine), Sleep(0.05), Send(stolen), AwaitClose()]
    url = await proxy_server(wire.url)
    async with aiohttp.ClientSession() as session:
        async with session.post(url + PATH, json={}) as resp:
            assert await resp.read() == b'"mine"'
        # The poisoned connection is closed by the proxy (the upstream sees it go).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wire.peer_closed.wait(), 5)
        async with session.post(url + PATH, json={}) as resp:
            assert await resp.read() == b'"mine"'  # its own answer, on a new connection
    assert wire.peer_closed.is_set()
    assert len(wire.heads) == 2
    assert [r["status"] for r in await logs.wait(2)] == [200, 200]


async def test_bytes_right_after_the_response_are_named_and_never_forwarded(
    wire, proxy_server, logs
) -> None:
    """A second response in the same read as the first one's end: the client gets its own
    body only, and the record names the stray bytes."""
    mine = response(COMPLETE, headers=b"Content-Type: text/event-stream\r\n")
    wire.steps = [Send(mine + response(b'"stolen"')), AwaitClose()]
    url = await proxy_server(wire.url)
    status, _, got, error = await fetch(url + PATH)
    assert (status, got, error) == (200, COMPLETE, None)
    [record] = await logs.wait(1)
    assert record["state"] == "completed" and record["http_complete"] is True
    assert record["anomalies"] == {"bytes_after_response": 1}


async def test_a_stray_body_after_204_does_not_poison_the_next_request(
    wire, proxy_server, logs
) -> None:
    wire.steps = [
        Send(b"HTTP/1.1 204 No Content\r\n\r\n"),
        Sleep(0.05),
        Send(b"STRAY"),
        AwaitClose(),
    ]
    url = await proxy_server(wire.url)
    first = await fetch(url + PATH)
    await asyncio.wait_for(wire.peer_closed.wait(), 5)
    second = await fetch(url + PATH)
    assert (first[0], first[2], second[0], second[2]) == (204, b"", 204, b"")
    records = await logs.wait(2)
    assert [(r["status"], r["state"]) for r in records] == [(204, "unconfirmed")] * 2
    assert all(r["no_body_expected"] and r["interruption"] is None for r in records)


async def test_a_framing_error_mid_body_ends_the_client_response_at_once(
    wire, proxy_server, logs
) -> None:
    """A chunk whose data is longer than its size line: named, and not the client's fault."""
    wire.steps = [
        Send(CHUNKED_HEAD + chunk(HELLO)),
        Sleep(0.05),
        Send(b"5\r\nhelloEXTRA\r\n0\r\n\r\n"),
        AwaitClose(),
    ]
    url = await proxy_server(wire.url, idle_timeout=600)
    status, headers, got, error = await fetch(url + PATH)
    assert status == 200 and got.startswith(HELLO)
    assert isinstance(error, aiohttp.ClientPayloadError)  # the client sees the break
    [record] = await logs.wait(1)
    assert record["interruption"]["reason"] == "upstream_protocol_error"
    assert record["http_complete"] is False
    assert record["request_id"] == headers["x-sseproxy-request-id"]


BAD_HEADS = {
    # The upstream leg's parser (llhttp) refuses a control character in a value itself, before
    # the head is whole, and names the fault rather than the field.
    "control_char_in_header": (b"HTTP/1.1 200 OK\r\nX-Ctl: a\x01b\r\n", "header value char"),
    "high_byte_in_header": (b"HTTP/1.1 200 OK\r\nX-Foo: caf\xe9\r\n", "X-Foo"),
    "non_utf8_content_type": (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/\xffevent\r\n",
        "Content-Type",
    ),
    "control_char_in_reason": (b"HTTP/1.1 200 O\x00K\r\n", "reason phrase"),
    "status_099": (b"HTTP/1.1 099 OK\r\n", "invalid status code 99"),
    "status_101_without_upgrade": (b"HTTP/1.1 101 Switching Protocols\r\n", "101"),
    "gzip_chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n", "gzip"),
}


@pytest.mark.parametrize("case", BAD_HEADS, ids=str)
async def test_a_head_that_cannot_be_forwarded_faithfully_is_a_502(
    case, wire, proxy_server, logs
) -> None:
    head, named = BAD_HEADS[case]
    body = b"2\r\nok\r\n0\r\n\r\n" if b"chunked" in head else b"Content-Length: 2\r\n\r\nok"
    if b"chunked" in head:
        head += b"\r\n"
    wire.steps = [Send(head + body), AwaitClose()]
    url = await proxy_server(wire.url)
    status, headers, got, error = await fetch(url + PATH)
    assert status == 502 and error is None
    assert json.loads(got)["error"]["type"] == "sseproxy_upstream_protocol_error"
    assert named in json.loads(got)["error"]["message"]
    await asyncio.wait_for(wire.peer_closed.wait(), 5)  # that connection is never reused
    [record] = await logs.wait(1)
    assert (record["status"], record["state"]) == (502, "http_error")
    assert record["interruption"]["reason"] == "upstream_protocol_error"
    assert record["request_id"] == headers["x-sseproxy-request-id"]


async def test_a_reset_after_accept_before_headers_is_upstream_reset(
    wire, proxy_server, logs
) -> None:
    wire.steps = [Reset()]
    url = await proxy_server(wire.url)
    status, headers, got, _ = await fetch(url + PATH)
    assert status == 502
    assert json.loads(got)["error"]["type"] == "sseproxy_upstream_reset"
    [record] = await logs.wait(1)
    assert record["interruption"]["reason"] == "upstream_reset"
    assert record["request_id"] == headers["x-sseproxy-request-id"]


async def test_head_is_recorded_as_a_response_without_body(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(COMPLETE)]))
    client = await make_proxy()
    resp = await client.head(PATH)
    assert resp.status == 200 and await resp.read() == b""
    [record] = await logs.wait(1)
    assert (record["state"], record["interruption"]) == ("unconfirmed", None)
    assert record["level"] == "warning"  # not the `interrupted` error it used to be


UNSERIALISABLE = {
    "lone_surrogate": b'data: {"id":"c1","model":"\\ud800","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
    "integer_over_64_bits": b'data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":123456789012345678901234567890,"completion_tokens":1}}\n\ndata: [DONE]\n\n',
    "negative_token_count": b'data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":-1,"completion_tokens":1}}\n\ndata: [DONE]\n\n',
}


@pytest.mark.parametrize("case", UNSERIALISABLE, ids=str)
async def test_whatever_the_upstream_sends_the_record_is_written_and_the_body_ends(
    case, wire, proxy_server, logs
) -> None:
    body = UNSERIALISABLE[case]
    wire.steps = [Send(CHUNKED_HEAD + chunk(body) + b"0\r\n\r\n"), AwaitClose()]
    url = await proxy_server(wire.url)
    status, _, got, error = await fetch(url + PATH)
    assert (status, got, error) == (200, body, None)  # every byte, and a clean end
    [record] = await logs.wait(1)
    assert record["state"] == "completed"
    if case == "lone_surrogate":
        assert record["response_model"] == "\ufffd"  # what JSON cannot carry is replaced
    if case == "integer_over_64_bits":
        assert record["usage"]["output_tokens"] == 1


async def test_an_early_hints_response_does_not_poison_the_connection(
    wire, proxy_server, logs
) -> None:
    """103 comes before the final response on the same connection: it is expected."""
    wire.steps = [
        Send(b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n"),
        Sleep(0.05),
        Send(CHUNKED_HEAD + chunk(COMPLETE) + b"0\r\n\r\n"),
        AwaitClose(),
    ]
    url = await proxy_server(wire.url)
    status, _, got, error = await fetch(url + PATH)
    assert (status, got, error) == (200, COMPLETE, None)
    [record] = await logs.wait(1)
    assert record["state"] == "completed"
