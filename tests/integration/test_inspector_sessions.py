"""WebSocket sessions in the inspector, without a browser: one row per session with its turns
under it, its detail (handshake redacted, the messages both ways in order, the close, the
record), and an inspector that raises never touches the relay."""

from __future__ import annotations

import json
import re
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType, web

from sseproxy.config import ConfigError, load
from sseproxy.inspector.sessions import SessionView
from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
from tests.integration import test_websocket
from tests.integration.test_websocket import connect, j

pytestmark = pytest.mark.skipif(
    not SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14"
)
# the scripted WebSocket upstream and the proxy in front of it, as the session tests have them
wsup, ws_proxy = test_websocket.wsup, test_websocket.ws_proxy
KEY = "ek_68af296e8e408191a1120ab6383263c2"
AUDIO = "UklGRiQAAABXQVZFZm10IBAAAAABAAEA" * 4


async def realtime(ws: web.WebSocketResponse, request: web.Request) -> None:
    """A completed turn (text and audio), then a second one cut by a 1011."""
    await ws.receive()  # response.create
    await ws.send_str(j({"type": "response.created", "response": {"id": "r1"}}))
    await ws.send_str(j({"type": "response.output_text.delta", "response_id": "r1", "delta": "Hi"}))
    await ws.send_str(
        j({"type": "response.output_audio.delta", "response_id": "r1", "delta": AUDIO})
    )
    await ws.send_str(j({"type": "response.done", "response": {"id": "r1", "status": "completed"}}))
    await ws.receive()  # response.create
    await ws.send_str(j({"type": "response.created", "response": {"id": "r2"}}))
    await ws.close(code=1011, message=b"Deadline expired")


async def run_session(base: str) -> None:
    ws = await connect(
        base,
        "/v1/realtime?model=m",
        protocols=("openai-insecure-api-key." + KEY, "realtime"),
        headers={"Authorization": "Bearer " + KEY},
    )
    try:
        await ws.send_str(j({"type": "response.create"}))
        for _ in range(4):
            await ws.receive()
        await ws.send_str(j({"type": "response.create"}))
        while (await ws.receive()).type is not WSMsgType.CLOSE:
            pass
    finally:
        await ws.close()
        await ws.http.close()


def snapshot_of(html: str) -> list[dict[str, Any]]:
    match = re.search(r"const SNAPSHOT = (.*);\n", html)
    assert match
    rows: list[dict[str, Any]] = json.loads(match.group(1))
    return rows


async def test_a_session_is_one_row_its_turns_under_it_and_its_detail_lists_the_messages(
    wsup, ws_proxy, logs
) -> None:
    up, _ = wsup
    up.script = realtime
    up.protocols = ("realtime",)
    base = await ws_proxy(keep_content=True)
    await run_session(base)
    [session] = await logs.wait_sessions()
    first, second = await logs.wait(2)
    sid = session["session_id"]
    async with aiohttp.ClientSession() as http:
        html = await (await http.get(base + "/_sseproxy/")).text()
        resp = await http.get(f"{base}/_sseproxy/sessions/{sid}")
        assert resp.status == 200
        detail = await resp.json()
        missing = await http.get(f"{base}/_sseproxy/sessions/nope")
        assert missing.status == 404
    rows = snapshot_of(html)
    [row] = [r for r in rows if r.get("kind") == "session"]
    assert (row["session_id"], row["state"], row["turns"]) == (sid, "closed", 2)
    assert (row["close_code"], row["close_reason"], row["closed_by"]) == (
        1011,
        "Deadline expired",
        "upstream",
    )
    assert row["last_state"] == "interrupted"
    assert row["messages"] == session["messages"] and row["bytes"] == session["bytes"]
    turns = [r for r in rows if r.get("kind") != "session"]
    assert [(t["request_id"], t["session_id"], t["turn"]) for t in turns] == [
        (first["request_id"], sid, 1),
        (second["request_id"], sid, 2),
    ]

    listed = [(m["direction"], m["kind"], m["type"], m["turn"]) for m in detail["message_list"]]
    assert listed[:8] == [
        ("client", "text", "response.create", None),
        ("upstream", "text", "response.created", 1),
        ("upstream", "text", "response.output_text.delta", 1),
        ("upstream", "text", "response.output_audio.delta", 1),
        ("upstream", "text", "response.done", 1),
        ("client", "text", "response.create", None),
        ("upstream", "text", "response.created", 2),
        ("upstream", "close", "1011", None),
    ]
    times = [m["t_ms"] for m in detail["message_list"]]
    assert times == sorted(times)
    delta, audio = detail["message_list"][2], detail["message_list"][3]
    assert json.loads(delta["data"])["delta"] == "Hi" and delta["truncated"] is False
    assert "data" not in audio and audio["audio"] is True  # audio is never kept, only its size
    assert audio["size"] > len(AUDIO)
    assert detail["close"] == {
        "code": 1011,
        "reason": "Deadline expired",
        "closed_by": "upstream",
        "close_frame": True,
    }
    logged = {k: v for k, v in session.items() if k not in ("event", "level", "timestamp")}
    assert detail["record"] == logged
    assert detail["turn_rows"] == [
        {"turn": 1, "request_id": first["request_id"]},
        {"turn": 2, "request_id": second["request_id"]},
    ]
    handshake = detail["handshake"]
    assert handshake["subprotocol"] == "realtime"
    assert handshake["request_headers"]["Authorization"] == "[redacted]"
    offered = handshake["request_headers"]["Sec-WebSocket-Protocol"]
    assert offered.endswith(",realtime") and "openai-insecure-api-key" not in offered
    assert handshake["response_headers"]["x-codex-turn-state"] == "ts-1"
    assert KEY not in json.dumps(detail) and KEY not in html


