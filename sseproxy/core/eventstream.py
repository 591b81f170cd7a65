"""AWS event stream framing (`application/vnd.amazon.eventstream`), as AWS Bedrock streams.

A binary framing (Smithy "Amazon Event Stream Specification"), big-endian throughout:

    uint32 total_length | uint32 headers_length | uint32 prelude_crc (CRC32 of the first 8)
    headers | payload | uint32 message_crc (CRC32 of everything before it)

A header is `uint8 name_len, name, uint8 type, value`. The decoder is incremental across any
chunking and never raises on input. A message longer than the cap but with a valid prelude is
skipped without being buffered (`oversized`); anything that proves the bytes are not what they
claim (a CRC mismatch, an impossible length, malformed headers) sets `corrupt` and the decoder
stops analysing: after such a fault no later boundary can be trusted (the spec says so too).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from sseproxy.core.framing import DEFAULT_MAX_EVENT_BYTES

EVENTSTREAM_MEDIA_TYPE = "application/vnd.amazon.eventstream"
PRELUDE_BYTES = 12
# prelude + message CRC: the smallest possible message has no headers and no payload.
MIN_MESSAGE_BYTES = 16
# botocore refuses encoded headers over 128 KiB; so do we (they are a few hundred bytes).
MAX_HEADERS_BYTES = 128 * 1024
# A message is buffered whole before it is checked: more than this is skipped, not buffered.
DEFAULT_MAX_MESSAGE_BYTES = DEFAULT_MAX_EVENT_BYTES
# Parsed header blocks remembered per decoder: a stream repeats a handful of exact blocks (one
# per event type), so parsing is skipped for nearly every message. Bounded like any peer input.
HEADER_CACHE_ENTRIES = 32

_PRELUDE = struct.Struct(">III")
_U32 = struct.Struct(">I")
_FIXED = {2: struct.Struct(">b"), 3: struct.Struct(">h"), 4: struct.Struct(">i")}
_FIXED[5] = _FIXED[8] = struct.Struct(">q")  # long, timestamp (ms since the epoch)

HeaderValue = bool | int | bytes | str


class Corruption(StrEnum):
    """Why the decoder stopped; each value is the anomaly the tap counts."""

    PRELUDE_CRC = "eventstream_prelude_crc_mismatch"
    MESSAGE_CRC = "eventstream_message_crc_mismatch"
    LENGTH = "eventstream_impossible_length"
    HEADERS = "eventstream_malformed_headers"


@dataclass(frozen=True, slots=True)
class EventMessage:
    """One event stream message: its headers (byte arrays and UUIDs as bytes, timestamps as
    milliseconds) and its raw payload."""

    headers: Mapping[str, HeaderValue]
    payload: bytes
    offset: int

    def header(self, name: str) -> str | None:
        value = self.headers.get(name)
        return value if isinstance(value, str) else None

    @property
    def message_type(self) -> str:
        """`event`, `exception` (modelled error) or `error` (unmodelled)."""
        return self.header(":message-type") or "event"

    @property
    def event_type(self) -> str | None:
        return self.header(":event-type")

    @property
    def exception_type(self) -> str | None:
        return self.header(":exception-type")


def prelude_holds(head: bytes) -> bool:
    """Do the first 12 bytes form a prelude whose CRC is right? (1 in 2**32 by chance.)"""
    return len(head) >= PRELUDE_BYTES and zlib.crc32(head[:8]) == int.from_bytes(head[8:12], "big")


def parse_headers(data: bytes) -> dict[str, HeaderValue] | None:
    """The typed headers of one message; None when they are malformed (botocore would raise)."""
    headers: dict[str, HeaderValue] = {}
    pos, end = 0, len(data)
    try:
        while pos < end:
            name_len = data[pos]
            name = data[pos + 1 : pos + 1 + name_len].decode("utf-8")
            pos += 1 + name_len
            if name_len == 0 or pos >= end or name in headers:
                return None
            kind = data[pos]
            pos += 1
            value: HeaderValue
            if kind in (0, 1):
                value = kind == 0
            elif kind in _FIXED:
                fixed = _FIXED[kind]
                if pos + fixed.size > end:
                    return None
                value = fixed.unpack_from(data, pos)[0]
                pos += fixed.size
            elif kind in (6, 7):
                if pos + 2 > end:
                    return None
                size = int.from_bytes(data[pos : pos + 2], "big")
                raw = data[pos + 2 : pos + 2 + size]
                if len(raw) != size:
                    return None
                value = raw.decode("utf-8") if kind == 7 else raw
                pos += 2 + size
            elif kind == 9:
                value = data[pos : pos + 16]
                if len(value) != 16:
                    return None
                pos += 16
            else:
                return None
            headers[name] = value
    except (IndexError, UnicodeDecodeError):
        return None
    return headers


class EventStreamDecoder:
    """Bytes in, complete `EventMessage`s out; memory bounded by `max_message_bytes`.

    After `finish()`, `partial_bytes` counts the bytes of a message that never completed.
    """

    def __init__(self, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.max_message_bytes = max_message_bytes
        self._buf = bytearray()
        self._skip = 0  # bytes of an oversized message still to discard
        self._headers: dict[bytes, Mapping[str, HeaderValue]] = {}
        self.received = 0
        self.consumed = 0  # offset where the message being received starts
        self.messages = 0
        self.oversized = 0
        self.corrupt: Corruption | None = None
        self.partial_bytes = 0
        self.finished = False

    def feed(self, data: bytes) -> list[EventMessage]:
        if self.finished:
            raise RuntimeError("feed() after finish()")
        self.received += len(data)
        out: list[EventMessage] = []
        if self.corrupt is not None or not data:
            return out
        if self._skip:
            n = min(self._skip, len(data))
            self._skip -= n
            data = data[n:]
            if self._skip:
                return out
            self.consumed = self.received - len(data)
        buf = self._buf
        buf += data
        start = 0
        while len(buf) - start >= PRELUDE_BYTES:
            total, headers_len, prelude_crc = _PRELUDE.unpack_from(buf, start)
            if zlib.crc32(buf[start : start + 8]) != prelude_crc:
                self._stop(Corruption.PRELUDE_CRC)
                return out
            if (
                total < MIN_MESSAGE_BYTES
                or headers_len > total - MIN_MESSAGE_BYTES
                or headers_len > MAX_HEADERS_BYTES
            ):
                self._stop(Corruption.LENGTH)
                return out
            if total > self.max_message_bytes:
                # The prelude is proven by its CRC: skip the message, keep the framing.
                self.oversized += 1
                available = len(buf) - start
                if available >= total:
                    start += total
                    self.consumed += total
                    continue
                self._skip = total - available
                buf.clear()
                return out
            if len(buf) - start < total:
                break
            end = start + total
            (message_crc,) = _U32.unpack_from(buf, end - 4)
            if zlib.crc32(memoryview(buf)[start : end - 4]) != message_crc:
                self._stop(Corruption.MESSAGE_CRC)
                return out
            headers_end = start + PRELUDE_BYTES + headers_len
            raw_headers = bytes(buf[start + PRELUDE_BYTES : headers_end])
            headers = self._headers.get(raw_headers)
            if headers is None:
                parsed = parse_headers(raw_headers)
                if parsed is None:
                    self._stop(Corruption.HEADERS)
                    return out
                headers = MappingProxyType(parsed)  # shared between messages: read-only
                if len(self._headers) < HEADER_CACHE_ENTRIES:
                    self._headers[raw_headers] = headers
            out.append(EventMessage(headers, bytes(buf[headers_end : end - 4]), self.consumed))
            self.messages += 1
            self.consumed += total
            start = end
        if start:
            del buf[:start]
        return out

    def finish(self) -> int:
        """Mark end of input; returns `partial_bytes`."""
        if not self.finished:
            self.finished = True
            if self.corrupt is None:
                self.partial_bytes = self.received - self.consumed
            self._buf = bytearray()
        return self.partial_bytes

    @property
    def retained_bytes(self) -> int:
        return len(self._buf)

    def _stop(self, why: Corruption) -> None:
        self.corrupt = why
        self._buf = bytearray()
        self._skip = 0


def encode_message(headers: Mapping[str, HeaderValue], payload: bytes) -> bytes:
    """One message, as a service writes it: drills inject with it, tests build streams.

    bool → type 0/1, int → int32 (the only integer type Bedrock sends), str → string,
    bytes → byte array.
    """
    parts = []
    for name, value in headers.items():
        raw_name = name.encode("utf-8")
        head = bytes([len(raw_name)]) + raw_name
        if isinstance(value, bool):
            parts.append(head + bytes([0 if value else 1]))
        elif isinstance(value, int):
            parts.append(head + b"\x04" + _FIXED[4].pack(value))
        else:
            raw = value.encode("utf-8") if isinstance(value, str) else value
            kind = b"\x07" if isinstance(value, str) else b"\x06"
            parts.append(head + kind + len(raw).to_bytes(2, "big") + raw)
    encoded = b"".join(parts)
    total = PRELUDE_BYTES + len(encoded) + len(payload) + 4
    prelude = _PRELUDE.pack(total, len(encoded), 0)[:8]
    prelude += _U32.pack(zlib.crc32(prelude))
    body = prelude + encoded + payload
    return body + _U32.pack(zlib.crc32(body))


def event(event_type: str, payload: bytes) -> bytes:
    """An `event` message as Bedrock sends it (JSON payload)."""
    return encode_message(
        {
            ":event-type": event_type,
            ":content-type": "application/json",
            ":message-type": "event",
        },
        payload,
    )


def exception(exception_type: str, payload: bytes) -> bytes:
    """A modelled error, e.g. `modelStreamErrorException`."""
    return encode_message(
        {
            ":exception-type": exception_type,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        payload,
    )
