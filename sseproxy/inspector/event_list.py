"""The inspector's event list and raw view of one stream, rebuilt from its retained bytes.

The proxy's own tap takes the usual SSE blocks without building events (its fast path), so the
list is not recorded while the stream runs: the bytes are (bounded, `StreamView.chunk`), and
when a person opens the stream they go once more through a tap of the same dialect that stops
at every frame. Each row is one SSE event or comment, NDJSON line, AWS event stream message or
JSON body, stamped with the arrival of the chunk that completed it, and carrying the anomalies
the tap counted while taking it. The analysis is the core's, so the rows agree with the
record's counts. Every string is cut at `chars`; the rows at `max_events`.
"""

from __future__ import annotations

import base64
import binascii
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from sseproxy.core import Dialect, EndReason, StreamTap, TapOptions
from sseproxy.core.events import Comment, Frame, Line
from sseproxy.core.eventstream import EventMessage
from sseproxy.observe.redact import Secrets

# Assembled text kept per kind when the list is rebuilt (the page shows it per kind).
CONTENT_CHARS = 64 * 1024
# Bytes a control character other than tab and newline is shown as, in the raw view.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F)}


@dataclass(slots=True)
class EventRow:
    t_ms: float
    kind: str  # event, comment, line, message, body, text
    type: str
    size: int
    data: str
    truncated: bool
    anomalies: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "t_ms": self.t_ms,
            "kind": self.kind,
            "type": self.type,
            "size": self.size,
            "data": self.data,
            "truncated": self.truncated,
            "anomalies": self.anomalies,
        }


