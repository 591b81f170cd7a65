"""A scripted WebSocket upstream: each connection runs `script(ws, request)`, and what it
received (handshake headers, messages, pings, the close) is kept for the test to check.

aiohttp's server with everything automatic turned off, so that the test sees the frames the
proxy sent: no autoping, no autoclose, text kept as bytes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

Script = Callable[[web.WebSocketResponse, web.Request], Awaitable[None]]


@dataclass
class Seen:
    headers: dict[str, str] = field(default_factory=dict)
    path: str = ""
    messages: list[tuple[str, Any]] = field(default_factory=list)  # (kind, data)


async def echo(ws: web.WebSocketResponse, request: web.Request) -> None:
    async for msg in ws:
        if msg.type is WSMsgType.TEXT:
            await ws.send_frame(msg.data, WSMsgType.TEXT)
        elif msg.type is WSMsgType.BINARY:
            await ws.send_bytes(msg.data)


class WsUpstream:
    def __init__(self) -> None:
        self.script: Script = echo
        self.protocols: tuple[str, ...] = ("realtime",)
        self.headers: dict[str, str] = {"x-codex-turn-state": "ts-1", "openai-model": "gpt-x"}
        self.reject: Callable[[], web.Response] | None = None  # a refusal, made per request
        self.seen: list[Seen] = []
        self.max_msg_size = 64 * 1024 * 1024

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        seen = Seen(dict(request.headers), request.path_qs)
        self.seen.append(seen)
        if self.reject is not None:
            return self.reject()
        ws = web.WebSocketResponse(
            protocols=self.protocols,
            autoping=False,
            autoclose=False,
            max_msg_size=self.max_msg_size,
            decode_text=False,
        )
        for name, value in self.headers.items():
            ws.headers[name] = value
        await ws.prepare(request)
        recorder = _Recorder(ws, seen)
        await self.script(recorder, request)  # type: ignore[arg-type]
        return ws


class _Recorder:
    """The upstream's socket, noting every message it receives."""

    def __init__(self, ws: web.WebSocketResponse, seen: Seen) -> None:
        self._ws = ws
        self._seen = seen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ws, name)

    async def receive(self, timeout: float | None = None) -> Any:
        msg = await self._ws.receive(timeout)
        if msg.type is WSMsgType.CLOSE:
            self._seen.messages.append(("close", (msg.data, msg.extra)))
        elif msg.type in (WSMsgType.TEXT, WSMsgType.BINARY, WSMsgType.PING, WSMsgType.PONG):
            self._seen.messages.append((msg.type.name.lower(), msg.data))
        return msg

    def __aiter__(self) -> _Recorder:
        return self

    async def __anext__(self) -> Any:
        msg = await self.receive()
        if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
            raise StopAsyncIteration
        return msg
