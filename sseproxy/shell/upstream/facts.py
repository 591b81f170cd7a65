"""What the upstream leg tells the relay: the values it hands over and the bounds it enforces.

The end of a response is decided from parser facts (message complete, a parse error, the
connection lost with or without ECONNRESET), never from an exception's text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sseproxy.core import EndReason

# Human text in a record stays readable: a parser message can quote a whole malformed line.
MAX_CAUSE_CHARS = 300


def bounded(cause: str) -> str:
    return cause if len(cause) <= MAX_CAUSE_CHARS else cause[: MAX_CAUSE_CHARS - 3] + "..."


@dataclass(frozen=True, slots=True)
class Limits:
    """What a response head and the framing around a body may spend (a peer sets each)."""

    head_bytes: int = 64 * 1024  # one head: status line, fields, the empty line
    head_fields: int = 200
    interim_heads: int = 16  # 1xx before the final head (each within `head_bytes`)
    # Bytes the parser takes without body progress: a chunk-size line with its extensions, or
    # the CRLF around it, counted over the reads that carry nothing else.
    chunk_line_bytes: int = 4096
    trailer_bytes: int = 16 * 1024  # names and values of the chunked trailer fields
    trailer_fields: int = 100


LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class UpstreamEnd:
    """How a response's body ended, once, for the relay and the record."""

    complete: bool  # the body ended by its own framing (http_complete)
    reason: EndReason  # UPSTREAM_CLOSED when complete, else why it broke
    cause: str = ""  # human text for the record, <= MAX_CAUSE_CHARS
    trailers: tuple[tuple[bytes, bytes], ...] = ()
    # Bytes that came after the message completed, in the read that completed it (later ones
    # are counted by the pool: `PoolStats.bytes_after_response`). Any poisons the connection.
    # Empty lines right after a chunked end are not counted: llhttp skips them, as it does
    # between messages, and they can answer no request.
    bytes_after_end: int = 0


class BodyReceiver(Protocol):
    """Implemented by the relay: gets the body as it is parsed, and its end."""

    def on_body(self, chunk: bytes) -> None:
        """A body piece, in order, from the transport's data callback (synchronous)."""

    def on_end(self, end: UpstreamEnd) -> None:
        """Exactly once per response: complete or failed."""


class UpstreamFailed(Exception):
    """No response head: the request failed before the upstream answered it."""

    def __init__(self, reason: EndReason, cause: str = "") -> None:
        cause = bounded(cause)
        super().__init__(f"{reason}: {cause}" if cause else str(reason))
        self.reason = reason
        self.cause = cause
