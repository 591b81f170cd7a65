"""OpenAI Realtime sessions (`/v1/realtime`): a turn is `response.created` … `response.done`,
keyed by the response's id; audio counted by the session's output format."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from sseproxy.core.dialects.base import as_int, dig, error_info, ident
from sseproxy.core.sessions.base import (
    G711_BYTES_PER_MS,
    MAX_OPEN_TURNS,
    SessionDialect,
    SessionSpec,
    Step,
    Turn,
    TurnJudge,
    audio_bytes,
    model_name,
)
from sseproxy.core.verdict import FinishCategory, State, Usage

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
        self.model = model_name(parse_qs(urlsplit(path).query).get("model", [None])[0])
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
            self.session_model = model_name(dig(obj, "session", "model")) or self.session_model
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
        a.model = model_name(dig(obj, "response", "model")) or a.model or self.session_model
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

    def _done(self, turn: Turn, response: Any) -> None:
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


SPEC = SessionSpec(SessionDialect.OPENAI_REALTIME, RealtimeJudge, path_suffixes=("/realtime",))
