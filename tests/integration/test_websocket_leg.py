"""The upstream leg of WebSocket sessions: text as its exact bytes both ways, messages bounded
after inflating and across frames, and the connection opened as the HTTP leg's are (egress
proxy, NO_PROXY, the configured CA)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp import WSMsgType, web

from sseproxy.config import load
from sseproxy.shell.app import create_app
from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
from tests.integration.egress_proxy import ConnectProxy
from tests.integration.raw_upstream import LoopbackServer
from tests.integration.ws_upstream import WsUpstream

pytestmark = pytest.mark.skipif(
    not SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14"
)

# Text that is not UTF-8: a lone continuation byte, a truncated sequence.
NOT_UTF8 = b"\x80 \xc3\x28 \xe2\x82"


def j(obj: Any) -> str:
    return json.dumps(obj)


@pytest.fixture
async def wsup(aiohttp_server) -> tuple[WsUpstream, str]:
    up = WsUpstream()
    server = await aiohttp_server(up.app())
    return up, str(server.make_url("")).rstrip("/")


@pytest.fixture
def proxy(aiohttp_server, logs) -> Any:
    async def make(upstream: str, environ: Mapping[str, str] | None = None, **kw: Any) -> str:
        settings = load(None, {}, {"upstream": upstream, **kw})
        server = await aiohttp_server(create_app(settings, environ=environ))
        return str(server.make_url("")).rstrip("/")

    return make


async def connect(base: str, path: str = "/v1/realtime", **kw: Any) -> Any:
    http = aiohttp.ClientSession()
    kw.setdefault("decode_text", False)
    kw.setdefault("autoping", False)
    kw.setdefault("autoclose", False)
    try:
        ws = await http.ws_connect(base + path, **kw)
    except BaseException:
        await http.close()
        raise
    ws.http = http
    return ws


async def done(ws: Any) -> None:
    await ws.close()
    await ws.http.close()


# -- text as its bytes -----------------------------------------------------------------------


async def test_text_that_is_not_utf8_travels_byte_for_byte_both_ways(wsup, proxy, logs) -> None:
    up, url = wsup
    delta = b'{"type":"response.output_text.delta","response_id":"r1","delta":"' + NOT_UTF8 + b'"}'

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.receive()  # the client's text
        await ws.send_str(j({"type": "response.created", "response": {"id": "r1"}}))
        await ws.send_frame(delta, WSMsgType.TEXT)
        await ws.send_str(
            j({"type": "response.done", "response": {"id": "r1", "status": "completed"}})
        )
        await ws.receive()  # the close

    up.script = script
    ws = await connect(await proxy(url))
    try:
        await ws.send_frame(b"client " + NOT_UTF8, WSMsgType.TEXT)
        got = [await ws.receive() for _ in range(3)]
    finally:
        await done(ws)
    assert [(m.type, m.data) for m in got][1] == (WSMsgType.TEXT, delta)
    assert up.seen[0].messages[0] == ("text", b"client " + NOT_UTF8)
    [turn] = await logs.wait(1)
    [session] = await logs.wait_sessions()
    assert (session["closed_by"], session["close_code"]) == ("client", 1000)  # never a 1007
    assert session["anomalies"] == {"invalid_utf8": 2}  # one each way
    assert (turn["state"], turn["anomalies"]) == ("completed", {"invalid_utf8": 1})


async def test_a_turn_names_the_model_asked_for_and_the_one_that_answered(
    wsup, proxy, logs
) -> None:
    up, url = wsup

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_str(j({"type": "session.created", "session": {"model": "gpt-realtime-1"}}))
        await ws.send_str(j({"type": "response.created", "response": {"id": "r1"}}))
        await ws.send_str(
            j({"type": "response.done", "response": {"id": "r1", "status": "completed"}})
        )
        await ws.receive()

    up.script = script
    ws = await connect(await proxy(url), "/v1/realtime?model=gpt-realtime")
    try:
        for _ in range(3):
            await ws.receive()
    finally:
        await done(ws)
    [turn] = await logs.wait(1)
    assert (turn["model"], turn["response_model"]) == ("gpt-realtime", "gpt-realtime-1")


# -- bounds after inflating ------------------------------------------------------------------


async def test_an_upstream_message_inflating_one_byte_past_the_limit_closes_with_1009(
    wsup, proxy, logs
) -> None:
    up, url = wsup

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_bytes(b"a" * 1000)  # a few bytes on the wire, 1000 inflated: passes
        await ws.send_bytes(b"a" * 1001)
        async for _msg in ws:
            pass

    up.script = script
    ws = await connect(await proxy(url, max_ws_message_bytes=1000), compress=15)
    try:
        first, second = await ws.receive(), await ws.receive()
    finally:
        await done(ws)
    assert (first.type, first.data) == (WSMsgType.BINARY, b"a" * 1000)
    assert (second.type, second.data) == (WSMsgType.CLOSE, 1009)
    [session] = await logs.wait_sessions()
    assert session["extensions"]["upstream"] == ["permessage-deflate"]
    assert (session["closed_by"], session["close_code"]) == ("proxy", 1009)
    [(kind, (code, _))] = up.seen[0].messages
    assert (kind, code) == ("close", 1009)


async def test_a_client_message_inflating_one_byte_past_the_limit_closes_with_1009(
    wsup, proxy, logs
) -> None:
    up, url = wsup
    ws = await connect(await proxy(url, max_ws_message_bytes=1000), compress=15)
    try:
        await ws.send_frame(b"c" * 1000, WSMsgType.TEXT)  # the upstream echoes
        echoed = await ws.receive()
        await ws.send_frame(b"c" * 1001, WSMsgType.TEXT)
        closed = await ws.receive()
    finally:
        await done(ws)
    assert (echoed.type, echoed.data) == (WSMsgType.TEXT, b"c" * 1000)
    assert (closed.type, closed.data) == (WSMsgType.CLOSE, 1009)
    [session] = await logs.wait_sessions()
    assert session["extensions"] == {
        "client": ["permessage-deflate"],
        "upstream": ["permessage-deflate"],
    }
    assert (session["closed_by"], session["close_code"]) == ("proxy", 1009)
    assert up.seen[0].messages[0] == ("text", b"c" * 1000)
    assert up.seen[0].messages[-1][0] == "close" and up.seen[0].messages[-1][1][0] == 1009


# -- a message in many frames ----------------------------------------------------------------


def frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """One unmasked frame, as a server sends it."""
    first = (0x80 if fin else 0) | opcode
    n = len(payload)
    if n < 126:
        return bytes((first, n)) + payload
    if n < 1 << 16:
        return bytes((first, 126)) + struct.pack("!H", n) + payload
    return bytes((first, 127)) + struct.pack("!Q", n) + payload


def fragments(message: bytes, size: int, text: bool = True) -> bytes:
    parts = [message[i : i + size] for i in range(0, len(message), size)]
    out = [frame(0x1 if text else 0x2, parts[0], fin=False)]
    out += [frame(0x0, p, fin=False) for p in parts[1:-1]]
    return b"".join([*out, frame(0x0, parts[-1])])


class FramingUpstream(LoopbackServer):
    """Accepts the upgrade by hand, then writes `wire` as it is (frames aiohttp's server
    cannot make: a message in many fragments), then answers the client's close."""

    def __init__(self, wire: bytes) -> None:
        self.wire = wire

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        key = next(
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        accept = base64.b64encode(
            hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()
        )
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n" + self.wire
        )
        try:
            first = await reader.readexactly(2)  # the client's next frame: its close
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        else:
            if first[0] & 0x0F == 0x8:
                writer.write(frame(0x8, struct.pack("!H", 1000)))
        writer.close()


