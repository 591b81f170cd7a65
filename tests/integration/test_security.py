"""Never an open proxy; the proxy's own endpoints stay private."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from sseproxy.capture.format import load_capture
from sseproxy.config import load
from sseproxy.shell.app import STATE, create_app
from tests.integration.fake_upstream import Script, Send
from tests.streams import chat_chunk, sse


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


# -- secrets (issue 11.5): nothing the proxy writes holds a credential --------------------------

GROQ = "gsk_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6kL9nP2rS5uV8xA1dG4"
XAI = "xai-Zq9Yw8Xv7Ut6Sr5Qp4On3Ml2Kj1Ih0GfEdCbA9z8y7x6w5v4u3t2s1r0"
CHAT = "/v1/chat/completions"


def error_json(key: str) -> bytes:
    error = {"message": f"Incorrect API key provided: {key}", "type": "invalid_request_error"}
    return json.dumps({"error": error}).encode()


ECHOES = {
    # a non-2xx error body, as OpenAI-compatible providers answer a bad key
    "groq-401": (GROQ, 401, "application/json", error_json(GROQ)),
    # an in-band error after 200, in the stream
    "xai-in-band": (
        XAI,
        200,
        "text/event-stream",
        sse(chat_chunk("Hi")) + b"data: " + error_json(XAI) + b"\n\n",
    ),
}


async def drained_capture(client, tmp_path: Path) -> tuple[str, bytes]:
    await client.app[STATE].captures.drain()
    [sidecar_path] = tmp_path.glob("*.json")
    _, body = load_capture(sidecar_path)
    return sidecar_path.read_text(), body


async def wait_record(logs) -> dict:
    for _ in range(500):
        if logs.records():
            return logs.records()[-1]
        await asyncio.sleep(0.01)
    raise AssertionError("no record")


@pytest.mark.parametrize("case", sorted(ECHOES))
async def test_an_upstream_echoing_the_key_leaks_it_nowhere(
    upstream, make_proxy, logs, tmp_path: Path, case: str
) -> None:
    fake, _ = upstream
    key, status, content_type, answer = ECHOES[case]
    fake.script(CHAT, Script([Send(answer)], status=status, headers={"Content-Type": content_type}))
    client = await make_proxy(capture_dir=str(tmp_path), keep_content=True)
    resp = await client.post(
        CHAT, json={"model": "m", "stream": True}, headers={"Authorization": f"Bearer {key}"}
    )
    got = await resp.read()
    assert resp.status == status and got == answer  # the client is told, key and all
    record = await wait_record(logs)
    assert record["error"]["message"] == "Incorrect API key provided: " + "*" * len(key)
    sidecar, body = await drained_capture(client, tmp_path)
    assert len(body) == len(got)
    assert body == got.replace(key.encode(), b"*" * len(key))
    request_id = resp.headers["x-sseproxy-request-id"]
    inspector = await (await client.get(f"/_sseproxy/streams/{request_id}")).text()
    assert json.loads(inspector)["error"]["message"].endswith("*" * 10)
    fragment = key[4:16]  # any 12 bytes of the key
    for written in (logs.stream.getvalue(), sidecar, body.decode(), inspector):
        assert fragment not in written


async def test_a_query_smuggled_into_the_path_is_redacted(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    fake.script("*", Script([Send(b"{}")], headers={"Content-Type": "application/json"}))
    client = await make_proxy(capture_dir=str(tmp_path))
    for target in ("/v1/x%3Fkey=SMUGGLED-SECRET-1", "/v1/x?alt=sse&key=QUERY-SECRET-22"):
        await (await client.get(target)).read()
    await logs.wait(2)
    paths = [r["path"] for r in logs.records()]
    assert paths == ["/v1/x%3Fkey=[redacted]", "/v1/x?alt=sse&key=[redacted]"]
    await client.app[STATE].captures.drain()
    written = logs.stream.getvalue() + "".join(p.read_text() for p in tmp_path.glob("*.json"))
    assert "SMUGGLED-SECRET-1" not in written and "QUERY-SECRET-22" not in written


async def test_query_values_named_like_secrets_are_redacted_in_the_record_inspector_and_capture(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    """A presigned URL's signature, a `?secret=`: kept out of all the proxy writes."""
    fake, _ = upstream
    fake.script("*", Script([Send(b"{}")], headers={"Content-Type": "application/json"}))
    client = await make_proxy(capture_dir=str(tmp_path))
    targets = {
        "/v1/x?secret=QUERY-SECRET-31": "/v1/x?secret=[redacted]",
        "/v1/x?X-Amz-Signature=QUERY-SECRET-32&a=1": "/v1/x?X-Amz-Signature=[redacted]&a=1",
        "/v1/x?sp=r&sig=QUERY-SECRET-33": "/v1/x?sp=r&sig=[redacted]",
    }
    ids = []
    for target in targets:
        resp = await client.get(target)
        await resp.read()
        ids.append(resp.headers["x-sseproxy-request-id"])
    await logs.wait(3)
    assert [r["path"] for r in logs.records()] == list(targets.values())
    views = [await (await client.get(f"/_sseproxy/streams/{i}")).text() for i in ids]
    assert [json.loads(v)["path"] for v in views] == list(targets.values())
    await client.app[STATE].captures.drain()
    written = logs.stream.getvalue() + "".join(p.read_text() for p in tmp_path.glob("*.json"))
    assert all(f"QUERY-SECRET-3{n}" not in written + "".join(views) for n in (1, 2, 3))


