"""A hostile upstream for `bench.fairness`: one peer that tries to hold the proxy's event loop or
its memory, over HTTP/1.1 and WebSocket, on loopback.

`python -m bench.hostile_upstream PORT`. Raw asyncio, so that WebSocket frames are exactly the
bytes written here (100,000 one-byte fragments or pings in 64 KiB writes, permessage-deflate
payloads crafted to inflate a thousandfold). The query's `bench=` names what to send:

- `ws-fragments`: one text message as `n` frames of one byte (default 100,000), then a close.
- `ws-pings`: `n` empty pings, then a text message `{"type":"bench.done"}`, then a close.
- `ws-deflate-bomb`: needs permessage-deflate (a 1008 close when it was not offered): messages
  of `mib` MiB of spaces each (`sizes=127,127,129`), about 1 KB of deflate per MiB, then a close.
- `ws-deflate-memory`: one such message of `mib` MiB, then the session stays open.
- `ws-flood`: text messages of `kib` KiB, up to `mib` MiB in all, as fast as the proxy reads.
- `gzip-bomb` (HTTP): an SSE body of `mib` MiB of blank lines, `Content-Encoding: gzip`.
- `stream` (HTTP): `mib` MiB of 64 KiB SSE events, as fast as the proxy reads.
- `ledger` (HTTP): `events` plain SSE events, each with an `id` of `id_kib` KiB.

Every session ends by itself: after its messages the upstream closes, or waits at most
`LINGER_S` for the proxy to close first.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
import sys
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from urllib.parse import parse_qs, urlsplit

MIB = 1024 * 1024
WRITE_BYTES = 64 * 1024  # "large writes": many tiny frames per socket write
LINGER_S = 60.0  # the longest a finished session waits for the proxy to close it
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
DEFLATE_EXTENSION = "permessage-deflate; server_no_context_takeover"
FRAGMENT_HEAD = b'{"type":"response.output_text.delta","delta":"'
FRAGMENT_TAIL = b'"}'


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]

    def number(self, name: str, default: int) -> int:
        return int(self.query.get(name, default))


# --- payloads ---------------------------------------------------------------------------------


def _gf2_times(matrix: list[int], vector: int) -> int:
    total, row = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[row]
        vector >>= 1
        row += 1
    return total


def _gf2_square(matrix: list[int]) -> list[int]:
    return [_gf2_times(matrix, matrix[n]) for n in range(32)]


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """zlib's crc32_combine (Python's zlib lacks it): the CRC-32 of A + B from theirs and
    B's length, so a GiB-long gzip trailer costs microseconds, not seconds of crc32."""
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << n for n in range(31)]  # the operator for one zero bit
    even = _gf2_square(odd)
    odd = _gf2_square(even)
    while True:
        even = _gf2_square(odd)
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _gf2_square(even)
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


def crc32_repeated(block: bytes, times: int) -> int:
    """The CRC-32 of `block * times`, in O(log times) combines."""
    result, result_len = 0, 0
    power, power_len = zlib.crc32(block), len(block)
    while times:
        if times & 1:
            result = crc32_combine(result, power, power_len) if result_len else power
            result_len += power_len
        times >>= 1
        if times:
            power = crc32_combine(power, power, power_len)
            power_len *= 2
    return result


