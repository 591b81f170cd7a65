"""Fault injection for drills, sans I/O: upstream bytes in, the writes a broken stream would
make out. The shell performs the `Write`, `Pause`, `Stall` and `Close` steps; the tap is fed
exactly what was written, so the verdict describes what the client actually received.

Rules (comma-separated, as in `x-sseproxy-inject: rechunk=1,split-utf8`):

- `rechunk=N`: every write carries at most N bytes (1: the worst case for a client's framing).
- `split-utf8`: a write boundary inside every multi-byte UTF-8 character.
- `delay=MS`: a pause of MS milliseconds before every write after the first.
- `stall-after=N`: after N events nothing more is sent; the connection stays open.
- `keepalive-stall=N`: after N events only keep-alives follow, one a second, forever: SSE
  `: keep-alive` comments, Anthropic `event: ping`, a blank line for NDJSON (which has no
  comment). Content never resumes: what a pinging server with a hung generator sends.
- `cut-after=N`: after N events the connection is closed without ending the HTTP body.
- `cut-mid-event=N`: events before N are sent, then half of event N, then the cut (N=3).
- `drop-terminal`: the dialect's terminal signal is removed: Chat's chunks carrying a
  `finish_reason` and `[DONE]`, `message_stop`, `response.completed/incomplete/failed`, Gemini
  chunks with a `finishReason`, Ollama's `done: true` line, Vercel's `finish` and `[DONE]`,
  Bedrock Converse `messageStop`, the Bedrock Invoke chunk holding `message_stop` or the
  invocation metrics, Cohere `message-end` (each dialect's spec says which).
- `done-after-cut=N`: after N events (N=2) the upstream "fails" and a relay-style end marker
  follows (`data: [DONE]`; `message_stop` for Anthropic); the HTTP body then ends cleanly.
- `inject-error=N`: after N events (N=2) the dialect's own in-band error is sent and the body
  ends: Anthropic `overloaded_error`, Chat `{"error": ...}`, Responses `error`, Gemini 503
  `UNAVAILABLE`, Ollama `{"error": ...}`, Vercel `error` then `[DONE]`, Bedrock a
  `modelStreamErrorException` message, Cohere `message-end` with `ERROR`.
- `duplicate-snapshot`: every Responses `*.done` snapshot event is sent twice.
- `crlf`: every line end becomes CRLF (binary AWS event streams are left alone).
- `close-code=C`: WebSocket sessions only (core/sessions/drills.py): `cut-after` closes with
  this close code instead of dropping the connection without a close frame.

Event rules work on whole events (blank-line framing, lines for NDJSON, messages for AWS event
streams); byte rules then cut the resulting bytes into writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sseproxy.core.dialects import fallback, sniff, spec_for
from sseproxy.core.events import Framing, SSEEvent
from sseproxy.core.eventstream import MIN_MESSAGE_BYTES
from sseproxy.core.framing import DEFAULT_MAX_EVENT_BYTES, SSEDecoder
from sseproxy.core.jsonvalue import loads
from sseproxy.core.verdict import Dialect

RULES = {
    "rechunk",
    "split-utf8",
    "delay",
    "stall-after",
    "keepalive-stall",
    "cut-after",
    "cut-mid-event",
    "drop-terminal",
    "done-after-cut",
    "inject-error",
    "duplicate-snapshot",
    "crlf",
    "close-code",
}
DEFAULTS = {"cut-mid-event": 3, "done-after-cut": 2, "inject-error": 2}
NEEDS_NUMBER = {"rechunk", "delay", "stall-after", "keepalive-stall", "cut-after", "close-code"}
# keepalive-stall: the interval between keep-alives (DeepSeek, sse-starlette send 1-15 s).
KEEPALIVE_INTERVAL_MS = 1000


class InjectionError(ValueError):
    """A rule that does not exist or lacks its number: the request is wrong (400)."""


class InjectionDisabled(InjectionError):
    """A request asked for drills where they are not allowed: refused, not wrong (403). The
    status follows this type, never the message's words."""


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


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """From now on write `data` every `interval_ms`, and nothing else, until the client leaves
    (or the shell's own bound ends the drill)."""

    data: bytes
    interval_ms: int


Step = Write | Pause | Stall | Close | KeepAlive


class RawEvents:
    """Splits bytes into raw events (up to and including the blank line), keeping every byte.

    Linear in the input however it is chunked: an unterminated line is kept as fragments and
    joined once when it ends, and only the new bytes are searched for line ends.
    """

    def __init__(self, ndjson: bool) -> None:
        self.ndjson = ndjson
        self._line: list[bytes] = []  # fragments of the line not yet ended
        self._cr = False  # that line ended in CR: an LF first in the next read completes CRLF
        self._event: list[bytes] = []
        self.work = 0  # bytes searched or copied, for the tests' linearity check

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        if not data:
            return out
        if self._cr:
            self._cr = False
            if data[0] == 10:  # LF
                self._line.append(data[:1])
                data = data[1:]
            self._end_line(out)
        self.work += len(data)
        lines = data.splitlines(True)
        for line in lines[:-1]:
            self._line.append(line)
            self._end_line(out)
        if lines:
            last = lines[-1]
            self._line.append(last)
            if last[-1] == 10:
                self._end_line(out)
            elif last[-1] == 13:
                self._cr = True  # a CR may be the first half of a CRLF
        return out

    def _end_line(self, out: list[bytes]) -> None:
        line = self._line[0] if len(self._line) == 1 else b"".join(self._line)
        self.work += len(line) if len(self._line) > 1 else 0
        self._line = []
        self._event.append(line)
        if self.ndjson or line in (b"\n", b"\r\n", b"\r"):
            event = self._event[0] if len(self._event) == 1 else b"".join(self._event)
            self.work += len(event) if len(self._event) > 1 else 0
            out.append(event)
            self._event = []

    def rest(self) -> bytes:
        rest = b"".join(self._event) + b"".join(self._line)
        self._event, self._line, self._cr = [], [], False
        return rest


