"""WebSocket sessions through the proxy, against a scripted WebSocket upstream."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType, web

from sseproxy.config import load
from sseproxy.shell.app import create_app
from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
from tests.integration.ws_upstream import WsUpstream

# Sessions need aiohttp 3.14 (exact text frames); on the floors' older aiohttp the proxy refuses
# them, which tests/integration/test_websocket_support.py checks.
pytestmark = pytest.mark.skipif(
    not SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14"
)


@pytest.fixture
async def wsup(aiohttp_server) -> tuple[WsUpstream, str]:
    up = WsUpstream()
    server = await aiohttp_server(up.app())
    return up, str(server.make_url("")).rstrip("/")


@pytest.fixture
def ws_proxy(aiohttp_server, logs, wsup) -> Any:
    async def make(**overrides: Any) -> str:
        settings = load(None, {}, {"upstream": wsup[1], **overrides})
        server = await aiohttp_server(create_app(settings))
        return str(server.make_url("")).rstrip("/")

    return make


async def test_messages_are_relayed_both_ways_in_order_text_as_its_bytes(
    wsup, ws_proxy, logs
) -> None:
    up, _ = wsup
    base = await ws_proxy()
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(
            base + "/v1/realtime?model=m",
            protocols=("realtime",),
            decode_text=False,
            autoping=False,
        ) as ws,
    ):
        await ws.send_str("héllo")
        await ws.send_bytes(b"\x00\xff")
        first = await ws.receive()
        second = await ws.receive()
        assert (first.type, first.data) == (WSMsgType.TEXT, "héllo".encode())
        assert (second.type, second.data) == (WSMsgType.BINARY, b"\x00\xff")
        assert ws.protocol == "realtime"
        assert ws._response.headers["x-codex-turn-state"] == "ts-1"
        session_id = ws._response.headers["x-sseproxy-request-id"]
    [session] = await logs.wait_sessions()
    assert session["session_id"] == session_id
    assert session["closed_by"] == "client"
    assert session["close_code"] == 1000
    assert session["messages"] == {"client": 2, "upstream": 2}
    assert up.seen[0].messages[:2] == [("text", "héllo".encode()), ("binary", b"\x00\xff")]


async def connect(base: str, path: str = "/v1/realtime", **kw: Any) -> Any:
    http = aiohttp.ClientSession()
    kw.setdefault("decode_text", False)
    kw.setdefault("autoping", False)
    kw.setdefault("autoclose", False)
    ws = await http.ws_connect(base + path, **kw)
    ws.http = http  # closed by the test's `finally`
    return ws


async def test_an_upgrade_is_recognised_whatever_the_case_of_its_tokens(
    wsup, ws_proxy, logs
) -> None:
    base = await ws_proxy()
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"GET /v1/realtime HTTP/1.1\r\nHost: x\r\nupgrade: WebSocket\r\n"
        b"connection: keep-alive, UPGRADE\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\n\r\n"
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    writer.close()
    assert head.startswith(b"HTTP/1.1 101")
    assert b"x-codex-turn-state: ts-1" in head
    assert wsup[0].seen[0].headers["Upgrade"] == "websocket"


async def test_pings_and_pongs_travel_end_to_end_with_their_payloads(wsup, ws_proxy, logs) -> None:
    up, _ = wsup
    got: list[Any] = []

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        msg = await ws.receive()  # the client's ping, not answered by the proxy
        got.append((msg.type, msg.data))
        await ws.pong(b"late-" + msg.data)
        await ws.ping(b"from-upstream")
        msg = await ws.receive()
        got.append((msg.type, msg.data))
        await ws.close(code=1000)

    up.script = script
    base = await ws_proxy()
    ws = await connect(base)
    try:
        await ws.ping(b"p1")
        pong = await ws.receive()
        assert (pong.type, pong.data) == (WSMsgType.PONG, b"late-p1")
        ping = await ws.receive()
        assert (ping.type, ping.data) == (WSMsgType.PING, b"from-upstream")
        await ws.pong(b"from-upstream")
        close = await ws.receive()
        assert close.type is WSMsgType.CLOSE
    finally:
        await ws.close()
        await ws.http.close()
    assert got == [(WSMsgType.PING, b"p1"), (WSMsgType.PONG, b"from-upstream")]
    [session] = await logs.wait_sessions()
    assert len(session["ping_ms"]) == 1  # only the pong that echoed its ping is timed


@pytest.mark.parametrize("code", [1000, 1001, 1011, 4001])
async def test_the_upstreams_close_code_and_reason_reach_the_client(
    wsup, ws_proxy, logs, code
) -> None:
    up, _ = wsup

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.close(code=code, message=b"Deadline expired")

    up.script = script
    base = await ws_proxy()
    ws = await connect(base)
    try:
        msg = await ws.receive()
        assert (msg.type, msg.data, msg.extra) == (WSMsgType.CLOSE, code, "Deadline expired")
    finally:
        await ws.close()
        await ws.http.close()
    [session] = await logs.wait_sessions()
    assert session["closed_by"] == "upstream"
    assert (session["close_code"], session["close_reason"]) == (code, "Deadline expired")
    assert session["close_frame"] is True


async def test_the_clients_close_code_and_reason_reach_the_upstream(wsup, ws_proxy, logs) -> None:
    up, _ = wsup

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        msg = await ws.receive()
        await ws.close(code=msg.data, message=msg.extra.encode())

    up.script = script
    base = await ws_proxy()
    ws = await connect(base)
    try:
        await ws.close(code=4002, message=b"user hung up")
    finally:
        await ws.http.close()
    [session] = await logs.wait_sessions()
    assert up.seen[0].messages == [("close", (4002, "user hung up"))]
    assert (session["closed_by"], session["close_code"]) == ("client", 4002)


async def test_an_upstream_that_vanishes_without_a_close_frame_is_mirrored(
    wsup, ws_proxy, logs
) -> None:
    up, _ = wsup

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_str('{"type":"session.created"}')
        request.transport.abort()

    up.script = script
    base = await ws_proxy()
    ws = await connect(base)
    try:
        first = await ws.receive()
        assert first.type is WSMsgType.TEXT
        end = await ws.receive()
        # no close frame reached the client: neither a 1000 nor a 1011 of the proxy's
        assert end.type in (WSMsgType.CLOSED, WSMsgType.ERROR)
        assert ws.close_code in (None, 1006)
    finally:
        await ws.http.close()
    [session] = await logs.wait_sessions()
    assert (session["closed_by"], session["close_frame"], session["close_code"]) == (
        "upstream",
        False,
        None,
    )


async def test_a_refused_upgrade_reaches_the_client_as_it_was(wsup, ws_proxy, logs) -> None:
    up, _ = wsup
    body = b'{"error":{"type":"invalid_request_error","code":"insufficient_quota","message":"no"}}'
    up.reject = lambda: web.Response(
        status=429, body=body, content_type="application/json", headers={"retry-after": "7"}
    )
    base = await ws_proxy()
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(base + "/v1/responses")
        assert refused.value.status == 429
        assert refused.value.headers["retry-after"] == "7"
        # the body too: read it the way a plain client does
        r = await http.get(
            base + "/v1/responses",
            headers={
                "Upgrade": "websocket",
                "Connection": "Upgrade",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                "Sec-WebSocket-Version": "13",
            },
        )
        assert (r.status, await r.read()) == (429, body)
    [record, _] = await logs.wait(2)
    assert record["state"] == "http_error"
    assert record["status"] == 429
    assert record["error"]["code"] == "insufficient_quota"


async def test_a_6_mib_message_passes_both_ways(wsup, ws_proxy, logs) -> None:
    base = await ws_proxy()
    big = b"x" * (6 * 1024 * 1024)
    ws = await connect(base, max_msg_size=0)
    try:
        await ws.send_frame(big, WSMsgType.TEXT)
        echoed = await ws.receive()
        assert echoed.type is WSMsgType.TEXT and echoed.data == big
    finally:
        await ws.close()
        await ws.http.close()
    [session] = await logs.wait_sessions()
    assert session["largest_message_bytes"] == len(big)


async def test_a_message_over_the_limit_closes_with_1009_both_ways(wsup, ws_proxy, logs) -> None:
    up, _ = wsup
    base = await ws_proxy(max_ws_message_bytes=1000)
    ws = await connect(base)  # the upstream echoes
    try:
        await ws.send_frame(b"y" * 1000, WSMsgType.BINARY)  # at the limit: passes
        assert (await ws.receive()).data == b"y" * 1000
        await ws.send_frame(b"y" * 1001, WSMsgType.BINARY)
        msg = await ws.receive()
        assert (msg.type, msg.data) == (WSMsgType.CLOSE, 1009)
    finally:
        await ws.close()
        await ws.http.close()
    [session] = await logs.wait_sessions()
    assert (session["closed_by"], session["close_code"]) == ("proxy", 1009)
    assert up.seen[0].messages[0] == ("binary", b"y" * 1000)
    assert up.seen[0].messages[-1][0] == "close" and up.seen[0].messages[-1][1][0] == 1009


async def test_an_upstream_message_over_the_limit_closes_the_client_with_1009(
    wsup, ws_proxy, logs
) -> None:
    up, _ = wsup
    base = await ws_proxy(max_ws_message_bytes=1000)

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_bytes(b"z" * 1001)
        async for _msg in ws:
            pass

    up.script = script
    ws = await connect(base)
    try:
        msg = await ws.receive()
        assert (msg.type, msg.data) == (WSMsgType.CLOSE, 1009)
    finally:
        await ws.close()
        await ws.http.close()
    [session] = await logs.wait_sessions()
    assert (session["closed_by"], session["close_code"]) == ("proxy", 1009)
    # the upstream hears the code, and websockets' reason naming the sizes
    [(kind, (code, reason))] = up.seen[0].messages
    assert (kind, code) == ("close", 1009) and "1000" in reason


async def test_a_client_that_does_not_read_holds_back_the_upstream(wsup, ws_proxy, logs) -> None:
    up, _ = wsup
    sent = 0
    chunk = b"b" * (1024 * 1024)

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        nonlocal sent
        for _ in range(64):
            await ws.send_bytes(chunk)
            sent += 1
        async for _msg in ws:
            pass

    up.script = script
    base = await ws_proxy()
    ws = await connect(base, max_msg_size=0)
    try:
        await asyncio.sleep(1.0)  # the client reads nothing
        held = sent
        received = 0
        while received < 64:
            msg = await ws.receive()
            assert msg.type is WSMsgType.BINARY
            received += 1
    finally:
        await ws.close()
        await ws.http.close()
    # socket buffers and the proxy's bounded queue hold a few MiB, never the 64 sent
    assert held < 32
    assert sent == 64


# -- turns and their records -----------------------------------------------------------------


def j(obj: Any) -> str:
    return json.dumps(obj)


async def test_each_turn_is_recorded_when_it_ends_not_at_the_session_end(
    wsup, ws_proxy, logs
) -> None:
    up, _ = wsup
    go_on = asyncio.Event()

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.receive()  # response.create
        await ws.send_str(j({"type": "response.created", "response": {"id": "r1"}}))
        await ws.send_str(
            j({"type": "response.output_text.delta", "response_id": "r1", "delta": "Hi"})
        )
        await ws.send_str(
            j({"type": "response.done", "response": {"id": "r1", "status": "completed"}})
        )
        await go_on.wait()
        await ws.send_str(j({"type": "response.created", "response": {"id": "r2"}}))
        await ws.close(code=1011, message=b"Deadline expired")

    up.script = script
    base = await ws_proxy()
    ws = await connect(base, protocols=("realtime",))
    try:
        await ws.send_str(j({"type": "response.create"}))
        [first] = await logs.wait(1)  # while the session is still open
        assert logs.sessions() == []
        go_on.set()
        while (await ws.receive()).type is not WSMsgType.CLOSE:
            pass
    finally:
        await ws.close()
        await ws.http.close()
    [session] = await logs.wait_sessions()
    [_, second] = await logs.wait(2)
    assert (first["transport"], first["dialect"], first["turn"], first["state"]) == (
        "websocket",
        "openai-realtime",
        1,
        "completed",
    )
    assert first["session_id"] == second["session_id"] == session["session_id"]
    assert first["request_id"] != second["request_id"]
    assert (second["turn"], second["state"]) == (2, "interrupted")
    assert second["interruption"]["reason"] == "upstream_closed"
    assert second["error"]["code"] == "1011"
    assert session["turns"] == 2
    assert session["states"] == {"completed": 1, "interrupted": 1}
    assert session["anomalies"] == {"turn_open_at_close": 1}
    assert session["subprotocol"] == "realtime"
    assert session["last_message_delivered"] == "response.created"


async def test_a_client_that_closes_mid_turn_cancels_it(wsup, ws_proxy, logs) -> None:
    up, _ = wsup

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_str(j({"serverContent": {"modelTurn": {"parts": [{"text": "Once upon"}]}}}))
        msg = await ws.receive()
        await ws.close(code=msg.data, message=msg.extra.encode())

    up.script = script
    base = await ws_proxy()
    ws = await connect(
        base, "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
    )
    try:
        await ws.receive()
        await ws.close(code=1000, message=b"bye")
    finally:
        await ws.http.close()
    [turn] = await logs.wait(1)
    [session] = await logs.wait_sessions()
    assert (turn["dialect"], turn["state"]) == ("gemini-live", "cancelled")
    assert turn["interruption"]["reason"] == "client_disconnected"
    assert (session["closed_by"], session["close_code"], session["close_reason"]) == (
        "client",
        1000,
        "bye",
    )


async def test_a_responses_error_with_a_status_is_an_http_error_turn(wsup, ws_proxy, logs) -> None:
    up, _ = wsup
    error = {
        "type": "error",
        "status": 429,
        "error": {"type": "rate_limit_error", "code": "rate_limit_exceeded", "message": "slow"},
    }

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.receive()
        await ws.send_str(j(error))
        await ws.receive()

    up.script = script
    base = await ws_proxy()
    ws = await connect(
        base, "/v1/responses", headers={"OpenAI-Beta": "responses_websockets=2026-02-06"}
    )
    try:
        await ws.send_str(j({"type": "response.create", "model": "gpt-5"}))
        assert json.loads((await ws.receive()).data) == error
    finally:
        await ws.close()
        await ws.http.close()
    [turn] = await logs.wait(1)
    assert (turn["dialect"], turn["state"], turn["status"]) == (
        "openai-responses",
        "http_error",
        429,
    )
    assert turn["error"]["code"] == "rate_limit_exceeded"
    assert up.seen[0].headers["OpenAI-Beta"] == "responses_websockets=2026-02-06"


async def test_keys_never_appear_in_any_record(wsup, ws_proxy, logs) -> None:
    up, _ = wsup
    # no known key shape: only the proxy's knowledge of where keys travel can mask them
    key = "ek_68af296e8e408191a1120ab6383263c2"
    goog = "goog0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    up.protocols = ("realtime", "openai-insecure-api-key." + key)

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_str(j({"type": "response.created", "response": {"id": "r1"}}))
        await ws.close(code=1000)

    up.script = script
    base = await ws_proxy()
    ws = await connect(
        base,
        f"/v1/realtime?model=m&key={goog}&apiKey={goog}",
        protocols=("openai-insecure-api-key." + key, "realtime"),
        headers={
            "Authorization": "Token auth_tokens/" + key,
            "x-goog-api-key": goog,
        },
    )
    try:
        while (await ws.receive()).type is not WSMsgType.CLOSE:
            pass
    finally:
        await ws.close()
        await ws.http.close()
    await logs.wait_sessions()
    await logs.wait(1)
    written = "".join(logs.stream.history)
    assert "session.finished" in written and "request.finished" in written
    assert key not in written and goog not in written
    assert "auth_tokens/" + key not in written
    # the upstream did get them: the proxy forwards, it only keeps them out of records
    assert up.seen[0].headers["x-goog-api-key"] == goog


async def test_a_client_that_reconnects_over_and_over_is_a_reconnect_loop(
    wsup, ws_proxy, logs
) -> None:
    up, _ = wsup

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        quota = {
            "type": "error",
            "error": {"type": "insufficient_quota", "code": "insufficient_quota"},
        }
        await ws.send_str(j(quota))
        await ws.close(code=1000)

    up.script = script
    base = await ws_proxy()
    for _ in range(5):
        ws = await connect(base, headers={"Authorization": "Bearer sk-same"})
        try:
            while (await ws.receive()).type is not WSMsgType.CLOSE:
                pass
        finally:
            await ws.close()
            await ws.http.close()
    sessions = await logs.wait_sessions(5)
    assert [s["anomalies"].get("reconnect_loop", 0) for s in sessions] == [0, 0, 0, 0, 1]
    assert all(s["anomalies"]["error_without_response"] == 1 for s in sessions)


async def test_each_turn_is_a_span_under_the_sessions_span(wsup, aiohttp_server, logs) -> None:
    trace_sdk = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from sseproxy.observe.tracing import Tracing

    assert trace_sdk is not None
    up, url = wsup

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        for rid in ("r1", "r2"):
            await ws.send_str(j({"type": "response.created", "response": {"id": rid}}))
            await ws.send_str(
                j({"type": "response.done", "response": {"id": rid, "status": "completed"}})
            )
        await ws.close(code=1000)

    up.script = script
    exporter = InMemorySpanExporter()
    tracing = Tracing(exporter)
    server = await aiohttp_server(create_app(load(None, {}, {"upstream": url}), tracing=tracing))
    ws = await connect(str(server.make_url("")).rstrip("/"))
    try:
        while (await ws.receive()).type is not WSMsgType.CLOSE:
            pass
    finally:
        await ws.close()
        await ws.http.close()
    await logs.wait_sessions()
    tracing.provider.force_flush()
    spans = exporter.get_finished_spans()
    [session] = [s for s in spans if s.parent is None]
    turns = [s for s in spans if s.parent is not None]
    assert [s.name for s in turns] == ["openai-realtime turn 1", "openai-realtime turn 2"]
    assert {s.parent.span_id for s in turns} == {session.context.span_id}
    assert session.attributes["sseproxy.turns"] == 2
    assert "traceparent" in up.seen[0].headers


# -- drills ----------------------------------------------------------------------------------


async def realtime_upstream(ws: web.WebSocketResponse, request: web.Request) -> None:
    """Three messages of one turn, then a quiet open connection."""
    await ws.send_str(j({"type": "response.created", "response": {"id": "r1"}}))
    await ws.send_str(j({"type": "response.output_text.delta", "response_id": "r1", "delta": "Hi"}))
    await ws.send_str(j({"type": "response.done", "response": {"id": "r1", "status": "completed"}}))
    async for _msg in ws:
        pass


async def drilled(wsup, ws_proxy, rules: str) -> tuple[list[Any], Any]:
    up, _ = wsup
    up.script = realtime_upstream
    base = await ws_proxy(allow_inject=True)
    ws = await connect(base, headers={"x-sseproxy-inject": rules})
    got = []
    try:
        while True:
            try:
                msg = await asyncio.wait_for(ws.receive(), 1.0)
            except TimeoutError:
                got.append("silence")
                break
            got.append((msg.type, msg.data))
            if msg.type is not WSMsgType.TEXT:
                break
    finally:
        await ws.close()
        await ws.http.close()
    return got, ws


async def test_drill_cut_after_with_a_close_code(wsup, ws_proxy, logs) -> None:
    got, _ = await drilled(wsup, ws_proxy, "cut-after=2,close-code=1011")
    assert [g[0] for g in got] == [WSMsgType.TEXT, WSMsgType.TEXT, WSMsgType.CLOSE]
    assert got[-1][1] == 1011
    [turn] = await logs.wait(1)
    [session] = await logs.wait_sessions()
    assert (turn["state"], turn["injected"]) == ("interrupted", ["cut-after=2", "close-code=1011"])
    assert (session["closed_by"], session["close_code"]) == ("proxy", 1011)


async def test_drill_cut_after_without_a_close_frame(wsup, ws_proxy, logs) -> None:
    got, _ = await drilled(wsup, ws_proxy, "cut-after=1")
    assert [g[0] for g in got] == [WSMsgType.TEXT, WSMsgType.CLOSED]
    [turn] = await logs.wait(1)
    assert turn["interruption"]["reason"] == "upstream_reset"


async def test_drill_drop_terminal_leaves_the_turn_open(wsup, ws_proxy, logs) -> None:
    got, _ = await drilled(wsup, ws_proxy, "drop-terminal")
    assert len([g for g in got if g != "silence"]) == 2 and got[-1] == "silence"
    [turn] = await logs.wait(1)  # the client closed with the turn still open
    assert turn["state"] == "cancelled"


async def test_drill_inject_error_sends_the_dialects_error(wsup, ws_proxy, logs) -> None:
    got, _ = await drilled(wsup, ws_proxy, "inject-error=1")
    assert json.loads(got[1][1])["error"]["code"] == "sseproxy_injected"
    [turn] = await logs.wait(1)
    assert turn["error"]["code"] == "sseproxy_injected"


async def test_drill_stall_after_sends_nothing_more(wsup, ws_proxy, logs) -> None:
    got, _ = await drilled(wsup, ws_proxy, "stall-after=1")
    assert [g for g in got if g != "silence"] == [
        (WSMsgType.TEXT, j({"type": "response.created", "response": {"id": "r1"}}).encode())
    ]


async def test_a_client_that_vanishes_is_mirrored_upstream(wsup, ws_proxy, logs) -> None:
    up, _ = wsup
    upstream_saw: list[Any] = []
    ended = asyncio.Event()

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_str(j({"type": "response.created", "response": {"id": "r1"}}))
        try:
            msg = await ws.receive()
            upstream_saw.append(msg.type)
        except asyncio.CancelledError:  # the test server cancels a handler whose peer left
            upstream_saw.append("connection lost")
            raise
        finally:
            ended.set()

    up.script = script
    base = await ws_proxy()
    ws = await connect(base)
    try:
        await ws.receive()
        ws._response.connection.transport.abort()  # no close frame
    finally:
        await ws.http.close()
    [session] = await logs.wait_sessions()
    [turn] = await logs.wait(1)
    assert (session["closed_by"], session["close_frame"]) == ("client", False)
    assert turn["state"] == "cancelled"
    await asyncio.wait_for(ended.wait(), 5)
    # the connection ended without a close frame, as the client's did
    assert upstream_saw[0] in (WSMsgType.CLOSED, WSMsgType.ERROR, "connection lost")


async def test_a_client_reset_mid_stream_is_its_leaving_not_a_proxy_error(
    wsup, ws_proxy, logs
) -> None:
    up, _ = wsup

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        with contextlib.suppress(ConnectionError):
            for _ in range(400):
                await ws.send_bytes(b"a" * 65536)
        await ws.receive()

    up.script = script
    base = await ws_proxy()
    ws = await connect(base, max_msg_size=0)
    try:
        await ws.receive()
        ws._response.connection.transport.abort()
    finally:
        await ws.http.close()
    [session] = await logs.wait_sessions()
    assert (session["closed_by"], session["close_frame"]) == ("client", False)
    assert "internal_error" not in "".join(logs.stream.history)
