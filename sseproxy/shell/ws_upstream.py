"""The upstream leg of a WebSocket session: a connection the proxy owns, wsproto on top.

wsproto (sans-I/O) because the upstream's answer must reach the client as it was: a non-101
answer keeps its status, headers and body (aiohttp's client raises and drops the body), and
no ping is answered here (wsproto leaves pongs to its caller: ping/pong stay end to end).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.extensions import PerMessageDeflate
from wsproto.utilities import LocalProtocolError, RemoteProtocolError
from yarl import URL

from .upstream.connect import tls_context

# Bytes of upstream events queued for the client before the proxy stops reading the
# upstream (back-pressure; the TCP window does the rest). One message may be larger: it is
# assembled whole, within the per-message limit.
MAX_QUEUED_BYTES = 1024 * 1024
# Bytes of a non-101 answer's body kept for the client; a longer body is cut there.
MAX_REJECT_BODY = 1024 * 1024


class TooBig(Exception):
    """A message beyond the per-message limit."""


@dataclass(slots=True)
class Handshake:
    """The upstream's answer to the upgrade."""

    status: int
    headers: list[tuple[bytes, bytes]]
    subprotocol: str | None = None
    extensions: list[str] = field(default_factory=list)
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Message:
    """One whole message; text as its UTF-8 bytes."""

    text: bool
    data: bytes


@dataclass(frozen=True, slots=True)
class Control:
    """A ping, a pong, or the close frame (code None: a close frame without a status)."""

    kind: str  # "ping" | "pong" | "close"
    payload: bytes = b""
    code: int | None = None
    reason: str = ""


Item = Message | Control | None  # None: the connection ended without a close frame


class UpstreamSocket(asyncio.Protocol):
    """One upstream WebSocket connection, fed by the transport's callbacks."""

    def __init__(self, max_message: int) -> None:
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.max_message = max_message
        self.transport: asyncio.Transport | None = None
        self.handshake: asyncio.Future[Handshake] = asyncio.get_running_loop().create_future()
        self.items: deque[Item] = deque()
        self.queued = 0
        self.ready = asyncio.Event()
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.paused = False
        self.ended = False
        self.too_big = False
        self._parts: list[bytes] = []
        self._size = 0
        self._reject: Handshake | None = None

    # -- transport callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.ws.receive_data(data)
            for event in self.ws.events():
                self._on(event)
        except TooBig as exc:  # the upstream hears why, as the client does: 1009
            self.too_big = True
            self._lost(exc)
            if self.transport is not None:
                with contextlib.suppress(LocalProtocolError):
                    self.transport.write(self.ws.send(CloseConnection(1009, "message too big")))
                self.transport.close()  # after the close frame is written
        except (RemoteProtocolError, LocalProtocolError) as exc:
            self._lost(exc)
            if self.transport is not None:
                self.transport.abort()
        if self.queued > MAX_QUEUED_BYTES and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc)

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    # -- events -----------------------------------------------------------------------------

    def _on(self, event: Event) -> None:
        if isinstance(event, AcceptConnection):
            headers = list(event.extra_headers)
            names = [str(getattr(e, "name", e)) for e in event.extensions]
            self._answer(Handshake(101, headers, event.subprotocol, names))
        elif isinstance(event, RejectConnection):
            self._reject = Handshake(event.status_code, list(event.headers))
            if not event.has_body:
                self._answer(self._reject)
        elif isinstance(event, RejectData):
            if self._reject is not None:
                if len(self._reject.body) < MAX_REJECT_BODY:
                    room = MAX_REJECT_BODY - len(self._reject.body)
                    self._reject.body += bytes(event.data)[:room]
                if event.body_finished:
                    self._answer(self._reject)
        elif isinstance(event, TextMessage | BytesMessage):
            part = event.data.encode() if isinstance(event, TextMessage) else bytes(event.data)
            self._size += len(part)
            if self._size > self.max_message:
                raise TooBig(f"message over {self.max_message} bytes")
            self._parts.append(part)
            if event.message_finished:
                data = b"".join(self._parts)
                self._parts, self._size = [], 0
                self._push(Message(isinstance(event, TextMessage), data), len(data))
        elif isinstance(event, Ping):
            self._push(Control("ping", bytes(event.payload)), 0)
        elif isinstance(event, Pong):
            self._push(Control("pong", bytes(event.payload)), 0)
        elif isinstance(event, CloseConnection):
            code = None if event.code == 1005 else int(event.code)
            self._push(Control("close", b"", code, event.reason or ""), 0)

    def _answer(self, handshake: Handshake) -> None:
        if not self.handshake.done():
            self.handshake.set_result(handshake)

    def _push(self, item: Item, size: int) -> None:
        self.items.append(item)
        self.queued += size
        self.ready.set()

    def _lost(self, exc: BaseException | None) -> None:
        if self.ended:
            return
        self.ended = True
        if not self.handshake.done():
            self.handshake.set_exception(
                ConnectionError(f"upstream closed during the handshake: {exc!r}"[:300])
            )
        self._push(None, 0)

    # -- the relay's side -------------------------------------------------------------------

    async def next(self) -> Item:
        """The next message or control, in order; None once the connection ended."""
        while not self.items:
            self.ready.clear()
            await self.ready.wait()
        item = self.items.popleft()
        if isinstance(item, Message):
            self.queued -= len(item.data)
        if self.paused and self.queued <= MAX_QUEUED_BYTES // 2 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return item

    async def send(self, event: Event) -> None:
        """Write `event`; waits while the upstream's socket buffer is full (back-pressure)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        try:
            transport.write(self.ws.send(event))
        except LocalProtocolError:
            return  # e.g. a message after the close: the session is ending anyway
        await self.can_write.wait()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def request_event(
    url: URL, subprotocols: Sequence[str], deflate: bool, headers: list[tuple[bytes, bytes]]
) -> Request:
    host = url.raw_host or ""
    if not url.is_default_port() and url.port is not None:
        host = f"{host}:{url.port}"
    return Request(
        host=host,
        target=url.raw_path_qs,
        subprotocols=list(subprotocols),
        extensions=[PerMessageDeflate()] if deflate else [],
        extra_headers=headers,
    )


@functools.cache
def _default_tls() -> ssl.SSLContext:
    """The HTTP leg's trust store (the system's and certifi's), built once."""
    return tls_context()


async def connect(
    url: URL,
    request: Request,
    max_message: int,
    timeout: float,
    tls: ssl.SSLContext | None,
) -> tuple[UpstreamSocket, Handshake]:
    """Connect, send the upgrade, and wait for the answer (101 or not), within `timeout`."""
    loop = asyncio.get_running_loop()
    secure = url.scheme in ("https", "wss")
    host = url.raw_host or ""
    port = url.port or (443 if secure else 80)
    async with asyncio.timeout(timeout):
        _, sock = await loop.create_connection(
            lambda: UpstreamSocket(max_message),
            host,
            port,
            ssl=(tls or _default_tls()) if secure else None,
            server_hostname=host if secure else None,
        )
        assert sock.transport is not None
        sock.transport.write(sock.ws.send(request))
        try:
            return sock, await sock.handshake
        except BaseException:
            sock.abort()
            raise
