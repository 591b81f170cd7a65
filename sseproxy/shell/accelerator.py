"""Writing a body chunk to the client synchronously, from the upstream's data callback.

`StreamResponse.write` is a coroutine: called per chunk it costs a task hop. Once aiohttp has
sent the response head (the first write), the rest of a chunked body is only each chunk framed
as RFC 9112 §7.1 says, written to `request.transport`; for an HTTP/1.0 client, the bytes as
they are. That is an assumption about the running aiohttp, so it is checked once, at startup,
against the real thing (`probe`: a response written both ways over a socket pair); when it does
not hold, every chunk goes through `await response.write()` and nothing else changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from aiohttp import web

# The probe's body: a first chunk through aiohttp (it carries the head), one written here,
# one more through aiohttp after it, then aiohttp's end.
FIRST, OURS, LAST = b"ab", b"cde", b"fghi"
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

    loop = asyncio.get_running_loop()
    server = web.Server(handler)
    ours, theirs = socket.socketpair()
    try:
        transport, _ = await loop.connect_accepted_socket(server, ours)
        reader, writer = await asyncio.open_connection(sock=theirs)
        try:
            writer.write(
                f"GET / HTTP/{version}\r\nHost: probe\r\nConnection: close\r\n\r\n".encode()
            )
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                raw = await reader.read(-1)
        finally:
            writer.close()
            transport.close()
    finally:
        await server.shutdown(0)
        ours.close()
        theirs.close()
    return chunked, raw.partition(b"\r\n\r\n")[2]


class Detection:
    """Whether `frame` + `transport.write` may stand in for `response.write` (decided once)."""

    enabled: bool | None = None


async def detect() -> bool:
    """Run the probe once per process (`proxy.started` says the outcome); any failure of the
    probe means off."""
    if Detection.enabled is None:
        enabled = False
        with contextlib.suppress(Exception):
            chunked, body = await probe("1.1")
            plain, body10 = await probe("1.0")
            enabled = (
                chunked
                and body == expected_body(True)
                and not plain
                and body10 == expected_body(False)
            )
        Detection.enabled = enabled
    return Detection.enabled


def enabled() -> bool:
    """The detection's outcome (False before it ran)."""
    return bool(Detection.enabled)