@cache
def deflate_block(byte: bytes) -> bytes:
    """1 MiB of `byte`, raw deflate ending in a full flush (byte-aligned, history reset): the
    same ~1 KB whatever precedes it, so N of them in a row inflate to N MiB."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(byte * MIB) + compressor.flush(zlib.Z_FULL_FLUSH)


def deflate_bomb_payload(mib: int) -> bytes:
    """A permessage-deflate payload that inflates to `mib` MiB of spaces (RFC 7692: the
    trailing 00 00 ff ff of the final flush is left off)."""
    return (deflate_block(b" ") * mib)[:-4]


@cache
def gzip_bomb(mib: int) -> bytes:
    """A gzip body of `mib` MiB of newlines (blank lines), about 1 KB per MiB."""
    block = deflate_block(b"\n")
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    final = b"\x03\x00"  # an empty final block with fixed Huffman codes
    trailer = struct.pack("<II", crc32_repeated(b"\n" * MIB, mib), (mib * MIB) & 0xFFFFFFFF)
    return header + block * mib + final + trailer


def ws_frame(opcode: int, payload: bytes, fin: bool = True, rsv1: bool = False) -> bytes:
    """One unmasked frame, as a server sends it."""
    first = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
    n = len(payload)
    if n < 126:
        return bytes([first, n]) + payload
    if n < 65536:
        return bytes([first, 126]) + struct.pack("!H", n) + payload
    return bytes([first, 127]) + struct.pack("!Q", n) + payload


def close_frame(code: int, reason: str = "") -> bytes:
    return ws_frame(0x8, struct.pack("!H", code) + reason.encode())


def fragments(n: int) -> bytes:
    """One text message as `n` frames: a JSON head, n - 2 frames of one byte, a JSON tail."""
    middle = ws_frame(0x0, b"x", fin=False) * max(n - 2, 0)
    return ws_frame(0x1, FRAGMENT_HEAD, fin=False) + middle + ws_frame(0x0, FRAGMENT_TAIL)


def sse_block(size: int) -> bytes:
    return b"data: " + b"x" * (size - 8) + b"\n\n"


def ledger_event(stream: int, i: int, id_bytes: int) -> bytes:
    """A plain SSE event (no LLM dialect: generic SSE streams are resumable with
    Last-Event-ID, so the resume ledger records their ids) whose id is `id_bytes` long."""
    cursor = f"{stream}-{i}-".encode()
    cursor += b"i" * (id_bytes - len(cursor))
    return b"id: " + cursor + b"\ndata: token " + str(i).encode() + b"\n\n"


# --- the server ---------------------------------------------------------------------------------


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    if length:
        await reader.readexactly(length)
    parts = urlsplit(target)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return Request(method, parts.path, query, headers)


async def write_all(writer: asyncio.StreamWriter, data: bytes) -> None:
    for start in range(0, len(data), WRITE_BYTES):
        writer.write(data[start : start + WRITE_BYTES])
        await writer.drain()


async def read_until_close(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limit: float = LINGER_S
) -> None:
    """Reads (and drops) the proxy's frames (pongs, messages) until its close, which is
    answered as RFC 6455 asks, or until it goes away, or `limit`."""
    try:
        async with asyncio.timeout(limit):
            while True:
                first, second = await reader.readexactly(2)
                n = second & 0x7F
                if n == 126:
                    (n,) = struct.unpack("!H", await reader.readexactly(2))
                elif n == 127:
                    (n,) = struct.unpack("!Q", await reader.readexactly(8))
                await reader.readexactly(n + (4 if second & 0x80 else 0))
                if first & 0x0F == 0x8:
                    writer.write(close_frame(1000))
                    await writer.drain()
                    return
    except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
        pass


async def ws_fragments(r: Request, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    await write_all(w, fragments(r.number("n", 100_000)) + close_frame(1000))


async def ws_pings(r: Request, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    done = ws_frame(0x1, b'{"type":"bench.done"}')
    await write_all(w, ws_frame(0x9, b"") * r.number("n", 100_000) + done + close_frame(1000))


async def ws_deflate_bomb(
    r: Request, reader: asyncio.StreamReader, w: asyncio.StreamWriter
) -> None:
    sizes = [int(s) for s in r.query.get("sizes", "127,127,129").split(",")]
    for mib in sizes:
        payload = await asyncio.to_thread(deflate_bomb_payload, mib)
        await write_all(w, ws_frame(0x1, payload, rsv1=True))
    await write_all(w, close_frame(1000))


async def ws_deflate_memory(
    r: Request, reader: asyncio.StreamReader, w: asyncio.StreamWriter
) -> None:
    payload = await asyncio.to_thread(deflate_bomb_payload, r.number("mib", 100))
    await write_all(w, ws_frame(0x1, payload, rsv1=True))
    # No close: the session stays open, holding whatever the proxy keeps of it.


async def ws_flood(r: Request, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    size = r.number("kib", 1024) * 1024
    pad = b"x" * (size - len(FRAGMENT_HEAD) - len(FRAGMENT_TAIL))
    message = ws_frame(0x1, FRAGMENT_HEAD + pad + FRAGMENT_TAIL)
    for _ in range(r.number("mib", 16) * MIB // size):
        w.write(message)
        await w.drain()  # waits while the proxy does not read


WsHandler = Callable[[Request, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
WS_HANDLERS: dict[str, tuple[WsHandler, bool]] = {  # name: (handler, needs permessage-deflate)
    "ws-fragments": (ws_fragments, False),
    "ws-pings": (ws_pings, False),
    "ws-deflate-bomb": (ws_deflate_bomb, True),
    "ws-deflate-memory": (ws_deflate_memory, True),
    "ws-flood": (ws_flood, False),
}


async def websocket(r: Request, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    handler, needs_deflate = WS_HANDLERS[r.query.get("bench", "ws-fragments")]
    offered = "permessage-deflate" in r.headers.get("sec-websocket-extensions", "").lower()
    accept = base64.b64encode(
        hashlib.sha1(r.headers["sec-websocket-key"].encode() + WS_GUID).digest()
    )
    head = (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept.decode()}\r\n"
    )
    if offered and needs_deflate:
        head += f"Sec-WebSocket-Extensions: {DEFLATE_EXTENSION}\r\n"
    w.write((head + "\r\n").encode())
    drain = asyncio.create_task(read_until_close(reader, w))
    try:
        if needs_deflate and not offered:
            w.write(close_frame(1008, "bench: permessage-deflate was not offered"))
        else:
            await handler(r, reader, w)
        await drain
    finally:
        drain.cancel()


async def http(r: Request, w: asyncio.StreamWriter) -> None:
    name = r.query.get("bench", "stream")
    head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    if name == "gzip-bomb":
        body = await asyncio.to_thread(gzip_bomb, r.number("mib", 2048))
        w.write(f"{head}Content-Encoding: gzip\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        await write_all(w, body)
    elif name == "ledger":
        stream, id_bytes = r.number("s", 0), r.number("id_kib", 64) * 1024
        events = [ledger_event(stream, i, id_bytes) for i in range(r.number("events", 256))]
        size = sum(map(len, events))
        w.write(f"{head}Content-Length: {size}\r\n\r\n".encode())
        for event in events:
            w.write(event)
            await w.drain()
    else:
        block = sse_block(64 * 1024)
        count = r.number("mib", 10) * 16
        w.write(f"{head}Content-Length: {count * len(block)}\r\n\r\n".encode())
        for _ in range(count):
            w.write(block)
            await w.drain()  # waits whenever the proxy stops reading
    await w.drain()


async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while (request := await read_request(reader)) is not None:
            if request.headers.get("upgrade", "").lower() == "websocket":
                await websocket(request, reader, writer)
                break
            await http(request, writer)
    except (ConnectionError, asyncio.IncompleteReadError):
        pass  # the proxy went away: a stalled client closed, or the proxy cut the session
    finally:
        writer.close()


async def serve(port: int) -> None:
    server = await asyncio.start_server(connection, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