# -- values JSON cannot carry (issue 11.7): the record is written, the response ends well -------


async def test_values_json_cannot_carry_still_give_a_record_and_a_clean_end(
    make_proxy, logs
) -> None:
    body = (
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
        b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        # orjson refuses the lone surrogate: this event is parsed by the json module, whose
        # integers have no bound
        b'data: {"id":"c","model":"\\ud800","choices":[],"usage":{"prompt_tokens":3,'
        b'"completion_tokens":' + str(2**70).encode() + b',"total_tokens":5}}\n\n'
        b"data: [DONE]\n\n"
    )
    head = (
        # (A non-UTF-8 byte in a header is refused with a 502 now: test_hostile_upstream.py.)
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Request-Id: id-1\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    )

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(head + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        client = await make_proxy(upstream=f"http://127.0.0.1:{port}")
        resp = await client.get(CHAT)
        assert await resp.read() == body  # ended by its framing: no payload error
        record = await wait_record(logs)
    finally:
        server.close()
        await server.wait_closed()
    assert record["state"] == "completed"
    assert record["response_model"] == "\ufffd"
    assert record["usage"]["output_tokens"] == str(2**70)
    assert record["upstream_request_id"] == "id-1"
    view = await (await client.get(f"/_sseproxy/streams/{record['request_id']}")).json()
    assert view["state"] == "completed"  # the inspector entry was finished too


async def test_upstream_userinfo_stays_out_of_the_record(upstream, make_proxy, logs) -> None:
    fake, url = upstream
    fake.script("*", Script([Send(b"{}")], headers={"Content-Type": "application/json"}))
    client = await make_proxy(upstream=url.replace("://", "://route-user:route-pa55word@"))
    await (await client.get("/v1/models")).read()
    [record] = await logs.wait(1)
    assert record["upstream"] == url.replace("://", "://***@")
    assert "route-pa55word" not in logs.stream.getvalue()


async def test_the_span_carries_the_redacted_error(upstream, aiohttp_client, logs) -> None:
    pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from sseproxy.observe.tracing import Tracing

    fake, url = upstream
    key, status, content_type, answer = ECHOES["xai-in-band"]
    fake.script(CHAT, Script([Send(answer)], status=status, headers={"Content-Type": content_type}))
    exporter = InMemorySpanExporter()
    tracing = Tracing(exporter)
    client = await aiohttp_client(create_app(load(None, {}, {"upstream": url}), tracing=tracing))
    await (await client.post(CHAT, json={}, headers={"Authorization": f"Bearer {key}"})).read()
    await wait_record(logs)
    tracing.provider.force_flush()
    [span] = exporter.get_finished_spans()
    assert span.status.description == "Incorrect API key provided: " + "*" * len(key)


async def test_only_the_whole_admin_token_passes(aiohttp_client) -> None:
    app = create_app(load(None, {}, {"listen": "0.0.0.0:8790", "admin_token": "s3cret"}))
    client = await aiohttp_client(app)
    for header in ("Bearer s3cre", "Bearer s3cret2", "Basic s3cret", "s3cret"):
        resp = await client.get("/_sseproxy/anything", headers={"Authorization": header})
        assert resp.status == 403, header
    assert (await client.get("/_sseproxy/anything?token=s3cre")).status == 403
    assert (await client.get("/_sseproxy/anything?token=s3cret")).status == 404  # past the guard
