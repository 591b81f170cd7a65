"""The tap's reader for AWS event streams: bytes to messages, messages to the dialect.

Kept apart from the tap so the tap gains one branch per method, not a framing's worth of code.
A corrupt stream (bad CRC, impossible length, malformed headers) makes the tap go blind with
the corruption as its anomaly: the bytes are still forwarded, the verdict becomes
`unconfirmed` unless an error had already been seen.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from .dialects import Assembler, MessageAssembler, sniff_message
from .eventstream import EventMessage, EventStreamDecoder
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
