"""Fault injection for drills, sans I/O: upstream bytes in, the writes a broken stream would
make out. The shell performs the `Write`, `Pause`, `Stall` and `Close` steps; the tap is fed
exactly what was written, so the verdict describes what the client actually received.

Rules (comma-separated, as in `x-sseproxy-inject: rechunk=1,split-utf8`):

- `rechunk=N`: every write carries at most N bytes (1: the worst case for a client's framing).
- `split-utf8`: a write boundary inside every multi-byte UTF-8 character.
- `delay=MS`: a pause of MS milliseconds before every write after the first.
- `stall-after=N`: after N events nothing more is sent; the connection stays open.
- `cut-after=N`: after N events the connection is closed without ending the HTTP body.
- `cut-mid-event=N`: events before N are sent, then half of event N, then the cut (N=3).
- `drop-terminal`: the dialect's terminal signal is removed: Chat's chunks carrying a
  `finish_reason` and `[DONE]`, `message_stop`, `response.completed/incomplete/failed`, Gemini
  chunks with a `finishReason`, Ollama's `done: true` line, Vercel's `finish` and `[DONE]`,
  Bedrock Converse `messageStop`, Bedrock Invoke chunks holding `message_stop` or the
  invocation metrics, Cohere `message-end`.
- `done-after-cut=N`: after N events (N=2) the upstream "fails" and a relay-style end marker
  follows (`data: [DONE]`; `message_stop` for Anthropic); the HTTP body then ends cleanly.
- `inject-error=N`: after N events (N=2) the dialect's own in-band error is sent and the body
  ends: Anthropic `overloaded_error`, Chat `{"error": ...}`, Responses `error`, Gemini 503
  `UNAVAILABLE`, Ollama `{"error": ...}`, Vercel `error` then `[DONE]`, Bedrock a
  `modelStreamErrorException` message, Cohere `message-end` with `finish_reason: ERROR`.
- `duplicate-snapshot`: every Responses `*.done` snapshot event is sent twice.
- `crlf`: every line end becomes CRLF.

Event rules work on whole events (blank-line framing, lines for NDJSON, messages for AWS event
streams); byte rules then cut the resulting bytes into writes (`crlf` leaves binary alone).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from . import eventstream
from .dialects import EVENTSTREAM_DIALECTS, sniff
from .events import SSEEvent
from .framing import DEFAULT_MAX_EVENT_BYTES, SSEDecoder
from .verdict import Dialect

RULES = {
    "rechunk",
    "split-utf8",
    "delay",
    "stall-after",
    "cut-after",
    "cut-mid-event",
    "drop-terminal",
    "done-after-cut",
    "inject-error",
    "duplicate-snapshot",
    "crlf",
}
DEFAULTS = {"cut-mid-event": 3, "done-after-cut": 2, "inject-error": 2}
NEEDS_NUMBER = {"rechunk", "delay", "stall-after", "cut-after"}


class InjectionError(ValueError):
    """A rule that does not exist or lacks its number."""


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    value: int | None = None

    def __str__(self) -> str:
        return self.name if self.value is None else f"{self.name}={self.value}"


def parse_rules(text: str) -> tuple[Rule, ...]:
    rules = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, raw = item.partition("=")
        name = name.strip().lower()
        if name not in RULES:
            raise InjectionError(f"unknown injection rule {name!r}")
        value: int | None = None
        if raw.strip():
            try:
                value = int(raw)
            except ValueError as exc:
                raise InjectionError(f"{name}: {raw!r} is not a whole number") from exc
            if value < (1 if name in ("rechunk",) else 0):
                raise InjectionError(f"{name}: {value} is out of range")
        elif name in NEEDS_NUMBER:
            raise InjectionError(f"{name} needs a number, as in {name}=3")
        else:
            value = DEFAULTS.get(name)
        rules.append(Rule(name, value))
    return tuple(rules)


@dataclass(frozen=True, slots=True)
class Write:
    data: bytes


@dataclass(frozen=True, slots=True)
class Pause:
    milliseconds: int


@dataclass(frozen=True, slots=True)
class Stall:
    """Send nothing more; keep the connection open until the client gives up."""


@dataclass(frozen=True, slots=True)
class Close:
    """End the connection without ending the HTTP body."""


Step = Write | Pause | Stall | Close


class RawEvents:
    """Splits bytes into raw events (up to and including the blank line), keeping every byte."""

    def __init__(self, ndjson: bool) -> None:
        self.ndjson = ndjson
        self._line: list[bytes] = []
        self._event: list[bytes] = []

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        if self._line:
            data = b"".join(self._line) + data
            self._line = []
        lines = data.splitlines(True)
        if lines and (lines[-1].endswith(b"\r") or not lines[-1].endswith((b"\n", b"\r"))):
            self._line = [lines.pop()]  # a CR may be the first half of a CRLF
        for line in lines:
            self._event.append(line)
            if self.ndjson or line in (b"\n", b"\r\n", b"\r"):
                out.append(b"".join(self._event))
                self._event = []
        return out

    def rest(self) -> bytes:
        rest = b"".join(self._event) + b"".join(self._line)
        self._event, self._line = [], []
        return rest


class RawMessages:
    """Splits an AWS event stream into raw messages by their length prefix, keeping every
    byte. Bytes that cannot be a message (an impossible or oversized length) pass through
    unsplit from there on."""

    ndjson = False

    def __init__(self, max_message_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_message_bytes = max_message_bytes
        self._held = b""
        self._passthrough = False

    def feed(self, data: bytes) -> list[bytes]:
        held = self._held + data
        if self._passthrough:
            self._held = b""
            return [held] if held else []
        out: list[bytes] = []
        start = 0
        while len(held) - start >= 4:
            total = int.from_bytes(held[start : start + 4], "big")
            if total < eventstream.MIN_MESSAGE_BYTES or total > self.max_message_bytes:
                self._passthrough = True
                out.append(held[start:])
                start = len(held)
                break
            if len(held) - start < total:
                break
            out.append(held[start : start + total])
            start += total
        self._held = held[start:]
        return out

    def rest(self) -> bytes:
        rest, self._held = self._held, b""
        return rest


def raw_splitter(dialect: Dialect | None, ndjson: bool) -> RawEvents | RawMessages:
    """The raw event splitter for a dialect's framing."""
    if dialect in EVENTSTREAM_DIALECTS:
        return RawMessages()
    return RawEvents(ndjson or dialect is Dialect.OLLAMA)