async def test_without_keep_content_the_messages_are_listed_without_their_data(
    wsup, ws_proxy, logs
) -> None:
    up, _ = wsup
    up.script = realtime
    base = await ws_proxy()
    await run_session(base)
    [session] = await logs.wait_sessions()
    async with aiohttp.ClientSession() as http:
        detail = await (await http.get(f"{base}/_sseproxy/sessions/{session['session_id']}")).json()
    assert detail["retained"] == "off"
    assert len(detail["message_list"]) >= 8
    assert not any("data" in m for m in detail["message_list"])


async def test_an_inspector_that_raises_never_touches_the_session(
    wsup, ws_proxy, logs, monkeypatch
) -> None:
    up, _ = wsup
    up.script = realtime

    def broken(self: SessionView, *args: Any) -> None:
        raise RuntimeError("inspector bug")

    monkeypatch.setattr(SessionView, "message", broken)
    base = await ws_proxy(keep_content=True)
    await run_session(base)
    [session] = await logs.wait_sessions()
    assert session["messages"] == {"client": 2, "upstream": 5}
    assert session["states"] == {"completed": 1, "interrupted": 1}
    assert session["close_code"] == 1011


async def echo_session(base: str, *texts: str) -> None:
    ws = await connect(base)
    try:
        for text in texts:
            await ws.send_str(text)
            await ws.receive()
    finally:
        await ws.close()
        await ws.http.close()


async def test_the_settings_bound_sessions_messages_and_characters(wsup, ws_proxy, logs) -> None:
    base = await ws_proxy(
        keep_content=True, inspector_sessions=1, inspector_session_messages=4, inspector_chars=10
    )
    await echo_session(base, "a" * 10, "b" * 11, "one more")
    await echo_session(base, "the second session")
    first, second = await logs.wait_sessions(2)
    async with aiohttp.ClientSession() as http:
        gone = await http.get(f"{base}/_sseproxy/sessions/{first['session_id']}")
        assert gone.status == 404  # one more session than inspector_sessions: the oldest went
        detail = await (await http.get(f"{base}/_sseproxy/sessions/{second['session_id']}")).json()
    assert [m["data"] for m in detail["message_list"][:2]] == ["the second", "the second"]
    assert detail["message_list"][0]["truncated"] is True
    base = await ws_proxy(keep_content=True, inspector_session_messages=4, inspector_chars=10)
    await echo_session(base, "a" * 10, "b" * 11, "one more")
    [*_, third] = await logs.wait_sessions(3)
    async with aiohttp.ClientSession() as http:
        detail = await (await http.get(f"{base}/_sseproxy/sessions/{third['session_id']}")).json()
    listed = [(m["direction"], m.get("data"), m.get("truncated")) for m in detail["message_list"]]
    assert listed == [
        ("client", "a" * 10, False),
        ("upstream", "a" * 10, False),
        ("client", "b" * 10, True),
        ("upstream", "b" * 10, True),
    ]
    assert detail["messages_omitted"] >= 2  # "one more" both ways, then the closes


@pytest.mark.parametrize("key", ["inspector_sessions", "inspector_session_messages"])
def test_the_session_bounds_must_be_positive(key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load(None, {}, {key: 0})
