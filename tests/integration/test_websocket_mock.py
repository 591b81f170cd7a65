"""`sseproxy mock` serving WebSocket session captures: each upstream message after the client
message that preceded it, the recorded gaps, the recorded ending; directly and through the
proxy, whose records must then say what the original session's said."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType, web

from sseproxy.config import load
from sseproxy.shell.app import create_app
from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
from sseproxy.tools.mock import MOCK_HEADER, MockServer, load_recordings, load_sessions
from tests.integration.test_websocket_capture import (  # noqa: F401  (fixtures)
    REALTIME,
    capturing,
    drive_realtime,
    j,
    realtime_two_turns,
    saved,
    wsup,
)
from tests.streams import chat_chunk, sse

pytestmark = pytest.mark.skipif(
    not SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14"
)


async def recorded(wsup, capturing, logs, tmp_path: Path, script: Any, drive: Any) -> Path:  # noqa: F811
    """Capture one session of `script` driven by `drive(base)`; the sidecar's path."""
    up, _ = wsup
    up.script = script
    base, app = await capturing()
    await drive(base)
    return await saved(app, logs, tmp_path)


async def serve(aiohttp_server, directory: Path, speed: float = 0) -> str:
    mock = MockServer(load_recordings([directory]), speed, sessions=load_sessions([directory]))
    server = await aiohttp_server(mock.app())
    return str(server.make_url("")).rstrip("/")


async def test_the_mock_plays_the_recorded_turns_when_the_client_asks(
    wsup,  # noqa: F811
    capturing,  # noqa: F811
    logs,
    tmp_path: Path,
    aiohttp_server,
) -> None:
    path = await recorded(wsup, capturing, logs, tmp_path, realtime_two_turns, drive_realtime)
    original = await drive_realtime(await serve(aiohttp_server, tmp_path))
    assert original == [
        "response.created",
        "response.output_text.delta",
        "response.done",
        "response.created",
        (WSMsgType.CLOSE, 1011, "Deadline expired"),
    ]
    base = await serve(aiohttp_server, tmp_path)
    name = "openai-realtime/" + path.stem
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(base + REALTIME, headers={MOCK_HEADER: name}) as ws,
    ):
        assert json.loads((await ws.receive()).data)["type"] == "session.created"
        with pytest.raises(asyncio.TimeoutError):  # the turn waits for the client's message
            await ws.receive(timeout=0.3)
        await ws.send_str(j({"type": "response.create"}))
        assert json.loads((await ws.receive()).data)["type"] == "response.created"


async def test_through_the_proxy_the_records_say_what_the_recorded_sessions_did(
    wsup,  # noqa: F811
    capturing,  # noqa: F811
    logs,
    tmp_path: Path,
    aiohttp_server,
) -> None:
    await recorded(wsup, capturing, logs, tmp_path, realtime_two_turns, drive_realtime)
    [first_session] = logs.sessions()
    first_turns = [r["state"] for r in logs.records()]
    mock = await serve(aiohttp_server, tmp_path)
    proxy = await aiohttp_server(create_app(load(None, {}, {"upstream": mock})))
    await drive_realtime(str(proxy.make_url("")).rstrip("/"), protocols=("realtime",))
    sessions = await logs.wait_sessions(2)
    turns = await logs.wait(4)
    assert first_turns == ["completed", "interrupted"]
    assert [r["state"] for r in turns[2:]] == first_turns
    assert turns[3]["error"]["code"] == "1011"
    again = sessions[1]
    for field in ("closed_by", "close_code", "close_reason", "close_frame", "states", "turns"):
        assert again[field] == first_session[field], field
    assert again["messages"] == first_session["messages"]


