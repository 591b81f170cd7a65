"""The inspector's event list and raw view of one stream, rebuilt from its retained bytes.

The proxy's own tap takes the usual SSE blocks without building events (its fast path), so the
list is not recorded while the stream runs: the bytes are (bounded, `StreamView.chunk`), and
when a person opens the stream they go once more through a tap of the same dialect, which the
list watches item by item (`TapObserver`, which turns the fast paths off). Each row is one SSE
event or comment, NDJSON line, AWS event stream message or JSON body, stamped with the arrival
of the chunk that completed it, carrying the anomalies the tap counted while taking it, its
size on the wire (from where it began to where the next began) and its gist: the text it adds,
or its error, finish or role, or its JSON without the keys every event repeats. The analysis
is the core's, so the rows agree with the record's counts. Every string is cut at `chars`; the
rows at `max_events`.
"""

from __future__ import annotations

import base64
import binascii
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from sseproxy.core import Dialect, EndReason, ItemKind, StreamTap, TapItem, TapOptions
from sseproxy.observe.redact import Secrets

# Assembled text kept per kind when the list is rebuilt (the page shows it per kind).
CONTENT_CHARS = 64 * 1024
# Bytes a control character other than tab and newline is shown as, in the raw view.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F)}


# Keys every event of a stream repeats (ids, model, timestamps): left out of an event's gist,
# so that a row starts with what this event says.
_SAME_EVERY_TIME = frozenset(
    {
        "id",
        "object",
        "created",
        "created_at",
        "model",
        "system_fingerprint",
        "service_tier",
        "type",
        "sequence_number",
        "item_id",
        "output_index",
        "content_index",
        "index",
        "usage",
        "provider",
    }
)
# Keys whose string value is the text an event adds (a delta), in the order looked for.
_TEXT_KEYS = (
    "delta",
    "text",
    "content",
    "partial_json",
    "thinking",
    "arguments",
    "refusal",
    "response",
    "transcript",
)
_FINISH_KEYS = ("finish_reason", "stop_reason", "finishReason", "done_reason", "status")
# JSON nodes visited to find an event's gist: a row costs a bounded walk, whatever the event.
_GIST_NODES = 256


@dataclass(slots=True)
class EventRow:
    t_ms: float
    kind: str  # event, comment, line, message, body, text
    type: str
    size: int  # bytes on the wire (of the decoded body, for a compressed one)
    data: str
    truncated: bool
    gist: str = ""  # what this event says that the others do not (its delta, its finish)
    anomalies: list[str] = field(default_factory=list)
    offset: int = -1  # where it began in the body; -1: unknown (its size is its own)

    def to_dict(self) -> dict[str, Any]:
        return {
            "t_ms": self.t_ms,
            "kind": self.kind,
            "type": self.type,
            "size": self.size,
            "data": self.data,
            "gist": self.gist,
            "truncated": self.truncated,
            "anomalies": self.anomalies,
        }


