"""The upstream leg of a WebSocket session: a connection the proxy owns (opened by the upstream
pool, so through the same egress proxy and trust store as HTTP), websockets' sans-I/O client
protocol on top.

websockets because the relay is exact per message: a text frame's payload is handed over as its
bytes, never checked as UTF-8 (invalid UTF-8 is the peers' business); `max_size` bounds a whole
message across its frames on the wire. permessage-deflate is negotiated by websockets and
inflated here (`inflate.py`), in bounded steps, up to `max_message` bytes per message. A
non-101 answer keeps its status, headers and body (up to websockets' 1 MiB body bound; a
longer body is dropped, its status and headers kept). Two things the proxy does itself: it
writes the request head (header values keep the bytes aiohttp read, which need not be UTF-8),
and it drops the pong websockets makes for each ping, because pings and pongs travel end to
end.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidState, InvalidStatus, PayloadTooBig, ProtocolError
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol
from websockets.uri import parse_uri
from yarl import URL

from sseproxy.shell.budget import HeldBytes
from sseproxy.shell.upstream import UpstreamPool
from sseproxy.shell.upstream.parser import ResponseParser
from sseproxy.shell.websocket.frames import FrameCursor
from sseproxy.shell.websocket.inflate import DeferredDeflate, DeferredDeflateFactory

# Bytes of upstream events queued for the client before the proxy stops reading the
# upstream (back-pressure; the TCP window does the rest). One message may be larger: it is
# assembled whole, within the per-message limit. Each queued item counts its payload plus
# ITEM_OVERHEAD (its objects), so a flood of tiny messages or pings is bounded too.
MAX_QUEUED_BYTES = 1024 * 1024
ITEM_OVERHEAD = 128
# The work done in one loop callback for the upstream (fairness: one peer never holds the
# loop): websockets' parser is handed one frame at a time (`FrameCursor`), and a callback
# stops after MAX_EVENTS_PER_TURN frames or once TURN_INFLATED_BYTES of message data came out
# (a compressed frame is inflated over as many turns as it takes). The rest of the read
# waits, the socket paused, for a later loop iteration. The answer to the upgrade (and a
# refusal's body) is handed over SLICE_BYTES at a time, the head up to its exact end. 16
# frames (and 16 relayed items between yields) keep a loop turn well under a millisecond: with
# 256 and 64, 100,000 pings held health checks for 20 ms (p99) in `bench.fairness`, 10 ms with
# 64 and 16, 6 ms now (100,000 one-byte fragments: 5.1 -> 1.4 ms, in the same time).
# 256 KiB inflate in ~0.5 ms, from reused memory; 1 MiB took ~2.4 ms (fresh pages each time),
# 4-5 ms a turn under the deflate bomb, and held health checks for 13 ms (p99).
MAX_EVENTS_PER_TURN = 16
TURN_INFLATED_BYTES = 256 * 1024
SLICE_BYTES = 4096
# A turn that handled TURN_INFLATED_BYTES lets one loop iteration per TURN_INFLATED_BYTES pass
# before the next, up to this many: a health check or another session needs a few iterations.
MAX_ITERATIONS_OWED = 256
# A message assembled from parts totalling this much or more is joined in a thread (bytes.join
# lets other threads run while it copies): joining 128 MiB holds the loop for about 0.1 s.
JOIN_IN_THREAD = 1024 * 1024
# Items the relay takes (`next`) or sends (`send`) before it lets other tasks run: a queue
# that is never empty would otherwise never suspend the pump.
ITEMS_PER_YIELD = 16
_DATA = (Opcode.TEXT, Opcode.BINARY, Opcode.CONT)
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
    """One upstream WebSocket connection, fed by the transport's callbacks.

    What it holds is bounded: the queue for the relay (MAX_QUEUED_BYTES, and counted in
    `budget`, the proxy's total for sessions) and the unparsed rest of one socket read;
    reading pauses while either waits. Parsing is done in bounded turns (MAX_EVENTS_PER_TURN).
    """

    def __init__(
        self, ws: ClientProtocol, budget: HeldBytes | None = None, max_message: int | None = None
    ) -> None:
        self.ws = ws
        self.budget = budget
        self.max_message = max_message  # inflated bytes of one message (websockets: on the wire)
        self.transport: asyncio.Transport | None = None
        self._loop = loop = asyncio.get_running_loop()
        self.handshake: asyncio.Future[Handshake] = loop.create_future()
        self.items: deque[Item] = deque()
        self.queued = 0  # bytes the queue holds, items' overhead included
        self.in_flight = 0  # the item the relay took last, counted until it takes the next
        self.ready = asyncio.Event()
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.paused = False  # the queue is over its mark: the upstream waits for the relay
        self.ended = False
        self.too_big = False
        self.turns = 0  # callbacks that fed the parser (tests read these two)
        self.most_events = 0  # the most events one callback handled
        self._text = False  # the kind of the message whose frames are arriving
        self._parts: list[bytes] = []
        self._assembled = 0  # bytes in _parts (counted in `budget`, not in `queued`)
        self._deflate: DeferredDeflate | None = None  # permessage-deflate, once negotiated
        self._compressed = False  # the message whose frames are arriving is compressed
        self._fin = False  # the frame being inflated ends its message
        self._blocked = False  # waits for room in `budget` to go on assembling a message
        self._joining = False  # a large message is being joined in a thread: parsing waits
        self._head = bytearray()  # the answer's first bytes, until the handshake is done
        self._unfed = bytearray()  # read from the socket, not yet given to the parser
        self._cursor: FrameCursor | None = None  # frame boundaries, once the upgrade holds
        self._tail = b""  # the last bytes of the answer's head handed over (its end spans reads)
        self._turn_handle: asyncio.Handle | None = None  # the next turn, when scheduled
        self._sharing = False  # waits for the sessions' shared turn (LoopShare)
        self._owed = 0  # loop iterations the next turn waits: the last one inflated this much
        self._reading = True  # the transport's reading, as this protocol last set it
        self._eof = False  # the upstream's end of stream, parsed after what came before it
        self._lost_with: list[Exception | None] = []  # connection_lost, after the unparsed
        self._released = False  # the session ended: the queue no longer counts in `budget`
        self._taken = 0  # items taken / sent since the relay's task last let others run
        self._sent = 0

    # -- transport callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.ended:
            return
        self._unfed += data
        if self._turn_handle is None and not self.paused and not self._owed:
            self._turn()
        else:
            self._schedule()  # (when not already scheduled, nor waiting for the relay)
            self._flow()

    def eof_received(self) -> bool | None:
        self._eof = True  # a refusal's body may end with the connection
        if not self._pending():
            self._input_ended()
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        if self._pending() and not self.ended:
            self._lost_with.append(exc)  # the bytes already read come first
            self._schedule()
            return
        self._lost(exc)

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    # -- bounded parsing --------------------------------------------------------------------

    def _turn(self, granted: bool = False) -> None:
        """Give the parser one bounded batch of what was read; the rest waits for a later
        loop iteration (scheduled here), for the sessions' shared turn (`granted`: it is this
        one's), or for the relay when the queue is over its mark."""
        self._turn_handle = None
        self.turns += 1
        events = inflated = 0
        unfed = self._unfed
        share = self.budget.share if self.budget is not None else None
        while (unfed or self._inflating()) and not self.paused and not self.ended:
            if self._joining:
                break  # `_joined` goes on
            if events >= MAX_EVENTS_PER_TURN or inflated >= TURN_INFLATED_BYTES:
                self._schedule()
                break
            if share is not None and not granted and share.spent_out():
                if not self._sharing:
                    self._sharing = True
                    share.wait(self._share_turn)
                break
            granted = False
            if self._assembled and not self._may_grow():
                break  # `budget` calls back once there is room
            if self._inflating():
                step = self._inflate(TURN_INFLATED_BYTES - inflated)
                inflated += step
                if share is not None:
                    share.spend(step)
                if self._over():
                    self.paused = True
                continue
            n = self._span()
            if n == len(unfed):
                chunk = bytes(unfed)
                unfed.clear()
            else:
                with memoryview(unfed) as view:
                    chunk = bytes(view[:n])
                del unfed[:n]
            if not self.handshake.done() and len(self._head) < MAX_HEAD_KEPT:
                self._head += chunk[: MAX_HEAD_KEPT - len(self._head)]
            self.ws.receive_data(chunk)
            handled, size = self._received()
            events += handled
            inflated += size
            if share is not None:
                share.spend(size + handled * ITEM_OVERHEAD)
            if self._over():
                self.paused = True
        self.most_events = max(self.most_events, events)
        self._owed = min(inflated // TURN_INFLATED_BYTES, MAX_ITERATIONS_OWED)
        if self.ended:
            unfed.clear()
        if not self._pending():
            self._input_ended()
        self._flow()

    def _share_turn(self) -> None:
        """The sessions' shared turn has come to this one."""
        self._sharing = False
        if not self.ended:
            if self._turn_handle is not None:
                self._turn_handle.cancel()
            self._turn(granted=True)

    def _pending(self) -> bool:
        """Read bytes are not all handled yet (parsed, inflated, joined)."""
        return bool(self._unfed) or self._inflating() or self._joining

    def _inflating(self) -> bool:
        deflate = self._deflate
        return deflate is not None and deflate.inflater.busy

    def _may_grow(self) -> bool:
        """Whether the message being assembled may grow now: up to the queue's mark always;
        past it while all sessions together are under their cap, or when this session is the
        one allowed past the cap (so that one message at a time always completes)."""
        budget = self.budget
        if budget is None or self._assembled < MAX_QUEUED_BYTES or not budget.over():
            return True
        if budget.holder is None:
            budget.holder = self
        if budget.holder is self:
            return True
        if not self._blocked:
            self._blocked = True
            budget.wait(self._room)
        return False

    def _room(self) -> None:
        """`budget` has room again (called from another session's accounting)."""
        self._blocked = False
        if not self.ended:
            self._schedule()

    def _let_go(self) -> None:
        """This session holds nothing any more: another may assemble past the cap."""
        budget = self.budget
        if budget is not None and budget.holder is self:
            budget.let_go(self)

    def _inflate(self, room: int) -> int:
        """Inflate up to `room` bytes of the current compressed frame; returns how many."""
        deflate = self._deflate
        assert deflate is not None
        try:
            data = deflate.inflater.step(room)
        except zlib.error:
            deflate.inflater.drop()
            self._fail(CloseCode.PROTOCOL_ERROR, "decompression failed")
            return 0
        if data:
            self._add(data)
        if not deflate.inflater.busy and self._fin and not self.ended:
            self._complete()
        return len(data)

    def _span(self) -> int:
        """How many unparsed bytes to hand websockets next: up to the end of one frame once
        the upgrade holds; before, up to the end of the answer's head (frames follow it)."""
        unfed = self._unfed
        if self._cursor is not None:
            return self._cursor.span(unfed)
        if self.handshake.done():  # a refusal's body: no frames follow
            return min(SLICE_BYTES, len(unfed))
        window = self._tail + bytes(unfed[:SLICE_BYTES])
        end = window.find(b"\r\n\r\n")
        n = end + 4 - len(self._tail) if end >= 0 else min(SLICE_BYTES, len(unfed))
        self._tail = window[: len(self._tail) + n][-3:]
        return n

    def _schedule(self) -> None:
        if self._turn_handle is None and not (self.paused or self._blocked or self._joining):
            self._turn_handle = self._loop.call_soon(self._after, self._owed)

    def _after(self, iterations: int) -> None:
        """The next turn, once `iterations` more loop iterations have run other callbacks."""
        if iterations > 0:
            self._turn_handle = self._loop.call_soon(self._after, iterations - 1)
        else:
            self._turn()

    def _input_ended(self) -> None:
        """Everything read was parsed: now the end of stream and the lost connection."""
        if self._eof and not self.ended:
            self._eof = False
            self.ws.receive_eof()
            self._received()
        while self._lost_with:
            self._lost(self._lost_with.pop())

    def _flow(self) -> None:
        """The socket is read only while nothing waits to be parsed and the queue has room."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        reading = not self.paused and not self._pending()
        if reading != self._reading:
            self._reading = reading
            if reading:
                transport.resume_reading()
            else:
                transport.pause_reading()

    def _over(self) -> bool:
        """The queue is over its mark, or holds anything while all sessions together hold
        more than their cap (the sessions whose clients read on are not stopped)."""
        queued, budget = self.queued, self.budget
        return queued > MAX_QUEUED_BYTES or (queued > 0 and budget is not None and budget.over())

    def _has_room(self) -> bool:
        queued, budget = self.queued, self.budget
        if budget is not None and budget.over():
            # past the cap a session reads on only once its client took everything, the
            # message being written included: a client that stopped reading pins one message
            return queued == 0 and self.in_flight == 0
        return queued <= MAX_QUEUED_BYTES // 2

    # -- events -----------------------------------------------------------------------------

    def _received(self) -> tuple[int, int]:
        """Handle what websockets parsed: (events, bytes of frame data)."""
        ws = self.ws
        events = size = 0
        for event in ws.events_received():
            events += 1
            if isinstance(event, Response):
                self._answered(event)
            elif isinstance(event, Frame):
                data = event.data
                if not self._frame(event.opcode, bytes(data), event.fin):
                    size += len(data)  # (a compressed frame's bytes count as inflated)
                if isinstance(data, bytearray) and event.opcode in _DATA:
                    # websockets' parser keeps its last frame until the next one is read: the
                    # copy above is what the proxy holds, not this one as well
                    data.clear()
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
        return events, size

    def _answered(self, response: Response) -> None:
        exc = self.ws.handshake_exc
        if exc is not None and not isinstance(exc, InvalidStatus):
            return  # a 101 that does not hold (key, extension, subprotocol): no session
        headers = [
            (k.encode("ascii"), v.encode("ascii", "surrogateescape"))
            for k, v in response.headers.raw_items()
        ]
        if exc is None:
            self._cursor = FrameCursor()  # the head ended exactly here: frames from now on
            for extension in self.ws.extensions:
                if isinstance(extension, DeferredDeflate):
                    self._deflate = extension
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

    def _frame(self, opcode: Opcode, data: bytes, fin: bool) -> bool:
        """One frame parsed; True when its payload is compressed (inflated by later turns)."""
        deflate = self._deflate
        if opcode is Opcode.TEXT or opcode is Opcode.BINARY:
            self._text = opcode is Opcode.TEXT
            self._compressed = deflate is not None and deflate.compressed.popleft()
            first = True
        elif opcode is Opcode.CONT:
            first = False  # websockets bounds the message on the wire (`max_size`)
        elif opcode is Opcode.PING:
            self._push(Control("ping", data))
            return False
        elif opcode is Opcode.PONG:
            self._push(Control("pong", data))
            return False
        else:  # the close frame, parsed by websockets
            close = self.ws.close_rcvd
            code = None if close is None or close.code == 1005 else close.code
            self._push(Control("close", b"", code, close.reason if close else ""))
            return False
        if self._compressed and deflate is not None:
            deflate.inflater.start(data, first, fin)
            self._fin = fin
            return True
        if data or fin:
            self._add(data)
        if fin and not self.ended:
            self._complete()
        return False

    def _add(self, data: bytes) -> None:
        """Part of the message being assembled; one over `max_message` ends the session."""
        self._parts.append(data)
        self._assembled += len(data)
        if self.budget is not None and not self._released:
            self.budget.change(len(data))
        if self.max_message is not None and self._assembled > self.max_message:
            self._fail(CloseCode.MESSAGE_TOO_BIG, f"over size limit ({self.max_message} bytes)")

    def _complete(self) -> None:
        parts = self._parts
        if len(parts) > 1 and self._assembled >= JOIN_IN_THREAD:
            try:
                joined = self._loop.run_in_executor(None, b"".join, parts)
            except RuntimeError:  # the loop's executor is shut down (the proxy is stopping)
                pass
            else:
                self._joining = True
                joined.add_done_callback(self._joined)
                return
        self._queue(parts[0] if len(parts) == 1 else b"".join(parts))

    def _joined(self, joined: asyncio.Future[bytes]) -> None:
        self._joining = False
        if self.ended or joined.cancelled():
            return
        self._queue(joined.result())
        if self._pending():
            self._schedule()
        else:
            self._input_ended()
        self._flow()

    def _queue(self, message: bytes) -> None:
        """The message assembled: from now on it counts in the queue."""
        assembled = self._assembled
        self._parts, self._assembled = [], 0
        if self.budget is not None and not self._released:
            self.budget.change(-assembled)
        self._push(Message(self._text, message))

    def _fail(self, code: CloseCode, reason: str) -> None:
        """The upstream sent what ends the session: it hears why (a close frame), the relay
        sees the end (1009 to the client for a message over the limit)."""
        if self.ended:
            return
        self.ws.fail(code, reason)
        self._write([w for w in self.ws.data_to_send() if w[:1] != bytes((_PONG,))])
        self.too_big = code == CloseCode.MESSAGE_TOO_BIG
        self._drop_message()
        self._lost(None)
        if self.transport is not None:
            self.transport.close()  # after the close frame is written

    def _drop_message(self) -> None:
        if self._deflate is not None:
            self._deflate.inflater.drop()
        if self._assembled and self.budget is not None and not self._released:
            self.budget.change(-self._assembled)
        self._parts, self._assembled = [], 0

    def _answer(self, handshake: Handshake) -> None:
        self._head = bytearray()
        if not self.handshake.done():
            self.handshake.set_result(handshake)

    def _push(self, item: Item) -> None:
        self.items.append(item)
        self._count(_size(item))
        self.ready.set()

    def _count(self, delta: int) -> None:
        self.queued += delta
        if self.budget is not None and not self._released:
            self.budget.change(delta)

    def _lost(self, exc: BaseException | None) -> None:
        if self.ended:
            return
        self.ended = True
        self._unfed.clear()
        self._drop_message()
        if not self.handshake.done():
            self.handshake.set_exception(
                ConnectionError(f"upstream closed during the handshake: {exc!r}"[:300])
            )
        self._push(None)

    def _write(self, writes: list[bytes]) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        for data in writes:
            if data:  # b"" is websockets' end of stream: the session's end closes it
                transport.write(data)

    # -- the relay's side -------------------------------------------------------------------

    async def next(self) -> Item:
        """The next message or control, in order; None once the connection ended. The one
        returned still counts in `budget` until the relay asks for the next (it is being
        written to the client meanwhile). Lets other tasks run every ITEMS_PER_YIELD items
        taken without waiting."""
        self._take(0)  # the previous one was written
        if not self.queued and not self._assembled:
            self._let_go()
        self._resume()
        if self._taken >= ITEMS_PER_YIELD:
            self._taken = 0
            await asyncio.sleep(0)
        while not self.items:
            self._taken = 0
            self.ready.clear()
            await self.ready.wait()
        share = self.budget.share if self.budget is not None else None
        if share is not None and share.spent_out():  # others' turn first
            self._taken = 0
            await share.turn()
        self._taken += 1
        item = self.items.popleft()
        size = _size(item)
        if share is not None:
            share.spend(size)
        self._count(-size)
        self._take(size)
        self._resume()
        return item

    def _resume(self) -> None:
        if self.paused and self._has_room():
            self.paused = False
            if self._pending():
                self._schedule()  # the rest of the last read first, then the socket again
            self._flow()

    def _take(self, size: int) -> None:
        """Count `size` bytes as the item the relay is writing (in `budget` only)."""
        if self.budget is not None and not self._released:
            self.budget.change(size - self.in_flight)
        self.in_flight = size

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
        self._sent += 1
        if not self.can_write.is_set():
            self._sent = 0
            await self.can_write.wait()
        elif self._sent >= ITEMS_PER_YIELD:
            self._sent = 0
            await asyncio.sleep(0)  # the client's messages were queued: let others run

    def abort(self) -> None:
        """End the connection now (the session is over, or mirrors a client that left):
        what was read and not parsed is dropped, and the queue no longer counts."""
        self._unfed.clear()
        self.release()
        if self.transport is not None:
            self.transport.abort()

    def forget(self) -> None:
        """The session is over (after `abort`): drop what is queued and any message being
        assembled now, not when this object is collected (a cancelled session's frames may
        keep it until the cyclic collector runs)."""
        self.release()
        self.items.clear()
        self.queued = self.in_flight = 0
        self._unfed = bytearray()
        self._head = bytearray()

    def release(self) -> None:
        if not self._released:
            self._drop_message()
            self._released = True
            if self.budget is not None:
                self.budget.change(-self.queued - self.in_flight)
            self._let_go()


def _size(item: Item) -> int:
    """What a queued item counts for: its payload and its objects."""
    if isinstance(item, Message):
        return len(item.data) + ITEM_OVERHEAD
    if isinstance(item, Control):
        return len(item.payload) + len(item.reason) + ITEM_OVERHEAD
    return 0


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
        extensions=[DeferredDeflateFactory()] if deflate else None,
        max_size=max_message,
        logger=_LOG,
    )
    request: Request = ws.connect()
    head = [f"GET {url.raw_path_qs} HTTP/1.1".encode()]
    head += [f"{k}: {v}".encode() for k, v in request.headers.raw_items()]
    head += [k + b": " + v for k, v in headers]
    return ws, b"\r\n".join([*head, b"", b""])


async def connect(
    pool: UpstreamPool,
    url: URL,
    ws: ClientProtocol,
    request: bytes,
    timeout: float,
    budget: HeldBytes | None = None,
    max_message: int | None = None,
) -> tuple[UpstreamSocket, Handshake]:
    """Connect (the pool's way: egress proxy, TLS, within its connect timeout), send the
    upgrade, and wait for the answer (101 or not) within `timeout`. Raises UpstreamFailed when
    no connection opened, ConnectionError for an answer that is no upgrade nor a refusal.
    `budget`: the proxy's count of bytes held by sessions, this one's queue included."""
    sock = await pool.open_socket(lambda: UpstreamSocket(ws, budget, max_message), url)
    try:
        async with asyncio.timeout(timeout):
            assert sock.transport is not None
            sock.transport.write(request)
            return sock, await sock.handshake
    except BaseException:
        sock.abort()
        raise