async def test_an_upstream_that_vanished_is_served_as_an_abort(
    wsup,  # noqa: F811
    capturing,  # noqa: F811
    logs,
    tmp_path: Path,
    aiohttp_server,
) -> None:
    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_str(j({"type": "response.created", "response": {"id": "r1"}}))
        request.transport.abort()

    async def drive(base: str) -> list[Any]:
        async with aiohttp.ClientSession() as http, http.ws_connect(base + REALTIME) as ws:
            return [(await ws.receive()).type, (await ws.receive()).type, ws.close_code]

    await recorded(wsup, capturing, logs, tmp_path, script, drive)
    got = await drive(await serve(aiohttp_server, tmp_path))
    assert got[0] is WSMsgType.TEXT
    assert got[1] in (WSMsgType.CLOSED, WSMsgType.ERROR)  # no close frame
    assert got[2] in (None, 1006)


async def test_a_client_that_closed_first_is_waited_for(
    wsup,  # noqa: F811
    capturing,  # noqa: F811
    logs,
    tmp_path: Path,
    aiohttp_server,
) -> None:
    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_str(j({"type": "session.created"}))
        async for _ in ws:
            pass

    async def drive(base: str) -> Any:
        async with aiohttp.ClientSession() as http, http.ws_connect(base + REALTIME) as ws:
            await ws.receive()
            await asyncio.sleep(0.3)  # no close of its own meanwhile: the client closes
            await ws.close(code=4001, message=b"done")
            return ws.close_code

    await recorded(wsup, capturing, logs, tmp_path, script, drive)
    assert await drive(await serve(aiohttp_server, tmp_path)) == 4001


async def test_the_recorded_gaps_are_kept_and_scaled_by_speed(
    wsup,  # noqa: F811
    capturing,  # noqa: F811
    logs,
    tmp_path: Path,
    aiohttp_server,
) -> None:
    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_str(j({"type": "session.created"}))
        await asyncio.sleep(0.4)
        await ws.send_str(j({"type": "session.updated"}))
        await ws.close(code=1000)

    async def drive(base: str) -> float:
        async with aiohttp.ClientSession() as http, http.ws_connect(base + REALTIME) as ws:
            await ws.receive()
            start = time.monotonic()
            await ws.receive()
            return time.monotonic() - start

    await recorded(wsup, capturing, logs, tmp_path, script, drive)
    assert await drive(await serve(aiohttp_server, tmp_path, speed=1)) >= 0.35
    assert await drive(await serve(aiohttp_server, tmp_path, speed=4)) < 0.3


async def test_session_captures_load_as_sessions_never_as_streams(
    wsup,  # noqa: F811
    capturing,  # noqa: F811
    logs,
    tmp_path: Path,
    aiohttp_server,
) -> None:
    path = await recorded(wsup, capturing, logs, tmp_path, realtime_two_turns, drive_realtime)
    (tmp_path / "chat.sse").write_bytes(sse(chat_chunk("Hi", finish="stop"), "[DONE]"))
    assert [r.name for r in load_recordings([tmp_path])] == ["openai-chat/chat"]
    assert [s.name for s in load_sessions([tmp_path])] == ["openai-realtime/" + path.stem]
    # an HTTP request to the same mock still gets a stream
    base = await serve(aiohttp_server, tmp_path)
    async with aiohttp.ClientSession() as http:
        resp = await http.post(base + "/v1/chat/completions", json={"stream": True})
        assert b"[DONE]" in await resp.read()


async def test_an_unknown_session_name_is_a_404_listing_the_sessions(
    wsup,  # noqa: F811
    capturing,  # noqa: F811
    logs,
    tmp_path: Path,
    aiohttp_server,
) -> None:
    path = await recorded(wsup, capturing, logs, tmp_path, realtime_two_turns, drive_realtime)
    base = await serve(aiohttp_server, tmp_path)
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as exc:
            await http.ws_connect(base + REALTIME, headers={MOCK_HEADER: "nope"})
        assert exc.value.status == 404
        resp = await http.get(
            base + REALTIME,
            headers={
                MOCK_HEADER: "nope",
                "Upgrade": "websocket",
                "Connection": "Upgrade",
                "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            },
        )
        body = await resp.json()
    assert body["error"]["sessions"] == ["openai-realtime/" + path.stem]
