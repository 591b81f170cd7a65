"""WebSocket sessions captured through the proxy (`--capture DIR`): the messages file and its
sidecar, their bounds and their secrets, and `sseproxy replay` of them."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType, web

from sseproxy.capture.sessions import MESSAGES_SUFFIX, SessionCapture, load_session
from sseproxy.config import load
from sseproxy.shell.app import STATE, create_app
from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
from tests.integration.ws_upstream import WsUpstream

pytestmark = pytest.mark.skipif(
    not SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14"
)
REALTIME = "/v1/realtime?model=gpt-realtime"
GEMINI = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"


def j(obj: Any) -> str:
    return json.dumps(obj)


@pytest.fixture
async def wsup(aiohttp_server) -> tuple[WsUpstream, str]:
    up = WsUpstream()
    server = await aiohttp_server(up.app())
    return up, str(server.make_url("")).rstrip("/")


@pytest.fixture
def capturing(aiohttp_server, logs, wsup, tmp_path: Path) -> Any:
    """A proxy capturing into tmp_path: (its URL, its app)."""

    async def make(**overrides: Any) -> tuple[str, web.Application]:
        settings = load(None, {}, {"upstream": wsup[1], "capture_dir": str(tmp_path), **overrides})
        app = create_app(settings)
        server = await aiohttp_server(app)
        return str(server.make_url("")).rstrip("/"), app

    return make


async def realtime_two_turns(ws: web.WebSocketResponse, request: web.Request) -> None:
    """A completed turn, then the upstream closes with 1011 while the second is open."""
    await ws.send_str(j({"type": "session.created", "session": {"id": "sess_1"}}))
    await ws.receive()  # response.create
    await ws.send_str(j({"type": "response.created", "response": {"id": "r1"}}))
    await ws.send_str(j({"type": "response.output_text.delta", "response_id": "r1", "delta": "Hi"}))
    await ws.send_str(j({"type": "response.done", "response": {"id": "r1", "status": "completed"}}))
    await ws.receive()  # the second response.create
    await ws.send_str(j({"type": "response.created", "response": {"id": "r2"}}))
    await ws.close(code=1011, message=b"Deadline expired")


async def drive_realtime(base: str, path: str = REALTIME, **kw: Any) -> list[Any]:
    """The client's side of `realtime_two_turns`: what it received, to the close."""
    got: list[Any] = []
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(base + path, autoclose=False, **kw) as ws,
    ):
        await ws.receive()  # session.created
        await ws.send_str(j({"type": "response.create", "response": {"instructions": "secret"}}))
        for _ in range(3):
            got.append(json.loads((await ws.receive()).data)["type"])
        await ws.send_str(j({"type": "response.create"}))
        got.append(json.loads((await ws.receive()).data)["type"])
        close = await ws.receive()
        got.append((close.type, close.data, close.extra))
    return got


async def saved(app: web.Application, logs, directory: Path) -> Path:
    await logs.wait_sessions()
    await app[STATE].captures.drain()  # written in a worker thread
    [sidecar] = directory.glob("*.json")
    return sidecar


