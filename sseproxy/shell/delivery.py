"""What the client actually received, and content stalls that keep-alives hide.

Shell side (reads the clock, touches the transport); the relay wires these in:

- `ClientDelivery` is the client's side of one response: its writes (synchronous through the
  accelerator when it is on, else `await response.write()`), the bytes held for the client
  (its transport's write buffer), the time spent waiting for a client that did not read, the
  bytes its connection accepted, and the last whole event written before a break.
- `ContentWatch` ends (or only counts) a stream whose bytes keep arriving, keep-alives or
  pings, while no content delta does: a hung generator behind a pinging server defeats every
  client's read timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import warnings
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from aiohttp import web

from sseproxy.core import StreamTap
from sseproxy.shell import accelerator

# Spans of waiting kept for the inspector's timeline. Beyond it only the totals grow.
MAX_WAIT_SPANS = 256


class ClientDelivery:
    """Writes and meters one response to the client, after `response.prepare()`.

    The tap is read lazily: at each write the previous chunk has been written and fed, so its
    event count is what the client holds; a write that fails leaves that snapshot in place.
    `mark` is the most bytes the client's transport may buffer before a write waits for it
    (its high-water mark is set to it).
    """

    __slots__ = (
        "_chunked",
        "_clock",
        "_events",
        "_last_type",
        "_marked",
        "_response",
        "_tap",
        "_transport",
        "client_bytes",
        "client_wait",
        "direct",
        "failed",
        "last_wait",
        "started",
        "waits",
    )

    def __init__(
        self,
        request: web.BaseRequest,
        response: web.StreamResponse,
        tap: StreamTap | None = None,
        *,
        mark: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._response = response
        self._tap = tap
        self._clock = clock
        # asyncio's transport API (uvloop's transports have it too, without subclassing).
        self._transport = transport = request.transport
        if transport is not None and mark is not None:
            # A transport without limits: aiohttp's own waits stay as they were.
            with contextlib.suppress(AttributeError, NotImplementedError):
                transport.set_write_buffer_limits(high=mark)
            cap_send_buffer(transport, mark // 2)  # the kernel keeps twice what it is given
        self._chunked = response.chunked
        # Chunks may be framed and written here (`write_now`) once aiohttp has sent the head:
        # a chunked response, or an HTTP/1.0 one that ends with the connection.
        self.direct = (
            accelerator.enabled()
            and transport is not None
            and (response.chunked or (request.version < (1, 1) and response.content_length is None))
        )
        self.started = False  # the head went out with the first write
        self.client_bytes = 0
        self.client_wait = 0.0  # seconds
        # The latest wait: the relay subtracts it from the time between two upstream chunks,
        # so max_gap_ms measures the upstream's silence, not the client's slowness.
        self.last_wait = 0.0
        self.waits: list[tuple[float, float]] = []  # (start, seconds) of each wait, capped
        self.failed = False
        self._events = 0
        self._last_type: str | None = None
        self._marked = False  # the tap counts the snapshot's events once it analysed them

    def held(self) -> int:
        """Bytes written for the client that its connection has not taken yet."""
        transport = self._transport
        return transport.get_write_buffer_size() if transport is not None else 0

    def gone(self) -> bool:
        transport = self._transport
        return transport is None or transport.is_closing()

    def _snapshot(self) -> None:
        tap = self._tap
        if tap is not None:
            # Analysis may trail the bytes (a large read, analysed a slice at a time): then
            # the tap counts the events within what was fed so far once it gets there.
            self._marked = tap.mark_fed()
            self._events = tap.events
            assembler = tap.assembler
            if assembler is not None:
                self._last_type = assembler.last_event

    def write_now(self, chunk: bytes) -> bool:
        """Frame and write `chunk` at once (only while `direct` and `started`); False when
        the client's connection is gone, and nothing was written."""
        transport = self._transport
        if transport is None or transport.is_closing():
            self.broken()
            return False
        self._snapshot()
        self.last_wait = 0.0
        transport.write(accelerator.frame(chunk, self._chunked))
        self.client_bytes += len(chunk)
        return True

    async def write(self, chunk: bytes) -> None:
        """`response.write(chunk)`, timed; exceptions pass through."""
        self._snapshot()
        started = self._clock()
        try:
            await self._response.write(chunk)
        except BaseException:
            self.failed = True
            raise
        finally:
            self._waited(started)
        self.started = True
        self.client_bytes += len(chunk)

    async def drain(self) -> None:
        """Wait until the client's connection has taken most of what it holds (timed)."""
        started = self._clock()
        try:
            with warnings.catch_warnings():
                # aiohttp marks `drain` deprecated in favour of `write`, which waits only past
                # its own count of bytes; the accelerator's bytes are not in that count.
                warnings.simplefilter("ignore", DeprecationWarning)
                await self._response.drain()
        except BaseException:
            self.failed = True
            raise
        finally:
            self._waited(started)

    def _waited(self, started: float) -> None:
        waited = self.last_wait = self._clock() - started
        self.client_wait += waited
        if waited > 0 and len(self.waits) < MAX_WAIT_SPANS:
            self.waits.append((started, waited))

    def broken(self) -> None:
        """The client's connection was gone before the next chunk could be written: what the
        tap holds now is what the client was sent."""
        if not self.failed:
            self._snapshot()
        self.failed = True

    @property
    def client_wait_ms(self) -> float:
        return round(self.client_wait * 1000, 3)

    def last_delivered(self) -> tuple[int, str | None]:
        """(whole events the client was sent, the type of the last one)."""
        tap = self._tap
        if self.failed or tap is None:
            if self._marked and tap is not None and tap.at_mark is not None:
                return tap.at_mark
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


def cap_send_buffer(transport: Any, size: int) -> None:
    """Cap the kernel's send buffer for the client (SO_SNDBUF `size`: Linux keeps twice it).

    Left alone it grows by itself to megabytes (tcp_wmem's maximum, 4 MiB by default), and
    every byte of it is relayed and analysed before a client that stopped reading pushes
    back: 300 such clients cost the loop seconds, and the kernel a gigabyte. An LLM stream
    needs no more than the mark in flight. A socket that refuses keeps the kernel's default.
    """
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError, AttributeError, ValueError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)


class StallAction(StrEnum):
    LOG = "log"  # count the stall only
    CUT = "cut"  # end the stream as interrupted / content_timeout


class ContentWatch:
    """Notices `timeout` seconds without a content delta while bytes still arrive.

    Like the relay's IdleWatch: the relay only stores times (`chunk()`); one timer per period
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
