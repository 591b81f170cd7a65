"""One upstream connection as an asyncio.Protocol: it writes a request, parses its response,
and hands the body to a receiver from the data callback itself.

A connection carries one exchange at a time. A byte that arrives while no exchange is
reading (idle in the pool, in quarantine, or after the response's end) poisons it: it is
closed and never reused, so a late response can never answer the next request.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from multidict import CIMultiDict, CIMultiDictProxy

from sseproxy.core import EndReason
from sseproxy.shell.upstream.facts import (
    LIMITS,
    BodyReceiver,
    Limits,
    UpstreamEnd,
    UpstreamFailed,
    bounded,
)
from sseproxy.shell.upstream.parser import Framing, Head, ResponseParser


@dataclass(slots=True)
class PoolStats:
    """Counters the relay or metrics can read: what the isolation rules caught."""

    opened: int = 0
    reused: int = 0
    poisoned: int = 0  # connections closed because a byte came when none was expected
    bytes_after_response: int = 0  # those bytes (and the ones after a response's end)


def _was_reset(exc: BaseException | None) -> bool:
    return isinstance(exc, ConnectionResetError | BrokenPipeError) or (
        isinstance(exc, OSError) and exc.errno in (errno.ECONNRESET, errno.EPIPE)
    )


def _lost_cause(exc: BaseException | None, what: str) -> str:
    if exc is None:
        return f"the upstream closed the connection {what}"
    return bounded(f"connection lost {what}: {type(exc).__name__}: {exc}")


class UpstreamConnection(asyncio.Protocol):
    """The protocol of one upstream connection (plain, TLS, or through a CONNECT tunnel)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        stats: PoolStats,
        *,
        limits: Limits = LIMITS,
    ) -> None:
        self.loop = loop
        self.stats = stats
        self.limits = limits
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.closed = False
        self.poisoned = False
        # Called once the exchange ended: (connection, reusable). The pool sets it.
        self.on_done: Callable[[UpstreamConnection, bool], None] | None = None
        self.on_close: Callable[[UpstreamConnection], None] | None = None

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None or exchange.ended is not None:
            self.stray(len(data))
        elif exchange.hold is not None:
            # The relay has not taken the head yet (or paused before it took all of this):
            # one read held, no more. uvloop reads a socket up to 32 times in one poll, and
            # a kernel buffer that filled while the response waited would all come here.
            exchange.hold.append(data)
            if self.transport is not None:
                self.transport.pause_reading()
        else:
            exchange.feed(data)

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost concludes

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        exchange = self.exchange
        if exchange is not None and exchange.ended is None:
            exchange.lost(exc)
        if self.on_close is not None:
            self.on_close(self)

    # -- for the pool and the exchange --------------------------------------------------------

    def start(self, request: bytes, receiver: BodyReceiver, *, no_body: bool) -> Exchange:
        """Write `request` and read its response (the connection must be free)."""
        assert self.transport is not None and not self.closed
        exchange = Exchange(self, ResponseParser(no_body=no_body, limits=self.limits), receiver)
        self.exchange = exchange
        self.transport.write(request)
        return exchange

    def stray(self, size: int) -> None:
        """Bytes nobody asked for: count them, close, never reuse."""
        self.stats.bytes_after_response += size
        if not self.poisoned:
            self.poisoned = True
            self.stats.poisoned += 1
        self.close()

    def shut_down(self) -> None:
        """Close, ending the exchange under way (if any) as the proxy's shutdown."""
        exchange = self.exchange
        if exchange is not None and exchange.ended is None:
            exchange.fail(EndReason.PROXY_SHUTDOWN, "the proxy is shutting down")
        self.close()

    def close(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.abort()  # unsent bytes and a lingering close are worth nothing here

    @property
    def usable(self) -> bool:
        return not self.closed and not self.poisoned and self.exchange is None

    def finished(self, exchange: Exchange, reusable: bool) -> None:
        if self.exchange is exchange:
            self.exchange = None
        if not reusable:
            self.close()
        if self.on_done is not None:
            self.on_done(self, reusable and self.usable)


class Exchange:
    """One request's response on a connection: its parser, receiver and end."""

    def __init__(
        self, conn: UpstreamConnection, parser: ResponseParser, receiver: BodyReceiver
    ) -> None:
        self.conn = conn
        self.parser = parser
        self.receiver = receiver
        parser.sink = receiver.on_body
        self.head: asyncio.Future[Head] = conn.loop.create_future()
        # Bytes after the head, held until the relay has the response (call_soon), or while
        # it is paused before taking them.
        self.hold: list[bytes] | None = None
        self.lost_with: tuple[Exception | None] | None = None  # connection lost while holding
        self.paused = False
        self.aborted = False
        self.ended: UpstreamEnd | None = None

    def feed(self, data: bytes) -> None:
        parser = self.parser
        rest = parser.feed(data)
        if parser.error is not None:
            self.fail(EndReason.UPSTREAM_PROTOCOL_ERROR, parser.error)
        elif not self.head.done():
            if parser.head is not None:
                self.hold = [rest] if rest else []
                self.head.set_result(parser.head)
                self.conn.loop.call_soon(self.release)
        elif parser.complete:
            self.end(
                UpstreamEnd(
                    complete=True,
                    reason=EndReason.UPSTREAM_CLOSED,
                    trailers=tuple(parser.trailers),
                    bytes_after_end=len(rest),
                )
            )

    def release(self) -> None:
        """Deliver what came with (and after) the head, now that the relay holds the response."""
        held = self.hold
        if held is None or self.paused or self.ended is not None:
            return
        while held:
            data = held.pop(0)
            if self.ended is None:
                self.feed(data)
            else:
                self.conn.stray(len(data))
            if self.paused and self.ended is None and held:
                return  # the receiver paused: the rest waits for resume_reading, in order
        self.hold = None
        transport = self.conn.transport
        if (
            not self.paused
            and self.ended is None
            and transport is not None
            and not transport.is_closing()
        ):
            transport.resume_reading()  # paused while it held
        if self.ended is None and self.parser.complete:
            self.feed(b"")  # a bodiless response (HEAD, 204, 304) ends here
        if self.ended is None and self.lost_with is not None:
            self.lost(self.lost_with[0])

    def lost(self, exc: Exception | None) -> None:
        if self.hold is not None:
            self.lost_with = (exc,)  # concluded once the held bytes are delivered
            return
        reset = _was_reset(exc)
        reason = EndReason.UPSTREAM_RESET if reset else EndReason.UPSTREAM_CLOSED
        if not self.head.done():
            self.fail(reason, _lost_cause(exc, "before the response head"))
        elif self.parser.eof():
            self.feed(b"")  # close-delimited: the close is the body's end
        else:
            self.fail(reason, _lost_cause(exc, "before the body's end"))

    def fail(self, reason: EndReason, cause: str) -> None:
        """The exchange broke: before the head, request() raises; after it, on_end says why."""
        self.conn.close()
        if not self.head.done():
            self.ended = UpstreamEnd(complete=False, reason=reason, cause=bounded(cause))
            self.head.set_exception(UpstreamFailed(reason, cause))
            self.conn.finished(self, reusable=False)
            return
        self.end(UpstreamEnd(complete=False, reason=reason, cause=bounded(cause)))

    def end(self, end: UpstreamEnd) -> None:
        self.ended = end
        self.hold = None
        head = self.parser.head
        reusable = (
            end.complete
            and not end.bytes_after_end
            and not self.aborted
            and head is not None
            and head.keep_alive
            and head.framing is not Framing.CLOSE
        )
        if end.bytes_after_end:
            self.conn.stray(end.bytes_after_end)
        if reusable and self.conn.transport is not None:
            # Paused by the relay, or while it held reads: idle, it must see a stray byte at
            # once (and read the next response).
            self.conn.transport.resume_reading()
        try:
            self.receiver.on_end(end)
        finally:
            self.conn.finished(self, reusable)


class UpstreamResponse:
    """The upstream's final head, and the controls over its body while it flows."""

    def __init__(self, exchange: Exchange, head: Head) -> None:
        self._exchange = exchange
        self.status = head.status
        self.reason = head.reason
        self.version = head.version
        self.raw_headers = head.raw_headers
        self.framing = head.framing  # how the body's end is known (length, chunked, close)
        self.headers = CIMultiDictProxy(
            CIMultiDict(
                (name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))
                for name, value in head.raw_headers
            )
        )

    @property
    def ended(self) -> UpstreamEnd | None:
        """How the body ended, once it has (the value on_end had)."""
        return self._exchange.ended

    def pause_reading(self) -> None:
        """Stop reading the upstream (the client is slow). A read already under way is still
        delivered; nothing else is until `resume_reading`."""
        exchange = self._exchange
        if exchange.ended is None and not exchange.paused:
            exchange.paused = True
            transport = exchange.conn.transport
            if transport is not None and not transport.is_closing():
                transport.pause_reading()

    def resume_reading(self) -> None:
        exchange = self._exchange
        if exchange.ended is None and exchange.paused:
            exchange.paused = False
            transport = exchange.conn.transport
            if transport is not None and not transport.is_closing():
                transport.resume_reading()
            if exchange.hold is not None:
                exchange.conn.loop.call_soon(exchange.release)

    def abort(self, reason: EndReason = EndReason.CLIENT_DISCONNECTED, cause: str = "") -> None:
        """Stop now: the connection is closed, never reused, and on_end gets `reason`.
        Once the response has ended this does nothing (its connection may serve another)."""
        exchange = self._exchange
        if exchange.ended is None:
            exchange.aborted = True
            exchange.conn.close()
            exchange.end(UpstreamEnd(complete=False, reason=reason, cause=bounded(cause)))

    def set_receiver(self, receiver: BodyReceiver) -> None:
        """Who gets the body from now on (before it flows: after request() returns)."""
        self._exchange.receiver = receiver
        self._exchange.parser.sink = receiver.on_body
