"""StreamTap: the shell's only contact with the core. Bytes in; a Verdict when told they ended.

The tap chooses the framing from the first bytes (SSE, NDJSON, or one JSON body), routes frames
to the dialect's assembler (detected from the request, or sniffed from the first events), and
guards all of it: an internal bug becomes the `core_error` anomaly and the tap goes blind,
never an exception into the forwarding loop (unless `strict`, which tests use).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .dialects import Assembler, new_assembler, sniff, sniff_body
from .dialects.base import DEFAULT_CONTENT_CHARS, loads
from .encoding import BodyDecoder, ContentDecodingError
from .events import Comment, Frame, SSEEvent
from .eventstream import PRELUDE_BYTES
from .eventstream_reader import EventStreamFraming
from .framing import DEFAULT_MAX_EVENT_BYTES, LineDecoder, SSEDecoder
from .verdict import Dialect, EndReason, Interruption, State, Verdict

# A non-streamed JSON body is analysed from a bounded copy; real completions are far smaller.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
# Events held while the dialect is still unknown (auto mode). The first telling event decides;
# a stream that says nothing within this many events is analysed as plain SSE.
SNIFF_EVENTS = 32
CLEAN_ENDS = {EndReason.END_OF_INPUT, EndReason.UPSTREAM_CLOSED}


class Framing(Enum):
    UNDECIDED = "undecided"
    SSE = "sse"
    NDJSON = "ndjson"
    JSON_BODY = "json"
    EVENTSTREAM = "eventstream"  # AWS `application/vnd.amazon.eventstream` (Bedrock)


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
    ) -> None:
        self.options = options or TapOptions()
        self.dialect = dialect
        self.assembler: Assembler | None = (
            new_assembler(dialect, self.options.content_chars) if dialect else None
        )
        self.bytes = 0
        self.events = 0
        self.comments = 0
        self.anomalies: Counter[str] = Counter()
        self.framing = Framing.UNDECIDED
        self._ndjson = dialect is Dialect.OLLAMA or "ndjson" in (content_type or "").lower()
        self._aws = EventStreamFraming.wanted(dialect, content_type, self.options.max_event_bytes)
        self._held: list[bytes] = []
        self._held_len = 0
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

    def close(self, end: EndReason | str = EndReason.END_OF_INPUT) -> Verdict:
        """The bytes ended for `end`; decide. Idempotent: later calls return the same verdict."""
        if self._verdict is None:
            try:
                self._verdict = self._conclude(str(end))
            except Exception:
                if self.options.strict:
                    raise
                self._go_blind("core_error")
                try:
                    self._verdict = self._conclude(str(end))
                except Exception:
                    self._verdict = Verdict(
                        dialect=self.dialect or Dialect.SSE,
                        state=State.UNCONFIRMED,
                        anomalies=dict(self.anomalies),
                        bytes=self.bytes,
                        events=self.events,
                        comments=self.comments,
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
        else:
            self._hold(data)

    def _decide_framing(self, data: bytes) -> bytes:
        """Hold leading whitespace until the first significant byte says which framing this is."""
        self._hold(data)
        held = b"".join(self._held)
        stripped = held.lstrip(b" \t\r\n\xef\xbb\xbf")
        if not stripped:
            if len(held) < 64 * 1024:
                return b""
            stripped = b"\n"  # a sea of blank lines can only be SSE
        first = stripped[:1]
        if self._aws is None and held[:1] == b"\x00":  # no text framing starts with NUL
            if len(held) < PRELUDE_BYTES:
                return b""
            self._aws = EventStreamFraming.sniffed(held, self.options.max_event_bytes)
        if self._aws is not None and first not in (b"{", b"["):
            self.framing = Framing.EVENTSTREAM
            self._held, self._held_len = [], 0
            return held
        if first in (b"{", b"["):
            if self._ndjson:
                self.framing = Framing.NDJSON
            elif b"\n" not in stripped:
                return b""  # cannot tell NDJSON from a JSON body before the first line ends
            elif self._looks_like_ndjson(stripped):
                self.framing = Framing.NDJSON
            else:
                self.framing = Framing.JSON_BODY
                return b""  # already held
        else:
            self.framing = Framing.SSE
        self._held, self._held_len = [], 0
        if self.framing is Framing.SSE:
            self._sse = SSEDecoder(self.options.max_event_bytes)
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
        if (
            self.framing is Framing.UNDECIDED
            and self._blind is None
            and (self._held or self._body_overflow)
        ):
            self.framing = Framing.JSON_BODY  # a single JSON body without a newline
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

    def _conclude(self, end: str) -> Verdict:
        partial = self._finish_framing() if self._blind is None else 0
        if self._blind is not None and self.framing is Framing.SSE and self._sse:
            self._sse.finish()
            partial = self._sse.partial_bytes
        clean = end in CLEAN_ENDS
        assembler = self.assembler or new_assembler(self.dialect or Dialect.SSE)
        outcome = assembler.conclude(partial > 0, clean)
        state = outcome.state
        if self._blind is not None and not (
            state is State.FAILED or (assembler.terminal and state is State.INCOMPLETE)
        ):
            # Part of the stream went unseen: whatever came after could change the verdict.
            state = State.UNCONFIRMED
        if partial:
            self.anomalies["partial_event_discarded"] += 1
        tool_calls = assembler.tool_call_summaries()
        anomalies = self.anomalies + assembler.anomalies
        last_id = self._sse.last_event_id if self._sse else ""
        return Verdict(
            dialect=assembler.dialect,
            state=state,
            finish_reason=outcome.finish_reason,
            finish_category=outcome.finish_category,
            last_event=assembler.last_event,
            last_event_id=last_id or None,
            interruption=Interruption(end, partial) if state is State.INTERRUPTED else None,
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
