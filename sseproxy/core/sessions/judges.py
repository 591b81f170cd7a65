"""WebSocket LLM sessions, judged turn by turn: the shell feeds each decoded JSON message (and
how the connection closed); a judge splits the session into turns and gives each a `Verdict`.

Sans-I/O like the rest of the core: no clock, no sockets. Every dialect is declared once as a
`SessionSpec` (how to recognise it, which judge reads it); nothing elsewhere branches on a
session dialect's name.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from sseproxy.core.dialects import new_assembler
from sseproxy.core.dialects.base import Assembler, as_int, dig, error_info, ident
from sseproxy.core.events import SSEEvent
from sseproxy.core.jsonvalue import loads
from sseproxy.core.verdict import (
    Dialect,
    EndReason,
    ErrorInfo,
    FinishCategory,
    Interruption,
    State,
    Usage,
    Verdict,
)


class SessionDialect(StrEnum):
    OPENAI_REALTIME = "openai-realtime"
    OPENAI_RESPONSES = "openai-responses"
    GEMINI_LIVE = "gemini-live"
    UNKNOWN = "websocket"  # relayed exactly, never judged


# Turns open at once in one session: Realtime allows out-of-band responses beside the
# conversation's; a peer that opens more is counted (`too_many_open_turns`), not kept.
MAX_OPEN_TURNS = 16
# Bytes of a base64 audio delta per millisecond, by output format (16-bit PCM is 2 bytes a
# sample; G.711 one byte at 8 kHz). Realtime's default output is PCM16 at 24 kHz.
PCM16_24K_BYTES_PER_MS = 48.0
G711_BYTES_PER_MS = 8.0
_RATE = re.compile(r"rate=(\d{3,6})")
# Characters of a model name kept (a peer's string).
MAX_MODEL_CHARS = 200


@dataclass(frozen=True, slots=True)
class TurnResult:
    """One finished turn: the record's verdict plus what only sessions have."""

    number: int
    verdict: Verdict
    status: int | None = None  # an HTTP status an in-band error carried (Responses mode)
    audio_bytes: int = 0
    audio_ms: float | None = None
    model: str | None = None  # the model the turn asked for (its record's `model`)


@dataclass(slots=True)
class Step:
    """What one message did: turns it opened, content deltas it carried, turns it ended."""

    opened: list[int] = field(default_factory=list)
    deltas: int = 0
    ended: list[TurnResult] = field(default_factory=list)


class _TurnAssembler(Assembler):
    """Content tallies and tool-call buffers for one turn (the assembler base's helpers)."""

    dialect: ClassVar[Dialect] = Dialect.SSE


@dataclass(slots=True)
class _Turn:
    number: int
    assembler: Assembler
    messages: int = 0
    bytes: int = 0
    audio_bytes: int = 0
    outcome: State | None = None
    finish_reason: str | None = None
    finish_category: FinishCategory | None = None
    error: ErrorInfo | None = None
    status: int | None = None
    model: str | None = None


def _model(value: Any) -> str | None:
    return value[:MAX_MODEL_CHARS] if isinstance(value, str) and value else None


