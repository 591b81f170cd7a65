"""Framing readers: decoded body bytes in, frames / lines / text / one JSON document out.

Every body framing sseproxy understands is a `Reader` behind the same three members (`feed`,
`finish`, `retained_bytes`), kept in one table keyed by `Framing` (as h11 keys its readers by
state). Which reader a body gets is decided by `FramingChoice`: the Content-Type first, the
first significant bytes second.
"""

from __future__ import annotations

import codecs
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from sseproxy.core.events import Frame, Framing, Line
from sseproxy.core.eventstream import (
    EVENTSTREAM_MEDIA_TYPE,
    PRELUDE_BYTES,
    Corruption,
    EventMessage,
    prelude_holds,
)
from sseproxy.core.eventstream_reader import EventStreamReader
from sseproxy.core.framing import LineDecoder, SSEDecoder
from sseproxy.core.jsonvalue import loads

# A non-streamed JSON body is analysed from a bounded copy; real completions are far smaller.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
# Leading whitespace held before the first significant byte decides the framing; a body that
# is nothing but blank lines for this long can only be SSE.
MAX_UNDECIDED_BYTES = 64 * 1024
# Leading bytes of a `text/plain` body that mark it as SSE served under the wrong type.
SSE_FIELD_STARTS = (b"data:", b"event:", b"id:", b"retry:", b":")
WHITESPACE = b" \t\r\n\xef\xbb\xbf"  # and the BOM's bytes
# Anomalies a reader counts when part of the body went unanalysed: the tap then goes blind.
UNSEEN = ("body_too_large_to_analyse", *(str(c) for c in Corruption))


class Sink(Protocol):
    """Where readers deliver what they decode (the tap)."""

    anomalies: Counter[str]

    def on_frames(self, frames: list[Frame]) -> None: ...
    def on_line(self, line: Line) -> None: ...
    def on_text(self, text: str) -> None: ...
    def on_body(self, body: Any) -> None: ...
    def on_message(self, message: EventMessage) -> None: ...


class Reader(Protocol):
    def feed(self, data: bytes) -> None: ...

    def finish(self) -> int:
        """End of input: flush; returns the bytes of a discarded unterminated unit."""
        ...

    @property
    def retained_bytes(self) -> int: ...


class SSEReader:
    def __init__(self, sink: Sink, max_event_bytes: int) -> None:
        self.sink = sink
        self.decoder = SSEDecoder(max_event_bytes)

    def feed(self, data: bytes) -> None:
        self.sink.on_frames(self.decoder.feed(data))

    def finish(self) -> int:
        decoder, anomalies = self.decoder, self.sink.anomalies
        self.sink.on_frames(decoder.finish())
        if decoder.invalid_utf8:
            anomalies["invalid_utf8"] += decoder.invalid_utf8
        if decoder.oversized:
            anomalies["oversized_event"] += decoder.oversized
        if decoder.unknown_fields:
            # Lines that are not SSE fields: e.g. a raw JSON error body inside the stream.
            anomalies["unknown_sse_field"] += decoder.unknown_fields
        return decoder.partial_bytes

    @property
    def retained_bytes(self) -> int:
        return self.decoder.retained_bytes


class NDJSONReader:
    def __init__(self, sink: Sink, max_event_bytes: int) -> None:
        self.sink = sink
        self.decoder = LineDecoder(max_event_bytes)

    def feed(self, data: bytes) -> None:
        on_line = self.sink.on_line
        for line in self.decoder.feed(data):
            on_line(line)

    def finish(self) -> int:
        if self.decoder.oversized:
            self.sink.anomalies["oversized_event"] += self.decoder.oversized
        return self.decoder.finish()

    @property
    def retained_bytes(self) -> int:
        return self.decoder.retained_bytes


class JSONBodyReader:
    """One JSON document, parsed once at the end from a bounded copy."""

    def __init__(self, sink: Sink, max_body_bytes: int) -> None:
        self.sink = sink
        self.max_body_bytes = max_body_bytes
        self.parts: list[bytes] = []
        self.size = 0
        self.overflow = False

    def feed(self, data: bytes) -> None:
        if self.size + len(data) > self.max_body_bytes:
            self.overflow = True
            self.parts = []
        if not self.overflow:
            self.parts.append(data)
        self.size += len(data)

    def finish(self) -> int:
        if self.overflow:
            self.sink.anomalies["body_too_large_to_analyse"] += 1
            return 0
        try:
            body = loads(b"".join(self.parts))
        except ValueError:
            self.sink.anomalies["json_decode_error"] += 1
            body = None
        self.parts = []
        self.sink.on_body(body)
        return 0

    @property
    def retained_bytes(self) -> int:
        return 0 if self.overflow else self.size


