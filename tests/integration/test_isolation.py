"""Before the upstream's headers: a timeout is a 504, a client that leaves is recorded as such
and its upstream connection closed; 204, 304 and redirects pass through as they are."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.integration.fake_upstream import AwaitClose, Script, Send, Sleep

PATH = "/v1/chat/completions"


async def test_upstream_headers_that_never_come_are_a_504(wire, proxy_server, logs) -> None:
    wire.steps = [Sleep(30)]
    url = await proxy_server(wire.url, idle_timeout=0.3)
    async with aiohttp.ClientSession() as session, session.post(url + PATH, json={}) as resp:
        assert resp.status == 504
        assert (await resp.json())["error"]["type"] == "sseproxy_upstream_timeout"
        request_id = resp.headers["x-sseproxy-request-id"]
    [record] = await logs.wait(1)
    assert (record["state"], record["interruption"]["reason"]) == ("http_error", "idle_timeout")
    assert record["request_id"] == request_id


async def test_a_client_leaving_before_upstream_headers_closes_the_upstream(
    wire, proxy_server, logs
) -> None:
    wire.steps = [AwaitClose()]  # the upstream accepts and never answers
    url = await proxy_server(wire.url)
    port = int(url.rsplit(":", 1)[1])
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}".encode())
    await writer.drain()
    async with asyncio.timeout(5):
        while not wire.heads:  # the request reached the upstream
            await asyncio.sleep(0.005)
    writer.transport.abort()
    await asyncio.wait_for(wire.peer_closed.wait(), 5)  # generation stops at once
    [record] = await logs.wait(1)
    assert (record["state"], record["interruption"]["reason"]) == (
        "cancelled",
        "client_disconnected",
    )
    assert record["status"] is None


@pytest.mark.parametrize(
    ("status", "headers", "state"),
    [
        (204, {}, "unconfirmed"),
        (304, {"ETag": '"x"'}, "http_error"),
        (302, {"Location": "https://elsewhere.example/next"}, "http_error"),
        (307, {"Location": "/v1/other"}, "http_error"),
    ],
)
async def test_bodiless_and_redirect_responses_pass_through_as_they_are(
    status, headers, state, upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([] if status in (204, 304) else [Send(b"moved")], status, headers))
    client = await make_proxy()
    resp = await client.post(PATH, json={}, allow_redirects=False)
    assert resp.status == status
    for name, value in headers.items():
        assert resp.headers[name] == value  # never followed, never rewritten
    await resp.read()
    assert len(fake.seen) == 1
    [record] = await logs.wait(1)
    assert (record["status"], record["state"]) == (status, state)
    assert record["interruption"] is None


async def test_a_clean_response_keeps_its_upstream_connection_for_the_next(
    upstream, make_proxy, logs
) -> None:
    """Isolation closes only poisoned connections: normal traffic still reuses the pool."""
    fake, _ = upstream
    fake.script(PATH, Script([Send(b'data: {"x": 1}\n\n')]))
    client = await make_proxy()
    for _ in range(3):
        resp = await client.post(PATH, json={})
        await resp.read()
        # Past the pool's quarantine: a connection is reused once no stray byte came after
        # its response for that long.
        await asyncio.sleep(0.02)
    assert len({seen.peer for seen in fake.seen}) == 1