def audio_bytes(b64: Any) -> int:
    """Decoded size of a base64 audio chunk, computed without decoding it."""
    if not isinstance(b64, str) or not b64:
        return 0
    n = len(b64)
    return max(0, n * 3 // 4 - b64[-2:].count("="))


class TurnJudge:
    """The shared part: turn numbering, session anomalies, the end of a connection."""

    dialect: ClassVar[SessionDialect] = SessionDialect.UNKNOWN

    def __init__(self, content_chars: int | None = None, path: str = "") -> None:
        self.content_chars = content_chars
        self.model: str | None = None  # the model the session asked for, where it says one
        self.anomalies: Counter[str] = Counter()
        self.turns = 0
        self.states: Counter[str] = Counter()
        self.open: dict[Any, _Turn] = {}
        self.errors = 0  # in-band error events, recoverable or not
        self.go_away_s: float | None = None
        self.resumable: bool | None = None
        self.bytes_per_ms = PCM16_24K_BYTES_PER_MS

    # -- input ------------------------------------------------------------------------------

    def client(self, obj: Any) -> Step:
        """A message the client sent, parsed (None when it was not JSON)."""
        return Step()

    def upstream(self, obj: Any, raw: bytes) -> Step:
        """A message the upstream sent: parsed (None when it was not JSON), and as it came."""
        return Step()

    def text(self, data: bytes) -> None:
        """A text message (either way). One that is not UTF-8 was relayed as it came (the peers'
        business, never a close of the proxy's) and judged as not JSON: counted on the session
        and on the turn it came in (`invalid_utf8`)."""
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            self.anomalies["invalid_utf8"] += 1
            if self.open:
                next(reversed(self.open.values())).assembler.anomalies["invalid_utf8"] += 1

    def close(self, end: EndReason, code: int | None = None, reason: str = "") -> list[TurnResult]:
        """The connection ended for `end`: every open turn ends with it."""
        results = []
        for key in list(self.open):
            self.anomalies["turn_open_at_close"] += 1
            results.append(self._cut(key, end, code, reason))
        return results

    # -- helpers ----------------------------------------------------------------------------

    def _open(self, key: Any, step: Step, assembler: Assembler | None = None) -> _Turn | None:
        turn = self.open.get(key)
        if turn is not None:
            return turn
        if len(self.open) >= MAX_OPEN_TURNS:
            self.anomalies["too_many_open_turns"] += 1
            return None
        self.turns += 1
        made = assembler or _TurnAssembler()
        if self.content_chars is not None:
            for store in (made.text, made.reasoning, made.refusal):
                store.cap = self.content_chars
        turn = _Turn(self.turns, made, model=self.model)
        self.open[key] = turn
        step.opened.append(turn.number)
        return turn

    def _end(self, key: Any, step: Step) -> None:
        turn = self.open.pop(key, None)
        if turn is not None:
            step.ended.append(self._result(turn, None))

    def _cut(self, key: Any, end: EndReason, code: int | None, reason: str) -> TurnResult:
        turn = self.open.pop(key)
        if end == EndReason.UPSTREAM_CLOSED and code is not None and turn.error is None:
            # Gemini Live (and any server) tells why in the close frame
            turn.error = ErrorInfo(type="websocket_close", code=str(code), message=reason or None)
        return self._result(turn, end)

    def _result(self, turn: _Turn, cut: EndReason | None) -> TurnResult:
        a = turn.assembler
        tool_calls = tuple(call.summary() for call in a.tool_calls.values())
        anomalies = Counter(a.anomalies)
        invalid = sum(1 for call in tool_calls if call.arguments_valid_json is False)
        if invalid:
            anomalies["invalid_tool_arguments"] += invalid
        interruption = None
        if cut is not None:
            state = State.CANCELLED if cut == EndReason.CLIENT_DISCONNECTED else State.INTERRUPTED
            interruption = Interruption(str(cut), 0)
        elif turn.status is not None:
            state = State.HTTP_ERROR
        else:
            state = turn.outcome or State.UNCONFIRMED
        self.states[str(state)] += 1
        verdict = Verdict(
            dialect=Dialect.SSE,  # the record says the session dialect (Verdict's are HTTP's)
            state=state,
            finish_reason=turn.finish_reason,
            finish_category=turn.finish_category,
            last_event=a.last_event,
            interruption=interruption,
            http_complete=cut is None,
            error=turn.error or a.error,
            anomalies=dict(sorted(anomalies.items())),
            bytes=turn.bytes,
            events=turn.messages,
            text_chars=a.text.chars,
            reasoning_chars=a.reasoning.chars,
            refusal_chars=a.refusal.chars,
            tool_calls=tool_calls,
            server_tool_calls=tuple(a.server_tool_calls),
            usage=a.usage,
            response_id=a.response_id,
            model=a.model,
        )
        ms = round(turn.audio_bytes / self.bytes_per_ms, 3) if turn.audio_bytes else None
        return TurnResult(turn.number, verdict, turn.status, turn.audio_bytes, ms, turn.model)


# -- OpenAI Realtime ---------------------------------------------------------------------------

REALTIME_TEXT = frozenset(
    {
        "response.output_text.delta",
        "response.text.delta",
        "response.output_audio_transcript.delta",
        "response.audio_transcript.delta",
    }
)
REALTIME_AUDIO = frozenset({"response.output_audio.delta", "response.audio.delta"})
REALTIME_ARGS = "response.function_call_arguments.delta"
REALTIME_ARGS_DONE = "response.function_call_arguments.done"
REALTIME_STATUS = {
    "completed": (State.COMPLETED, FinishCategory.STOP),
    "incomplete": (State.INCOMPLETE, FinishCategory.LENGTH),
    "cancelled": (State.CANCELLED, FinishCategory.OTHER),
    "failed": (State.FAILED, FinishCategory.ERROR),
}
INCOMPLETE_CATEGORY = {
    "max_output_tokens": FinishCategory.LENGTH,
    "content_filter": FinishCategory.CONTENT_FILTER,
}
REALTIME_ERROR_ANOMALIES = {
    "session_expired": "session_expired",
    "conversation_already_has_active_response": "active_response_conflict",
}


class RealtimeJudge(TurnJudge):
    """A turn is `response.created` … `response.done`, keyed by `response.id`. The model asked
    for is the handshake's `?model=`; the one that answered, the response's `model` where it
    says one, else the session's (`session.created` / `session.updated`)."""

    dialect = SessionDialect.OPENAI_REALTIME

    def __init__(self, content_chars: int | None = None, path: str = "") -> None:
        super().__init__(content_chars, path)
        self.pending = 0  # response.create sent, no response.created yet
        self.model = _model(parse_qs(urlsplit(path).query).get("model", [None])[0])
        self.session_model: str | None = None

    def client(self, obj: Any) -> Step:
        if isinstance(obj, dict) and obj.get("type") == "response.create":
            self.pending = min(self.pending + 1, MAX_OPEN_TURNS)
        return Step()

    def upstream(self, obj: Any, raw: bytes) -> Step:
        step = Step()
        size = len(raw)
        if not isinstance(obj, dict):
            return step
        etype = obj.get("type")
        if not isinstance(etype, str):
            return step
        if etype in ("session.created", "session.updated"):
            self._audio_format(obj.get("session"))
            self.session_model = _model(dig(obj, "session", "model")) or self.session_model
            return step
        if etype == "error":
            self._error(obj, size, step)
            return step
        rid = ident(dig(obj, "response", "id")) or ident(obj.get("response_id"))
        if rid is None or not etype.startswith("response."):
            return step  # conversation.*, input_audio_buffer.*, rate_limits.updated: session's
        if etype == "response.created":
            self.pending = max(0, self.pending - 1)
        turn = self._open(("r", rid), step)
        if turn is None:
            return step
        a = turn.assembler
        before = a.content_deltas
        a.last_event = etype
        a.response_id = a.response_id or (rid if isinstance(rid, str) else None)
        a.model = _model(dig(obj, "response", "model")) or a.model or self.session_model
        key = (obj.get("item_id"), obj.get("content_index"))
        if etype in REALTIME_TEXT:
            a.add_text(key, obj.get("delta"))
        elif etype in REALTIME_AUDIO:
            turn.audio_bytes += audio_bytes(obj.get("delta"))
            a.content_deltas += 1
        elif etype in (REALTIME_ARGS, REALTIME_ARGS_DONE):
            call = a.tool_call(ident(obj.get("call_id")) or ident(obj.get("item_id")))
            a.set_call_identity(call, obj.get("call_id"), obj.get("name"), snapshot=True)
            if etype == REALTIME_ARGS:
                a.add_arguments(call, obj.get("delta"))
            else:
                call.completed = True
                if not call.fragments and isinstance(obj.get("arguments"), str):
                    a.add_arguments(call, obj["arguments"])
        turn.messages += 1
        turn.bytes += size
        step.deltas += a.content_deltas - before
        if etype == "response.done":
            self._done(turn, obj.get("response"))
            self._end(("r", rid), step)
        return step

    def _done(self, turn: _Turn, response: Any) -> None:
        a = turn.assembler
        a.terminal = True
        status = dig(response, "status")
        state, category = REALTIME_STATUS.get(status, (State.UNCONFIRMED, None))
        details = dig(response, "status_details")
        reason = dig(details, "reason")
        turn.outcome = state
        turn.finish_reason = reason if isinstance(reason, str) else status
        if state is State.INCOMPLETE:
            category = INCOMPLETE_CATEGORY.get(reason, FinishCategory.OTHER)
        if state is State.COMPLETED and a.tool_calls:
            category = FinishCategory.TOOL_USE
        turn.finish_category = category
        if state is State.FAILED:
            turn.error = error_info({"error": dig(details, "error") or {}})
        usage = dig(response, "usage")
        if isinstance(usage, dict):
            a.usage = Usage(
                input_tokens=as_int(usage.get("input_tokens")),
                output_tokens=as_int(usage.get("output_tokens")),
                total_tokens=as_int(usage.get("total_tokens")),
                cached_tokens=as_int(dig(usage, "input_token_details", "cached_tokens")),
            )

    def _error(self, obj: dict[str, Any], size: int, step: Step) -> None:
        self.errors += 1
        info = error_info(obj)
        named = REALTIME_ERROR_ANOMALIES.get(info.code or "")
        if named:
            self.anomalies[named] += 1
        if self.open:  # in-band and recoverable: the turn it answers keeps it
            turn = next(reversed(self.open.values()))
            turn.error = turn.error or info
            turn.messages += 1
            turn.bytes += size
            return
        if self.pending:  # it answers a response.create that got no response: a failed turn
            self.pending -= 1
            key = ("e", self.turns)
            failed = self._open(key, step)
            if failed is not None:
                failed.assembler.last_event = "error"
                failed.outcome, failed.error = State.FAILED, info
                failed.finish_category = FinishCategory.ERROR
                failed.messages, failed.bytes = 1, size
                self._end(key, step)
            return
        self.anomalies["error_without_response"] += 1

    def _audio_format(self, session: Any) -> None:
        fmt = dig(session, "audio", "output", "format")  # GA: {"type": "audio/pcm", "rate"}
        if isinstance(fmt, dict):
            kind, rate = fmt.get("type"), as_int(fmt.get("rate"))
            if kind in ("audio/pcmu", "audio/pcma"):
                self.bytes_per_ms = G711_BYTES_PER_MS
            elif rate:
                self.bytes_per_ms = rate * 2 / 1000
            return
        beta = dig(session, "output_audio_format")  # beta: "pcm16", "g711_ulaw", "g711_alaw"
        if isinstance(beta, str):
            self.bytes_per_ms = G711_BYTES_PER_MS if beta.startswith("g711") else 48.0


# -- the Responses API over a WebSocket ---------------------------------------------------------

RESPONSES_TERMINALS = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)
RESPONSES_ERROR_ANOMALIES = {
    "websocket_connection_limit_reached": "connection_limit_reached",
    "previous_response_not_found": "previous_response_not_found",
}