class TextReader:
    """A body with no protocol (`text/plain`, octet streams): decoded incrementally as UTF-8."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes) -> None:
        self.sink.on_text(self.decoder.decode(data))

    def finish(self) -> int:
        self.sink.on_text(self.decoder.decode(b"", True))
        return 0

    @property
    def retained_bytes(self) -> int:
        return len(self.decoder.getstate()[0])


ReaderFactory = Callable[[Sink, int, int], Reader]
READERS: dict[Framing, ReaderFactory] = {
    Framing.SSE: lambda sink, max_event, max_body: SSEReader(sink, max_event),
    Framing.NDJSON: lambda sink, max_event, max_body: NDJSONReader(sink, max_event),
    Framing.JSON_BODY: lambda sink, max_event, max_body: JSONBodyReader(sink, max_body),
    Framing.TEXT: lambda sink, max_event, max_body: TextReader(sink),
    Framing.EVENTSTREAM: lambda sink, max_event, max_body: EventStreamReader(sink, max_event),
}


def framing_for(content_type: str | None) -> Framing | None:
    """The framing a Content-Type declares; None when the first bytes must decide."""
    ctype = (content_type or "").split(";", 1)[0].strip().lower()
    if ctype == "text/event-stream":
        return Framing.SSE
    if ctype == EVENTSTREAM_MEDIA_TYPE:
        return Framing.EVENTSTREAM
    if "ndjson" in ctype or "jsonl" in ctype or "json-seq" in ctype:
        return Framing.NDJSON
    if not ctype or ctype == "application/json" or ctype.endswith("+json"):
        return None
    return Framing.TEXT  # text/plain, application/octet-stream, anything else: no protocol


class FramingChoice:
    """Holds the first bytes until the Content-Type and the first significant bytes say which
    framing the body has. Held bytes are joined only when a decision can be made, so holding a
    long first line stays linear.

    `ndjson_hint(first_line)` says whether a JSON first line starts an NDJSON stream (the tap
    asks the dialects); `anomalies` receives `content_type_mismatch`.
    """

    def __init__(
        self,
        content_type: str | None,
        ndjson: bool,
        ndjson_hint: Callable[[bytes], bool],
        anomalies: Counter[str],
        max_held: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.max_held = max_held
        self.declared = framing_for(content_type)
        self.ndjson = ndjson or self.declared is Framing.NDJSON
        self.ndjson_hint = ndjson_hint
        self.anomalies = anomalies
        self.held: list[bytes] = []
        self.held_len = 0
        self.significant = False  # a non-whitespace byte has been held
        self.json_like = False  # ... and it opened a JSON value
        self.line_seen = False  # ... and a line end came after it

    def feed(self, data: bytes) -> Framing | None:
        """Hold `data`; the framing once it can be told (then `take()` the held bytes)."""
        self.held.append(data)
        self.held_len += len(data)
        if self.ndjson:
            return Framing.NDJSON
        if not self.significant:
            start = data.lstrip(WHITESPACE)
            if not start:
                # A sea of blank lines can only be SSE.
                return Framing.SSE if self.held_len >= MAX_UNDECIDED_BYTES else None
            self.significant = True
            self.json_like = start[:1] in (b"{", b"[")
            self.line_seen = b"\n" in start
        elif not self.line_seen:
            self.line_seen = b"\n" in data
        if not self.json_like:
            if self.declared is Framing.EVENTSTREAM or self.held[0][:1] == b"\x00":
                return self._eventstream()
            return Framing.SSE if self.declared is not Framing.TEXT else self._text_or_sse()
        if not self.line_seen:
            if self.held_len > self.max_held:
                return Framing.JSON_BODY  # one huge line: a body, too large to analyse anyway
            return None  # cannot tell NDJSON from a JSON body before the first line ends
        return self._json_framing()

    def finish(self) -> Framing | None:
        """End of input before a decision: what the held bytes must be."""
        if self.json_like:
            return self._json_framing()
        return Framing.TEXT if self.significant else None

    def take(self) -> bytes:
        held = b"".join(self.held)
        self.held, self.held_len = [], 0
        return held

    def _eventstream(self) -> Framing | None:
        """Declared, or (a replayed body has no Content-Type) a first prelude whose CRC holds;
        no text framing starts with NUL."""
        if self.declared is Framing.EVENTSTREAM:
            return Framing.EVENTSTREAM
        held = b"".join(self.held)
        self.held = [held]
        if len(held) < PRELUDE_BYTES:
            return None
        if prelude_holds(held):
            return Framing.EVENTSTREAM
        return Framing.SSE if self.declared is not Framing.TEXT else self._text_or_sse()

    def _text_or_sse(self) -> Framing | None:
        """`text/plain` and other types are text, unless the body is visibly SSE under the
        wrong type (a common relay mistake), which needs its first few bytes to tell."""
        start = b"".join(self.held).lstrip(WHITESPACE)  # a few bytes: decided within 6
        if not self.line_seen and any(field.startswith(start) for field in SSE_FIELD_STARTS):
            return None  # still a prefix of an SSE field name
        if start.startswith(SSE_FIELD_STARTS):
            self.anomalies["content_type_mismatch"] += 1
            return Framing.SSE
        return Framing.TEXT

    def _json_framing(self) -> Framing:
        if self.declared is not None:
            self.anomalies["content_type_mismatch"] += 1  # JSON under another declared type
        if not self.line_seen:
            return Framing.JSON_BODY  # a single JSON body without a newline
        held = b"".join(self.held)
        self.held = [held]
        first_line = held.lstrip(WHITESPACE).split(b"\n", 1)[0]
        return Framing.NDJSON if self.ndjson_hint(first_line) else Framing.JSON_BODY
