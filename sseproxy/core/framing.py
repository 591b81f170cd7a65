"""Incremental framing: network chunks in, complete SSE events or NDJSON lines out.

The SSE decoder follows WHATWG HTML §9.2.5-9.2.6 ("Parsing / Interpreting an event stream").
It works on bytes: CR and LF are ASCII and can never sit inside a multi-byte UTF-8 sequence, so
splitting complete lines first and decoding each field value afterwards gives exactly the
result of decoding the whole stream first (including U+FFFD per maximal invalid subpart).
"""

from __future__ import annotations

from .events import Comment, Frame, Line, SSEEvent

# A single event bigger than this is almost certainly not an LLM delta (the largest real ones
# are Responses `response.completed` snapshots of a few MiB). Past it we stop buffering, report
# `oversized_event` and resynchronise at the next line end, so memory stays bounded.
DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024

_BOM = b"\xef\xbb\xbf"
_CR = 13
_LF = 10
_COLON = 58


def _decode(raw: bytes) -> tuple[str, bool]:
    """UTF-8 decode with replacement; also says whether a replacement was needed."""
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), True


class SSEDecoder:
    """Bytes in, `SSEEvent` and `Comment` frames out; never raises on input.

    After `finish()`, `partial_bytes` says how many bytes belonged to a block (or line) that
    never ended and was therefore discarded.
    """

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self.pos = 0  # offset of the next byte not yet consumed (BOM included)
        self._head: bytes | None = b""  # bytes held until the leading BOM is decided
        self._skip_lf = False  # the previous chunk ended in CR: a leading LF is its pair
        # The unterminated line, kept as fragments and joined once (linear time).
        self._frags: list[bytes] = []
        self._frag_len = 0
        self._line_start = 0
        self._discarding_line = False
        # The block being built.
        self._data: list[bytes] = []
        self._data_len = 0
        self._type = b""
        self._id_buf = ""
        self._block_start = -1
        self._block_oversized = False
        # Observable results.
        self.last_event_id = ""
        self.retry: int | None = None
        self.invalid_utf8 = 0
        self.oversized = 0
        self.unknown_fields = 0
        self.partial_bytes = 0
        self.finished = False

    # -- input ------------------------------------------------------------------------------

    def feed(self, data: bytes) -> list[Frame]:
        """Consume one network chunk; return the frames it completed."""
        if self.finished:
            raise RuntimeError("feed() after finish()")
        out: list[Frame] = []
        if self._head is not None:
            data = self._head + data
            if len(data) < 3 and _BOM.startswith(data):
                self._head = data  # could still become a BOM: wait for more bytes
                return out
            self._head = None
            if data.startswith(_BOM):
                self.pos += 3
                data = data[3:]
        if self._skip_lf and data:
            self._skip_lf = False
            if data[0] == _LF:
                self.pos += 1
                data = data[1:]
        if not data:
            return out
        lines = data.splitlines(True)  # bytes.splitlines splits on CR, LF and CRLF only
        last_byte = lines[-1][-1]
        tail = lines.pop() if last_byte != _LF and last_byte != _CR else None
        if last_byte == _CR:
            self._skip_lf = True
        if lines and (self._frags or self._discarding_line):
            self._finish_pending_line(lines[0], out)
            lines = lines[1:]
        for line in lines:
            start = self.pos
            self.pos += len(line)
            self._line(line, start, out)
        if tail is not None:
            self._hold(tail)
        return out

    def finish(self) -> int:
        """Mark end of input. Returns the number of discarded bytes of an unterminated block."""
        if self.finished:
            return self.partial_bytes
        self.finished = True
        held = len(self._head) if self._head else 0
        if self._block_start >= 0:
            start = self._block_start
        elif self._frags or self._discarding_line:
            start = self._line_start
        else:
            start = self.pos
        self.partial_bytes = self.pos - start + held
        self._frags = []
        self._data = []
        return self.partial_bytes

    @property
    def retained_bytes(self) -> int:
        """Bytes currently buffered (for memory-bound checks)."""
        return self._frag_len + self._data_len + len(self._head or b"")

    # -- lines ------------------------------------------------------------------------------

    def _hold(self, fragment: bytes) -> None:
        if not self._frags and not self._discarding_line:
            self._line_start = self.pos
        self.pos += len(fragment)
        if self._discarding_line:
            return
        self._frags.append(fragment)
        self._frag_len += len(fragment)
        if self._frag_len + self._data_len > self.max_event_bytes:
            self._frags = []
            self._frag_len = 0
            self._discarding_line = True
            self._mark_oversized()

    def _finish_pending_line(self, end: bytes, out: list[Frame]) -> None:
        self.pos += len(end)
        if self._discarding_line:
            self._discarding_line = False
            return
        self._frags.append(end)
        line = b"".join(self._frags)
        self._frags = []
        self._frag_len = 0
        if len(line) + self._data_len > self.max_event_bytes:
            self._mark_oversized()
            return
        self._line(line, self._line_start, out)

    def _mark_oversized(self) -> None:
        if not self._block_oversized:
            self.oversized += 1
        self._block_oversized = True
        if self._block_start < 0:
            self._block_start = self._line_start
        self._data = []
        self._data_len = 0

    def _line(self, raw: bytes, start: int, out: list[Frame]) -> None:
        line = raw.rstrip(b"\r\n")
        if not line:
            self._dispatch(out)
            return
        if line[0] == _COLON:
            text, bad = _decode(line[1:])
            self.invalid_utf8 += bad
            out.append(Comment(text, start))
            return
        if self._block_start < 0:
            self._block_start = start
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            if self._block_oversized:
                return
            self._data.append(value)
            self._data_len += len(value) + 1
            if self._data_len > self.max_event_bytes:
                self._mark_oversized()
        elif name == b"event":
            self._type = value
        elif name == b"id":
            if b"\0" not in value:
                self._id_buf, bad = _decode(value)
                self.invalid_utf8 += bad
        elif name == b"retry":
            if value.isdigit():  # bytes.isdigit() is ASCII-only, as the spec requires
                self.retry = int(value)
        else:
            self.unknown_fields += 1

    def _dispatch(self, out: list[Frame]) -> None:
        # Step 1 runs even when nothing is dispatched: the id persists (WHATWG; case 54).
        self.last_event_id = self._id_buf
        if self._block_oversized:
            pass  # already counted; the event is dropped
        elif self._data:
            data, bad = _decode(b"\n".join(self._data))
            self.invalid_utf8 += bad
            if self._type:
                etype, bad = _decode(self._type)
                self.invalid_utf8 += bad
            else:
                etype = "message"
            out.append(SSEEvent(etype, data, self.last_event_id, self._block_start))
        self._data = []
        self._data_len = 0
        self._type = b""
        self._block_start = -1
        self._block_oversized = False


