"""`sseproxy mock` serving recorded WebSocket sessions: an upgrade is answered by playing the
upstream's side of a session capture. Each upstream message waits for the client message
that preceded it in the recording (so a client's `response.create` triggers the recorded
turn), then for its recorded gap (scaled by `--speed`); the session ends as it did: the
recorded close code and reason, an abort when no close frame came, or the client's own close
when the client closed first."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import WSMessage, WSMsgType, web

from sseproxy.capture.format import unfinished
from sseproxy.capture.sessions import MESSAGES_SUFFIX, line_data, load_session, with_audio
from sseproxy.core.sessions.base import parse_message

# Seconds the mock waits for a client's close frame once it sent its own.
CLOSE_TIMEOUT = 10.0
_DONE = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)


@dataclass(frozen=True, slots=True)
class AwaitClient:
    """The recording's client sent a message here: wait for the live client's next one."""

    at_ms: float


@dataclass(frozen=True, slots=True)
class SendUpstream:
    data: bytes
    text: bool
    at_ms: float


@dataclass(frozen=True, slots=True)
class Ending:
    """How the session ended: `by_client` (wait for the client's close), else a close frame
    (`frame`, with `code` None for one without a status) or an abort."""

    by_client: bool = False
    frame: bool = False
    code: int | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class SessionRecording:
    """A session to serve. `name` is `dialect/stem`, like a stream's."""

    name: str
    dialect: str
    subprotocol: str | None
    steps: tuple[AwaitClient | SendUpstream, ...]
    ending: Ending


def _upstream_data(line: dict[str, Any], data: bytes) -> bytes:
    """The message as sent: audio the capture left out comes back as silence of its size."""
    sizes = line.get("audio_bytes")
    if not isinstance(sizes, list):
        return data
    return orjson.dumps(with_audio(parse_message(data), [s for s in sizes if isinstance(s, int)]))


def from_session(path: Path) -> SessionRecording:
    file = load_session(path)
    steps: list[AwaitClient | SendUpstream] = []
    for line in file.lines:
        if line.get("kind") not in ("text", "binary"):
            continue  # pings and pongs are the live peers' own; the close is the ending
        at = float(line.get("t_ms") or 0.0)
        if line.get("dir") == "client":
            steps.append(AwaitClient(at))
            continue
        data = line_data(line)
        if data is not None:
            steps.append(SendUpstream(_upstream_data(line, data), line["kind"] == "text", at))
    session = file.session
    if file.sidecar.get("truncated") or unfinished(file.sidecar):
        ending = Ending()  # stored only in part: served cut, as a cut HTTP capture is
    elif session.get("closed_by") == "client":
        ending = Ending(by_client=True)
    else:
        code = session.get("close_code")
        ending = Ending(
            frame=session.get("close_frame") is True,
            code=code if isinstance(code, int) else None,
            reason=str(session.get("close_reason") or ""),
        )
    dialect = str(file.sidecar.get("dialect") or "websocket")
    handshake = file.sidecar.get("handshake")
    subprotocol = handshake.get("subprotocol") if isinstance(handshake, dict) else None
    return SessionRecording(
        name=f"{dialect}/{path.stem}",
        dialect=dialect,
        subprotocol=subprotocol if isinstance(subprotocol, str) else None,
        steps=tuple(steps),
        ending=ending,
    )


def is_messages_file(path: Path) -> bool:
    """A session capture's messages file (served through its sidecar, never as a body)."""
    name = path.name
    return (
        name.endswith(MESSAGES_SUFFIX)
        and path.with_name(name.removesuffix(MESSAGES_SUFFIX) + ".json").is_file()
    )


async def play_session(
    request: web.Request, recording: SessionRecording, speed: float, say: Callable[[str], None]
) -> web.WebSocketResponse:
    """Answer the upgrade and play the recording's upstream side. A client that leaves
    mid-message is one line (`say`), as for streams."""
    ws = web.WebSocketResponse(
        protocols=(recording.subprotocol,) if recording.subprotocol else (),
        autoclose=False,  # a client's close is answered with its own code, as servers do
        timeout=CLOSE_TIMEOUT,
    )
    await ws.prepare(request)
    try:
        await _play(request, ws, recording, speed)
    except ConnectionError as exc:
        say(f"sseproxy mock: the client left session {recording.name} ({type(exc).__name__})")
    return ws


async def _play(
    request: web.Request, ws: web.WebSocketResponse, recording: SessionRecording, speed: float
) -> None:
    last = 0.0
    for step in recording.steps:
        if isinstance(step, AwaitClient):
            msg = await ws.receive()
            while msg.type in (WSMsgType.PING, WSMsgType.PONG):
                msg = await ws.receive()
            if msg.type in _DONE:
                await _answer(ws, msg)
                return  # the client left before the recording's end
        elif speed:
            await asyncio.sleep(max(0.0, (step.at_ms - last) / 1000 / speed))
        last = step.at_ms
        if isinstance(step, SendUpstream):
            await ws.send_frame(step.data, WSMsgType.TEXT if step.text else WSMsgType.BINARY)
    ending = recording.ending
    if ending.by_client:
        msg = await ws.receive()
        while msg.type not in _DONE:
            msg = await ws.receive()
        await _answer(ws, msg)
    elif ending.frame and ending.code is not None:
        await ws.close(code=ending.code, message=ending.reason.encode())
    elif ending.frame:  # a close frame without a status, sent as one
        await ws.send_frame(b"", WSMsgType.CLOSE)
    elif request.transport is not None:
        request.transport.abort()  # no close frame came: none comes now


async def _answer(ws: web.WebSocketResponse, msg: WSMessage) -> None:
    """Echo a client's close frame (its code and reason), as the upstream did."""
    if msg.type is WSMsgType.CLOSE:
        await ws.close(code=msg.data or 1000, message=(msg.extra or "").encode())