class RawMessages:
    """Splits an AWS event stream into raw messages by their length prefix, keeping every
    byte. From bytes that cannot start a message (an impossible or oversized length) on,
    everything passes through unsplit."""

    ndjson = False

    def __init__(self, max_message_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_message_bytes = max_message_bytes
        self._held: list[bytes] = []
        self._held_len = 0
        self._need = 4  # bytes needed before the next decision
        self._passthrough = False

    def feed(self, data: bytes) -> list[bytes]:
        if self._passthrough:
            return [data] if data else []
        self._held.append(data)
        self._held_len += len(data)
        if self._held_len < self._need:
            return []  # joined once per message, not once per read: linear
        held = b"".join(self._held)
        out: list[bytes] = []
        start = 0
        while len(held) - start >= 4:
            total = int.from_bytes(held[start : start + 4], "big")
            if total < MIN_MESSAGE_BYTES or total > self.max_message_bytes:
                self._passthrough = True
                out.append(held[start:])
                start = len(held)
                break
            if len(held) - start < total:
                break
            out.append(held[start : start + total])
            start += total
        rest = held[start:]
        self._held, self._held_len = ([rest], len(rest)) if rest else ([], 0)
        self._need = (
            int.from_bytes(rest[:4], "big") if len(rest) >= 4 and not self._passthrough else 4
        )
        return out

    def rest(self) -> bytes:
        rest = b"".join(self._held)
        self._held, self._held_len = [], 0
        return rest


def _parse(raw: bytes) -> SSEEvent | None:
    decoder = SSEDecoder()
    events = [f for f in decoder.feed(raw) if isinstance(f, SSEEvent)]
    return events[0] if events else None


def is_terminal(dialect: Dialect | None, raw: bytes, ndjson: bool) -> bool:
    spec = spec_for(dialect)
    binary = spec.framing is Framing.EVENTSTREAM
    return spec.drills.is_terminal(None if ndjson or binary else _parse(raw), raw)


def error_event(dialect: Dialect | None, sequence_number: int = 0) -> bytes:
    """The dialect's own in-band error; `sequence_number` continues a Responses stream's."""
    return spec_for(dialect).drills.error(sequence_number)


def end_marker(dialect: Dialect | None) -> bytes:
    return spec_for(dialect).drills.end_marker


def keepalive(dialect: Dialect | None, ndjson: bool) -> bytes:
    """The dialect's own liveness signal: what its servers send while no content flows (on an
    NDJSON stream, that of an NDJSON dialect: the fallback one when this dialect is not)."""
    if ndjson and (dialect is None or spec_for(dialect).framing is not Framing.NDJSON):
        dialect = fallback(Framing.NDJSON)
    return spec_for(dialect).drills.keepalive


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
    # The body's framing when the response declared it (the Content-Type), else the dialect's:
    # a binary event stream must never be split as text lines, even for an unknown dialect.
    framing: Framing | None = None
    events_sent: int = 0
    done: bool = False
    next_sequence: int = 0  # of a Responses stream, for an injected error event
    _raw: RawEvents | RawMessages = field(init=False)
    _first_write: bool = True

    def __post_init__(self) -> None:
        framing = self.framing or spec_for(self.dialect).framing
        if framing is Framing.EVENTSTREAM:
            self._raw = RawMessages()
        else:
            self._raw = RawEvents(self.ndjson or framing is Framing.NDJSON)
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
            if self.events_sent == 0 and rules.get("keepalive-stall") == 0:
                return self._keepalive_stall()
            if "drop-terminal" in rules and is_terminal(self.dialect, raw, self._raw.ndjson):
                continue
            if "inject-error" in rules and spec_for(self.dialect).drills.sequenced:
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
            if rules.get("keepalive-stall") == n:
                return steps + self._keepalive_stall()
        return steps

    def _track_sequence(self, raw: bytes) -> None:
        event = _parse(raw)
        if event is None:
            return
        try:
            seq = loads(event.data).get("sequence_number")
        except (ValueError, AttributeError):
            return
        if isinstance(seq, int) and not isinstance(seq, bool) and seq >= self.next_sequence:
            self.next_sequence = seq + 1

    def _keepalive_stall(self) -> list[Step]:
        data = keepalive(self.dialect, self._raw.ndjson)
        if "crlf" in self._by_name and not isinstance(self._raw, RawMessages):
            data = to_crlf(data)
        self.done = True
        return [KeepAlive(data, KEEPALIVE_INTERVAL_MS)]

    def _is_snapshot(self, raw: bytes) -> bool:
        is_snapshot = spec_for(self.dialect).drills.is_snapshot
        if is_snapshot is None:
            return False
        event = _parse(raw)
        return event is not None and is_snapshot(event)

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