class ResponsesJudge(TurnJudge):
    """A turn per `response.create` (which names the model asked for), read by the Responses
    assembler as if it were SSE (which takes the response's model)."""

    dialect = SessionDialect.OPENAI_RESPONSES
    KEY: ClassVar[str] = "turn"

    def client(self, obj: Any) -> Step:
        step = Step()
        if isinstance(obj, dict) and obj.get("type") == "response.create":
            if self.KEY in self.open:  # one response at a time per connection
                self.anomalies["active_response_conflict"] += 1
            else:
                turn = self._open(self.KEY, step, new_assembler(Dialect.OPENAI_RESPONSES))
                if turn is not None:
                    turn.model = _model(obj.get("model"))
        return step

    def upstream(self, obj: Any, raw: bytes) -> Step:
        step = Step()
        size = len(raw)
        if not isinstance(obj, dict):
            return step
        etype = obj.get("type")
        if not isinstance(etype, str):
            return step
        if etype == "error":
            self.errors += 1
            info = error_info(obj)
            named = RESPONSES_ERROR_ANOMALIES.get(info.code or "")
            if named:
                self.anomalies[named] += 1
            if self.KEY not in self.open:
                self.anomalies["error_without_response"] += 1
                return step
        turn = self.open.get(self.KEY)
        if turn is None:
            return step
        a = turn.assembler
        before = a.content_deltas
        a.on_event(SSEEvent(etype, raw.decode("utf-8", "replace"), "", 0, raw))
        turn.messages += 1
        turn.bytes += size
        step.deltas += a.content_deltas - before
        if etype in RESPONSES_TERMINALS:
            outcome = a.summarize(False, True).outcome
            turn.outcome = outcome.state
            turn.finish_reason, turn.finish_category = (
                outcome.finish_reason,
                outcome.finish_category,
            )
            status = as_int(obj.get("status"))
            if etype == "error" and status is not None and not 200 <= status < 300:
                turn.status = status
            self._end(self.KEY, step)
        return step


