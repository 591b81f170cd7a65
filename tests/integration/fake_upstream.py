"""A scripted fake upstream: each test says exactly which bytes go out, when, and how it ends.

The steps (Send, Sleep, WaitFor, Close, Reset, AwaitClose) are the one vocabulary of both fake
upstreams: this aiohttp one, and the byte-level ones in raw_upstream.py."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class Send:
    data: bytes


@dataclass(frozen=True)
class WaitFor:
    event: asyncio.Event


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Close:
    """Close the connection without ending the HTTP body (no final chunk)."""


@dataclass(frozen=True)
class Reset:
    """Abort the connection with a TCP RST."""


@dataclass(frozen=True)
class AwaitClose:
    """Wait until the proxy closes the connection (raw_upstream.WireUpstream only)."""


Step = Send | WaitFor | Sleep | Close | Reset


@dataclass
class Script:
    steps: Sequence[Step] = ()
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/event-stream"})
    content_length: bool = False
    reset_before_headers: bool = False


@dataclass
class Seen:
    """What the upstream received, for assertions on forwarding."""

    method: str
    path_qs: str
    headers: dict[str, str]
    body: bytes
    raw_path: str = ""  # the request target as it arrived, undecoded
    peer: Any = None  # the proxy's address: the same one twice means a reused connection


class FakeUpstream:
    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.seen: list[Seen] = []
        self.finished: dict[str, asyncio.Event] = {}
        self.disconnected: dict[str, asyncio.Event] = {}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    def script(self, path: str, script: Script) -> None:
        self.scripts[path] = script
        self.finished[path] = asyncio.Event()
        self.disconnected[path] = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(
            Seen(
                request.method,
                request.path_qs,
                dict(request.headers),
                body,
                request.raw_path,
                request.transport.get_extra_info("peername") if request.transport else None,
            )
        )
        script = self.scripts.get(request.path) or self.scripts["*"]
        if request.method == "HEAD":
            script = Script(status=script.status, headers=script.headers)
        key = request.path if request.path in self.scripts else "*"
        if script.reset_before_headers:
            _reset(request)
            raise asyncio.CancelledError
        total = sum(len(s.data) for s in script.steps if isinstance(s, Send))
        response = web.StreamResponse(status=script.status, headers=script.headers)
        if script.content_length:
            response.content_length = total
        try:
            await response.prepare(request)
            for step in script.steps:
                if isinstance(step, Send):
                    await response.write(step.data)
                elif isinstance(step, WaitFor):
                    await step.event.wait()
                elif isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                elif isinstance(step, Close):
                    assert request.transport is not None
                    request.transport.close()
                    return response
                elif isinstance(step, Reset):
                    _reset(request)
                    return response
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnected[key].set()
            raise
        finally:
            self.finished[key].set()
        return response


def _reset(request: web.Request) -> None:
    transport: Any = request.transport
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
