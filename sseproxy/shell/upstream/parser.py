"""One HTTP/1.1 response, parsed by llhttp (through httptools) and fed so that its facts are exact.

llhttp streams: it copies nothing and holds no buffer, so the bounds on a head, a chunk-size
line and the trailers are counted here. It does not know the request's method, so a response
to HEAD is ended at its head here; 1xx, 204 and 304 it ends at the head itself. It gives no
offsets, so where a response ends inside a read is found here: a head ends with CRLF CRLF,
and the parser is fed up to each one while it reads heads; a Content-Length body is fed its
length; a chunked body is fed whole, and bytes that follow its end stop llhttp (a second
message, or an error after the end). What follows an end is returned, never parsed: stray
bytes that poison the connection, or the body after a head, for the relay to take.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import httptools

from sseproxy.shell.upstream.facts import LIMITS, Limits, bounded
from sseproxy.shell.upstream.headers import head_refusal

_END = b"\r\n\r\n"
# The body pieces of one read are joined up to this size before they go to the relay.
JOIN_BYTES = 64 * 1024
# The last chunk and the trailer section, ending where the search ends.
_LAST_CHUNK = re.compile(rb"(?:\A|\n)0+[ \t]*(?:;[^\r\n]*)?\r\n(?:[^\r\n]+\r\n)*\r\n\Z")


class Framing(Enum):
    """How the body's end is known."""

    LENGTH = "content-length"
    CHUNKED = "chunked"
    CLOSE = "close"  # no length, not chunked: the connection's close ends the body
    NONE = "none"  # HEAD, 204, 304, Content-Length: 0: the head is the whole response


@dataclass(frozen=True, slots=True)
class Head:
    """The final response head, as the upstream sent it."""

    status: int
    reason: str  # ASCII: `head_refusal` refused anything else
    version: tuple[int, int]
    raw_headers: tuple[tuple[bytes, bytes], ...]
    keep_alive: bool  # llhttp's verdict: no `Connection: close`, not HTTP/1.0 without keep-alive
    framing: Framing


