"""Who answered: every record says whether the response came from the proxy itself or from the
upstream (`answered_by`), or that none was sent; and no response without a body due, nor any
answer of the proxy's own, counts `empty_body`."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from sseproxy.config import load
from sseproxy.shell.app import STATE, create_app
from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
from tests.integration.conftest import raw_exchange
from tests.integration.fake_upstream import AwaitClose, Script, Send
from tests.integration.test_inspector import snapshot_of
from tests.integration.ws_upstream import WsUpstream

DONE = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
PATH = "/v1/chat/completions"


async def one(logs: Any) -> dict[str, Any]:
    [record] = await logs.wait(1)
    return record


async def test_claude_codes_startup_head_gets_the_proxys_404_without_empty_body(
    aiohttp_client, logs
) -> None:
    """The default routes: `HEAD /` matches none."""
    client = await aiohttp_client(create_app(load(None, {}, {})))
    response = await client.head("/")
    assert response.status == 404
    record = await one(logs)
    assert (record["status"], record["state"], record["answered_by"]) == (
        404,
        "http_error",
        "proxy",
    )
    assert record["error"]["type"] == "sseproxy_no_route"
    assert record["no_body_expected"] is True
    assert "empty_body" not in record["anomalies"]


@pytest.mark.parametrize(
    ("method", "status", "no_body"),
    [("HEAD", 200, True), ("GET", 204, True), ("GET", 304, True), ("GET", 200, False)],
)
async def test_empty_body_only_where_a_body_was_due(
    upstream, make_proxy, logs, method: str, status: int, no_body: bool
) -> None:
    fake, _ = upstream
    fake.script("*", Script(status=status, headers={"Content-Type": "application/json"}))
    client = await make_proxy()
    response = await client.request(method, PATH)
    assert response.status == status
    await response.read()
    record = await one(logs)
    assert record["answered_by"] == "upstream"
    assert ("empty_body" in record["anomalies"]) is not no_body  # the control: a GET 200
    assert record.get("no_body_expected", False) is no_body


async def test_an_upstream_answer_is_the_upstreams_whatever_its_status(
    upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    fake.script("/ok", Script([Send(DONE)]))
    fake.script("/bad", Script([Send(b'{"error":{"message":"no"}}')], status=500))
    client = await make_proxy()
    for path in ("/ok", "/bad"):
        response = await client.post(path, json={"stream": True})
        await response.read()
    records = await logs.wait(2)
    assert [(r["status"], r["answered_by"]) for r in records] == [
        (200, "upstream"),
        (500, "upstream"),
    ]
    assert records[1]["state"] == "http_error"


async def test_the_proxys_own_answers_are_the_proxys(upstream, make_proxy, logs) -> None:
    """Each refusal path: bad target (the guard), loop, body too large, overloaded, forbidden
    drill header, no route (admission)."""
    client = await make_proxy(max_request_body_bytes=10, max_total_request_body_bytes=10)
    asks = [
        ("GET", "/%0a", {}, b""),  # a decoded newline: bad target
        ("POST", PATH, {"Via": f"1.1 sseproxy-{client.app[STATE].instance_id}"}, b""),
        ("POST", PATH, {}, b"x" * 11),  # one byte over max_request_body_bytes
        ("POST", PATH, {"x-sseproxy-inject": "cut-after=1"}, b"{}"),  # not allowed
    ]
    for method, path, headers, body in asks:
        response = await client.request(method, path, headers=headers, data=body)
        await response.read()
    records = await logs.wait(len(asks))
    assert [(r["status"], r["answered_by"], r["interruption"]) for r in records] == [
        (400, "proxy", None),
        (508, "proxy", None),
        (413, "proxy", None),
        (403, "proxy", None),
    ]
    assert all("empty_body" not in r["anomalies"] for r in records)


async def test_no_route_and_overload_are_the_proxys(aiohttp_client, logs) -> None:
    settings = load(None, {}, {"max_total_request_body_bytes": 4})
    client = await aiohttp_client(create_app(settings))
    for path, body in (("/nowhere", b""), (PATH, b"12345")):
        response = await client.post(path, data=body)
        await response.read()
    records = await logs.wait(2)
    assert [(r["status"], r["answered_by"]) for r in records] == [(404, "proxy"), (503, "proxy")]


async def test_an_unreachable_upstream_is_the_proxys_502_with_its_cut(make_proxy, logs) -> None:
    port = await free_port()
    client = await make_proxy(upstream=f"http://127.0.0.1:{port}")
    response = await client.post(PATH, json={})
    assert response.status == 502
    record = await one(logs)
    assert (record["answered_by"], record["interruption"]["reason"]) == (
        "proxy",
        "upstream_unreachable",
    )
    assert "empty_body" not in record["anomalies"]


async def free_port() -> int:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port: int = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    return port


async def test_nothing_answered_is_null(wire, proxy_server, logs) -> None:
    """The client leaves before the upstream's head: no response was sent."""
    wire.steps = [AwaitClose()]  # no head: the proxy gives up when the client leaves
    url = await proxy_server(wire.url)
    async with aiohttp.ClientSession() as http:
        with pytest.raises(asyncio.TimeoutError):
            await http.post(url + PATH, json={}, timeout=aiohttp.ClientTimeout(total=0.3))
    record = await one(logs)
    assert (record["status"], record["answered_by"]) == (None, None)
    assert record["interruption"]["reason"] == "client_disconnected"
    assert "empty_body" not in record["anomalies"]