class LineDecoder:
    """NDJSON framing (Ollama): complete LF-terminated lines out, blank lines skipped."""

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self.pos = 0
        self._frags: list[bytes] = []
        self._frag_len = 0
        self._line_start = 0
        self._discarding = False
        self.oversized = 0
        self.partial_bytes = 0
        self.finished = False

    def feed(self, data: bytes) -> list[Line]:
        if self.finished:
            raise RuntimeError("feed() after finish()")
        out: list[Line] = []
        pieces = data.split(b"\n")
        tail = pieces.pop()
        for i, piece in enumerate(pieces):
            start = self.pos
            self.pos += len(piece) + 1
            if i == 0 and (self._frags or self._discarding):
                start = self._line_start
                if self._discarding:
                    self._discarding = False
                    continue
                self._frags.append(piece)
                piece = b"".join(self._frags)
                self._frags = []
                self._frag_len = 0
                if len(piece) > self.max_line_bytes:
                    self.oversized += 1
                    continue
            piece = piece.rstrip(b"\r")
            if piece.strip():
                out.append(Line(piece, start))
        if tail:
            if not self._frags and not self._discarding:
                self._line_start = self.pos
            self.pos += len(tail)
            if not self._discarding:
                self._frags.append(tail)
                self._frag_len += len(tail)
                if self._frag_len > self.max_line_bytes:
                    self.oversized += 1
                    self._frags = []
                    self._frag_len = 0
                    self._discarding = True
        return out

    def finish(self) -> int:
        if not self.finished:
            self.finished = True
            pending = self._frags or self._discarding
            self.partial_bytes = self.pos - self._line_start if pending else 0
            self._frags = []
        return self.partial_bytes

    @property
    def retained_bytes(self) -> int:
        return self._frag_len