# -- Gemini Live --------------------------------------------------------------------------------


class GeminiLiveJudge(TurnJudge):
    """A turn is the model's output until `turnComplete` (or a `toolCall`, which yields). The
    model asked for is `setup.model` (`models/{model}`: named as the HTTP path's is)."""

    dialect = SessionDialect.GEMINI_LIVE
    KEY: ClassVar[str] = "turn"

    def __init__(self, content_chars: int | None = None, path: str = "") -> None:
        super().__init__(content_chars, path)
        self.generation_complete = False
        self.interrupted = False

    def client(self, obj: Any) -> Step:
        model = _model(dig(obj, "setup", "model"))
        if model is not None:
            self.model = model.rpartition("models/")[2] or model
        return Step()

    def upstream(self, obj: Any, raw: bytes) -> Step:
        step = Step()
        size = len(raw)
        if not isinstance(obj, dict):
            return step
        go_away = obj.get("goAway")
        if isinstance(go_away, dict):
            self.anomalies["go_away"] += 1
            self.go_away_s = _seconds(go_away.get("timeLeft"))
        update = obj.get("sessionResumptionUpdate")
        if isinstance(update, dict) and isinstance(update.get("resumable"), bool):
            self.resumable = update["resumable"]
        cancellation = obj.get("toolCallCancellation")
        if isinstance(cancellation, dict):
            self.anomalies["tool_call_cancellation"] += 1
        content, tool_call = obj.get("serverContent"), obj.get("toolCall")
        usage = obj.get("usageMetadata")
        if not isinstance(content, dict) and not isinstance(tool_call, dict):
            if isinstance(usage, dict) and self.KEY in self.open:
                self._usage(self.open[self.KEY], usage)
            return step
        turn = self._open(self.KEY, step)
        if turn is None:
            return step
        a = turn.assembler
        before = a.content_deltas
        turn.messages += 1
        turn.bytes += size
        if isinstance(usage, dict):
            self._usage(turn, usage)
        if isinstance(tool_call, dict):
            a.last_event = "toolCall"
            calls = tool_call.get("functionCalls")
            for n, fc in enumerate(calls if isinstance(calls, list) else []):
                if not isinstance(fc, dict):
                    continue
                call = a.tool_call(ident(fc.get("id")) or n)
                a.set_call_identity(call, fc.get("id"), fc.get("name"), snapshot=True)
                call.empty_means_no_arguments, call.completed = True, True
                args = fc.get("args")
                if args is not None:
                    a.add_arguments(call, json.dumps(args, ensure_ascii=False))
            turn.outcome, turn.finish_reason = State.COMPLETED, "tool_call"
            turn.finish_category = FinishCategory.TOOL_USE
            self._end(self.KEY, step)
            step.deltas += a.content_deltas - before
            return step
        assert isinstance(content, dict)
        a.last_event = "serverContent"
        parts = dig(content, "modelTurn", "parts")
        for n, part in enumerate(parts if isinstance(parts, list) else []):
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("text"), str):
                if part.get("thought") is True:
                    a.add_reasoning(n, part["text"])
                else:
                    a.add_text(n, part["text"])
            inline = part.get("inlineData")
            if isinstance(inline, dict):
                turn.audio_bytes += audio_bytes(inline.get("data"))
                a.content_deltas += 1
                rate = _RATE.search(str(inline.get("mimeType", "")))
                if rate:
                    self.bytes_per_ms = int(rate.group(1)) * 2 / 1000
        transcript = dig(content, "outputTranscription", "text")
        a.add_text("transcript", transcript)
        if content.get("generationComplete") is True:
            self.generation_complete = True
        if content.get("interrupted") is True:
            self.interrupted = True
        step.deltas += a.content_deltas - before
        if content.get("turnComplete") is True:
            a.terminal = True
            a.last_event = "turnComplete"
            reason = content.get("turnCompleteReason")
            if isinstance(reason, str) and reason != "TURN_COMPLETE_REASON_UNSPECIFIED":
                turn.outcome, turn.finish_reason = State.INCOMPLETE, reason
                turn.finish_category = (
                    FinishCategory.CONTENT_FILTER
                    if "PROHIBITED" in reason or "REJECTED" in reason
                    else FinishCategory.OTHER
                )
            elif self.interrupted:  # barge-in: the user spoke over the answer
                turn.outcome, turn.finish_reason = State.CANCELLED, "interrupted"
                turn.finish_category = FinishCategory.OTHER
            else:
                turn.outcome, turn.finish_reason = State.COMPLETED, "turn_complete"
                turn.finish_category = FinishCategory.STOP
            self.generation_complete = self.interrupted = False
            self._end(self.KEY, step)
        return step

    @staticmethod
    def _usage(turn: _Turn, usage: dict[str, Any]) -> None:
        turn.assembler.usage = Usage(
            input_tokens=as_int(usage.get("promptTokenCount")),
            output_tokens=as_int(usage.get("responseTokenCount")),
            total_tokens=as_int(usage.get("totalTokenCount")),
            reasoning_tokens=as_int(usage.get("thoughtsTokenCount")),
            cached_tokens=as_int(usage.get("cachedContentTokenCount")),
        )


