"""Frames emitted by the framing decoders.

These are NamedTuples rather than frozen dataclasses on purpose: one is built per event on the
hot path, and a tuple is several times cheaper to create while staying immutable and typed.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple


class Framing(Enum):
    """How a response body is framed; each has a reader in `readers.READERS`."""

    UNDECIDED = "undecided"
    SSE = "sse"
    NDJSON = "ndjson"
    JSON_BODY = "json"
    TEXT = "text"
    EVENTSTREAM = "eventstream"  # AWS `application/vnd.amazon.eventstream` (Bedrock)


class SSEEvent(NamedTuple):
    """One dispatched server-sent event (WHATWG "dispatch the event")."""

    type: str
    """The `event:` field, or "message" when the block had none."""
    data: str
    """The data buffer, lines joined with LF, decoded as UTF-8 with replacement."""
    id: str
    """The last event ID in force when this event was dispatched."""
    offset: int
    """Byte offset in the stream where the event's block started."""
    raw: bytes
    """The data buffer before decoding: dialect fast paths scan bytes, not wide strings."""


class Comment(NamedTuple):
    """A comment line (`: ...`): no content, but evidence that the upstream is alive."""

    text: str
    offset: int


class Line(NamedTuple):
    """One complete NDJSON line (LF terminated, a trailing CR removed), still as bytes."""

    data: bytes
    offset: int


Frame = SSEEvent | Comment
