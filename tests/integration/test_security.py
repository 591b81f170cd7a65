"""Never an open proxy; the proxy's own endpoints stay private."""

from __future__ import annotations

import asyncio

from sseproxy.config import load
from sseproxy.proxy import create_app


async def raw_request(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(65536), 5)
    writer.close()
    return data


async def test_absolute_form_is_refused(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    client = await make_proxy()
    port = client.server.port
    answer = await raw_request(
        port, b"GET http://evil.example/v1/models HTTP/1.1\r\nHost: evil.example\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 400")
    assert fake.seen == []
    assert logs.records()[-1]["state"] == "http_error"


async def test_connect_is_refused(upstream, make_proxy) -> None:
    fake, _ = upstream
    client = await make_proxy()
    answer = await raw_request(
        client.server.port, b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n"
    )
    assert answer.split(b" ", 2)[1] in (b"405", b"400")
    assert fake.seen == []


async def test_host_header_never_chooses_the_upstream(upstream, make_proxy) -> None:
    fake, url = upstream
    from tests.integration.fake_upstream import Script, Send

    fake.script("/v1/models", Script([Send(b"{}")], headers={"Content-Type": "application/json"}))
    client = await make_proxy()
    resp = await client.get(
        "/v1/models", headers={"Host": "evil.example", "X-Forwarded-Host": "evil.example"}
    )
    assert resp.status == 200
    assert fake.seen[0].headers["Host"] == url.split("//")[1]


async def test_own_endpoints_need_a_token_beyond_loopback(aiohttp_client) -> None:
    app = create_app(load(None, {}, {"listen": "0.0.0.0:8790", "admin_token": "s3cret"}))
    client = await aiohttp_client(app)
    assert (await client.get("/_sseproxy/healthz")).status == 200
    assert (await client.get("/_sseproxy/anything")).status == 403
    authorised = await client.get("/_sseproxy/anything", headers={"Authorization": "Bearer s3cret"})
    assert authorised.status == 404  # past the guard: simply not an endpoint


async def test_own_endpoints_are_refused_beyond_loopback_without_a_token(aiohttp_client) -> None:
    client = await aiohttp_client(create_app(load(None, {}, {"listen": "0.0.0.0:8790"})))
    assert (await client.get("/_sseproxy/anything")).status == 403


async def test_too_many_streams_is_a_503_with_a_record(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    from tests.integration.fake_upstream import Script, Send, WaitFor

    release = asyncio.Event()
    fake.script(
        "/v1/chat/completions",
        Script([Send(b": hi\n\n"), WaitFor(release), Send(b"data: [DONE]\n\n")]),
    )
    client = await make_proxy(max_concurrent_streams=1)
    first = await client.post("/v1/chat/completions", json={})
    await first.content.readany()
    second = await client.post("/v1/chat/completions", json={})
    assert second.status == 503
    assert (await second.json())["error"]["type"] == "sseproxy_overloaded"
    release.set()
    await first.read()
    states = [r["status"] for r in logs.records()]
    assert 503 in states
