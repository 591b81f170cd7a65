"""StreamTap: the shell's only contact with the core. Bytes in; a Verdict when told they ended.

The tap chooses the framing from the first bytes (SSE, NDJSON, or one JSON body), routes frames
to the dialect's assembler (detected from the request, or sniffed from the first events), and
guards all of it: an internal bug becomes the `core_error` anomaly and the tap goes blind,
never an exception into the forwarding loop (unless `strict`, which tests use).
"""

from __future__ import annotations

import codecs
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .dialects import Assembler, new_assembler, sniff, sniff_body
from .dialects.base import DEFAULT_CONTENT_CHARS, Outcome, loads
from .encoding import BodyDecoder, ContentDecodingError
from .events import Comment, Frame, SSEEvent
from .eventstream import PRELUDE_BYTES, prelude_holds
from .eventstream_reader import EVENTSTREAM_CONTENT_TYPE, EventStreamFraming
from .framing import DEFAULT_MAX_EVENT_BYTES, LineDecoder, SSEDecoder
from .request import RequestFacts
from .verdict import Dialect, EndReason, Interruption, State, Verdict

# A non-streamed JSON body is analysed from a bounded copy; real completions are far smaller.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
# Events held while the dialect is still unknown (auto mode). The first telling event decides;
# a stream that says nothing within this many events is analysed as plain SSE.
SNIFF_EVENTS = 32
# Ends at which the bytes stopped by themselves; whether the body was whole is `http_complete`.
CLEAN_ENDS = {EndReason.END_OF_INPUT, EndReason.UPSTREAM_CLOSED}
# Leading whitespace held before the first significant byte decides the framing; a body that
# is nothing but blank lines for this long can only be SSE.
MAX_UNDECIDED_BYTES = 64 * 1024
# Leading bytes of a `text/plain` body that mark it as SSE served under the wrong type.
SSE_FIELD_STARTS = (b"data:", b"event:", b"id:", b"retry:", b":")
WHITESPACE = b" \t\r\n\xef\xbb\xbf"  # and the BOM's bytes
# States that a client leaving cannot change once the events decided them.
KNOWN_OUTCOMES = {State.COMPLETED, State.INCOMPLETE, State.FAILED}


class Framing(Enum):
    UNDECIDED = "undecided"
    SSE = "sse"
    NDJSON = "ndjson"
    JSON_BODY = "json"
    TEXT = "text"
    EVENTSTREAM = "eventstream"  # AWS `application/vnd.amazon.eventstream` (Bedrock)


def framing_for(content_type: str | None) -> Framing | None:
    """The framing a Content-Type declares; None when the first bytes must decide."""
    ctype = (content_type or "").split(";", 1)[0].strip().lower()
    if ctype == "text/event-stream":
        return Framing.SSE
    if ctype == EVENTSTREAM_CONTENT_TYPE:
        return Framing.EVENTSTREAM
    if "ndjson" in ctype or "jsonl" in ctype or "json-seq" in ctype:
        return Framing.NDJSON
    if not ctype or ctype == "application/json" or ctype.endswith("+json"):
        return None
    return Framing.TEXT  # text/plain, application/octet-stream, anything else: no protocol


@dataclass(frozen=True, slots=True)
class TapOptions:
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    content_chars: int = DEFAULT_CONTENT_CHARS  # assembled text kept (per kind)
    strict: bool = False