def _seconds(value: Any) -> float | None:
    """A protobuf Duration as JSON ("10s", "1.5s")."""
    if isinstance(value, str) and value.endswith("s"):
        try:
            return float(value[:-1])
        except ValueError:
            return None
    return None


# -- across sessions ----------------------------------------------------------------------------

# `reconnect_loop`: this many sessions opened with the same route and credentials within
# RECONNECT_WINDOW_S seconds (a client that reconnects on every error, e.g. insufficient_quota
# every 300 ms). Clients tracked: the most recent MAX_RECONNECT_KEYS.
RECONNECT_SESSIONS = 5
RECONNECT_WINDOW_S = 10.0
MAX_RECONNECT_KEYS = 1024


class ReconnectWatch:
    """Sessions opened per (route, credentials), over a sliding window; the shell gives the
    clock readings. Keys are hashes: no credential is kept."""

    def __init__(self) -> None:
        self._opened: dict[int, list[float]] = {}

    def opened(self, route: str | None, credentials: tuple[str, ...], now: float) -> bool:
        """Note a session opening at `now`; True when it makes a reconnect loop."""
        key = hash((route, credentials))
        times = [t for t in self._opened.pop(key, []) if now - t <= RECONNECT_WINDOW_S]
        times = [*times[-(RECONNECT_SESSIONS - 1) :], now]
        self._opened[key] = times  # most recent last: the oldest key goes first
        if len(self._opened) > MAX_RECONNECT_KEYS:
            del self._opened[next(iter(self._opened))]
        return len(times) >= RECONNECT_SESSIONS


