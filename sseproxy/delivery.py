"""What the client actually received, and content stalls that keep-alives hide.

Shell side (reads the clock, touches the transport); the relay loop wires these in:

- `ClientDelivery` wraps `response.write(chunk)`: the time writes waited for a slow-reading
  client (back-pressure), the bytes the client's connection accepted, and the last whole event
  written before a break.
- `ContentWatch` ends (or only counts) a stream whose bytes keep arriving, keep-alives or
  pings, while no content delta does: a hung generator behind a pinging server defeats every
  client's read timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from aiohttp import web
from aiohttp.base_protocol import BaseProtocol

from .core import StreamTap

# aiohttp's StreamWriter.write awaits only in `drain()`, and `drain()` waits only while the
# protocol is paused, which asyncio does when the transport's buffer passes its high-water
# mark. A write can therefore wait only if the buffer plus this chunk (plus chunked-encoding
# framing, under this margin) can pass that mark; every other write is timed at no cost.
FRAMING_MARGIN = 64
# Spans of waiting kept for the inspector's timeline. Beyond it only the totals grow.
MAX_WAIT_SPANS = 256


class ClientDelivery:
    """Meters the writes of one response to the client.

    Call `write(chunk)` instead of `response.write(chunk)`, after `response.prepare()`. The
    tap is read lazily: at each write the previous chunk has been written and fed, so its
    event count is what the client holds; a write that fails leaves that snapshot in place.
    """

    __slots__ = (
        "_buffered",
        "_clock",
        "_events",
        "_last_type",
        "_limit",
        "_protocol",
        "_response",
        "_tap",
        "client_bytes",
        "client_wait",
        "failed",
        "last_wait",
        "waits",
    )

    def __init__(
        self,
        request: web.BaseRequest,
        response: web.StreamResponse,
        tap: StreamTap | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._response = response
        self._tap = tap
        self._clock = clock
        transport = request.transport
        protocol = transport.get_protocol() if transport is not None else None
        self._protocol = protocol if isinstance(protocol, BaseProtocol) else None
        # The fast path's test, bound once: buffered() + len(chunk) <= limit.
        self._buffered: Callable[[], int] | None = None
        self._limit = 0
        if isinstance(transport, asyncio.WriteTransport):
            try:
                high = transport.get_write_buffer_limits()[1]
                self._buffered = transport.get_write_buffer_size
                self._limit = high - FRAMING_MARGIN
            except (AttributeError, NotImplementedError):
                self._buffered = None  # unknown: time every write
        self.client_bytes = 0
        self.client_wait = 0.0  # seconds
        # The latest write's wait: the relay subtracts it from the time between two upstream
        # chunks, so max_gap_ms measures the upstream's silence, not the client's slowness.
        self.last_wait = 0.0
        self.waits: list[tuple[float, float]] = []  # (start, seconds) of each wait, capped
        self.failed = False
        self._events = 0
        self._last_type: str | None = None

    async def write(self, chunk: bytes) -> None:
        """`response.write(chunk)`, timed only when it can wait; exceptions pass through."""
        tap = self._tap
        if tap is not None:
            self._events = tap.events
            assembler = tap.assembler
            if assembler is not None:
                self._last_type = assembler.last_event
        buffered, protocol = self._buffered, self._protocol
        if (
            buffered is not None
            and buffered() + len(chunk) <= self._limit
            and (protocol is None or not protocol.writing_paused)
        ):
            self.last_wait = 0.0
            try:
                await self._response.write(chunk)
            except BaseException:
                self.failed = True
                raise
            self.client_bytes += len(chunk)
            return
        started = self._clock()
        try:
            await self._response.write(chunk)
        except BaseException:
            self.failed = True
            raise
        finally:
            waited = self.last_wait = self._clock() - started
            self.client_wait += waited
            if waited > 0 and len(self.waits) < MAX_WAIT_SPANS:
                self.waits.append((started, waited))
        self.client_bytes += len(chunk)

    def broken(self) -> None:
        """The client's connection was gone before the next chunk could be written: what the
        tap holds now is what the client was sent."""
        tap = self._tap
        if tap is not None and not self.failed:
            self._events = tap.events
            assembler = tap.assembler
            if assembler is not None:
                self._last_type = assembler.last_event
        self.failed = True

    @property
    def client_wait_ms(self) -> float:
        return round(self.client_wait * 1000, 3)

    def last_delivered(self) -> tuple[int, str | None]:
        """(whole events the client was sent, the type of the last one)."""
        tap = self._tap
        if self.failed or tap is None:
            return self._events, self._last_type
        assembler = tap.assembler
        return tap.events, assembler.last_event if assembler is not None else self._last_type

    def fields(self, broken: bool) -> dict[str, Any]:
        """The record's fields. `broken`: the client left or the connection broke, so the
        last event delivered is reported (a whole stream delivered needs no such pointer)."""
        out: dict[str, Any] = {
            "client_wait_ms": self.client_wait_ms,
            "client_bytes": self.client_bytes,
        }
        if broken:
            events, last = self.last_delivered()
            out["events_delivered"] = events
            out["last_event_delivered"] = last
        return out


class StallAction(StrEnum):
    LOG = "log"  # count the stall only
    CUT = "cut"  # end the stream as interrupted / content_timeout


class ContentWatch:
    """Notices `timeout` seconds without a content delta while bytes still arrive.

    Like proxy.py's IdleWatch: the relay only stores times (`chunk()`); one timer per period
    checks them. The reference is the last content delta, or the first byte before any
    content. A silence without any byte is the idle timeout's business: the watch only looks
    again a quarter timeout later. In "log" mode each stalled gap is counted once; in "cut"
    mode `on_cut` is called once (the relay closes the upstream, as for the idle timeout).
    """

    __slots__ = (
        "_clock",
        "_counted",
        "_handle",
        "_loop",
        "action",
        "expired",
        "first_byte",
        "last_byte",
        "last_content",
        "on_cut",
        "stalls",
        "timeout",
    )

    def __init__(
        self,
        timeout: float,
        action: StallAction | str,
        on_cut: Callable[[], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout = timeout
        self.action = StallAction(action)
        self.on_cut = on_cut
        self._clock = clock
        self.first_byte: float | None = None
        self.last_byte: float | None = None
        self.last_content: float | None = None
        self.stalls = 0
        self.expired = False
        self._counted: float | None = None  # the reference of the gap already counted
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_later(timeout, self._check)

    def chunk(self, now: float, content_deltas: int) -> None:
        """An upstream chunk arrived at `now`, completing `content_deltas` content deltas."""
        self.last_byte = now
        if content_deltas:
            self.last_content = now
        elif self.first_byte is None:
            self.first_byte = now

    def _check(self) -> None:
        now = self._clock()
        reference = self.last_content if self.last_content is not None else self.first_byte
        if reference is None or self.last_byte is None or self.last_byte <= reference:
            self._arm(self.timeout / 4)  # no byte since: silence, not a content stall
            return
        deadline = reference + self.timeout
        if now < deadline:
            self._arm(deadline - now)
            return
        if self._counted != reference:
            self._counted = reference
            self.stalls += 1
        if self.action is StallAction.CUT:
            self.expired = True
            self.on_cut()
            return
        self._arm(self.timeout)

    def _arm(self, delay: float) -> None:
        self._handle = self._loop.call_later(delay, self._check)

    def stop(self) -> None:
        self._handle.cancel()