def replay(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sseproxy", "replay", str(path), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_realtime_session_is_captured_and_replays_to_its_turn_states(
    wsup, capturing, logs, tmp_path: Path
) -> None:
    up, _ = wsup
    up.script = realtime_two_turns
    base, app = await capturing()
    got = await drive_realtime(base, protocols=("realtime",))
    assert got[-1] == (WSMsgType.CLOSE, 1011, "Deadline expired")
    path = await saved(app, logs, tmp_path)
    [session] = logs.sessions()
    file = load_session(path)
    assert path.with_name(path.stem + MESSAGES_SUFFIX).is_file()
    assert file.sidecar["session_id"] == session["session_id"]
    assert path.name.endswith(f"-{session['session_id']}.json")
    assert file.session["states"] == {"completed": 1, "interrupted": 1}
    assert [r["state"] for r in file.sidecar["turn_records"]] == ["completed", "interrupted"]
    assert file.sidecar["handshake"]["subprotocol"] == "realtime"
    assert file.sidecar["handshake"]["response_headers"]["x-codex-turn-state"] == "ts-1"
    assert file.sidecar["truncated"] is False
    kinds = [(line["dir"], line["kind"], line.get("name")) for line in file.lines]
    assert kinds == [
        ("upstream", "text", "session.created"),
        ("client", "text", "response.create"),
        ("upstream", "text", "response.created"),
        ("upstream", "text", "response.output_text.delta"),
        ("upstream", "text", "response.done"),
        ("client", "text", "response.create"),
        ("upstream", "text", "response.created"),
        ("upstream", "close", None),
    ]
    times = [line["t_ms"] for line in file.lines]
    assert times == sorted(times) and times[0] >= 0
    close = file.lines[-1]
    assert (close["code"], close["reason"]) == (1011, "Deadline expired")
    # the client's messages hold prompts: without --capture-request-bodies, only their facts
    client = file.lines[1]
    assert "data" not in client and client["size"] > 0
    assert "secret" not in path.with_name(path.stem + MESSAGES_SUFFIX).read_text()
    assert json.loads(file.lines[3]["data"])["delta"] == "Hi"

    result = await asyncio.to_thread(replay, path)
    assert result.returncode == 0, result.stderr
    *turns, summary = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(t["turn"], t["state"]) for t in turns] == [(1, "completed"), (2, "interrupted")]
    assert turns[1]["interruption"]["reason"] == "upstream_closed"
    assert turns[1]["error"]["code"] == "1011"
    assert summary["session"]["reproduced"] is True
    assert summary["session"]["close_code"] == 1011


async def test_client_messages_are_kept_with_capture_request_bodies(
    wsup, capturing, logs, tmp_path: Path
) -> None:
    up, _ = wsup
    up.script = realtime_two_turns
    base, app = await capturing(capture_request_bodies=True)
    await drive_realtime(base)
    file = load_session(await saved(app, logs, tmp_path))
    client = file.lines[1]
    assert json.loads(client["data"])["response"]["instructions"] == "secret"


async def test_a_gemini_live_session_replays_to_its_turn_states(
    wsup, capturing, logs, tmp_path: Path
) -> None:
    up, _ = wsup
    audio = base64.b64encode(bytes(960)).decode()

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.receive()  # setup
        await ws.send_bytes(j({"setupComplete": {}}).encode())
        await ws.receive()  # clientContent
        part = {"inlineData": {"mimeType": "audio/pcm;rate=24000", "data": audio}}
        await ws.send_bytes(j({"serverContent": {"modelTurn": {"parts": [part]}}}).encode())
        await ws.send_bytes(j({"serverContent": {"generationComplete": True}}).encode())
        await ws.send_bytes(j({"serverContent": {"turnComplete": True}}).encode())
        await ws.send_bytes(
            j({"serverContent": {"modelTurn": {"parts": [{"text": "a"}]}}}).encode()
        )
        await ws.send_bytes(j({"serverContent": {"interrupted": True}}).encode())
        await ws.send_bytes(j({"serverContent": {"turnComplete": True}}).encode())
        await ws.close(code=1000)

    up.script = script
    base, app = await capturing()
    async with aiohttp.ClientSession() as http, http.ws_connect(base + GEMINI) as ws:
        await ws.send_str(j({"setup": {"model": "models/gemini-live"}}))
        await ws.receive()
        await ws.send_str(j({"clientContent": {"turnComplete": True}}))
        while (await ws.receive()).type is not WSMsgType.CLOSE:
            pass
    path = await saved(app, logs, tmp_path)
    file = load_session(path)
    first = logs.records()[0]
    assert (first["state"], first["audio_bytes"]) == ("completed", 960)
    # audio is counted, never kept: its base64 replaced by "", its size said
    [media] = [line for line in file.lines if line.get("audio_bytes")]
    assert media["audio_bytes"] == [960] and audio not in json.dumps(file.lines)
    assert media["kind"] == "binary" and media["size"] > len(media["data"])
    result = await asyncio.to_thread(replay, path)
    assert result.returncode == 0, result.stderr
    *turns, summary = [json.loads(line) for line in result.stdout.splitlines()]
    assert [t["state"] for t in turns] == ["completed", "cancelled"]
    assert turns[0]["audio_bytes"] == 960 and turns[0]["bytes"] == first["bytes"]
    assert summary["session"]["dialect"] == "gemini-live"