class _ListingTap(StreamTap):
    """A tap that hands each frame to its assembler one at a time and notes what it saw."""

    fast_paths = False  # they take blocks without frames: every frame is a row here

    def __init__(self, owner: EventList, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.owner = owner

    def counted(self) -> Counter[str]:
        found = Counter(self.anomalies)
        if self.assembler is not None:
            found.update(self.assembler.anomalies)
        return found

    def on_frames(self, frames: list[Frame]) -> None:
        if self.owner.full:  # no more rows: the analysis goes on for the end's findings
            self.owner.omitted += len(frames)
            super().on_frames(frames)
            return
        for frame in frames:
            before = self.counted()
            super().on_frames([frame])
            if isinstance(frame, Comment):
                self.owner.add("comment", "comment", len(frame.text), frame.text, before)
            else:
                self.owner.add("event", frame.type, len(frame.raw), frame.data, before)

    def on_line(self, line: Line) -> None:
        if self.owner.full:
            self.owner.omitted += 1
            super().on_line(line)
            return
        before = self.counted()
        super().on_line(line)
        self.owner.add("line", _json_type(line.data), len(line.data), _text(line.data), before)

    def on_message(self, message: EventMessage) -> None:
        if self.owner.full:
            self.owner.omitted += 1
            super().on_message(message)
            return
        before = self.counted()
        super().on_message(message)
        etype = message.event_type or message.exception_type or message.message_type
        data = _aws_payload(message.payload)
        self.owner.add("message", etype, len(message.payload), data, before)

    def on_body(self, body: Any) -> None:
        before = self.counted()
        super().on_body(body)
        data = orjson.dumps(body, option=orjson.OPT_INDENT_2).decode()
        self.owner.add("body", "json", len(data), data, before)

    def on_text(self, text: str) -> None:
        before = self.counted()
        super().on_text(text)
        self.owner.add("text", "text", len(text), text, before)


class EventList:
    """Rows of one stream's retained chunks; see the module's docstring."""

    def __init__(self, max_events: int, chars: int, secrets: Secrets) -> None:
        self.max_events = max_events
        self.chars = chars
        self.secrets = secrets
        self.rows: list[EventRow] = []
        self.omitted = 0
        self.t_ms = 0.0
        self.tap: _ListingTap | None = None

    @property
    def full(self) -> bool:
        return len(self.rows) >= self.max_events

    def add(self, kind: str, etype: str, size: int, data: str, before: Counter[str]) -> None:
        assert self.tap is not None
        if self.full:
            self.omitted += 1
            return
        new = sorted((self.tap.counted() - before).keys())
        data = self.secrets.redact_text(data)
        self.rows.append(
            EventRow(
                self.t_ms,
                kind,
                etype[: self.chars],
                size,
                data[: self.chars],
                len(data) > self.chars,
                new,
            )
        )

    def build(
        self,
        chunks: Sequence[tuple[float, bytes]],
        dialect: str | None,
        content_type: str | None,
        content_encoding: str | None,
        whole: bool,
    ) -> dict[str, Any]:
        """`chunks`: (ms since the request, bytes); `whole`: they are all the body's bytes."""
        known = Dialect(dialect) if dialect and dialect in Dialect._value2member_map_ else None
        self.tap = tap = _ListingTap(
            self,
            dialect=known,
            content_type=content_type,
            content_encoding=content_encoding,
            options=TapOptions(content_chars=CONTENT_CHARS),
        )
        for t_ms, data in chunks:
            self.t_ms = t_ms
            tap.feed(data)
            while tap.backlog:
                tap.pump()
        before = tap.counted()
        # Frames the end flushes belong to the last chunk; a cut stream's tail is discarded.
        tap.close(EndReason.END_OF_INPUT if whole else EndReason.UPSTREAM_CLOSED)
        at_end = sorted((tap.counted() - before).keys())
        described = tap.describe()
        redact = self.secrets.redact_text
        content = {
            "text": redact(described.get("text", ""))[: self.chars * 8],
            "reasoning": redact(described.get("reasoning", ""))[: self.chars * 8],
            "refusal": redact(described.get("refusal", ""))[: self.chars * 8],
            "tool_calls": [
                {
                    "id": call["id"],
                    "name": call["name"],
                    "arguments": redact(call["arguments"] or "")[: self.chars],
                }
                for call in described.get("tool_calls", [])[: self.max_events]
            ],
        }
        return {
            "events": [row.to_dict() for row in self.rows],
            "events_omitted": self.omitted,
            "anomalies_at_end": at_end,
            "content": content,
        }


def raw_view(
    chunks: Sequence[tuple[float, bytes]], secrets: Secrets, cut: bool, chars: int, partial: int
) -> list[dict[str, Any]]:
    """The chunks as they arrived: offset, size, time, and their bytes as text (invalid
    UTF-8 and control bytes as `\\xNN`), credential values masked with as many `*`. The last
    `partial` bytes (an unfinished event at a cut) are apart, in `tail`."""
    body = secrets.mask(b"".join(data for _, data in chunks), cut=cut)
    tail_from = len(body) - partial if 0 < partial <= len(body) else len(body)
    out, offset = [], 0
    for t_ms, data in chunks:
        end = offset + len(data)
        head = _shown(body[offset : min(end, max(offset, tail_from))])
        entry: dict[str, Any] = {"t_ms": t_ms, "offset": offset, "size": len(data)}
        entry["text"], entry["truncated"] = head[:chars], len(head) > chars
        if end > tail_from:
            tail = _shown(body[max(offset, tail_from) : end])
            entry["tail"] = tail[:chars]
            entry["truncated"] = entry["truncated"] or len(tail) > chars
        out.append(entry)
        offset = end
    return out


def _shown(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace").translate(_CONTROL)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _json_type(data: bytes) -> str:
    """An NDJSON line's `type` (Ollama has none: its lines are `chunk`s)."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return "invalid_json"
    if isinstance(obj, dict) and isinstance(obj.get("type"), str):
        return str(obj["type"])
    return "chunk"


def _aws_payload(payload: bytes) -> str:
    """A message's JSON payload; an Invoke `chunk`'s base64 `bytes` shown decoded beside it."""
    text = _text(payload)
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return text
    if isinstance(obj, dict) and isinstance(obj.get("bytes"), str):
        try:
            inner = base64.b64decode(obj["bytes"], validate=True)
            obj = {**obj, "bytes (decoded)": orjson.loads(inner)}
        except (binascii.Error, orjson.JSONDecodeError):
            pass
        return orjson.dumps(obj).decode()
    return text
