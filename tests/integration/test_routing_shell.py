"""The shell forwards the client's path as the raw bytes it sent (with --upstream too), and a
request that already passed through this proxy is refused (508) instead of looping.
(Routes and strip_prefix: test_routing.py.)"""

from __future__ import annotations

import json

import aiohttp

from sseproxy.config import load
from sseproxy.shell.app import create_app
from tests.integration.conftest import raw_exchange
from tests.integration.fake_upstream import Script, Send

BODY = b'data: {"x": 1}\n\n'


async def get_raw(port: int, target: str) -> bytes:
    return await raw_exchange(
        port, f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    )


async def test_the_path_is_forwarded_as_the_raw_bytes_the_client_sent(upstream, make_proxy) -> None:
    fake, _ = upstream
    fake.script("*", Script([Send(BODY)]))
    client = await make_proxy()
    answer = await get_raw(client.server.port, "/v1/x%3Fkey=SECRET/a%2Fb/%2541?alt=sse")
    assert answer.startswith(b"HTTP/1.1 200")
    [seen] = fake.seen
    assert seen.raw_path == "/v1/x%3Fkey=SECRET/a%2Fb/%2541?alt=sse"  # no %3F became a query


async def test_a_request_that_loops_back_to_this_proxy_is_508(
    aiohttp_server, logs, unused_tcp_port
) -> None:
    own = f"http://127.0.0.1:{unused_tcp_port}"
    settings = load(None, {}, {"upstream": own, "max_concurrent_streams": 5})
    await aiohttp_server(create_app(settings), port=unused_tcp_port)
    async with aiohttp.ClientSession() as session, session.post(own + "/v1/x", json={}) as resp:
        assert resp.status == 508  # the second pass refused it; the first forwarded that
        assert json.loads(await resp.read())["error"]["type"] == "sseproxy_loop_detected"
    records = await logs.wait(2)
    assert [r["status"] for r in records] == [508, 508]
    inner, outer = records
    assert inner["error"]["type"] == "sseproxy_loop_detected"
    assert resp.headers["x-sseproxy-request-id"] == outer["request_id"]