def _message(raw: bytes) -> eventstream.EventMessage | None:
    messages = eventstream.EventStreamDecoder().feed(raw)
    return messages[0] if messages else None


def _is_terminal_message(dialect: Dialect, raw: bytes) -> bool:
    message = _message(raw)
    if message is None or message.message_type != "event":
        return False
    if dialect is Dialect.BEDROCK_CONVERSE:
        return message.event_type == "messageStop"
    try:
        payload = base64.b64decode(json.loads(message.payload)["bytes"])
    except (ValueError, KeyError, TypeError):
        return False
    return b'"message_stop"' in payload or b"amazon-bedrock-invocationMetrics" in payload


def _parse(raw: bytes) -> SSEEvent | None:
    decoder = SSEDecoder()
    events = [f for f in decoder.feed(raw) if isinstance(f, SSEEvent)]
    return events[0] if events else None


def is_terminal(dialect: Dialect | None, raw: bytes, ndjson: bool) -> bool:
    if dialect in EVENTSTREAM_DIALECTS:
        assert dialect is not None
        return _is_terminal_message(dialect, raw)
    if ndjson:
        return b'"done":true' in raw.replace(b" ", b"")
    event = _parse(raw)
    if event is None:
        return False
    etype, data = event.type, event.data
    if data == "[DONE]":
        return dialect in (None, Dialect.OPENAI_CHAT, Dialect.VERCEL_UI, Dialect.SSE)
    if dialect is Dialect.OPENAI_CHAT:
        # The finish_reason is Chat's real terminal evidence; `[DONE]` alone proves nothing.
        return '"finish_reason":"' in data.replace(" ", "")
    if dialect is Dialect.ANTHROPIC_MESSAGES:
        return etype == "message_stop" or '"message_stop"' in data
    if dialect is Dialect.OPENAI_RESPONSES:
        return etype in ("response.completed", "response.incomplete", "response.failed")
    if dialect is Dialect.GEMINI:
        return '"finishReason"' in data
    if dialect is Dialect.VERCEL_UI:
        return '"type":"finish"' in data.replace(" ", "")
    if dialect is Dialect.COHERE_CHAT:
        return etype == "message-end" or '"message-end"' in data
    return False


