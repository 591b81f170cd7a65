"""The proxy end to end against a scripted upstream: bytes, timing, and one record each."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json

import aiohttp
import pytest

from tests.integration.fake_upstream import Close, Reset, Script, Send, Sleep, WaitFor
from tests.streams import chat_chunk, random_split, sse

CHAT_PATH = "/v1/chat/completions"


COMPLETE = sse(chat_chunk("Hello, "), chat_chunk("世界"), chat_chunk(finish="stop"), "[DONE]")


async def wait_for_records(logs, n: int = 1) -> list[dict]:
    return await logs.wait(n)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_bytes_pass_through_identically(relay_mode, upstream, make_proxy, logs, seed) -> None:
    fake, _ = upstream
    fake.script(CHAT_PATH, Script([Send(c) for c in random_split(COMPLETE, seed, 9)]))
    client = await make_proxy()
    resp = await client.post(CHAT_PATH, json={"model": "gpt-x", "stream": True})
    body = await resp.read()
    assert hashlib.sha256(body).hexdigest() == hashlib.sha256(COMPLETE).hexdigest()
    assert resp.headers["X-Accel-Buffering"] == "no"
    assert resp.headers["Cache-Control"] == "no-cache"
    [record] = await wait_for_records(logs)
    assert record["request_id"] == resp.headers["x-sseproxy-request-id"]
    assert (record["state"], record["finish_reason"], record["model"]) == (
        "completed",
        "stop",
        "gpt-x",
    )
    assert record["level"] == "info"
    assert record["stream"] is True
    assert record["bytes"] == len(COMPLETE)
    assert (
        record["ttft_ms"] is not None
        and record["ttfb_ms"] <= record["ttft_ms"] <= record["duration_ms"]
    )


async def test_gzip_passes_compressed_and_is_analysed(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    packed = gzip.compress(COMPLETE)
    headers = {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}
    fake.script(CHAT_PATH, Script([Send(c) for c in random_split(packed, 5, 9)], headers=headers))
    client = await make_proxy()
    resp = await client.post(CHAT_PATH, json={}, auto_decompress=False)
    assert await resp.read() == packed
    [record] = await wait_for_records(logs)
    assert (record["state"], record["text_chars"]) == ("completed", 9)


async def test_no_buffering_client_sees_event_one_while_upstream_waits(
    relay_mode, upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    seen_first = asyncio.Event()
    first = sse(chat_chunk("one"))
    rest = sse(chat_chunk(finish="stop"), "[DONE]")
    fake.script(CHAT_PATH, Script([Send(first), WaitFor(seen_first), Send(rest)]))
    client = await make_proxy()
    resp = await client.post(CHAT_PATH, json={})
    got = b""
    while len(got) < len(first):  # upstream is blocked until we have event 1
        got += await resp.content.readany()
    assert got == first
    seen_first.set()
    assert got + await resp.read() == first + rest
    [record] = await wait_for_records(logs)
    assert record["state"] == "completed"


async def test_upstream_close_mid_stream_breaks_the_client(
    relay_mode, upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    partial = sse(chat_chunk("Hel")) + b'data: {"id":"c1","cho'
    fake.script(CHAT_PATH, Script([Send(partial), Close()]))
    client = await make_proxy()
    resp = await client.post(CHAT_PATH, json={})
    got = b""
    with pytest.raises(aiohttp.ClientPayloadError):
        async for chunk in resp.content.iter_any():
            got += chunk
    assert got == partial
    [record] = await wait_for_records(logs)
    assert record["state"] == "interrupted"
    assert record["interruption"] == {"reason": "upstream_closed", "partial_event_bytes": 21}
    assert record["last_event"] == "chunk"
    assert record["level"] == "error"


async def test_upstream_reset_mid_stream(relay_mode, upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script(CHAT_PATH, Script([Send(sse(chat_chunk("Hel"))), Sleep(0.2), Reset()]))
    client = await make_proxy()
    resp = await client.post(CHAT_PATH, json={})
    with pytest.raises(aiohttp.ClientPayloadError):
        await resp.read()
    [record] = await wait_for_records(logs)
    assert record["state"] == "interrupted"
    assert record["interruption"]["reason"] == "upstream_reset"
    # The silence before the reset: measured from the first chunk's delivery to the client,
    # so the proxy's own milliseconds of delivering it (more on a loaded machine) are not in
    # it; it is the upstream's 200 ms less those, never the whole request's duration.
    assert 100 <= record["max_gap_ms"] <= record["duration_ms"]


async def test_clean_http_end_without_terminal_is_still_interrupted(
    upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    fake.script(CHAT_PATH, Script([Send(sse(chat_chunk("Hel")))]))
    client = await make_proxy()
    resp = await client.post(CHAT_PATH, json={})
    assert await resp.read() == sse(chat_chunk("Hel"))  # HTTP ended properly: so do we
    [record] = await wait_for_records(logs)
    assert (record["state"], record["interruption"]["reason"]) == ("interrupted", "upstream_closed")


async def test_idle_timeout_cuts_a_silent_stream(relay_mode, upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script(CHAT_PATH, Script([Send(sse(chat_chunk("Hel"))), Sleep(5)]))
    client = await make_proxy(idle_timeout=0.3)
    resp = await client.post(CHAT_PATH, json={})
    with pytest.raises(aiohttp.ClientPayloadError):
        await resp.read()
    [record] = await wait_for_records(logs)
    assert (record["state"], record["interruption"]["reason"]) == ("interrupted", "idle_timeout")
    assert record["max_gap_ms"] >= 300


async def test_keepalive_comments_are_bytes_and_keep_the_stream_alive(
    upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    steps = [Send(sse(chat_chunk("a")))]
    steps += [step for _ in range(6) for step in (Sleep(0.2), Send(b": keep-alive\n\n"))]
    steps += [Send(sse(chat_chunk(finish="stop"), "[DONE]"))]
    fake.script(CHAT_PATH, Script(steps))
    client = await make_proxy(idle_timeout=0.9)  # < the 1.2 s without content, > each gap
    resp = await client.post(CHAT_PATH, json={})
    await resp.read()
    [record] = await wait_for_records(logs)
    assert record["state"] == "completed"
    assert record["comments"] == 6
    # silence between content deltas, keep-alives aside: 6 x 0.2 s as sent, less the jitter of
    # when the first delta arrived; beyond the idle timeout either way
    assert record["content_gap_ms"] >= 1100
    assert record["max_gap_ms"] < 900


async def test_client_disconnect_closes_upstream_at_once(
    relay_mode, upstream, make_proxy, logs
) -> None:
    fake, _ = upstream
    never = asyncio.Event()
    fake.script(CHAT_PATH, Script([Send(sse(chat_chunk("Hel"))), WaitFor(never)]))
    client = await make_proxy()
    resp = await client.post(CHAT_PATH, json={})
    await resp.content.readany()
    resp.close()  # the app gives up mid-stream
    await asyncio.wait_for(fake.disconnected[CHAT_PATH].wait(), 5)
    [record] = await wait_for_records(logs)
    assert (record["state"], record["interruption"]["reason"]) == (
        "cancelled",
        "client_disconnected",
    )
    assert record["level"] == "warning"


async def test_client_leaving_after_terminal_stays_completed(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    never = asyncio.Event()
    fake.script(CHAT_PATH, Script([Send(COMPLETE), WaitFor(never)]))
    client = await make_proxy()
    resp = await client.post(CHAT_PATH, json={})
    got = b""
    while len(got) < len(COMPLETE):
        got += await resp.content.readany()
    resp.close()
    await asyncio.wait_for(fake.disconnected[CHAT_PATH].wait(), 5)
    [record] = await wait_for_records(logs)
    assert record["state"] == "completed"


async def test_non_2xx_is_forwarded_untouched(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    body = json.dumps(
        {
            "error": {
                "message": "Rate limit reached",
                "type": "tokens",
                "code": "rate_limit_exceeded",
            }
        }
    ).encode()
    fake.script(
        CHAT_PATH,
        Script(
            [Send(body)],
            status=429,
            headers={"Content-Type": "application/json", "x-request-id": "req_9"},
        ),
    )
    client = await make_proxy()
    resp = await client.post(CHAT_PATH, json={})
    assert resp.status == 429
    assert await resp.read() == body
    [record] = await wait_for_records(logs)
    assert (record["state"], record["status"], record["upstream_request_id"]) == (
        "http_error",
        429,
        "req_9",
    )
    assert record["error"]["code"] == "rate_limit_exceeded"
    assert len(fake.seen) == 1  # never retried


async def test_unreachable_upstream_is_a_502_naming_the_cause(
    make_proxy, logs, unused_tcp_port
) -> None:
    client = await make_proxy(upstream=f"http://127.0.0.1:{unused_tcp_port}")
    resp = await client.post(CHAT_PATH, json={})
    assert resp.status == 502
    error = (await resp.json())["error"]
    assert error["type"] == "sseproxy_upstream_unreachable"
    assert "onnect" in error["message"]
    [record] = await wait_for_records(logs)
    assert (record["state"], record["interruption"]["reason"]) == (
        "http_error",
        "upstream_unreachable",
    )


async def test_reset_before_headers_is_a_502(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script(CHAT_PATH, Script(reset_before_headers=True))
    client = await make_proxy()
    resp = await client.post(CHAT_PATH, json={})
    assert resp.status == 502
    [record] = await wait_for_records(logs)
    assert record["state"] == "http_error"


async def test_non_streamed_json_gets_a_verdict(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    body = b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"content":"Hi"},"finish_reason":"length"}]}'
    fake.script(
        CHAT_PATH,
        Script([Send(body)], headers={"Content-Type": "application/json"}, content_length=True),
    )
    client = await make_proxy()
    resp = await client.post(CHAT_PATH, json={"stream": False})
    assert await resp.read() == body
    assert resp.headers["Content-Length"] == str(len(body))
    [record] = await wait_for_records(logs)
    assert (record["state"], record["finish_reason"], record["stream"]) == (
        "incomplete",
        "length",
        False,
    )


async def test_request_forwarding_headers_and_body(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script(CHAT_PATH, Script([Send(COMPLETE)]))
    client = await make_proxy()
    payload = b'{"model": "m",  "stream": true}'
    resp = await client.post(
        CHAT_PATH + "?api-version=1",
        data=payload,
        headers={
            "Authorization": "Bearer sk-test-123456789",
            "Connection": "keep-alive, X-Hop",
            "X-Hop": "drop me",
            "Keep-Alive": "timeout=5",
            "X-Custom": "kept",
            "Content-Type": "application/json",
        },
    )
    await resp.read()
    [seen] = fake.seen
    assert seen.body == payload
    assert seen.path_qs == CHAT_PATH + "?api-version=1"
    assert seen.headers["Authorization"] == "Bearer sk-test-123456789"
    assert seen.headers["X-Custom"] == "kept"
    assert "X-Hop" not in seen.headers and "Keep-Alive" not in seen.headers
    assert seen.headers["Host"].startswith("127.0.0.1:")


async def test_secrets_never_reach_the_log(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    path = "/v1beta/models/gemini-x:streamGenerateContent"
    fake.script(
        path,
        Script(
            [
                Send(
                    b'data: {"error": {"code": 400, "message": "bad key AIzaSyA1234567890123456789012345", "status": "INVALID_ARGUMENT"}}\n\n'
                )
            ]
        ),
    )
    client = await make_proxy()
    secrets = [
        "sk-secret-abcdefgh",
        "anthropic-secret-xyz",
        "azure-secret-1",
        "AIzaSyA1234567890123456789012345",
        "cookie-secret",
        "query-secret",
    ]
    resp = await client.post(
        path + "?alt=sse&key=query-secret",
        json={"api_key": "body-secret-123", "contents": []},
        headers={
            "Authorization": f"Bearer {secrets[0]}",
            "x-api-key": secrets[1],
            "api-key": secrets[2],
            "x-goog-api-key": secrets[3],
            "Cookie": f"session={secrets[4]}",
        },
    )
    await resp.read()
    [record] = await wait_for_records(logs)
    assert record["path"].startswith(path + "?alt=sse&key=")
    everything = "\n".join(logs.lines())
    for secret in [*secrets, "body-secret-123"]:
        assert secret not in everything


async def test_healthz(make_proxy) -> None:
    client = await make_proxy()
    resp = await client.get("/_sseproxy/healthz")
    body = await resp.json()
    assert resp.status == 200
    assert set(body) >= {"version", "uptime_s", "active_streams"}


async def test_unmatched_route_is_404_listing_routes(make_proxy, logs) -> None:
    client = await make_proxy(upstream="")
    resp = await client.post("/nowhere", json={})
    assert resp.status == 404
    body = await resp.json()
    assert "openai" in [r["name"] for r in body["error"]["routes"]]
    [record] = await wait_for_records(logs)
    assert (record["state"], record["status"]) == ("http_error", 404)


async def test_request_body_limit(make_proxy, logs) -> None:
    client = await make_proxy(max_request_body_bytes=100)
    resp = await client.post(CHAT_PATH, data=b"x" * 1000)
    assert resp.status == 413
    assert (await resp.json())["error"]["type"] == "sseproxy_request_too_large"
