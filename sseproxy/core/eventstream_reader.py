"""The tap's reader for AWS event streams: bytes to messages, messages to the dialect.

Kept apart from the tap so the tap gains one branch per method, not a framing's worth of code.
A corrupt stream (bad CRC, impossible length, malformed headers) makes the tap go blind with
the corruption as its anomaly: the bytes are still forwarded, the verdict becomes
`unconfirmed` unless an error had already been seen.
"""

from __future__ import annotations

import zlib
from collections import Counter
from typing import Protocol

from .dialects import EVENTSTREAM_DIALECTS, Assembler, MessageAssembler, sniff_message
from .eventstream import PRELUDE_BYTES, EventMessage, EventStreamDecoder
from .verdict import Dialect

EVENTSTREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"
# Messages held while the dialect is still unknown; exceptions alone do not tell.
SNIFF_MESSAGES = 8


class Tap(Protocol):
    """What the reader needs of the tap (`StreamTap` provides it)."""

    assembler: Assembler | None
    anomalies: Counter[str]

    def _adopt(self, dialect: Dialect) -> Assembler: ...

    def _go_blind(self, why: str) -> None: ...


class EventStreamFraming:
    def __init__(self, max_message_bytes: int) -> None:
        self.decoder = EventStreamDecoder(max_message_bytes)
        self.pending: list[EventMessage] = []

    @classmethod
    def wanted(
        cls, dialect: Dialect | None, content_type: str | None, max_message_bytes: int
    ) -> EventStreamFraming | None:
        """The content type decides; without one (replay), a Bedrock dialect does. A JSON
        body (an error, a non-streamed answer) still starts with `{` and is read as JSON."""
        ctype = (content_type or "").lower()
        if EVENTSTREAM_CONTENT_TYPE in ctype or (
            dialect in EVENTSTREAM_DIALECTS and "json" not in ctype
        ):
            return cls(max_message_bytes)
        return None

    @classmethod
    def sniffed(cls, head: bytes, max_message_bytes: int) -> EventStreamFraming | None:
        """From the first bytes, when no content type said so: a prelude whose CRC holds."""
        if len(head) >= PRELUDE_BYTES and zlib.crc32(head[:8]) == int.from_bytes(head[8:12], "big"):
            return cls(max_message_bytes)
        return None

    def feed(self, tap: Tap, data: bytes) -> int:
        """Feed bytes; returns how many messages they completed."""
        messages = self.decoder.feed(data)
        for message in messages:
            self.deliver(tap, message)
        if self.decoder.corrupt is not None:
            tap._go_blind(str(self.decoder.corrupt))
        return len(messages)

    def deliver(self, tap: Tap, message: EventMessage) -> None:
        assembler = tap.assembler
        if assembler is None:
            self.pending.append(message)
            dialect = sniff_message(message)
            if dialect is None and len(self.pending) < SNIFF_MESSAGES:
                return
            self.adopt(tap, dialect or Dialect.BEDROCK_CONVERSE)
            return
        if isinstance(assembler, MessageAssembler):
            assembler.on_aws_message(message)
        else:
            tap.anomalies["unexpected_framing"] += 1

    def adopt(self, tap: Tap, dialect: Dialect) -> None:
        tap._adopt(dialect)
        pending, self.pending = self.pending, []
        for message in pending:
            self.deliver(tap, message)

    def finish(self, tap: Tap) -> int:
        """End of input: returns the bytes of a message that never completed."""
        partial = self.decoder.finish()
        if self.pending:
            self.adopt(tap, Dialect.BEDROCK_CONVERSE)
        if self.decoder.oversized:
            tap.anomalies["oversized_event"] += self.decoder.oversized
        return partial

    @property
    def retained_bytes(self) -> int:
        return self.decoder.retained_bytes