class EventList:
    """Rows of one stream's retained chunks; see the module's docstring. A `TapObserver` of
    items on a tap of its own."""

    def __init__(self, max_events: int, chars: int, secrets: Secrets) -> None:
        self.max_events = max_events
        self.chars = chars
        self.secrets = secrets
        self.rows: list[EventRow] = []
        self.omitted = 0
        self.t_ms = 0.0
        self.body_bytes = 0

    @property
    def full(self) -> bool:
        return len(self.rows) >= self.max_events

    # -- TapObserver ------------------------------------------------------------------------

    @property
    def watching(self) -> bool:
        """Anomalies are found per row while there is room for rows."""
        return not self.full

    def on_chunk(self, chunk: bytes) -> None:
        self.body_bytes += len(chunk)

    def on_item(self, item: TapItem) -> None:
        if self.full:
            self.omitted += 1
            return
        value, new = item.value, list(item.anomalies)
        kind = item.kind
        if kind is ItemKind.COMMENT:
            self.add("comment", "comment", value.text, new, value.offset)
        elif kind is ItemKind.EVENT:
            self.add("event", value.type, value.data, new, value.offset)
        elif kind is ItemKind.LINE:
            self.add("line", _json_type(value.data), _text(value.data), new, value.offset)
        elif kind is ItemKind.MESSAGE:
            etype = value.event_type or value.exception_type or value.message_type
            self.add("message", etype, _aws_payload(value.payload), new, value.offset)
        elif kind is ItemKind.BODY:
            data = orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
            self.add("body", "json", data, new, 0)
        else:
            size = len(value.encode())
            self.add("text", "text", value, new, size=size)

    def add(
        self,
        kind: str,
        etype: str,
        data: str,
        anomalies: list[str],
        offset: int = -1,
        size: int = 0,
    ) -> None:
        data = self.secrets.redact_text(data)
        gist = _gist(kind, data)[: self.chars]
        self.rows.append(
            EventRow(
                self.t_ms,
                kind,
                etype[: self.chars],
                size,
                data[: self.chars],
                len(data) > self.chars,
                gist,
                anomalies,
                offset,
            )
        )

    def _sizes(self, end: int) -> None:
        """Each row's bytes on the wire: from where it began to where the next began (the
        last: to `end`, where the body's whole units ended)."""
        placed = [row for row in self.rows if row.offset >= 0]
        for i, row in enumerate(placed):
            after = placed[i + 1].offset if i + 1 < len(placed) else end
            row.size = max(0, (after if after > row.offset else end) - row.offset)

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
        tap = StreamTap(
            dialect=known,
            content_type=content_type,
            content_encoding=content_encoding,
            options=TapOptions(content_chars=CONTENT_CHARS),
        )
        tap.observe(self, items=True)
        for t_ms, data in chunks:
            self.t_ms = t_ms
            tap.feed(data)
            while tap.backlog:
                tap.pump()
        before = _counted(tap)
        # Frames the end flushes belong to the last chunk; a cut stream's tail is discarded.
        verdict = tap.close(EndReason.END_OF_INPUT if whole else EndReason.UPSTREAM_CLOSED)
        at_end = sorted((_counted(tap) - before).keys())
        analysed = tap.decoded_bytes if tap.decoded_bytes else self.body_bytes
        partial = verdict.interruption.partial_event_bytes if verdict.interruption else 0
        self._sizes(analysed - partial)
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


def _counted(tap: StreamTap) -> Counter[str]:
    found = Counter(tap.anomalies)
    if tap.assembler is not None:
        found.update(tap.assembler.anomalies)
    return found


def _gist(kind: str, data: str) -> str:
    """What one event says that the stream's other events do not: the text it adds (quoted),
    else its finish or error, else its JSON without the keys every event repeats."""
    if kind in ("comment", "text") or not data.startswith(("{", "[")):
        return data
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data
    found = _walk(obj)
    if found is not None:
        return found
    if isinstance(obj, dict):
        rest = {k: v for k, v in obj.items() if k not in _SAME_EVERY_TIME}
        return orjson.dumps(rest).decode() if rest else ""
    return orjson.dumps(obj).decode()


def _walk(obj: Any) -> str | None:
    """The first delta text in `obj` (breadth first, a bounded walk), else its error, finish
    or role as `key: value`."""
    queue, seen = [obj], 0
    finish: str | None = None
    error: str | None = None
    role: str | None = None
    while queue and seen < _GIST_NODES:
        node = queue.pop(0)
        seen += 1
        if isinstance(node, dict):
            for key in _TEXT_KEYS:
                value = node.get(key)
                if isinstance(value, str) and value:
                    return orjson.dumps(value).decode()
            for key in _FINISH_KEYS:
                value = node.get(key)
                if finish is None and isinstance(value, str) and value:
                    finish = f"{key}: {value}"
            if role is None and isinstance(node.get("role"), str):
                role = f"role: {node['role']}"
            message = node.get("message")
            if error is None and "error" in node and isinstance(node["error"], dict | str):
                error = "error: " + (
                    node["error"]
                    if isinstance(node["error"], str)
                    else str(node["error"].get("message") or orjson.dumps(node["error"]).decode())
                )
            elif error is None and node.get("type") == "error" and isinstance(message, str):
                error = f"error: {message}"
            queue.extend(v for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            queue.extend(v for v in node if isinstance(v, dict | list))
    return error or finish or role


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