async def test_a_capture_cut_at_its_cap_says_so_and_replays_partial(
    wsup, capturing, logs, tmp_path: Path
) -> None:
    up, _ = wsup
    up.script = realtime_two_turns
    base, app = await capturing(capture_max_bytes=400)
    await drive_realtime(base)
    path = await saved(app, logs, tmp_path)
    file = load_session(path)
    assert file.sidecar["truncated"] is True
    assert file.sidecar["truncated_reason"] == "capture_max_bytes"
    at = file.sidecar["truncated_at"]
    assert len(file.lines) == at == file.sidecar["messages"] < file.sidecar["messages_seen"]
    assert sum(len(line.get("data", "")) + 64 for line in file.lines) <= 400
    result = await asyncio.to_thread(replay, path)
    assert result.returncode == 3
    assert "partial capture" in result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["partial_capture"] == {"truncated_at": at, "reason": "capture_max_bytes"}


def test_one_message_more_than_the_cap_is_not_kept() -> None:
    from sseproxy.capture.format import CaptureSettings
    from sseproxy.capture.sessions import LINE_OVERHEAD, Direction, Kind

    cap = SessionCapture(CaptureSettings(Path("."), max_bytes=LINE_OVERHEAD + 10), "s", 0.0)
    cap.message(Direction.UPSTREAM, Kind.TEXT, b"x" * 10, 0.0)
    assert (len(cap.lines), cap.truncated_at) == (1, None)
    cap.message(Direction.UPSTREAM, Kind.TEXT, b"", 0.0)
    cap.message(Direction.UPSTREAM, Kind.TEXT, b"y", 0.0)  # fits no more, nor does any later
    assert (len(cap.lines), cap.truncated_at, cap.seen) == (1, 1, 3)


async def test_the_directory_cap_deletes_the_oldest_session_captures(
    wsup, capturing, logs, tmp_path: Path
) -> None:
    up, _ = wsup
    up.script = realtime_two_turns
    base, app = await capturing(capture_max_total_bytes=12_000)
    for n in range(1, 6):
        await drive_realtime(base)
        await logs.wait_sessions(n)
        await app[STATE].captures.drain()
    files = list(tmp_path.iterdir())
    assert sum(f.stat().st_size for f in files) <= 12_000
    sidecars = list(tmp_path.glob("*.json"))
    assert 0 < len(sidecars) < 5
    assert len(list(tmp_path.glob("*" + MESSAGES_SUFFIX))) <= len(sidecars) + 1


async def test_an_unwritable_capture_dir_leaves_sessions_relayed(
    wsup, aiohttp_server, logs, tmp_path: Path
) -> None:
    up, target = wsup
    up.script = realtime_two_turns
    blocker = tmp_path / "file"
    blocker.write_text("")
    settings = load(None, {}, {"upstream": target, "capture_dir": str(blocker / "sub")})
    server = await aiohttp_server(create_app(settings))
    got = await drive_realtime(str(server.make_url("")).rstrip("/"))
    assert got[-1] == (WSMsgType.CLOSE, 1011, "Deadline expired")
    assert "capture.disabled" in "".join(logs.stream.history)


async def test_a_capture_that_fails_never_touches_the_session(
    wsup, capturing, logs, tmp_path: Path, monkeypatch
) -> None:
    up, _ = wsup
    up.script = realtime_two_turns

    def broken(*args: Any) -> None:
        raise RuntimeError("capture bug")

    monkeypatch.setattr(SessionCapture, "message", broken)
    base, _ = await capturing()
    got = await drive_realtime(base)
    assert got == [
        "response.created",
        "response.output_text.delta",
        "response.done",
        "response.created",
        (WSMsgType.CLOSE, 1011, "Deadline expired"),
    ]
    [session] = await logs.wait_sessions()
    assert session["states"] == {"completed": 1, "interrupted": 1}


