"""The reader for AWS event streams (`Framing.EVENTSTREAM` in `readers.READERS`): decoded body
bytes in, `EventMessage`s out to the sink (the tap), which hands them to a Bedrock assembler.

A corrupt stream (bad CRC, impossible length, malformed headers) is counted at `finish()` under
the corruption's name; the tap treats that anomaly like an unanalysed body (`UNSEEN` in
readers.py): the bytes were forwarded, the verdict is `unconfirmed` unless an error was seen.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from sseproxy.core.eventstream import EventMessage, EventStreamDecoder


class MessageSink(Protocol):
    anomalies: Counter[str]

    def on_message(self, message: EventMessage) -> None: ...


class EventStreamReader:
    def __init__(self, sink: MessageSink, max_message_bytes: int) -> None:
        self.sink = sink
        self.decoder = EventStreamDecoder(max_message_bytes)

    def feed(self, data: bytes) -> None:
        on_message = self.sink.on_message
        for message in self.decoder.feed(data):
            on_message(message)

    def finish(self) -> int:
        decoder, anomalies = self.decoder, self.sink.anomalies
        partial = decoder.finish()
        if decoder.corrupt is not None:
            anomalies[str(decoder.corrupt)] += 1
        if decoder.oversized:
            anomalies["oversized_event"] += decoder.oversized
        return partial

    @property
    def retained_bytes(self) -> int:
        return self.decoder.retained_bytes