@pytest.fixture
async def framing() -> AsyncIterator[Any]:
    servers: list[FramingUpstream] = []

    async def make(wire: bytes) -> FramingUpstream:
        server = FramingUpstream(wire)
        await server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.stop()


async def test_a_message_in_many_frames_reaches_the_client_whole(framing, proxy, logs) -> None:
    # split inside multi-byte characters too: the bytes are joined, never decoded per frame
    message = ("é€" * 20_000).encode() + NOT_UTF8
    upstream = await framing(fragments(message, 333))
    ws = await connect(await proxy(upstream.url), max_msg_size=0)
    try:
        got = await ws.receive()
    finally:
        await done(ws)
    assert (got.type, got.data) == (WSMsgType.TEXT, message)
    [session] = await logs.wait_sessions()
    assert session["messages"]["upstream"] == 1
    assert session["largest_message_bytes"] == len(message)


async def test_frames_adding_up_past_the_limit_close_with_1009(framing, proxy, logs) -> None:
    upstream = await framing(fragments(b"f" * 1001, 100, text=False))
    ws = await connect(await proxy(upstream.url, max_ws_message_bytes=1000))
    try:
        got = await ws.receive()
    finally:
        await done(ws)
    assert (got.type, got.data) == (WSMsgType.CLOSE, 1009)
    [session] = await logs.wait_sessions()
    assert (session["closed_by"], session["close_code"], session["messages"]["upstream"]) == (
        "proxy",
        1009,
        0,
    )


