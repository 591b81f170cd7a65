"""StreamTap: the shell's only contact with the core. Bytes in; a Verdict when told they ended.

The tap chooses the framing from the first bytes (SSE, NDJSON, or one JSON body), routes frames
to the dialect's assembler (detected from the request, or sniffed from the first events), and
guards all of it: an internal bug becomes the `core_error` anomaly and the tap goes blind,
never an exception into the forwarding loop (unless `strict`, which tests use).

Whoever wants more than the verdict registers a `TapObserver` (`StreamTap.observe`) rather
than subclassing the tap: it is shown each chunk fed and, when it asks for them, each item
decoded (an SSE event or comment, an NDJSON line, an event stream message, a JSON body, text).
A tap with no observer pays nothing for the hook; one that watches items runs without the fast
paths, which take blocks of deltas without building events.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from sseproxy.core.dialects import (
    Assembler,
    by_request,
    fallback,
    new_assembler,
    sniff,
    sniff_body,
    sniff_line,
    sniff_message,
    spec_for,
)
from sseproxy.core.dialects.base import DEFAULT_CONTENT_CHARS, Assembly
from sseproxy.core.encoding import SLICE_BYTES, BodyDecoder, ContentDecodingError, must_slice
from sseproxy.core.events import Comment, Frame, Framing, Line, SSEEvent
from sseproxy.core.eventstream import EventMessage
from sseproxy.core.framing import DEFAULT_MAX_EVENT_BYTES, SSEDecoder
from sseproxy.core.jsonvalue import loads
from sseproxy.core.readers import (
    DEFAULT_MAX_BODY_BYTES,
    READERS,
    UNSEEN,
    FramingChoice,
    Reader,
    SSEReader,
)
from sseproxy.core.request import RequestFacts
from sseproxy.core.resume import EventRecorder, LedgerEvent
from sseproxy.core.verdict import Dialect, EndReason, Interruption, State, Verdict

__all__ = ["Framing", "ItemKind", "StreamTap", "TapItem", "TapObserver", "TapOptions"]

# Events held while the dialect is still unknown (auto mode). The first telling event decides;
# a stream that says nothing within this many events is analysed as plain SSE.
SNIFF_EVENTS = 32
# Decompressed bytes of one compressed response analysed at most. Real LLM streams decompress
# to a few MiB to ~20 MiB (a 64k-token Chat answer at ~250 bytes per chunk is ~16 MiB); 64 MiB
# leaves room for that while capping what a gzip bomb (~1000:1, so ~64 KiB of gzip) can demand:
# ~3 s of CPU for real events, up to ~30-80 s for the costliest (blank lines, 8-byte events),
# spent in short slices between other streams' work. Identity bodies need no budget: their
# analysis is proportional to the bytes actually received.
DEFAULT_MAX_DECODED_BYTES = 64 * 1024 * 1024
# Ends at which the bytes stopped by themselves; whether the body was whole is `http_complete`.
CLEAN_ENDS = {EndReason.END_OF_INPUT, EndReason.UPSTREAM_CLOSED}
# Assembler anomalies for a message the analysis could not decode, and so neither could the
# client's decoder (botocore raises on a Bedrock chunk whose `bytes` is not base64, and on a
# Converse payload or Invoke envelope that is not JSON; apps `json.loads` Invoke's bytes).
UNDECODABLE = ("invalid_chunk_bytes",)
UNDECODABLE_EVENTSTREAM = ("json_decode_error",)
# States that a client leaving cannot change once the events decided them.
KNOWN_OUTCOMES = {State.COMPLETED, State.INCOMPLETE, State.FAILED}


@dataclass(frozen=True, slots=True)
class TapOptions:
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    content_chars: int = DEFAULT_CONTENT_CHARS  # assembled text kept (per kind)
    max_decoded_bytes: int = DEFAULT_MAX_DECODED_BYTES
    # Events whose cursor and hash a resumable stream records for the resume ledger (0: none).
    ledger_events: int = 0
    # An identity read too costly to analyse in one call (`encoding.must_slice`) is only held
    # by `feed`, none of it analysed there: the caller pumps every slice (the proxy, between
    # other streams' work).
    defer_large_reads: bool = False
    strict: bool = False


class ItemKind(Enum):
    """What one decoded item is (`TapItem.value`'s type follows from it)."""

    EVENT = "event"  # an SSEEvent
    COMMENT = "comment"  # a Comment
    LINE = "line"  # an NDJSON Line
    MESSAGE = "message"  # an AWS EventMessage
    BODY = "body"  # one JSON document, parsed (None when it did not parse)
    TEXT = "text"  # text of a body with no protocol, as decoded so far


@dataclass(frozen=True, slots=True)
class TapItem:
    """One item the tap decoded and analysed; `anomalies`: those it counted while doing so
    (empty when the observer was not `watching`)."""

    kind: ItemKind
    value: Any
    anomalies: tuple[str, ...] = ()


class TapObserver(Protocol):
    """Watches a tap from outside. `on_chunk` sees every chunk fed, before it is analysed;
    `on_item` sees each item once the tap has analysed it, when the observer was registered
    with `items=True`. While `watching` is False the items come without their anomalies (it
    costs a copy of the counts per item to find them)."""

    @property
    def watching(self) -> bool: ...

    def on_chunk(self, chunk: bytes) -> None: ...

    def on_item(self, item: TapItem) -> None: ...


class _WatchedSink:
    """The readers' sink while an observer watches items: each item goes to the tap one at a
    time, then to the observer with what the tap counted while taking it."""

    __slots__ = ("anomalies", "observer", "tap")

    def __init__(self, tap: StreamTap, observer: TapObserver) -> None:
        self.tap = tap
        self.observer = observer
        self.anomalies = tap.anomalies

    def _counted(self) -> Counter[str]:
        found = Counter(self.tap.anomalies)
        if self.tap.assembler is not None:
            found.update(self.tap.assembler.anomalies)
        return found

    def _take(self, kind: ItemKind, value: Any, take: Callable[[Any], None], arg: Any) -> None:
        observer = self.observer
        if not observer.watching:
            take(arg)
            observer.on_item(TapItem(kind, value))
            return
        before = self._counted()
        take(arg)
        new = tuple(sorted((self._counted() - before).keys()))
        observer.on_item(TapItem(kind, value, new))

    def on_frames(self, frames: list[Frame]) -> None:
        take = self.tap.on_frames
        for frame in frames:
            kind = ItemKind.COMMENT if type(frame) is Comment else ItemKind.EVENT
            self._take(kind, frame, take, [frame])

    def on_line(self, line: Line) -> None:
        self._take(ItemKind.LINE, line, self.tap.on_line, line)

    def on_text(self, text: str) -> None:
        self._take(ItemKind.TEXT, text, self.tap.on_text, text)

    def on_body(self, body: Any) -> None:
        self._take(ItemKind.BODY, body, self.tap.on_body, body)

    def on_message(self, message: EventMessage) -> None:
        self._take(ItemKind.MESSAGE, message, self.tap.on_message, message)


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
        dialect = dialect or by_request(self.request)  # a JSON-RPC method says which protocol
        self.dialect = dialect
        self.assembler: Assembler | None = (
            new_assembler(dialect, self.options.content_chars) if dialect else None
        )
        if self.assembler is not None:
            self.assembler.expect(self.request)
        # Dropped once the dialect is known not to be resumable (its fast path stays on).
        self._recorder: EventRecorder | None = (
            EventRecorder(self.options.ledger_events) if self.options.ledger_events > 0 else None
        )
        self.bytes = 0
        self.events = 0
        self.comments = 0
        self.anomalies: Counter[str] = Counter()
        self.framing = Framing.UNDECIDED
        self._choice: FramingChoice | None = FramingChoice(
            content_type,
            ndjson=dialect is not None and spec_for(dialect).framing is Framing.NDJSON,
            ndjson_hint=self._starts_ndjson,
            anomalies=self.anomalies,
            max_held=self.options.max_body_bytes,
        )
        self._reader: Reader | None = None
        # The observer shown each chunk (None: none, and `feed` pays one test for the hook)
        # and the readers' sink: the tap itself, or `_WatchedSink` while items are watched.
        self._observer: TapObserver | None = None
        self._sink: Any = self
        self._pending_events: list[SSEEvent] = []
        self._blind: str | None = None
        self._verdict: Verdict | None = None
        self._direct: (
            tuple[SSEDecoder, Assembler, Callable[[bytes, int, int], bool] | None] | None
        ) = None
        # The same, also while input is held for later slices.
        self._fast: (
            tuple[SSEDecoder, Assembler, Callable[[bytes, int, int], bool] | None] | None
        ) = None
        self._decoder: BodyDecoder | None = None
        self.decoded_bytes = 0  # decompressed bytes analysed (compressed bodies only)
        # (events, type of the last one) complete within the input fed when `mark_fed` was
        # last called, once the analysis got there; None: not yet, or no mark.
        self.at_mark: tuple[int, str | None] | None = None
        try:
            self._decoder = BodyDecoder(content_encoding)
        except ContentDecodingError:
            self._go_blind("content_decoding_error")

    # -- observers --------------------------------------------------------------------------

    def observe(self, observer: TapObserver | None, *, items: bool = False) -> None:
        """Show `observer` every chunk fed from now on (None: no more chunks). `items`: also
        each item decoded, to the end, which turns the fast paths off; such an observer is
        registered before the first `feed`, so that it sees every item."""
        self._observer = observer
        if observer is not None and items:
            assert self._reader is None, "an item observer is registered before the first feed"
            self._sink = _WatchedSink(self, observer)
            self._direct = self._fast = None
        elif self._reader is None:
            self._sink = self

    # -- input ------------------------------------------------------------------------------

    def feed(self, chunk: bytes) -> int:
        """Account for one upstream chunk. Returns how many content deltas it completed."""
        self.bytes += len(chunk)
        if self._observer is not None:
            self._observer.on_chunk(chunk)
        direct = self._direct
        if direct is not None and (len(chunk) <= SLICE_BYTES or not must_slice(chunk)):
            return self._feed_fast(chunk, direct)
        self._direct = None  # a costly read: analysed a slice at a time, in order
        decoder = self._decoder
        if (
            self.options.defer_large_reads
            and decoder is not None
            and decoder.identity
            and self._blind is None
            and (decoder.pending or must_slice(chunk))
        ):
            decoder.hold(chunk)
            return 0
        deltas = self._analyse_slice(chunk)
        self._settle()
        return deltas

    def _feed_fast(
        self,
        chunk: bytes,
        direct: tuple[SSEDecoder, Assembler, Callable[[bytes, int, int], bool] | None],
    ) -> int:
        """Plain SSE of a known dialect, identity: a read as it came (`feed`) or a slice of a
        costly one (`pump`). Returns the content deltas it completed."""
        sse, assembler, take_block = direct
        before = assembler.content_deltas
        try:
            if take_block is not None:
                if sse.ready:
                    # The usual chunk: one block of a delta, taken without an event.
                    size = len(chunk)
                    if size <= sse.max_event_bytes and take_block(chunk, 0, size):
                        sse.pos += size
                        self.events += 1
                        return assembler.content_deltas - before
                    several = chunk.find(b"\n\n") + 2 < size
                else:
                    # A block began in an earlier chunk (a bulk read ends anywhere): the
                    # decoder completes it, and the blocks after it can be taken whole.
                    end = chunk.find(b"\n\n") + 2
                    several = 2 <= end < len(chunk)
                    if several:
                        self.on_frames(sse.feed(chunk[:end]))
                        chunk = chunk[end:]
                if several and sse.ready:
                    chunk = self._take_blocks(chunk, sse, assembler)
                    if not chunk:
                        return assembler.content_deltas - before
            event = sse.whole_event(chunk)
            if event is not None:  # the usual chunk: one event, nothing held
                if self._recorder is not None:
                    self._recorder.record(event)
                assembler.on_event(event)
                self.events += 1
                return assembler.content_deltas - before
            self.on_frames(sse.feed(chunk))
        except Exception:
            if self.options.strict:
                raise
            self._go_blind("core_error")
            return 0
        return assembler.content_deltas - before

    def _settle(self) -> None:
        """Once the dialect is known: drop the recorder if it cannot resume, and take the fast
        path for plain SSE (for slices of held input too; for whole reads when none is held)."""
        reader = self._reader
        if (
            self._recorder is not None
            and self.assembler is not None
            and not spec_for(self.assembler.dialect).resumable(self.request)
        ):
            self._recorder = None
        if (
            self._sink is self  # an observer of items sees every frame: no fast path
            and type(reader) is SSEReader
            and self.assembler is not None
            and self._decoder is not None
            and self._decoder.identity
            and self._blind is None
        ):
            assembler = self.assembler
            take_block = (
                assembler.take_block
                if type(assembler).take_block is not Assembler.take_block
                and self._recorder is None  # a block taken whole builds no event to record
                else None
            )
            self._fast = (reader.decoder, assembler, take_block)
            self._direct = self._fast if not self._decoder.pending else None

    def _take_blocks(self, chunk: bytes, sse: SSEDecoder, assembler: Assembler) -> bytes:
        """Take the usual blocks of deltas at the start of `chunk` without events, while they
        come; returns what is left from the first other block on, for the decoder."""
        pos, taken = assembler.take_blocks(chunk, 0, sse.max_event_bytes)
        if not taken:
            return chunk
        self.events += taken
        sse.pos += pos
        return b"" if pos == len(chunk) else chunk[pos:]

    @property
    def backlog(self) -> bool:
        """Input received but not yet analysed (a compressed body's, or what a read beyond
        `SLICE_BYTES` brought): call `pump()` (one slice each)."""
        return self._blind is None and self._decoder is not None and self._decoder.pending

    def pump(self) -> int:
        """Analyse one more slice of the backlog; returns content deltas."""
        if not self.backlog:
            return 0
        deltas = self._analyse_slice(b"")
        self._settle()
        return deltas

    def mark_fed(self) -> bool:
        """Count the events complete within the input fed so far once the analysis gets there
        (`at_mark`): True when it has not yet (an identity read held for later slices), False
        when `events` already counts them (or, compressed, when no byte offset maps to them)."""
        decoder = self._decoder
        if self._blind is not None or decoder is None or not decoder.identity:
            return False
        if not decoder.pending:
            return False
        decoder.mark()
        self.at_mark = None
        return True

    def stop_analysis(self) -> None:
        """Analyse nothing more (the shell stops before the backlog was analysed: a
        shutdown): the verdict counts `analysis_cut_short` and is not confirmed."""
        if self._blind is None and self._verdict is None:
            self._go_blind("analysis_cut_short")
            self._decoder = None  # its backlog is dropped

    def _analyse_slice(self, chunk: bytes) -> int:
        """Decode at most one slice (`encoding.SLICE_BYTES`) of `chunk` plus backlog; analyse it."""
        decoder = self._decoder
        if self._blind is not None or decoder is None:
            return 0
        before = self.assembler.content_deltas if self.assembler else 0
        try:
            piece = decoder.decode(chunk)
            over = False
            if not decoder.identity:
                # Exactly `max_decoded_bytes` are analysed; a byte more stops the analysis.
                left = self.options.max_decoded_bytes - self.decoded_bytes
                if len(piece) > left:
                    piece, over = piece[:left], True
                self.decoded_bytes += len(piece)
            if piece:
                fast = self._fast
                if fast is not None and decoder.identity:
                    self._feed_fast(piece, fast)
                else:
                    self._feed_decoded(piece)
            if decoder.mark_reached:
                decoder.mark_reached = False
                self.at_mark = (self.events, self.assembler.last_event if self.assembler else None)
            if over:
                self._go_blind("analysis_budget_exceeded")
                self._decoder = None  # its backlog is dropped: nothing more is analysed
        except ContentDecodingError:
            self._go_blind("content_decoding_error")
            return 0
        except Exception:
            if self.options.strict:
                raise
            self._go_blind("core_error")
            return 0
        return (self.assembler.content_deltas if self.assembler else 0) - before

    def close(
        self, end: EndReason | str = EndReason.END_OF_INPUT, *, http_complete: bool | None = True
    ) -> Verdict:
        """The bytes ended for `end`; decide. Idempotent: later calls return the same verdict.

        `http_complete`: True when the body ended by its own HTTP framing (last-chunk,
        Content-Length, or the close of a close-delimited body); False when it was cut; None
        when nobody knows (the client left and the proxy stopped reading before the end). A
        cut body is `interrupted`, also after the dialect's end marker: the client saw it break.
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
        reader = self._reader
        if reader is None:
            assert self._choice is not None
            framing = self._choice.feed(data)
            if framing is None:
                return
            reader = self._use(framing)
            data = self._choice.take()
            self._choice = None
        reader.feed(data)

    def _use(self, framing: Framing) -> Reader:
        self.framing = framing
        if framing is Framing.TEXT:
            if self.assembler is not None:
                self.anomalies["unexpected_content_type"] += 1
            self._adopt(fallback(Framing.TEXT))
        # An NDJSON stream of no known dialect gets one from its first line (`on_line`).
        options = self.options
        self._reader = READERS[framing](self._sink, options.max_event_bytes, options.max_body_bytes)
        return self._reader

    def _starts_ndjson(self, first_line: bytes) -> bool:
        """Does a JSON first line open an NDJSON stream (rather than one JSON body)?"""
        try:
            obj = loads(first_line)
        except ValueError:
            return False
        dialect = sniff_body(obj)
        if dialect is None or (self.dialect is not None and dialect is not self.dialect):
            return False
        return spec_for(dialect).framing is Framing.NDJSON

    # -- events -----------------------------------------------------------------------------

    def on_frames(self, frames: list[Frame]) -> None:
        recorder = self._recorder
        if recorder is not None:
            for frame in frames:
                if type(frame) is not Comment:
                    recorder.record(frame)  # type: ignore[arg-type]
        assembler = self.assembler
        if assembler is None:
            for frame in frames:
                self._on_frame_sniffing(frame)
            return
        if len(frames) == 1:  # the usual chunk
            frame = frames[0]
            if type(frame) is Comment:
                self.comments += 1
            else:
                assembler.on_event(frame)  # type: ignore[arg-type]
                self.events += 1
            return
        on_event = assembler.on_event
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

    def on_line(self, line: Line) -> None:
        self.events += 1
        assembler = self.assembler or self._adopt(sniff_line(line.data))
        assembler.on_line(line)

    def on_text(self, text: str) -> None:
        assert self.assembler is not None
        self.assembler.on_text(text)

    def on_message(self, message: EventMessage) -> None:
        """One AWS event stream message: the first one tells Converse from Invoke."""
        self.events += 1
        if self.assembler is None:
            self._adopt(sniff_message(message))
        assert self.assembler is not None
        receive = getattr(self.assembler, "on_aws_message", None)
        if receive is None:
            self.anomalies["unexpected_framing"] += 1  # a dialect forced on an event stream
        else:
            receive(message)

    def on_body(self, body: Any) -> None:
        if self.assembler is None:
            self._adopt(sniff_body(body) or Dialect.SSE)
        assert self.assembler is not None
        self.assembler.on_body(body)

    def _adopt(self, dialect: Dialect) -> Assembler:
        self.dialect = dialect
        assembler = self.assembler = new_assembler(dialect, self.options.content_chars)
        assembler.expect(self.request)
        for pending in self._pending_events:
            assembler.on_event(pending)
        self._pending_events = []
        return assembler

    # -- conclusion -------------------------------------------------------------------------

    def _go_blind(self, why: str) -> None:
        self.anomalies[why] += 1
        self._blind = why
        self._direct = self._fast = None

    def _finish_framing(self, rest_unseen: bool = False) -> int:
        """Flush the framing; returns the bytes of a discarded unterminated block."""
        while self.backlog:  # a caller that did not pump: the budget bounds this
            self.pump()
        decoder = self._decoder
        if decoder is not None and self._blind is None and not decoder.finish() and not rest_unseen:
            self.anomalies["truncated_compressed_body"] += 1
        if self._reader is None and self._choice is not None:
            framing = self._choice.finish()
            if framing is not None:
                self._use(framing).feed(self._choice.take())
            self._choice = None
        partial = self._reader.finish() if self._reader is not None else 0
        if self.assembler is None and self._blind is None:
            self._adopt(fallback(self.framing))
        for why in UNSEEN:
            if self.anomalies.get(why):
                self._blind = why  # counted by the reader; part of the body was not seen
        return partial

    def _conclude(self, end: str, http_complete: bool | None) -> Verdict:
        # The client left before the body's framing completed: what it did not wait for was
        # never read, so findings that need the rest of the body are not made.
        rest_unseen = end == EndReason.CLIENT_DISCONNECTED and http_complete is not True
        if self._blind is None:
            partial = self._finish_framing(rest_unseen)
        else:  # what was not analysed can still tell where the bytes stopped
            partial = self._reader.decoder.partial_bytes if type(self._reader) is SSEReader else 0
        assembler = self.assembler or new_assembler(self.dialect or Dialect.SSE)
        body_complete = http_complete is True and end in CLEAN_ENDS
        result = assembler.summarize(partial > 0, body_complete)
        outcome = result.outcome
        state = self._transport_rule(result, end, body_complete)
        undecodable = any(result.anomalies.get(why) for why in UNDECODABLE) or (
            self.framing is Framing.EVENTSTREAM
            and any(result.anomalies.get(why) for why in UNDECODABLE_EVENTSTREAM)
        )
        cut = not body_complete and end != EndReason.CLIENT_DISCONNECTED
        if (
            (self._blind is not None or undecodable)
            and not (cut and state is State.INTERRUPTED)  # the client saw the break: certain
            and not (state is State.FAILED or (result.terminal and state is State.INCOMPLETE))
        ):
            # Part of the stream went unseen, or could not be decoded (the client's decoder
            # raises on it too): whatever it held could change the verdict.
            state = State.UNCONFIRMED
        if partial:
            self.anomalies["partial_event_discarded"] += 1
        state = self._request_checks(state, result, rest_unseen)
        interruption = None
        if state is State.INTERRUPTED or (
            end == EndReason.CLIENT_DISCONNECTED and not result.terminal
        ):
            interruption = Interruption(end, partial)
        anomalies = self.anomalies + result.anomalies
        reader = self._reader
        last_id = reader.decoder.last_event_id if type(reader) is SSEReader else ""
        return Verdict(
            dialect=result.dialect,
            state=state,
            finish_reason=outcome.finish_reason,
            finish_category=outcome.finish_category,
            finish_reasons=outcome.finish_reasons,
            last_event=result.last_event,
            last_event_id=last_id or None,
            interruption=interruption,
            http_complete=http_complete,
            error=result.error,
            anomalies=dict(sorted(anomalies.items())),
            bytes=self.bytes,
            events=self.events,
            comments=self.comments,
            text_chars=result.text_chars,
            reasoning_chars=result.reasoning_chars,
            refusal_chars=result.refusal_chars,
            tool_calls=result.tool_calls,
            server_tool_calls=result.server_tool_calls,
            usage=result.usage,
            response_id=result.response_id,
            model=result.model,
            fallback=result.fallback,
        )

    def _transport_rule(self, result: Assembly, end: str, body_complete: bool) -> State:
        """How the bytes ended decides whether the events' outcome stands (PROTOCOLS §9.2 plus
        the HTTP framing): a body cut by the upstream or the proxy is `interrupted`, also after
        the end marker (every client that reads to the end raises); an in-band error stands
        (the client raised it first); a client that left after the outcome was known keeps it."""
        state = result.outcome.state
        if self.bytes == 0 and state is not State.FAILED:
            self.anomalies["empty_body"] += 1
            return State.UNCONFIRMED if body_complete else State.INTERRUPTED
        if body_complete:
            return state
        if end == EndReason.CLIENT_DISCONNECTED:
            if result.terminal or result.error is not None:
                return state
            if state in KNOWN_OUTCOMES:
                self.anomalies["client_left_before_end"] += 1
                return state
            return State.INTERRUPTED
        if result.error is not None and state is State.FAILED:
            return state
        if result.terminal:
            # The answer itself was whole: clients that stop reading at the end marker (the
            # openai-python Chat iterator, langchain) saw no error; the others raised.
            self.anomalies["truncated_after_terminal"] += 1
        return State.INTERRUPTED

    def _request_checks(self, state: State, result: Assembly, rest_unseen: bool) -> State:
        """Compare the response with what the request asked for; returns the state."""
        facts = self.request
        if facts.stream_framing and self.framing is Framing.JSON_BODY and result.error is None:
            # Every streaming helper raises on one JSON document: nothing confirms an answer.
            self.anomalies["stream_not_honoured"] += 1
            if state in (State.COMPLETED, State.INCOMPLETE):
                state = State.UNCONFIRMED
        if state not in (State.COMPLETED, State.INCOMPLETE) or rest_unseen:
            return state
        if facts.include_usage and result.usage is None:
            self.anomalies["usage_missing"] += 1
        if facts.choices is not None and facts.choices > 1:
            finished = result.outcome.finish_reasons or (result.outcome.finish_reason,)
            if sum(1 for r in finished if r is not None) < facts.choices:
                self.anomalies["choices_missing"] += 1
        return state

    # -- for callers that want more than the verdict ----------------------------------------

    def ledger(self) -> tuple[LedgerEvent, ...]:
        """The recorded events of a resumable stream (its last `ledger_events`), else ()."""
        return tuple(self._recorder.events) if self._recorder is not None else ()

    @property
    def retry_ms(self) -> int | None:
        """The SSE `retry:` the stream set: how long a client should wait to reconnect."""
        reader = self._reader
        return reader.decoder.retry if type(reader) is SSEReader else None

    @property
    def retained_bytes(self) -> int:
        decoder = self._decoder.retained_bytes if self._decoder is not None else 0
        if self._reader is not None:
            return self._reader.retained_bytes + decoder
        return (self._choice.held_len if self._choice is not None else 0) + decoder

    def primary_text(self) -> str:
        """The visible answer of choice / candidate 0 (all parts for single-message dialects)."""
        if self.assembler is None:
            return ""
        group = spec_for(self.assembler.dialect).primary_group
        if group is not None:
            return self.assembler.text.group_text(group)
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