# -- the declarations ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """One session dialect: recognised by a request path containing one of `path_contains`
    (or ending with one of `path_suffixes`); read by `judge`."""

    dialect: SessionDialect
    judge: type[TurnJudge]
    path_suffixes: tuple[str, ...] = ()
    path_contains: tuple[str, ...] = ()


SESSION_SPECS: tuple[SessionSpec, ...] = (
    SessionSpec(
        SessionDialect.GEMINI_LIVE,
        GeminiLiveJudge,
        path_contains=("BidiGenerateContent",),  # AI Studio's and Vertex's LlmBidiService
    ),
    SessionSpec(SessionDialect.OPENAI_REALTIME, RealtimeJudge, path_suffixes=("/realtime",)),
    SessionSpec(SessionDialect.OPENAI_RESPONSES, ResponsesJudge, path_suffixes=("/responses",)),
)


def session_spec(path: str) -> SessionSpec:
    """The spec for a WebSocket request to `path` (its query excluded)."""
    path = path.partition("?")[0].rstrip("/")
    for spec in SESSION_SPECS:
        if path.endswith(spec.path_suffixes) or any(s in path for s in spec.path_contains):
            return spec
    return SessionSpec(SessionDialect.UNKNOWN, TurnJudge)


def parse_message(data: bytes) -> Any:
    """A message's JSON value, or None: Gemini sends its JSON in binary frames too."""
    if not data or data[:1] not in (b"{", b"[", b" ", b"\n"):
        return None
    try:
        return loads(data)
    except ValueError:
        return None


__all__ = [
    "SESSION_SPECS",
    "ReconnectWatch",
    "SessionDialect",
    "SessionSpec",
    "Step",
    "TurnJudge",
    "TurnResult",
    "parse_message",
    "session_spec",
]