def error_event(dialect: Dialect | None, sequence_number: int = 0) -> bytes:
    """The dialect's own in-band error; `sequence_number` continues a Responses stream's."""
    if dialect in EVENTSTREAM_DIALECTS:
        body = {"message": "Model stream error (injected)", "originalStatusCode": 500}
        return eventstream.exception("modelStreamErrorException", json.dumps(body).encode())
    if dialect is Dialect.COHERE_CHAT:
        body = {
            "type": "message-end",
            "delta": {"finish_reason": "ERROR", "error": "internal server error (injected)"},
        }
        return b"event: message-end\ndata: " + json.dumps(body).encode() + b"\n\n"
    if dialect is Dialect.ANTHROPIC_MESSAGES:
        body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        return b"event: error\ndata: " + json.dumps(body).encode() + b"\n\n"
    if dialect is Dialect.OPENAI_RESPONSES:
        # Shaped as OpenAI's ResponseErrorEvent (the Vercel AI SDK rejects an event without
        # `sequence_number` as a schema mismatch and never shows the message).
        event = {
            "type": "error",
            "code": "server_error",
            "message": "The server had an error (injected)",
            "param": None,
            "sequence_number": sequence_number,
        }
        return b"event: error\ndata: " + json.dumps(event).encode() + b"\n\n"
    if dialect is Dialect.GEMINI:
        body = {
            "error": {
                "code": 503,
                "message": "The model is overloaded (injected)",
                "status": "UNAVAILABLE",
            }
        }
        return b"data: " + json.dumps(body).encode() + b"\n\n"
    if dialect is Dialect.OLLAMA:
        return (
            json.dumps({"error": "model runner has unexpectedly stopped (injected)"}).encode()
            + b"\n"
        )
    if dialect is Dialect.VERCEL_UI:
        return b'data: {"type":"error","errorText":"An error occurred."}\n\ndata: [DONE]\n\n'
    body = {
        "error": {
            "message": "The server had an error (injected)",
            "type": "server_error",
            "code": "injected",
        }
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def end_marker(dialect: Dialect | None) -> bytes:
    if dialect is Dialect.BEDROCK_CONVERSE:
        return eventstream.event("messageStop", b"{}")
    if dialect is Dialect.BEDROCK_INVOKE:
        inner = base64.b64encode(b'{"type":"message_stop"}').decode()
        return eventstream.event("chunk", json.dumps({"bytes": inner}).encode())
    if dialect is Dialect.COHERE_CHAT:
        return b'event: message-end\ndata: {"type":"message-end","delta":{}}\n\n'
    if dialect is Dialect.ANTHROPIC_MESSAGES:
        return b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    if dialect is Dialect.OLLAMA:
        return b'{"done":true}\n'
    return b"data: [DONE]\n\n"


def to_crlf(raw: bytes) -> bytes:
    return b"\r\n".join(raw.splitlines()) + (b"\r\n" if raw.endswith((b"\n", b"\r")) else b"")


def split_utf8(data: bytes) -> list[bytes]:
    """Cut inside every multi-byte character: after the first byte of each lead byte."""
    out, start = [], 0
    for i, byte in enumerate(data):
        if byte >= 0xC0 and i + 1 < len(data):
            out.append(data[start : i + 1])
            start = i + 1
    out.append(data[start:])
    return [piece for piece in out if piece]


@dataclass
class Injector:
    """Turns upstream chunks into the steps of a faulty stream, per the rules."""

    rules: tuple[Rule, ...]
    dialect: Dialect | None = None
    ndjson: bool = False
    events_sent: int = 0
    done: bool = False
    next_sequence: int = 0  # of a Responses stream, for an injected error event
    _raw: RawEvents | RawMessages = field(init=False)
    _first_write: bool = True

    def __post_init__(self) -> None:
        self._raw = raw_splitter(self.dialect, self.ndjson)
        self._by_name = {rule.name: rule.value for rule in self.rules}

    @property
    def names(self) -> list[str]:
        return [str(rule) for rule in self.rules]

    def feed(self, chunk: bytes) -> list[Step]:
        if self.done:
            return []
        return self._events(self._raw.feed(chunk))

    def finish(self) -> list[Step]:
        """The upstream body ended: flush what is left (an unterminated tail stays as is)."""
        if self.done:
            return []
        rest = self._raw.rest()
        steps = self._writes(rest) if rest else []
        self.done = True
        return steps

    def _events(self, events: list[bytes]) -> list[Step]:
        steps: list[Step] = []
        rules = self._by_name
        for raw in events:
            if self.dialect is None and not self._raw.ndjson:
                parsed = _parse(raw)
                if parsed is not None:
                    self.dialect = sniff(parsed)
            if "drop-terminal" in rules and is_terminal(self.dialect, raw, self._raw.ndjson):
                continue
            if "inject-error" in rules and self.dialect is Dialect.OPENAI_RESPONSES:
                self._track_sequence(raw)
            n = self.events_sent + 1
            if rules.get("cut-mid-event") == n:
                steps += [*self._writes(raw[: max(1, len(raw) // 2)]), Close()]
                self.done = True
                return steps
            if "crlf" in rules and not isinstance(self._raw, RawMessages):
                raw = to_crlf(raw)
            out = raw
            if "duplicate-snapshot" in rules and self._is_snapshot(raw):
                out = raw + raw
            steps += self._writes(out)
            self.events_sent = n
            for name, tail in (
                ("inject-error", [Write(error_event(self.dialect, self.next_sequence))]),
                ("done-after-cut", [Write(end_marker(self.dialect))]),
            ):
                if rules.get(name) == n:
                    steps += self._bytes_rules(tail)
                    self.done = True
                    return steps
            if rules.get("cut-after") == n:
                steps.append(Close())
                self.done = True
                return steps
            if rules.get("stall-after") == n:
                steps.append(Stall())
                self.done = True
                return steps
        return steps

    def _track_sequence(self, raw: bytes) -> None:
        event = _parse(raw)
        if event is None:
            return
        try:
            seq = json.loads(event.data).get("sequence_number")
        except (ValueError, AttributeError):
            return
        if isinstance(seq, int) and not isinstance(seq, bool) and seq >= self.next_sequence:
            self.next_sequence = seq + 1

    @staticmethod
    def _is_snapshot(raw: bytes) -> bool:
        event = _parse(raw)
        return (
            event is not None
            and event.type.startswith("response.")
            and event.type.endswith(".done")
        )

    def _writes(self, data: bytes) -> list[Step]:
        return self._bytes_rules([Write(data)])

    def _bytes_rules(self, writes: list[Write]) -> list[Step]:
        rules = self._by_name
        pieces = [w.data for w in writes]
        if "split-utf8" in rules:
            pieces = [p for data in pieces for p in split_utf8(data)]
        size = rules.get("rechunk")
        if size:
            pieces = [data[i : i + size] for data in pieces for i in range(0, len(data), size)]
        steps: list[Step] = []
        delay = rules.get("delay")
        for piece in pieces:
            if delay and not self._first_write:
                steps.append(Pause(delay))
            self._first_write = False
            steps.append(Write(piece))
        return steps
