"""The upstream leg of a WebSocket session: a connection the proxy owns (opened by the upstream
pool, so through the same egress proxy and trust store as HTTP), websockets' sans-I/O client
protocol on top.

websockets because the relay is exact per message: a text frame's payload is handed over as its
bytes, never checked as UTF-8 (invalid UTF-8 is the peers' business); `max_size` bounds a whole
message across its frames, and after inflating (its permessage-deflate decoder stops at the
limit). A non-101 answer keeps its status, headers and body (up to websockets' 1 MiB body bound;
a longer body is dropped, its status and headers kept). Two things the proxy does
itself: it writes the request head (header values keep the bytes aiohttp read, which need not
be UTF-8), and it drops the pong websockets makes for each ping, because pings and pongs travel
end to end.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidState, InvalidStatus, PayloadTooBig, ProtocolError
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol
from websockets.uri import parse_uri
from yarl import URL

from .upstream import UpstreamPool
from .upstream.parser import ResponseParser

# Bytes of upstream events queued for the client before the proxy stops reading the
# upstream (back-pressure; the TCP window does the rest). One message may be larger: it is
# assembled whole, within the per-message limit.
MAX_QUEUED_BYTES = 1024 * 1024
# The first byte of a pong frame (FIN, opcode 0xA): how websockets' own pong is told apart.
_PONG = 0x8A
# Bytes of the answer to the upgrade kept while it is read: a refusal whose body websockets
# cannot read (over its 1 MiB bound) still reaches the client with its status and headers.
MAX_HEAD_KEPT = 64 * 1024
# websockets' logger for this leg, never at debug level whatever the root's: there websockets
# writes every frame and header it reads (message content, keys) to the log.
_LOG = logging.getLogger("sseproxy.ws_upstream")
_LOG.setLevel(logging.INFO)


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
    """One whole message; text as the bytes that came, UTF-8 or not."""

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

    def __init__(self, ws: ClientProtocol) -> None:
        self.ws = ws
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
        self._text = False  # the kind of the message whose frames are arriving
        self._parts: list[bytes] = []
        self._head = bytearray()  # the answer's first bytes, until the handshake is done

    # -- transport callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if not self.handshake.done() and len(self._head) < MAX_HEAD_KEPT:
            self._head += data[: MAX_HEAD_KEPT - len(self._head)]
        self.ws.receive_data(data)
        self._received()
        if self.queued > MAX_QUEUED_BYTES and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        self.ws.receive_eof()  # a refusal's body may end with the connection
        self._received()
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc)

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    # -- events -----------------------------------------------------------------------------

    def _received(self) -> None:
        ws = self.ws
        for event in ws.events_received():
            if isinstance(event, Response):
                self._answered(event)
            elif isinstance(event, Frame):
                self._frame(event.opcode, bytes(event.data), event.fin)
        # What websockets wrote in answer: the echo of a close, the close of a failure; never
        # its own pong (the client's travels instead).
        self._write([w for w in ws.data_to_send() if w[:1] != bytes((_PONG,))])
        if ws.handshake_exc is not None and not self.handshake.done():
            self._unread(ws.handshake_exc)
        if ws.parser_exc is not None and not self.ended:
            # the upstream broke the protocol or sent too much: it heard why (websockets'
            # close frame, 1009 for a message over the limit); the relay sees the end
            self.too_big = isinstance(ws.parser_exc, PayloadTooBig)
            self._lost(ws.parser_exc)
            if self.transport is not None:
                self.transport.close()  # after the close frame is written

    def _answered(self, response: Response) -> None:
        exc = self.ws.handshake_exc
        if exc is not None and not isinstance(exc, InvalidStatus):
            return  # a 101 that does not hold (key, extension, subprotocol): no session
        headers = [
            (k.encode("ascii"), v.encode("ascii", "surrogateescape"))
            for k, v in response.headers.raw_items()
        ]
        if exc is None:
            names = [str(e.name) for e in self.ws.extensions]
            self._answer(Handshake(101, headers, self.ws.subprotocol, names))
        else:
            self._answer(Handshake(response.status_code, headers, body=response.body or b""))

    def _unread(self, exc: Exception) -> None:
        """websockets could not read the answer. A refusal whose head is sound (its body over
        the bound, or framed as websockets does not read) keeps its status and headers, without
        its body; anything else is no upgrade."""
        parser = ResponseParser(no_body=True)
        parser.feed(bytes(self._head))
        head = parser.head
        if head is not None and head.status != 101:
            self._answer(Handshake(head.status, list(head.raw_headers)))
        else:
            why = exc.__cause__ or exc
            self.handshake.set_exception(ConnectionError(f"invalid upgrade answer: {why}"[:300]))
        self._lost(None)

    def _frame(self, opcode: Opcode, data: bytes, fin: bool) -> None:
        if opcode is Opcode.TEXT or opcode is Opcode.BINARY:
            self._text, self._parts = opcode is Opcode.TEXT, [data]
        elif opcode is Opcode.CONT:
            self._parts.append(data)  # websockets bounds the whole message (`max_size`)
        elif opcode is Opcode.PING:
            self._push(Control("ping", data), 0)
            return
        elif opcode is Opcode.PONG:
            self._push(Control("pong", data), 0)
            return
        else:  # the close frame, parsed by websockets
            close = self.ws.close_rcvd
            code = None if close is None or close.code == 1005 else close.code
            self._push(Control("close", b"", code, close.reason if close else ""), 0)
            return
        if fin:
            message = b"".join(self._parts)
            self._parts = []
            self._push(Message(self._text, message), len(message))

    def _answer(self, handshake: Handshake) -> None:
        self._head = bytearray()
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

    def _write(self, writes: list[bytes]) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        for data in writes:
            if data:  # b"" is websockets' end of stream: the session's end closes it
                transport.write(data)

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

    async def send(self, item: Message | Control) -> None:
        """Write `item`; waits while the upstream's socket buffer is full (back-pressure)."""
        ws = self.ws
        try:
            if isinstance(item, Message):
                (ws.send_text if item.text else ws.send_binary)(item.data)
            elif item.kind == "ping":
                ws.send_ping(item.payload)
            elif item.kind == "pong":
                ws.send_pong(item.payload)
            else:
                ws.send_close(item.code, item.reason if item.code is not None else "")
        except (InvalidState, ProtocolError):
            return  # e.g. a message after the close: the session is ending anyway
        self._write(ws.data_to_send())
        await self.can_write.wait()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def upgrade(
    url: URL,
    subprotocols: Sequence[str],
    deflate: bool,
    headers: list[tuple[bytes, bytes]],
    max_message: int,
) -> tuple[ClientProtocol, bytes]:
    """The client protocol for `url`, and the upgrade request's bytes: websockets' handshake
    headers (key, version, subprotocols, permessage-deflate when the client offered it), then
    the forwarded ones as they came."""
    scheme = "wss" if url.scheme in ("https", "wss") else "ws"
    ws = ClientProtocol(
        # only the host and port matter here: the target is written as the client sent it
        parse_uri(str(url.origin().with_scheme(scheme))),
        subprotocols=[Subprotocol(p) for p in subprotocols] or None,
        extensions=[ClientPerMessageDeflateFactory()] if deflate else None,
        max_size=max_message,
        logger=_LOG,
    )
    request: Request = ws.connect()
    head = [f"GET {url.raw_path_qs} HTTP/1.1".encode()]
    head += [f"{k}: {v}".encode() for k, v in request.headers.raw_items()]
    head += [k + b": " + v for k, v in headers]
    return ws, b"\r\n".join([*head, b"", b""])


async def connect(
    pool: UpstreamPool, url: URL, ws: ClientProtocol, request: bytes, timeout: float
) -> tuple[UpstreamSocket, Handshake]:
    """Connect (the pool's way: egress proxy, TLS, within its connect timeout), send the
    upgrade, and wait for the answer (101 or not) within `timeout`. Raises UpstreamFailed when
    no connection opened, ConnectionError for an answer that is no upgrade nor a refusal."""
    sock = await pool.open_socket(lambda: UpstreamSocket(ws), url)
    try:
        async with asyncio.timeout(timeout):
            assert sock.transport is not None
            sock.transport.write(request)
            return sock, await sock.handshake
    except BaseException:
        sock.abort()
        raise
