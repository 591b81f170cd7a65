"""A host that is not intercepted: its bytes carried both ways untouched, with flow control
(each side stops being read while the other's write buffer is above `HIGH_WATER`), and one
`connect.finished` line when both sides are done: bytes each way, duration, who closed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, cast

# Bytes buffered for one side before the other side stops being read (per direction).
HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024


class Side(asyncio.Protocol):
    """One connection of the pair; what it receives is written to its peer's transport."""

    def __init__(self, name: str, tunnel: Tunnel) -> None:
        self.name = name  # "client" or "upstream"
        self.tunnel = tunnel
        self.transport: asyncio.Transport | None = None
        self.peer: Side | None = None
        self.received = 0
        self.eof = False
        self.lost = False
        self._paused_peer = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport instances, though they are one
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        transport.set_write_buffer_limits(HIGH_WATER, LOW_WATER)

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.lost:
            peer.transport.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        self.tunnel.closed(self.name)
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.lost:
            if peer.eof:  # both halves are closed
                self.tunnel.close()
                return False
            if peer.transport.can_write_eof():
                peer.transport.write_eof()
                return True  # the other direction still flows
        return False

    def pause_writing(self) -> None:  # our write buffer is full: stop reading the peer
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.lost:
            peer.transport.pause_reading()
            self._paused_peer = True

    def resume_writing(self) -> None:
        peer = self.peer
        if self._paused_peer and peer is not None and peer.transport is not None:
            self._paused_peer = False
            if not peer.lost:
                peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.tunnel.closed(self.name, exc)
        self.tunnel.close()


class Tunnel:
    """The pair; `done` resolves when both sides are closed."""

    def __init__(self, on_done: Callable[[Tunnel], Any]) -> None:
        self.client = Side("client", self)
        self.upstream = Side("upstream", self)
        self.client.peer, self.upstream.peer = self.upstream, self.client
        self.started = time.monotonic()
        self.closed_by: str | None = None
        self.error: str | None = None
        self._on_done = on_done
        self._reported = False

    def closed(self, side: str, exc: BaseException | None = None) -> None:
        if self.closed_by is None:
            self.closed_by = side
            if exc is not None:
                self.error = f"{type(exc).__name__}: {exc}"

    def close(self, by: str | None = None) -> None:
        """Close both sides; `by`: who is closing, when neither side has ("proxy")."""
        if by is not None and self.closed_by is None:
            self.closed_by = by
        for side in (self.client, self.upstream):
            if side.transport is not None and not side.transport.is_closing():
                side.transport.close()
        if self.client.lost and self.upstream.lost and not self._reported:
            self._reported = True
            self._on_done(self)

    @property
    def duration_ms(self) -> float:
        return round((time.monotonic() - self.started) * 1000, 3)