@pytest.mark.skipif(not SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14")
async def test_websocket_answers_the_upstreams_a_refused_handshake_the_proxys(
    aiohttp_server, logs
) -> None:
    from aiohttp import web

    up = WsUpstream()
    upstream_server = await aiohttp_server(up.app())
    settings = load(None, {}, {"upstream": str(upstream_server.make_url("")).rstrip("/")})
    server = await aiohttp_server(create_app(settings))
    base = str(server.make_url("")).rstrip("/")
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(base + "/v1/realtime", protocols=("realtime",)) as ws:
            # the upstream echoes: these open and end one turn
            await ws.send_str('{"type":"response.created","response":{"id":"r1"}}')
            await ws.send_str(
                '{"type":"response.done","response":{"id":"r1","status":"completed"}}'
            )
            await ws.receive()
            await ws.receive()
        up.reject = lambda: web.Response(status=401, text="no key")
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await http.ws_connect(base + "/v1/realtime")
    await logs.wait_sessions(1)
    answer = await raw_exchange(
        server.port,
        b"GET /v1/realtime HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        b"Connection: upgrade\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 400")
    records = [r for r in logs.all_records() if r["event"] == "request.finished"]
    assert [(r["status"], r.get("turn"), r["answered_by"]) for r in records] == [
        (101, 1, "upstream"),
        (401, None, "upstream"),
        (400, None, "proxy"),
    ]


async def test_the_inspector_keeps_the_proxys_refusals_apart_from_upstream_errors(
    upstream, make_proxy, logs
) -> None:
    """Its rows say who answered and whether it was a refusal; the page counts `refused` rows
    as `proxy_refused`, not `http_error`."""
    fake, _ = upstream
    fake.script("*", Script([Send(b'{"error":{"message":"busy"}}')], status=503))
    client = await make_proxy()
    upstream_error = await client.post(PATH, json={})
    refusal = await client.get("/%0a")
    assert (upstream_error.status, refusal.status) == (503, 400)
    records = await logs.wait(2)
    html = await (await client.get("/_sseproxy/")).text()
    rows = {r["request_id"]: r for r in snapshot_of(html)}
    shown = [rows[r["request_id"]] for r in records]
    got = [(row["state"], row["answered_by"], row["refused"]) for row in shown]
    assert got == [("http_error", "upstream", False), ("http_error", "proxy", True)]
    assert 'const stateOf = s => s.refused ? "proxy_refused" : s.state;' in html
    assert "counts[stateOf(s)]" in html
