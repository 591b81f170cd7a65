"""openai's `client.realtime.connect()` against `sseproxy mock` serving a session captured
through the proxy: directly, and through the proxy again, whose records must say what the
captured session's said."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from sseproxy.config import load
from sseproxy.shell.app import STATE, create_app
from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
from sseproxy.tools.mock import MockServer, load_sessions
from tests.integration.ws_upstream import WsUpstream

openai = pytest.importorskip("openai")
pytest.importorskip("websockets")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14"),
    pytest.mark.skipif(
        not hasattr(openai.AsyncOpenAI, "realtime"), reason="this openai has no client.realtime"
    ),
]


def j(obj: Any) -> str:
    return json.dumps(obj)


async def realtime(ws: web.WebSocketResponse, request: web.Request) -> None:
    await ws.send_str(
        j({"type": "session.created", "event_id": "e0", "session": {"id": "s", "type": "realtime"}})
    )
    async for msg in ws:
        if json.loads(msg.data)["type"] != "response.create":
            continue
        response = {"id": "resp_1", "object": "realtime.response", "output": []}
        await ws.send_str(j({"type": "response.created", "event_id": "e1", "response": response}))
        for n, piece in enumerate(["Hel", "lo"]):
            delta = {
                "type": "response.output_text.delta",
                "event_id": f"d{n}",
                "response_id": "resp_1",
                "item_id": "it",
                "output_index": 0,
                "content_index": 0,
                "delta": piece,
            }
            await ws.send_str(j(delta))
        done = {**response, "status": "completed", "usage": {"output_tokens": 2}}
        await ws.send_str(j({"type": "response.done", "event_id": "e9", "response": done}))


async def converse(base: str) -> tuple[str, str | None]:
    """One turn with the SDK: the text it assembled and the status it saw."""
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=base + "/v1", max_retries=0)
    text, status = "", None
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await conn.response.create()
        async for event in conn:
            if event.type == "response.output_text.delta":
                text += event.delta
            elif event.type == "response.done":
                status = event.response.status
                break
    return text, status


async def test_the_sdk_gets_the_recorded_session_from_the_mock(
    aiohttp_server, logs, tmp_path: Path
) -> None:
    up = WsUpstream()
    up.protocols = ()
    up.script = realtime
    target = await aiohttp_server(up.app())
    settings = load(None, {}, {"upstream": str(target.make_url("")), "capture_dir": str(tmp_path)})
    app = create_app(settings)
    recording = await aiohttp_server(app)
    assert await converse(str(recording.make_url("")).rstrip("/")) == ("Hello", "completed")
    [first] = await logs.wait_sessions()
    await app[STATE].captures.drain()

    mock = await aiohttp_server(MockServer([], speed=0, sessions=load_sessions([tmp_path])).app())
    mock_url = str(mock.make_url("")).rstrip("/")
    assert await converse(mock_url) == ("Hello", "completed")
    proxy = await aiohttp_server(create_app(load(None, {}, {"upstream": mock_url})))
    assert await converse(str(proxy.make_url("")).rstrip("/")) == ("Hello", "completed")
    sessions = await logs.wait_sessions(2)
    turns = await logs.wait(2)
    assert [(t["state"], t["text_chars"]) for t in turns] == [("completed", 5)] * 2
    assert sessions[1]["messages"] == first["messages"]
    assert sessions[1]["closed_by"] == first["closed_by"] == "client"
