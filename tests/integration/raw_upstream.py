"""Upstreams that write the HTTP response by hand, for faults aiohttp's server cannot make:
a reset right after the headers, a close-delimited HTTP/1.0 body, a Content-Length that lies."""

from __future__ import annotations

import asyncio
import socket
import struct
from dataclasses import dataclass, field

from tests.integration.fake_upstream import AwaitClose, Close, Reset, Send, Sleep

# Older names of the shared steps, kept for the tests that use them.
Body, Pause, Hangup, RST = Send, Sleep, Close, Reset

RawStep = Send | Sleep | Close | Reset


@dataclass
class RawScript:
    steps: list[RawStep]
    framing: str = "chunked"  # "chunked", "http10" (close-delimited) or "length:N"
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/event-stream"})


class LoopbackServer:
    """A TCP server on 127.0.0.1 whose connections `_serve` handles."""

    port = 0
    server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError  # each upstream below plays its own script


class RawUpstream(LoopbackServer):
    def __init__(self) -> None:
        self.script = RawScript([])
        self.requests = 0

    def body(self) -> bytes:
        return b"".join(s.data for s in self.script.steps if isinstance(s, Send))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            self.requests += 1
            await self._respond(self.script, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if not writer.is_closing():
                writer.close()

    async def _respond(self, script: RawScript, writer: asyncio.StreamWriter) -> None:
        version = b"HTTP/1.0" if script.framing == "http10" else b"HTTP/1.1"
        lines = [version + b" %d X" % script.status]
        lines += [f"{k}: {v}".encode() for k, v in script.headers.items()]
        if script.framing == "chunked":
            lines.append(b"Transfer-Encoding: chunked")
        if script.framing.startswith("length:"):
            # A server that lies about the length keeps the connection open: the stray bytes
            # then sit where the next response would start.
            lines.append(b"Content-Length: " + script.framing[7:].encode())
        else:
            lines.append(b"Connection: close")  # one response per connection, said honestly
        writer.write(b"\r\n".join(lines) + b"\r\n\r\n")
        await writer.drain()
        for step in script.steps:
            if isinstance(step, Send):
                data = step.data
                if script.framing == "chunked":
                    data = b"%x\r\n" % len(data) + data + b"\r\n"
                writer.write(data)
                await writer.drain()
            elif isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
            elif isinstance(step, Close):
                writer.close()
                return
            elif isinstance(step, Reset):
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                return
        if script.framing == "chunked":
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        else:
            writer.close()


WireStep = Send | Sleep | Close | Reset | AwaitClose


class WireUpstream(LoopbackServer):
    """Plays `steps` on every connection byte for byte, with no framing of its own: for
    responses no HTTP server would write (broken framing, bad heads, late extra responses)."""

    def __init__(self, steps: list[WireStep] | None = None) -> None:
        self.steps = steps or []
        self.heads: list[bytes] = []
        self.peer_closed = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        steps = self.steps
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            for step in steps:
                if isinstance(step, Send):
                    writer.write(step.data)
                    await writer.drain()
                elif isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                elif isinstance(step, Close):
                    break
                elif isinstance(step, Reset):
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                elif isinstance(step, AwaitClose):
                    while await reader.read(65536):
                        pass
                    self.peer_closed.set()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.peer_closed.set()
        finally:
            if not writer.is_closing():
                writer.close()
