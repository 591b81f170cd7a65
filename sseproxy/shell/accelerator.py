"""Writing a body chunk to the client synchronously, from the upstream's data callback.

`StreamResponse.write` is a coroutine: called per chunk it costs a task hop. Once aiohttp has
sent the response head (the first write), the rest of a chunked body is only each chunk framed
as RFC 9112 §7.1 says, written to `request.transport`; for an HTTP/1.0 client, the bytes as
they are. That is an assumption about the running aiohttp, so it is checked once, at startup,
against the real thing (`probe`: a response written both ways over a socket pair); when it does
not hold, every chunk goes through `await response.write()` and nothing else changes.

Trailers: aiohttp has no API for a trailer section, and its own end is always a bare
`0 CRLF CRLF`. A response that forwards trailers (its head said `Connection: close`) ends here
instead: the last chunk and its trailer section written to the transport, then the transport
closed, so aiohttp's last chunk has no connection to go to and it ends as for a client that
left (`end_with_trailers`). That too is probed once (`probe_trailers`); when it does not hold,
trailers are recorded and not forwarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable

from aiohttp import web

# The probe's body: a first chunk through aiohttp (it carries the head), one written here,
# one more through aiohttp after it, then aiohttp's end.
FIRST, OURS, LAST = b"ab", b"cde", b"fghi"
# The trailer probe's end: the last chunk with one trailer field.
TRAILER_END = b"0\r\nx-probe: 1\r\n\r\n"
PROBE_TIMEOUT_S = 5.0


def frame(chunk: bytes, chunked: bool) -> bytes:
    """One chunk as it travels: `size-in-hex CRLF data CRLF` when chunked, else unchanged."""
    return b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk


def expected_body(chunked: bool) -> bytes:
    """The bytes after the head if aiohttp frames as `frame` does and the writes interleave."""
    if not chunked:
        return FIRST + OURS + LAST
    return frame(FIRST, True) + frame(OURS, True) + frame(LAST, True) + b"0\r\n\r\n"


async def probe(version: str) -> tuple[bool, bytes]:
    """(`response.chunked` once enabled, the body bytes after the head) of one response
    written by aiohttp and by `frame` in turn, to an HTTP/`version` client over a socket pair."""
    chunked = False

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        nonlocal chunked
        response = web.StreamResponse()
        if request.version >= (1, 1):
            response.enable_chunked_encoding()
        await response.prepare(request)
        chunked = response.chunked
        await response.write(FIRST)
        transport = request.transport
        assert transport is not None
        transport.write(frame(OURS, chunked))
        await response.write(LAST)
        await response.write_eof()
        return response

    raw = await _exchange(handler, f"GET / HTTP/{version}\r\nHost: probe\r\nConnection: close")
    return chunked, raw.partition(b"\r\n\r\n")[2]


async def probe_trailers() -> tuple[bytes, bytes]:
    """(the head, the body bytes) of a chunked response ended by `end_with_trailers`, to a
    keep-alive HTTP/1.1 client over a socket pair."""

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        response.force_close()
        await response.prepare(request)
        await response.write(FIRST)
        end_with_trailers(request.transport, TRAILER_END)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    raw = await _exchange(handler, "GET / HTTP/1.1\r\nHost: probe\r\nTE: trailers")
    head, _, body = raw.partition(b"\r\n\r\n")
    return head, body


def trailers_hold(head: bytes, body: bytes) -> bool:
    """What `probe_trailers` must see: the head said the connection closes, and the body is
    aiohttp's chunk then exactly our end, nothing after it."""
    fields = [line.lower() for line in head.split(b"\r\n")[1:]]
    return b"connection: close" in fields and body == frame(FIRST, True) + TRAILER_END


def end_with_trailers(transport: asyncio.Transport | None, end: bytes) -> bool:
    """Write `end` (the last chunk and its trailer section) and close the connection, its
    buffer flushed first; False when the connection was already gone (nothing written)."""
    if transport is None or transport.is_closing():
        return False
    transport.write(end)
    transport.close()
    return True


async def _exchange(
    handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]], head: str
) -> bytes:
    """What an aiohttp server with `handler` sends for one request with `head`, read to its
    close, over a socket pair."""
    loop = asyncio.get_running_loop()
    server = web.Server(handler)
    ours, theirs = socket.socketpair()
    try:
        transport, _ = await loop.connect_accepted_socket(server, ours)
        reader, writer = await asyncio.open_connection(sock=theirs)
        try:
            writer.write(head.encode() + b"\r\n\r\n")
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                return await reader.read(-1)
        finally:
            writer.close()
            transport.close()
    finally:
        await server.shutdown(0)
        ours.close()
        theirs.close()


class Detection:
    """Whether `frame` + `transport.write` may stand in for `response.write`, and whether
    `end_with_trailers` may end a response (decided once)."""

    enabled: bool | None = None
    trailers = False


async def detect() -> bool:
    """Run the probes once per process (`proxy.started` says the outcome); any failure of a
    probe means off."""
    if Detection.enabled is None:
        enabled = trailers = False
        with contextlib.suppress(Exception):
            chunked, body = await probe("1.1")
            plain, body10 = await probe("1.0")
            enabled = (
                chunked
                and body == expected_body(True)
                and not plain
                and body10 == expected_body(False)
            )
        if enabled:
            with contextlib.suppress(Exception):
                trailers = trailers_hold(*await probe_trailers())
        Detection.enabled, Detection.trailers = enabled, trailers
    return Detection.enabled


def enabled() -> bool:
    """The detection's outcome (False before it ran)."""
    return bool(Detection.enabled)


def trailers_enabled() -> bool:
    """Whether a response may end with the upstream's trailers (needs the accelerator)."""
    return bool(Detection.enabled) and Detection.trailers