# -- egress: the HTTP leg's proxy choice and tunnel ------------------------------------------


async def echo_once(base: str) -> bytes:
    ws = await connect(base)
    try:
        await ws.send_frame(b"ping-me", WSMsgType.TEXT)
        got = await ws.receive()
    finally:
        await done(ws)
    return bytes(got.data)


async def test_a_session_goes_through_the_egress_proxy_in_a_connect_tunnel(
    wsup, proxy, logs
) -> None:
    _, url = wsup
    async with ConnectProxy() as egress:
        base = await proxy(url, {"HTTP_PROXY": f"http://{egress.url}"})
        assert await echo_once(base) == b"ping-me"
    authority = url.removeprefix("http://").encode()
    assert egress.heads == [b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)]
    [session] = await logs.wait_sessions()
    assert session["closed_by"] == "client"


async def test_no_proxy_covering_the_upstream_sends_a_session_direct(wsup, proxy, logs) -> None:
    _, url = wsup
    async with ConnectProxy() as egress:
        environ = {"HTTP_PROXY": f"http://{egress.url}", "NO_PROXY": "127.0.0.1"}
        assert await echo_once(await proxy(url, environ)) == b"ping-me"
    assert egress.heads == []


async def test_an_unreachable_egress_proxy_is_a_502_with_a_record(wsup, proxy, logs) -> None:
    _, url = wsup
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    base = await proxy(url, {"HTTP_PROXY": f"http://127.0.0.1:{port}"})
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await connect(base)
    assert refused.value.status == 502
    [record] = await logs.wait(1)
    assert (record["status"], record["state"]) == (502, "http_error")
    assert record["interruption"]["reason"] == "upstream_unreachable"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


