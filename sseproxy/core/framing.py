"""Incremental framing: network chunks in, complete SSE events or NDJSON lines out.

The SSE decoder follows WHATWG HTML §9.2.5-9.2.6 ("Parsing / Interpreting an event stream").
It works on bytes: CR and LF are ASCII and can never sit inside a multi-byte UTF-8 sequence, so
splitting complete lines first and decoding each field value afterwards gives exactly the
result of decoding the whole stream first (including U+FFFD per maximal invalid subpart).
"""

from __future__ import annotations

from sseproxy.core.events import Comment, Frame, Line, SSEEvent

# A single event bigger than this is almost certainly not an LLM delta (the largest real ones
# are Responses `response.completed` snapshots of a few MiB). Past it we stop buffering, report
# `oversized_event` and resynchronise at the next line end, so memory stays bounded.
DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024

# The block path remembers the type each `event:` line it has seen decodes to: a stream uses a
# few dozen names at most (Responses, the richest, ~50), so 64 lines of up to 128 bytes hold
# them all, while a peer that sends a new name per event costs at most 64 entries per stream.
EVENT_NAMES_CACHED = 64
EVENT_NAME_CACHED_BYTES = 128

_BOM = b"\xef\xbb\xbf"
_new_event = tuple.__new__
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

    The cap: a line (any field or comment, without its line end) whose length plus the data
    already buffered for its block exceeds `max_event_bytes` makes the block oversized: that
    line is ignored, the block's data is dropped (`oversized`, once per block) and its other
    lines still apply. It is decided from the line alone, so it holds however the bytes are
    chunked, and is decided while an unterminated line grows, so memory stays bounded.

    Two paths give identical frames, ids and counts: LF-only input is split into blocks at C
    speed (`block_path`), anything else goes line by line. `block_path=False` is for tests.
    """

    def __init__(
        self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, *, block_path: bool = True
    ) -> None:
        self.max_event_bytes = max_event_bytes
        self.block_path = block_path
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
        # LF-only input takes the block path; the first CR switches to the line path, which
        # hands back at the next event boundary. Both give identical frames.
        self._fast = block_path
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._names: dict[bytes, str] = {}  # `event:` line -> the type it sets (block path)
        # On the block path at an event boundary with nothing held: `whole_event` may take a
        # chunk, and so may a caller that recognises a chunk as exactly one block of the usual
        # form (`data: ` line, or `event: ` then `data: ` line, LF ends): it then only adds the
        # chunk's length to `pos` (`last_event_id` is already the id in force).
        self.ready = False

    # -- input ------------------------------------------------------------------------------

    def feed(self, data: bytes) -> list[Frame]:
        """Consume one network chunk; return the frames it completed."""
        if self.ready:
            event = self.whole_event(data)
            if event is not None:
                return [event]
        if self.finished:
            raise RuntimeError("feed() after finish()")
        out: list[Frame] = []
        self._feed(data, out)
        self.ready = (
            self._fast
            and not self._pending
            and self._head is None
            and not self._skip_lf
            and not self.finished
        )
        return out

    def whole_event(self, data: bytes) -> SSEEvent | None:
        """The event of a chunk that is exactly one block as LLM APIs send it (`data: ...` or
        `event: ...` then `data: ...`, LF line ends) arriving at an event boundary of the block
        path; None, consuming nothing, for anything else (`feed` then takes it). The same event
        and counts as `feed`, found with a few C-level scans and no split."""
        if not self.ready:
            return None
        n = len(data)
        first = data.find(b"\n")
        if first < 0 or n > self.max_event_bytes or data[n - 2 :] != b"\n\n" or b"\r" in data:
            return None
        if first == n - 2:  # one line
            if data[:6] != b"data: ":
                return None
            name = "message"
            value = data[6:first]
        else:
            if data.find(b"\n", first + 1) != n - 2 or data[first + 1 : first + 6] != b"data:":
                return None
            head = data[:first]
            name = self._names.get(head) or self._event_name(head)
            if not name:
                return None
            value = data[first + 7 : n - 2] if data[first + 6] == 32 else data[first + 6 : n - 2]
        try:
            text = value.decode()
        except UnicodeDecodeError:
            text = value.decode("utf-8", "replace")
            self.invalid_utf8 += 1
        start = self.pos
        self.pos = start + n
        event_id = self.last_event_id = self._id_buf
        return _new_event(SSEEvent, (name, text, event_id, start, value))

    def _feed(self, data: bytes, out: list[Frame]) -> None:
        if self._head is not None:
            data = self._head + data
            if len(data) < 3 and _BOM.startswith(data):
                self._head = data  # could still become a BOM: wait for more bytes
                return
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
            return
        if self._fast:
            if b"\r" not in data:
                self._feed_blocks(data, out)
                return
            self._leave_fast_path(out)
        self._feed_lines(data, out)
        if self.block_path and not (self._frags or self._discarding_line or self._block_start >= 0):
            self._fast = True  # back on an event boundary: the block path can take over

    def finish(self) -> list[Frame]:
        """Mark end of input. Returns frames completed by it (comments of a cut block only);
        `partial_bytes` then counts the discarded bytes of an unterminated block."""
        out: list[Frame] = []
        if self.finished:
            return out
        if self._fast and self._pending:
            self._leave_fast_path(out)
        self.finished = True
        self.ready = False
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
        return out

    # -- the block path: LF-only input, split on blank lines at C speed ---------------------

    def _feed_blocks(self, data: bytes, out: list[Frame]) -> None:
        cut = data.rfind(b"\n\n")
        if cut >= 0:
            complete = b"".join([*self._pending, data[:cut]]) if self._pending else data[:cut]
            rest = data[cut + 2 :]
        elif self._pending and self._pending[-1][-1] == _LF and data[0] == _LF:
            complete = b"".join(self._pending)[:-1]  # the blank line straddles two reads
            rest = data[1:]
        else:
            self._pending.append(data)
            self._pending_len += len(data)
            if self._pending_len > self.max_event_bytes:
                self._leave_fast_path(out)  # the line path bounds memory and resynchronises
            return
        self._pending = [rest] if rest else []
        self._pending_len = len(rest)
        # The hot loop: locals instead of attributes, tuple.__new__ instead of the NamedTuple
        # constructor (a Python-level function), and the two shapes LLM APIs send inlined:
        # a one-line `data: ` block (Chat) and an `event:` line then one `data:` line
        # (Anthropic, Responses). Any other block takes `_block`, field by field.
        pos = self.pos
        blocks = complete.split(b"\n\n")
        # Within the cap no line of a block can be oversized: a line plus the data before it
        # in its block is never longer than the block.
        cap = self.max_event_bytes
        small = len(complete) <= cap
        # One C-level count tells whether every block is a single line: then no per-block
        # newline search is needed.
        single_lines = small and complete.count(b"\n") == 2 * (len(blocks) - 1)
        append = out.append
        event_id = self._id_buf
        emitted = False
        for block in blocks:
            start = pos
            pos += len(block) + 2
            if single_lines:
                if block[:6] == b"data: ":
                    value = block[6:]
                    try:
                        text = value.decode()
                    except UnicodeDecodeError:
                        text = value.decode("utf-8", "replace")
                        self.invalid_utf8 += 1
                    append(_new_event(SSEEvent, ("message", text, event_id, start, value)))
                    emitted = True
                    continue
            else:
                head, _, rest = block.partition(b"\n")
                if rest[:5] == b"data:" and b"\n" not in rest and (small or len(block) <= cap):
                    name = self._names.get(head) or self._event_name(head)
                    if name:
                        value = rest[6:] if rest[5:6] == b" " else rest[5:]
                        try:
                            text = value.decode()
                        except UnicodeDecodeError:
                            text = value.decode("utf-8", "replace")
                            self.invalid_utf8 += 1
                        append(_new_event(SSEEvent, (name, text, event_id, start, value)))
                        emitted = True
                        continue
            if emitted:
                self.last_event_id = event_id
            self.pos = start
            self._block(block, start, out)
            event_id = self._id_buf
            emitted = False
        if emitted:
            self.last_event_id = event_id
        self.pos = pos

    def _event_name(self, line: bytes) -> str:
        """The type an `event:` line sets, remembered while the cache has room; "" when
        `line` is not an `event:` line or its value is not valid UTF-8 (`_block` counts it)."""
        if line[:6] != b"event:":
            return ""
        raw = line[7:] if line[6:7] == b" " else line[6:]
        try:
            name = raw.decode() or "message"
        except UnicodeDecodeError:
            return ""
        if len(self._names) < EVENT_NAMES_CACHED and len(line) <= EVENT_NAME_CACHED_BYTES:
            self._names[line] = name
        return name

    def _block(self, block: bytes, start: int, out: list[Frame]) -> None:
        """One complete block of the block path that the hot loop does not inline."""
        if len(block) > self.max_event_bytes:
            # May hold an oversized line: exactly what the line path does, line by line.
            for line in block.split(b"\n"):
                self._complete_line(line, start, out)
                start += len(line) + 1
            self._dispatch(out)
            return
        if block[:5] == b"data:" and b"\n" not in block:
            value = block[6:] if block[5:6] == b" " else block[5:]
            data, bad = _decode(value)
            self.invalid_utf8 += bad
            self.last_event_id = self._id_buf
            out.append(_new_event(SSEEvent, ("message", data, self.last_event_id, start, value)))
            return
        for line in block.split(b"\n"):
            self._line(line, start, out)
            start += len(line) + 1
        self._dispatch(out)

    def _leave_fast_path(self, out: list[Frame]) -> None:
        self._fast = False
        pending = self._pending
        self._pending = []
        self._pending_len = 0
        for piece in pending:  # piece by piece: no join of up to a whole event's bytes
            self._feed_lines(piece, out)

    # -- the line path: any line ends, split CRLF, oversized lines ---------------------------

    def _feed_lines(self, data: bytes, out: list[Frame]) -> None:
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
            self._complete_line(line.rstrip(b"\r\n"), start, out)
        if tail is not None:
            self._hold(tail)

    @property
    def retained_bytes(self) -> int:
        """Bytes currently buffered (for memory-bound checks)."""
        return self._frag_len + self._data_len + self._pending_len + len(self._head or b"")

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
        self._complete_line(line.rstrip(b"\r\n"), self._line_start, out)

    def _complete_line(self, line: bytes, start: int, out: list[Frame]) -> None:
        """A whole line, its end removed: ignored if it breaks the cap, else interpreted."""
        if len(line) + self._data_len > self.max_event_bytes:
            self._line_start = start
            self._mark_oversized()
            return
        self._line(line, start, out)

    def _mark_oversized(self) -> None:
        if not self._block_oversized:
            self.oversized += 1
        self._block_oversized = True
        if self._block_start < 0:
            self._block_start = self._line_start
        self._data = []
        self._data_len = 0

    def _line(self, line: bytes, start: int, out: list[Frame]) -> None:
        """Interpret one line, its terminator already removed (WHATWG §9.2.6)."""
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
            raw = b"\n".join(self._data)
            data, bad = _decode(raw)
            self.invalid_utf8 += bad
            if self._type:
                etype, bad = _decode(self._type)
                self.invalid_utf8 += bad
            else:
                etype = "message"
            out.append(SSEEvent(etype, data, self.last_event_id, self._block_start, raw))
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
            if len(piece) > self.max_line_bytes:  # whole or in pieces: the same rule
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
