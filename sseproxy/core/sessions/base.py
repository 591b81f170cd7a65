"""What every WebSocket session judge shares: the shell feeds each decoded JSON message (and
how the connection closed); a judge splits the session into turns and gives each a `Verdict`.

Sans-I/O like the rest of the core: no clock, no sockets. Each dialect family's judge lives in
its own module beside this one; the registry (`__init__`) declares them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from sseproxy.core.dialects.base import Assembler
from sseproxy.core.jsonvalue import loads
from sseproxy.core.verdict import (
    Dialect,
    EndReason,
    ErrorInfo,
    FinishCategory,
    Interruption,
    State,
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
# Characters of a model name kept (a peer's string).
MAX_MODEL_CHARS = 200


@dataclass(frozen=True, slots=True)
class HandOver:
    """A turn the server ended to hand over to a successor it made itself (the Responses API's
    steering over a WebSocket): the successor's record names it (`continues`)."""

    turn: int
    response_id: str | None


@dataclass(frozen=True, slots=True)
class TurnResult:
    """One finished turn: the record's verdict plus what only sessions have."""

    number: int
    verdict: Verdict
    status: int | None = None  # an HTTP status an in-band error carried (Responses mode)
    audio_bytes: int = 0
    audio_ms: float | None = None
    model: str | None = None  # the model the turn asked for (its record's `model`)
    lane: str | None = None  # the WebSocket lane (`stream_id`) the turn ran on, when named
    continues: HandOver | None = None  # the turn this one took over from (steering)


@dataclass(slots=True)
class Step:
    """What one message did: turns it opened, content deltas it carried, turns it ended."""

    opened: list[int] = field(default_factory=list)
    deltas: int = 0
    ended: list[TurnResult] = field(default_factory=list)


class TurnAssembler(Assembler):
    """Content tallies and tool-call buffers for one turn (the assembler base's helpers)."""

    dialect: ClassVar[Dialect] = Dialect.SSE


@dataclass(slots=True)
class Turn:
    """One open turn: what it has carried so far and how it ended."""

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
    lane: str | None = None
    continues: HandOver | None = None


def model_name(value: Any) -> str | None:
    """A peer's model name, bounded (None when it names none)."""
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
        self.open: dict[Any, Turn] = {}
        self.errors = 0  # in-band error events, recoverable or not
        self.go_away_s: float | None = None
        self.resumable: bool | None = None
        self.bytes_per_ms = PCM16_24K_BYTES_PER_MS
        # steering submissions over the session (Responses): sent, accepted, pending, failed
        self.steering: Counter[str] = Counter()

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

    def _open(self, key: Any, step: Step, assembler: Assembler | None = None) -> Turn | None:
        turn = self.open.get(key)
        if turn is not None:
            return turn
        if len(self.open) >= MAX_OPEN_TURNS:
            self.anomalies["too_many_open_turns"] += 1
            return None
        self.turns += 1
        made = assembler or TurnAssembler()
        if self.content_chars is not None:
            for store in (made.text, made.reasoning, made.refusal):
                store.cap = self.content_chars
        turn = Turn(self.turns, made, model=self.model)
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

    def _result(self, turn: Turn, cut: EndReason | None) -> TurnResult:
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
        return TurnResult(
            turn.number,
            verdict,
            turn.status,
            turn.audio_bytes,
            ms,
            turn.model,
            turn.lane,
            turn.continues,
        )


def parse_message(data: bytes) -> Any:
    """A message's JSON value, or None: Gemini sends its JSON in binary frames too."""
    if not data or data[:1] not in (b"{", b"[", b" ", b"\n"):
        return None
    try:
        return loads(data)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """One session dialect: recognised by a request path containing one of `path_contains`
    (or ending with one of `path_suffixes`); read by `judge`."""

    dialect: SessionDialect
    judge: type[TurnJudge]
    path_suffixes: tuple[str, ...] = ()
    path_contains: tuple[str, ...] = ()