async def test_a_wss_session_tunnels_then_speaks_tls_to_the_origin(
    ca: trustme.CA, tmp_path: Path, proxy, logs
) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    runner = web.AppRunner(WsUpstream().app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    try:
        async with ConnectProxy() as egress:
            origin = f"https://127.0.0.1:{runner.addresses[0][1]}"
            environ = {"HTTPS_PROXY": f"http://{egress.url}"}
            base = await proxy(origin, environ, upstream_ca_file=str(ca_file))
            assert await echo_once(base) == b"ping-me"
        assert len(egress.heads) == 1 and egress.heads[0].startswith(b"CONNECT 127.0.0.1:")
    finally:
        await runner.cleanup()
    [session] = await logs.wait_sessions()
    assert session["upstream"] == origin


async def test_a_wss_session_through_an_https_egress_proxy_is_tls_inside_tls(
    ca: trustme.CA, tmp_path: Path, proxy, logs
) -> None:
    origin_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(origin_tls)
    runner = web.AppRunner(WsUpstream().app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=origin_tls)
    await site.start()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    proxy_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(proxy_tls)
    try:
        async with ConnectProxy(tls=proxy_tls) as egress:
            origin = f"https://127.0.0.1:{runner.addresses[0][1]}"
            environ = {"HTTPS_PROXY": f"https://user:s3cret@{egress.url}"}
            base = await proxy(origin, environ, upstream_ca_file=str(ca_file))
            assert await echo_once(base) == b"ping-me"
        [head] = egress.heads
        assert head.startswith(b"CONNECT 127.0.0.1:")
        assert b"Proxy-Authorization: Basic dXNlcjpzM2NyZXQ=\r\n" in head  # user:s3cret
    finally:
        await runner.cleanup()
    [session] = await logs.wait_sessions()
    assert session["upstream"] == origin
    assert "s3cret" not in json.dumps(logs.all_records())


# -- a refusal's body ------------------------------------------------------------------------

REFUSAL_BODY = 1024 * 1024  # websockets' bound on the body of a non-101 answer


async def test_a_refusal_keeps_a_body_of_1_mib_and_one_byte_more_loses_only_its_body(
    wsup, proxy, logs
) -> None:
    up, url = wsup
    base = await proxy(url)
    upgrade = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
    }
    answers = []
    async with aiohttp.ClientSession() as http:
        for size in (REFUSAL_BODY, REFUSAL_BODY + 1):
            up.reject = lambda size=size: web.Response(
                status=403, body=b"n" * size, headers={"x-why": "quota"}
            )
            async with http.get(base + "/v1/realtime", headers=upgrade) as r:
                answers.append((r.status, r.headers.get("x-why"), len(await r.read())))
    # the status and headers always; the body when websockets could read it
    assert answers == [(403, "quota", REFUSAL_BODY), (403, "quota", 0)]
    records = await logs.wait(2)
    assert [(r["status"], r["state"], r["bytes"]) for r in records] == [
        (403, "http_error", REFUSAL_BODY),
        (403, "http_error", 0),
    ]


async def test_an_upstream_close_reason_that_is_not_utf8_is_a_vanished_upstream(
    framing, proxy, logs
) -> None:
    upstream = await framing(frame(0x8, struct.pack("!H", 1000) + b"\xff"))
    ws = await connect(await proxy(upstream.url))
    try:
        got = await ws.receive()
    finally:
        await done(ws)
    assert got.type in (WSMsgType.CLOSED, WSMsgType.ERROR)  # aborted: no close frame of ours
    [session] = await logs.wait_sessions()
    assert (session["closed_by"], session["close_frame"], session["close_code"]) == (
        "upstream",
        False,
        None,
    )


async def test_the_upstreams_ping_is_answered_only_by_the_clients_pong(wsup, proxy, logs) -> None:
    up, url = wsup
    heard: list[Any] = []

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.ping(b"u1")
        with contextlib.suppress(TimeoutError):  # websockets' own pong would come at once
            heard.append(await ws.receive(timeout=0.3))
        await ws.send_str("go")
        msg = await ws.receive()
        heard.append((msg.type, msg.data))
        await ws.close()

    up.script = script
    ws = await connect(await proxy(url))
    try:
        ping = await ws.receive()
        assert (ping.type, ping.data) == (WSMsgType.PING, b"u1")
        assert (await ws.receive()).data == b"go"  # the upstream waited and heard nothing
        await ws.pong(b"u1")
        await ws.receive()
    finally:
        await done(ws)
    assert heard == [(WSMsgType.PONG, b"u1")]


async def test_no_frame_or_header_reaches_the_log_even_at_debug_level(
    wsup, proxy, logs, caplog
) -> None:
    up, url = wsup
    secret = "sk-never-logged-0123456789"
    up.headers = {"x-upstream-secret": secret}
    caplog.set_level(logging.DEBUG)  # the root logger, as an embedding app might set it
    ws = await connect(await proxy(url))
    try:
        await ws.send_frame(secret.encode(), WSMsgType.TEXT)
        assert (await ws.receive()).data == secret.encode()
    finally:
        await done(ws)
    await logs.wait_sessions()
    assert secret not in caplog.text
