"""Gemini Live sessions (`BidiGenerateContent`, AI Studio's and Vertex's): a turn is the
model's output until `turnComplete` (or a `toolCall`); errors travel in the close frame."""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from sseproxy.core.dialects.base import as_int, dig, ident
from sseproxy.core.sessions.base import (
    SessionDialect,
    SessionSpec,
    Step,
    Turn,
    TurnJudge,
    audio_bytes,
    model_name,
)
from sseproxy.core.verdict import FinishCategory, State, Usage

_RATE = re.compile(r"rate=(\d{3,6})")


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
        model = model_name(dig(obj, "setup", "model"))
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
    def _usage(turn: Turn, usage: dict[str, Any]) -> None:
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


SPEC = SessionSpec(
    SessionDialect.GEMINI_LIVE,
    GeminiLiveJudge,
    path_contains=("BidiGenerateContent",),  # AI Studio's and Vertex's LlmBidiService
)