async def test_keys_appear_in_no_capture_file(wsup, capturing, logs, tmp_path: Path) -> None:
    up, _ = wsup
    key = "ek_68af296e8e408191a1120ab6383263c2"
    bearer = "sk-proj-Zq9Yw8Xv7Ut6Sr5Qp4On3Ml2Kj1Ih0Gf"
    goog = "goog0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    up.protocols = ("realtime", "openai-insecure-api-key." + key)

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        msg = await ws.receive()
        # an upstream that echoes what it got, keys and all (as error messages do)
        await ws.send_str(j({"type": "error", "error": {"message": f"bad {key} {goog}"}}))
        await ws.send_frame(msg.data, WSMsgType.TEXT)
        await ws.send_bytes(b"\xff" + bearer.encode())
        await ws.close(code=4000, message=f"no {goog}".encode())

    up.script = script
    base, app = await capturing(capture_request_bodies=True)
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(
            base + f"/v1/realtime?model=m&key={goog}",
            protocols=("openai-insecure-api-key." + key, "realtime"),
            headers={"Authorization": f"Bearer {bearer}", "x-goog-api-key": goog},
            autoclose=False,
        ) as ws,
    ):
        await ws.send_str(j({"type": "session.update", "note": f"{key} {bearer} {goog}"}))
        while (await ws.receive()).type is not WSMsgType.CLOSE:
            pass
    path = await saved(app, logs, tmp_path)
    files = list(tmp_path.iterdir())
    assert len(files) == 2
    for f in files:
        written = f.read_bytes()
        for secret in (key, bearer, goog):
            assert secret.encode() not in written, (f.name, secret)
            assert base64.b64encode(secret.encode()) not in written
    file = load_session(path)
    stars = " ".join("*" * len(s) for s in (key, bearer, goog))
    assert json.loads(file.lines[0]["data"])["note"] == stars  # masked with as many bytes
    assert len(file.lines[0]["data"]) == file.lines[0]["size"]


async def test_a_responses_session_replays_from_its_client_messages_names(
    wsup, capturing, logs, tmp_path: Path
) -> None:
    """The Responses judge opens a turn per client `response.create`: without request bodies
    the capture keeps that name, and the replay finds the same turns."""
    up, _ = wsup
    error = {"type": "error", "status": 429, "error": {"code": "rate_limit_exceeded"}}

    async def script(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.receive()
        await ws.send_str(j(error))
        await ws.receive()

    up.script = script
    base, app = await capturing()
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(base + "/v1/responses") as ws,
    ):
        await ws.send_str(j({"type": "response.create", "input": "a prompt"}))
        await ws.receive()
    path = await saved(app, logs, tmp_path)
    assert "a prompt" not in path.with_name(path.stem + MESSAGES_SUFFIX).read_text()
    result = await asyncio.to_thread(replay, path)
    assert result.returncode == 0, result.stderr
    [turn, summary] = [json.loads(line) for line in result.stdout.splitlines()]
    assert (turn["state"], turn["status"]) == ("http_error", 429)
    assert summary["session"]["recorded_states"] == ["http_error"]


async def test_replay_refuses_options_that_do_not_apply_to_sessions(
    wsup, capturing, logs, tmp_path: Path
) -> None:
    up, _ = wsup
    up.script = realtime_two_turns
    base, app = await capturing()
    await drive_realtime(base)
    path = await saved(app, logs, tmp_path)
    result = await asyncio.to_thread(replay, path, "--chunk-size", "1")
    assert result.returncode == 2
    assert "--chunk-size" in result.stderr and result.stdout == ""


async def test_the_inspector_links_a_sessions_capture_and_serves_its_files(
    wsup, capturing, logs, tmp_path: Path
) -> None:
    up, _ = wsup
    up.script = realtime_two_turns
    base, app = await capturing()
    await drive_realtime(base, protocols=("realtime",))
    sidecar = await saved(app, logs, tmp_path)
    [session] = logs.sessions()
    sid = session["session_id"]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/_sseproxy/sessions/{sid}") as resp:
            detail = await resp.json()
        capture = detail["capture"]
        assert capture["file"] == sidecar.name
        assert capture["replay"] == f"sseproxy replay {sidecar}"
        async with http.get(f"{base}/_sseproxy/{capture['sidecar']}") as resp:
            assert resp.status == 200
            assert await resp.read() == sidecar.read_bytes()
        async with http.get(f"{base}/_sseproxy/{capture['body']}") as resp:
            assert resp.status == 200
            messages = sidecar.with_name(json.loads(sidecar.read_text())["messages_file"])
            assert await resp.read() == messages.read_bytes()