class _Stop(Exception):
    """Raised from a parser callback to stop llhttp where it is; `why` is the refusal."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _ignore(chunk: bytes) -> None:
    pass


class ResponseParser:
    """Parses one response; `feed` returns what it did not consume.

    Facts: `head` (the final head, once), `sink` (the body, set by the owner; a read's small
    pieces joined), `complete` (the body ended by its framing), `error` (why the response is
    broken), `trailers`. 1xx interim heads (100, 102, 103, ...) are skipped: a proxy that has
    read the whole request body has nothing to continue, and early hints are advisory. 101 is
    refused.
    """

    def __init__(self, *, no_body: bool = False, limits: Limits = LIMITS) -> None:
        self.sink: Callable[[bytes], None] = _ignore
        self.head: Head | None = None
        self.complete = False
        self.error: str | None = None
        self.trailers: list[tuple[bytes, bytes]] = []
        self._no_body = no_body
        self._limits = limits
        self._parser = httptools.HttpResponseParser(self)
        self._reason = b""
        self._fields: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._interim = 0
        self._framing = Framing.NONE
        self._remaining = 0  # Content-Length still to come
        self._tail = b""  # the last bytes fed, for a CRLF CRLF split across reads
        self._read_body = 0  # body bytes in the current read
        self._pieces: list[bytes] = []  # the body pieces of the current read
        self._stall = 0  # chunked: bytes fed without body progress
        self._stray = False  # bytes followed the end in the read that completed the body
        self._trailer_bytes = 0
        self._next: Callable[[bytes], bytes] = self._feed_heads

    # -- feeding ------------------------------------------------------------------------------

    def feed(self, data: bytes) -> bytes:
        """Parse `data` up to the final head's end or the message's end; return the rest
        (nothing once the response is broken: `error` says why)."""
        return self._next(data)  # the feeder for where the response is: head, body, after

    def eof(self) -> bool:
        """The connection closed: True when that is the body's framing end (and now complete)."""
        if self.error is None and self.head is not None and self._framing is Framing.CLOSE:
            self._complete()
        return self.complete

    def _after_end(self, data: bytes) -> bytes:
        return data

    def _dead(self, data: bytes) -> bytes:
        return b""

    def _ends(self, data: bytes) -> list[int]:
        """Offsets just past each CRLF CRLF in `data` (one may begin in the previous read)."""
        ends = []
        tail = self._tail
        if tail:
            at = (tail + data[:3]).find(_END)
            if at != -1:
                ends.append(at + 4 - len(tail))
        at = data.find(_END)
        while at != -1:
            ends.append(at + 4)
            at = data.find(_END, at + 1)
        self._tail = data[-3:] if len(data) >= 3 else (tail + data)[-3:]
        return ends

    def _feed_heads(self, data: bytes) -> bytes:
        start = 0
        for end in self._ends(data):
            self._head_piece(data[start:end])
            start = end
            if self.error is not None:
                return b""
            if self.head is not None:
                self._tail = b""
                return data[end:]
        if start < len(data):
            self._head_piece(data[start:] if start else data)
        return b""

    def _head_piece(self, piece: bytes) -> None:
        # Pieces end where a head may end, so each belongs to one head: its bytes are exact.
        self._head_bytes += len(piece)
        if self._head_bytes > self._limits.head_bytes:
            self._fail(f"response head over {self._limits.head_bytes} bytes")
            return
        self._execute(piece)

    def _feed_length(self, data: bytes) -> bytes:
        remaining = self._remaining
        if len(data) < remaining:
            self._remaining = remaining - len(data)
            self._execute(data)
            return b""
        self._remaining = 0
        self._execute(data if len(data) == remaining else data[:remaining])
        return data[remaining:] if self.error is None else b""

    def _feed_close(self, data: bytes) -> bytes:
        self._execute(data)  # close-delimited: every byte is body
        return b""

    def _feed_chunked(self, data: bytes) -> bytes:
        # Fed whole: scanning every read for CRLF CRLF would cost more than parsing it.
        self._read_body = 0
        trailer_bytes = self._trailer_bytes
        # An end may straddle reads (of fewer than 3 bytes, too: keep the last 3 fed).
        tail, self._tail = self._tail, (self._tail + data)[-3:]
        self._execute(data)
        if self.complete:
            return self._past_chunked_end(data, tail) if self._stray else b""
        if self._read_body or self._trailer_bytes != trailer_bytes:
            self._stall = 0
            return b""
        self._stall += len(data)
        if self._stall > self._limits.chunk_line_bytes:
            self._fail(f"over {self._limits.chunk_line_bytes} bytes of chunk framing without body")
        return b""

    def _past_chunked_end(self, data: bytes, tail: bytes) -> bytes:
        """The bytes after the end, in the read that completed a chunked body and went on
        (rare: a misbehaving upstream). The end is the first CRLF CRLF past this read's body
        size that closes a last chunk (`0`, trailers); failing that, the first past it. At
        least one byte is returned: something did follow.
        """
        self._tail = tail
        ends = [end for end in self._ends(data) if end >= self._read_body]
        for end in ends:
            if _LAST_CHUNK.search(data, 0, end):
                return data[end:] or data[-1:]
        return data[ends[0] :] or data[-1:] if ends else data[-1:]

    def _execute(self, data: bytes) -> None:
        refused: httptools.HttpParserError | None = None
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.complete:  # bytes after the end: the response stands, they are stray
                self._stray = True
            else:
                refused = exc
        pieces = self._pieces
        if pieces:
            self._deliver(pieces)
        if refused is not None:
            self._refused(refused)

    def _deliver(self, pieces: list[bytes]) -> None:
        """The body bytes of one read, small pieces joined: a bulk upstream packs dozens of
        chunks in a read, and each piece costs the relay a write and a pass through the
        analysis. Joined up to JOIN_BYTES only: a client's transport keeps the whole piece
        it has sent only part of, so a big one pins more than the bytes it holds."""
        try:
            if len(pieces) == 1:
                self.sink(pieces[0])
            else:
                group: list[bytes] = []
                size = 0
                for piece in pieces:
                    group.append(piece)
                    size += len(piece)
                    if size >= JOIN_BYTES:
                        self.sink(group[0] if len(group) == 1 else b"".join(group))
                        group, size = [], 0
                if group:
                    self.sink(group[0] if len(group) == 1 else b"".join(group))
        except BaseException:
            self.complete = False  # the body's end was parsed, but the receiver never took it
            self._fail("the body's receiver failed")
            raise  # the receiver's own bug, not the upstream's
        finally:
            pieces.clear()

    def _refused(self, exc: httptools.HttpParserError) -> None:
        if isinstance(exc, httptools.HttpParserCallbackError):
            stop = exc.__context__
            if isinstance(stop, _Stop):
                self._fail(stop.why)
                return
            self._fail("the parser's callback failed")
            if stop is not None:
                raise stop from None  # our own bug, not the upstream's
            raise exc
        self._fail(f"upstream framing error: {exc}")

    def _fail(self, why: str) -> None:
        if self.error is None:
            self.error = bounded(why)
            self._next = self._dead

    def _complete(self) -> None:
        self.complete = True
        self._next = self._after_end

    # -- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.head is not None:  # a second message in the bytes fed: never ours
            raise _Stop("bytes after the response's end")
        self._reason = b""
        self._fields = []

    def on_status(self, status: bytes) -> None:
        self._reason += status  # llhttp may hand the reason in pieces across reads

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.head is None:
            self._fields.append((name, value))
            if len(self._fields) > self._limits.head_fields:
                raise _Stop(f"over {self._limits.head_fields} response header fields")
            return
        self.trailers.append((name, value))
        self._trailer_bytes += len(name) + len(value)
        if len(self.trailers) > self._limits.trailer_fields:
            raise _Stop(f"over {self._limits.trailer_fields} trailer fields")
        if self._trailer_bytes > self._limits.trailer_bytes:
            raise _Stop(f"trailers over {self._limits.trailer_bytes} bytes")

    def on_headers_complete(self) -> None:
        parser = self._parser
        status = parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._interim += 1
            if self._interim > self._limits.interim_heads:
                raise _Stop(f"over {self._limits.interim_heads} interim (1xx) responses")
            return  # llhttp ends it as a bodiless message; the final head follows
        fields = tuple(self._fields)
        reason = self._reason.decode("utf-8", "surrogateescape")
        why = head_refusal(status, reason, fields)
        if why is not None:
            raise _Stop(why)
        major, _, minor = parser.get_http_version().partition(".")
        self._framing = self._framing_of(status, fields)
        self.head = Head(
            status=status,
            reason=reason,
            version=(int(major), int(minor)),
            raw_headers=fields,
            keep_alive=parser.should_keep_alive(),
            framing=self._framing,
        )
        if self._framing is Framing.NONE:
            self._complete()
        else:
            self._next = {
                Framing.LENGTH: self._feed_length,
                Framing.CHUNKED: self._feed_chunked,
                Framing.CLOSE: self._feed_close,
            }[self._framing]

    def _framing_of(self, status: int, fields: tuple[tuple[bytes, bytes], ...]) -> Framing:
        if self._no_body or status in (204, 304):
            return Framing.NONE
        length: bytes | None = None
        for name, value in fields:
            lower = name.lower()
            if lower == b"transfer-encoding":
                return Framing.CHUNKED  # the only coding `head_refusal` lets through
            if lower == b"content-length":
                length = value
        if length is None:
            return Framing.CLOSE
        self._remaining = int(length)  # llhttp has checked it: digits, one value
        return Framing.LENGTH if self._remaining else Framing.NONE

    def on_body(self, body: bytes) -> None:
        self._read_body += len(body)
        self._pieces.append(body)  # delivered once the read is parsed (`_deliver`)

    # No on_chunk_header / on_chunk_complete: httptools then makes no Python call per chunk.

    def on_message_complete(self) -> None:
        if self.head is None:  # an interim head ended: the next one is counted afresh
            self._head_bytes = 0
            return
        self._complete()