class StreamTap:
    def __init__(
        self,
        dialect: Dialect | None = None,
        *,
        content_type: str | None = None,
        content_encoding: str | None = None,
        options: TapOptions | None = None,
        request: RequestFacts | None = None,
    ) -> None:
        self.options = options or TapOptions()
        self.request = request or RequestFacts()
        self.dialect = dialect
        self.assembler: Assembler | None = (
            new_assembler(dialect, self.options.content_chars) if dialect else None
        )
        self.bytes = 0
        self.events = 0
        self.comments = 0
        self.anomalies: Counter[str] = Counter()
        self.framing = Framing.UNDECIDED
        self._declared = framing_for(content_type)
        self._ndjson = dialect is Dialect.OLLAMA or self._declared is Framing.NDJSON
        self._aws: EventStreamFraming | None = None
        self._held: list[bytes] = []
        self._held_len = 0
        self._significant = False  # a non-whitespace byte has been held
        self._json_like = False  # ... and it opened a JSON value
        self._line_seen = False  # ... and a line end came after it
        self._text: codecs.BufferedIncrementalDecoder | None = None
        self._pending_events: list[SSEEvent] = []
        self._sse: SSEDecoder | None = None
        self._lines: LineDecoder | None = None
        self._body_overflow = False
        self._blind: str | None = None
        self._verdict: Verdict | None = None
        self._direct: tuple[SSEDecoder, Assembler] | None = None
        self._decoder: BodyDecoder | None = None
        try:
            self._decoder = BodyDecoder(content_encoding)
        except ContentDecodingError:
            self._go_blind("content_decoding_error")

    # -- input ------------------------------------------------------------------------------

    def feed(self, chunk: bytes) -> int:
        """Account for one upstream chunk. Returns how many content deltas it completed."""
        self.bytes += len(chunk)
        direct = self._direct
        if direct is not None:
            # The hot path: plain SSE of a known dialect. Same work as below, fewer calls.
            sse, assembler = direct
            before = assembler.content_deltas
            try:
                frames = sse.feed(chunk)
                if frames:
                    on_event = assembler.on_event
                    comments = 0
                    for frame in frames:
                        if type(frame) is Comment:
                            comments += 1
                        else:
                            on_event(frame)  # type: ignore[arg-type]
                    self.comments += comments
                    self.events += len(frames) - comments
            except Exception:
                if self.options.strict:
                    raise
                self._go_blind("core_error")
                return 0
            return assembler.content_deltas - before
        if self._blind is not None or self._decoder is None:
            return 0
        before = self.assembler.content_deltas if self.assembler else 0
        try:
            for piece in self._decoder.decode(chunk):
                self._feed_decoded(piece)
        except ContentDecodingError:
            self._go_blind("content_decoding_error")
            return 0
        except Exception:
            if self.options.strict:
                raise
            self._go_blind("core_error")
            return 0
        if (
            self.framing is Framing.SSE
            and self._sse is not None
            and self.assembler is not None
            and self._decoder.identity
            and self._blind is None
        ):
            self._direct = (self._sse, self.assembler)
        return (self.assembler.content_deltas if self.assembler else 0) - before

    def close(
        self, end: EndReason | str = EndReason.END_OF_INPUT, *, http_complete: bool = True
    ) -> Verdict:
        """The bytes ended for `end`; decide. Idempotent: later calls return the same verdict.

        `http_complete`: the body ended by its own HTTP framing (last-chunk, Content-Length,
        or the close of a close-delimited body). A body that did not is never a success unless
        the dialect's end marker had already arrived.
        """
        if self._verdict is None:
            try:
                self._verdict = self._conclude(str(end), http_complete)
            except Exception:
                if self.options.strict:
                    raise
                self._go_blind("core_error")
                try:
                    self._verdict = self._conclude(str(end), http_complete)
                except Exception:
                    self._verdict = Verdict(
                        dialect=self.dialect or Dialect.SSE,
                        state=State.UNCONFIRMED,
                        anomalies=dict(self.anomalies),
                        bytes=self.bytes,
                        events=self.events,
                        comments=self.comments,
                        http_complete=http_complete,
                    )
        return self._verdict

    # -- framing ----------------------------------------------------------------------------

    def _feed_decoded(self, data: bytes) -> None:
        if self.framing is Framing.UNDECIDED:
            data = self._decide_framing(data)
            if not data:
                return
        if self.framing is Framing.SSE:
            assert self._sse is not None
            self._on_frames(self._sse.feed(data))
        elif self.framing is Framing.EVENTSTREAM and self._aws is not None:
            self.events += self._aws.feed(self, data)
        elif self.framing is Framing.NDJSON:
            assert self._lines is not None
            assembler = self._assembler_for_lines()
            for line in self._lines.feed(data):
                self.events += 1
                assembler.on_line(line)
        elif self.framing is Framing.TEXT:
            assert self._text is not None and self.assembler is not None
            self.assembler.on_text(self._text.decode(data))
        else:
            self._hold(data)

    def _decide_framing(self, data: bytes) -> bytes:
        """Hold bytes until the Content-Type and the first significant bytes say which framing
        this is; returns the held bytes once decided. Held bytes are joined only when a
        decision can be made, so holding a long first line stays linear."""
        self._hold(data)
        if self._declared is Framing.NDJSON:
            return self._decided(Framing.NDJSON)
        if not self._significant:
            start = data.lstrip(WHITESPACE)
            if not start:
                if self._held_len < MAX_UNDECIDED_BYTES:
                    return b""
                return self._decided(Framing.SSE)  # a sea of blank lines can only be SSE
            self._significant = True
            self._json_like = start[:1] in (b"{", b"[")
            self._line_seen = b"\n" in start
        elif not self._line_seen:
            self._line_seen = b"\n" in data
        if not self._json_like:
            if self._declared is Framing.EVENTSTREAM or (
                self._held[:1] and self._held[0][:1] == b"\x00"
            ):
                return self._decide_eventstream()
            if self._declared is not Framing.TEXT:
                return self._decided(Framing.SSE)
            return self._decide_text()
        if self._declared is not None:
            self.anomalies["content_type_mismatch"] += 1  # JSON under another declared type
        if self._ndjson:
            return self._decided(Framing.NDJSON)
        if not self._line_seen:
            return b""  # cannot tell NDJSON from a JSON body before the first line ends
        held = b"".join(self._held)
        self._held = [held]
        if self._looks_like_ndjson(held.lstrip(WHITESPACE)):
            return self._decided(Framing.NDJSON)
        self.framing = Framing.JSON_BODY
        return b""  # already held, parsed whole at the end

    def _decide_text(self) -> bytes:
        """`text/plain` and other types: text, unless the body is visibly SSE under the
        wrong type (a common relay mistake), which needs its first few bytes to tell."""
        start = b"".join(self._held).lstrip(WHITESPACE)  # a few bytes: decided within 6
        if any(field.startswith(start) for field in SSE_FIELD_STARTS) and not self._line_seen:
            return b""  # still a prefix of an SSE field name
        if start.startswith(SSE_FIELD_STARTS):
            self.anomalies["content_type_mismatch"] += 1
            return self._decided(Framing.SSE)
        return self._decided(Framing.TEXT)

    def _decide_eventstream(self) -> bytes:
        """AWS event stream when declared, or when the first bytes are a prelude whose CRC
        holds (a replayed body has no Content-Type); no text framing starts with NUL."""
        if self._declared is Framing.EVENTSTREAM:
            return self._decided(Framing.EVENTSTREAM)
        held = b"".join(self._held)
        self._held = [held]
        if len(held) < PRELUDE_BYTES:
            return b""
        if prelude_holds(held):
            return self._decided(Framing.EVENTSTREAM)
        return (
            self._decided(Framing.SSE)
            if self._declared is not Framing.TEXT
            else self._decide_text()
        )

    def _decided(self, framing: Framing) -> bytes:
        self.framing = framing
        held = b"".join(self._held)
        self._held, self._held_len = [], 0
        if framing is Framing.SSE:
            self._sse = SSEDecoder(self.options.max_event_bytes)
        elif framing is Framing.TEXT:
            self._text = codecs.getincrementaldecoder("utf-8")("replace")
            if self.assembler is not None:
                self.anomalies["unexpected_content_type"] += 1
            self.dialect = Dialect.TEXT
            self.assembler = new_assembler(Dialect.TEXT, self.options.content_chars)
        elif framing is Framing.EVENTSTREAM:
            self._aws = EventStreamFraming(self.options.max_event_bytes)
        else:
            self._lines = LineDecoder(self.options.max_event_bytes)
        return held

    def _looks_like_ndjson(self, stripped: bytes) -> bool:
        first_line = stripped.split(b"\n", 1)[0]
        try:
            obj = loads(first_line)
        except ValueError:
            return False
        return self.dialect in (None, Dialect.OLLAMA) and sniff_body(obj) is Dialect.OLLAMA

    def _hold(self, data: bytes) -> None:
        if self._held_len + len(data) > self.options.max_body_bytes:
            self._body_overflow = True
            return
        self._held.append(data)
        self._held_len += len(data)

    def _assembler_for_lines(self) -> Assembler:
        if self.assembler is None:
            self.dialect = Dialect.OLLAMA
            self.assembler = new_assembler(Dialect.OLLAMA, self.options.content_chars)
        return self.assembler

    # -- events -----------------------------------------------------------------------------

    def _on_frames(self, frames: list[Frame]) -> None:
        if self.assembler is None:
            for frame in frames:
                self._on_frame_sniffing(frame)
            return
        on_event = self.assembler.on_event
        comments = 0
        for frame in frames:
            if type(frame) is Comment:
                comments += 1
            else:
                on_event(frame)  # type: ignore[arg-type]
        self.comments += comments
        self.events += len(frames) - comments

    def _on_frame_sniffing(self, frame: Frame) -> None:
        if type(frame) is Comment:
            self.comments += 1
            return
        self.events += 1
        if self.assembler is None:
            self._sniff(frame)  # type: ignore[arg-type]
        else:
            self.assembler.on_event(frame)  # type: ignore[arg-type]

    def _sniff(self, event: SSEEvent) -> Assembler | None:
        self._pending_events.append(event)
        dialect = sniff(event)
        if dialect is None and len(self._pending_events) < SNIFF_EVENTS:
            return None
        return self._adopt(dialect or Dialect.SSE)

    def _adopt(self, dialect: Dialect) -> Assembler:
        self.dialect = dialect
        assembler = self.assembler = new_assembler(dialect, self.options.content_chars)
        for pending in self._pending_events:
            assembler.on_event(pending)
        self._pending_events = []
        return assembler

    # -- conclusion -------------------------------------------------------------------------

    def _go_blind(self, why: str) -> None:
        self.anomalies[why] += 1
        self._blind = why
        self._direct = None

    def _finish_framing(self) -> int:
        """Flush the framing; returns the bytes of a discarded unterminated block."""
        if self._decoder is not None and self._blind is None and not self._decoder.finish():
            self.anomalies["truncated_compressed_body"] += 1
        if self.framing is Framing.UNDECIDED and self._blind is None:
            if self._json_like or self._body_overflow:
                self.framing = Framing.JSON_BODY  # a single JSON body without a newline
            elif self._significant:  # a short text body that looked like an SSE field's start
                self._feed_decoded(self._decided(Framing.TEXT))
        if self.framing is Framing.TEXT and self._text is not None and self.assembler:
            self.assembler.on_text(self._text.decode(b"", True))
            return 0
        if self.framing is Framing.SSE and self._sse is not None:
            self._on_frames(self._sse.finish())
            partial = self._sse.partial_bytes
            if self._sse.invalid_utf8:
                self.anomalies["invalid_utf8"] += self._sse.invalid_utf8
            if self._sse.oversized:
                self.anomalies["oversized_event"] += self._sse.oversized
            if self._sse.unknown_fields:
                # Lines that are not SSE fields: e.g. a raw JSON error body inside the stream.
                self.anomalies["unknown_sse_field"] += self._sse.unknown_fields
            if self._blind is None and self.assembler is None:
                self._adopt(Dialect.SSE)
            return partial
        if self.framing is Framing.EVENTSTREAM and self._aws is not None:
            return self._aws.finish(self)
        if self.framing is Framing.NDJSON and self._lines is not None:
            if self._lines.oversized:
                self.anomalies["oversized_event"] += self._lines.oversized
            return self._lines.finish()
        if self.framing is Framing.JSON_BODY and self._blind is None:
            self._conclude_body()
        return 0

    def _conclude_body(self) -> None:
        if self._body_overflow:
            self._go_blind("body_too_large_to_analyse")
            return
        try:
            body = loads(b"".join(self._held))
        except ValueError:
            self.anomalies["json_decode_error"] += 1
            body = None
        finally:
            self._held = []
        if self.assembler is None:
            self._adopt(sniff_body(body) or Dialect.SSE)
        assert self.assembler is not None
        self.assembler.on_body(body)

    def _conclude(self, end: str, http_complete: bool) -> Verdict:
        partial = self._finish_framing() if self._blind is None else 0
        if self._blind is not None and self.framing is Framing.SSE and self._sse:
            self._sse.finish()
            partial = self._sse.partial_bytes
        assembler = self.assembler or new_assembler(self.dialect or Dialect.SSE)
        body_complete = http_complete and end in CLEAN_ENDS
        outcome = assembler.conclude(partial > 0, body_complete)
        state = self._transport_rule(outcome, assembler, end, body_complete)
        if self._blind is not None and not (
            state is State.FAILED or (assembler.terminal and state is State.INCOMPLETE)
        ):
            # Part of the stream went unseen: whatever came after could change the verdict.
            state = State.UNCONFIRMED
        if partial:
            self.anomalies["partial_event_discarded"] += 1
        self._request_checks(state, outcome, assembler)
        interruption = None
        if state is State.INTERRUPTED or (
            end == EndReason.CLIENT_DISCONNECTED and not assembler.terminal
        ):
            interruption = Interruption(end, partial)
        tool_calls = assembler.tool_call_summaries()
        anomalies = self.anomalies + assembler.anomalies
        last_id = self._sse.last_event_id if self._sse else ""
        return Verdict(
            dialect=assembler.dialect,
            state=state,
            finish_reason=outcome.finish_reason,
            finish_category=outcome.finish_category,
            finish_reasons=outcome.finish_reasons,
            last_event=assembler.last_event,
            last_event_id=last_id or None,
            interruption=interruption,
            http_complete=http_complete,
            error=assembler.error,
            anomalies=dict(sorted(anomalies.items())),
            bytes=self.bytes,
            events=self.events,
            comments=self.comments,
            text_chars=assembler.text.chars,
            reasoning_chars=assembler.reasoning.chars,
            refusal_chars=assembler.refusal.chars,
            tool_calls=tool_calls,
            server_tool_calls=tuple(assembler.server_tool_calls),
            usage=assembler.usage,
            response_id=assembler.response_id,
            model=assembler.model,
        )

    def _transport_rule(
        self, outcome: Outcome, assembler: Assembler, end: str, body_complete: bool
    ) -> State:
        """How the bytes ended decides whether the events' outcome stands (PROTOCOLS §9.2 plus
        the HTTP framing): a truncated body is `interrupted` unless the end marker (or an
        in-band error) had arrived; a client that left after the outcome was known keeps it."""
        state = outcome.state
        if self.bytes == 0 and state is not State.FAILED:
            self.anomalies["empty_body"] += 1
            return State.UNCONFIRMED if body_complete else State.INTERRUPTED
        if body_complete:
            return state
        if assembler.terminal or assembler.error is not None:
            if end != EndReason.CLIENT_DISCONNECTED:
                self.anomalies["truncated_after_terminal"] += 1
            return state
        if end == EndReason.CLIENT_DISCONNECTED and state in KNOWN_OUTCOMES:
            self.anomalies["client_left_before_end"] += 1
            return state
        return State.INTERRUPTED

    def _request_checks(self, state: State, outcome: Outcome, assembler: Assembler) -> None:
        """Compare the response with what the request asked for."""
        facts = self.request
        if facts.stream_framing and self.framing is Framing.JSON_BODY and assembler.error is None:
            self.anomalies["stream_not_honoured"] += 1
        if state not in (State.COMPLETED, State.INCOMPLETE):
            return
        if facts.include_usage and assembler.usage is None:
            self.anomalies["usage_missing"] += 1
        if facts.choices is not None and facts.choices > 1:
            finished = outcome.finish_reasons or (outcome.finish_reason,)
            if sum(1 for r in finished if r is not None) < facts.choices:
                self.anomalies["choices_missing"] += 1

    # -- for callers that want more than the verdict ----------------------------------------

    @property
    def retained_bytes(self) -> int:
        framing = self._sse or self._lines or self._aws
        return self._held_len + (framing.retained_bytes if framing else 0)

    def primary_text(self) -> str:
        """The visible answer of choice / candidate 0 (all parts for single-message dialects)."""
        if self.assembler is None:
            return ""
        if self.assembler.dialect in (Dialect.OPENAI_CHAT, Dialect.GEMINI):
            return self.assembler.text.group_text(0)
        return self.assembler.text.all_text()

    def describe(self) -> dict[str, Any]:
        """Assembled content, for `replay --content` and tests."""
        a = self.assembler
        if a is None:
            return {}
        return {
            "text": self.primary_text(),
            "reasoning": a.reasoning.all_text(),
            "refusal": a.refusal.all_text(),
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments}
                for c in a.tool_calls.values()
            ],
        }
