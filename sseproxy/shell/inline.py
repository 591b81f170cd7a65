"""The relay's fast path: each upstream chunk written to the client from the upstream
connection's own data callback, with no task switch per chunk.

aiohttp hands a body chunk to its reader through a future: data_received -> feed_data -> wake
the reading task -> the task's next step runs the whole await chain down to `readany()`. For a
proxy that writes every chunk at once, that hand-off is the largest part of its cost per chunk.
While the client's connection takes bytes without pushing back, `InlineRelay` takes each chunk
in the upstream protocol's callback instead (`IsolatedHandler` calls `drain()` after aiohttp has
parsed the bytes), writes it with the framing aiohttp's writer would use, and accounts for it.
The relay task sleeps on one future meanwhile. It wakes when the body ends or fails, when the
client pushes back or is gone, or on an error of ours; then the ordinary loop carries on and
reads what is buffered, raises the upstream's exception, or sees the end, as it always did.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import aiohttp
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_writer import StreamWriter

from ..core import EndReason, StreamTap
from ..delivery import ClientDelivery
from .errors import Ended
from .upstream import IsolatedHandler

if TYPE_CHECKING:
    from ..capture import Capture
    from .relay import IdleWatch

# account(arrived, now, size, content_deltas): the relay's bookkeeping of one written chunk.
Account = Callable[[float, float, int, int], None]


class ClientGone(Exception):
    """The client's connection closed before a chunk could be written to it."""


class InlineRelay:
    """Relays one response's body from the upstream's data callback while nothing pushes back.

    Built by `attach()` only when the relay's loop would do nothing but write and account:
    no drill, an uncompressed body (no analysis backlog), and a client response aiohttp frames
    as chunked or as a body without a length, written by aiohttp's own `StreamWriter`.
    """

    __slots__ = (
        "_account",
        "_again",
        "_capture",
        "_chunked",
        "_client",
        "_content",
        "_delivery",
        "_done",
        "_draining",
        "_error",
        "_handler",
        "_loop",
        "_tap",
        "_watch",
        "_writer",
    )

    def __init__(
        self,
        handler: IsolatedHandler,
        content: aiohttp.StreamReader,
        writer: StreamWriter,
        delivery: ClientDelivery,
        tap: StreamTap,
        capture: Capture | None,
        watch: IdleWatch,
        account: Account,
    ) -> None:
        self._handler = handler
        self._content = content
        self._writer = writer
        self._client = writer.protocol
        self._chunked = writer.chunked
        self._delivery = delivery
        self._tap = tap
        self._capture = capture
        self._watch = watch
        self._account = account
        self._loop = asyncio.get_running_loop()
        self._done: asyncio.Future[None] | None = None
        self._draining = False
        self._again = False
        self._error: BaseException | None = None

    def ready(self) -> bool:
        """Whether the next chunks can go inline: the client takes bytes and the body goes on."""
        return (
            not self._client.writing_paused
            and self._client.transport is not None
            and self._content.exception() is None
            and not self._content.is_eof()
        )

    async def run(self) -> None:
        """Relay inline until the body ends or fails or the client pushes back; raises `Ended`
        when the client is gone. The caller's loop then goes on from where this stopped."""
        self._done = done = self._loop.create_future()
        self._delivery.last_wait = 0.0  # inline writes never wait
        self._handler.inline = self
        try:
            self.drain()  # what arrived while the loop was writing
            if not done.done():
                await done
        finally:
            self._handler.inline = None
            self._done = None
        error, self._error = self._error, None
        if isinstance(error, ClientGone):
            raise Ended(EndReason.CLIENT_DISCONNECTED, str(error)) from error
        if error is not None:
            raise error

    def drain(self) -> None:
        """Take every chunk aiohttp has buffered (called from the upstream's data callback)."""
        done = self._done
        if done is None or done.done():
            return
        if self._draining:
            # Re-entered: taking a chunk can resume aiohttp's reading, which parses what it
            # held back and calls back here. The outer call takes those chunks, in order.
            self._again = True
            return
        content = self._content
        self._draining = True
        try:
            again = True
            while again and content.exception() is None:
                self._again = False
                chunk = content.read_nowait()  # all that is buffered, as `readany()` returns
                if chunk and not self._relay(chunk):
                    return
                again = self._again
            if content.is_eof() or content.exception() is not None:
                self.wake()
        except Exception as exc:  # a bug of ours: the task raises it, nothing else breaks
            self._error = exc
            self.wake()
        finally:
            self._draining = False

    def wake(self) -> None:
        """Hand the body back to the relay's loop (end, failure, back-pressure, closed)."""
        done = self._done
        if done is not None and not done.done():
            done.set_result(None)

    def _relay(self, chunk: bytes) -> bool:
        """Write one chunk and account for it; False when the loop must take over.

        (No first-byte or backlog bookkeeping: the loop wrote the first chunk, and `attach`
        admits no compressed body.)
        """
        arrived = self._watch.last = time.monotonic()
        if self._capture is not None:
            self._capture.chunk(chunk, arrived)
        size = len(chunk)
        client = self._client
        transport = client.transport
        if transport is None or transport.is_closing():
            self._delivery.broken()
            self._account(arrived, arrived, size, self._tap.feed(chunk))  # it did arrive
            self._error = ClientGone("the client's connection closed")
            self.wake()
            return False
        framed = b"".join((b"%x\r\n" % size, chunk, b"\r\n")) if self._chunked else chunk
        transport.write(framed)
        self._writer.output_size += len(framed)
        self._delivery.client_bytes += size
        self._account(arrived, arrived, size, self._tap.feed(chunk))
        if client.writing_paused:
            self.wake()  # the loop's next write waits for the client to read
            return False
        return True


def attach(
    upstream: aiohttp.ClientResponse,
    writer: AbstractStreamWriter | None,
    delivery: ClientDelivery,
    tap: StreamTap,
    capture: Capture | None,
    watch: IdleWatch,
    account: Account,
) -> InlineRelay | None:
    """An `InlineRelay` for this response, or None when only the ordinary loop can relay it."""
    connection = upstream.connection
    handler = connection.protocol if connection is not None else None
    if not isinstance(handler, IsolatedHandler) or type(writer) is not StreamWriter:
        return None
    # What would make aiohttp's writer do more than frame and write: clipping at a length,
    # compression, listeners. (The private two are class attributes, read defensively.)
    if writer.length is not None or writer.on_body_write is not None:
        return None
    if getattr(writer, "_compress", None) is not None:
        return None
    if getattr(writer, "_on_chunk_sent", None) is not None:
        return None
    if upstream.headers.get("Content-Encoding", "identity").lower() != "identity":
        return None  # a compressed body is analysed in slices by the loop
    return InlineRelay(handler, upstream.content, writer, delivery, tap, capture, watch, account)
