"""Cohere v2 chat streaming (`POST /v2/chat` with `stream: true`), as cohere-python 5.x / 7.x
types it (`V2ChatStreamResponse`).

SSE events, each JSON object naming its `type`: `message-start`, `content-start` /
`content-delta` (`delta.message.content.text` or `.thinking`) / `content-end`,
`tool-plan-delta`, `tool-call-start` / `-delta` / `-end`, `citation-start` / `-end`, `debug`,
and `message-end` with `delta.finish_reason`, `delta.usage` and, on failure, `delta.error`.
`message-end` is the terminal; the SDK also stops at a `[DONE]` line, which Cohere does not
send (counted, never evidence).
"""

from __future__ import annotations

from typing import Any

from sseproxy.core.dialects.base import Assembler, Outcome, as_int, dig
from sseproxy.core.dialects.spec import DialectSpec, Drills, sse_event
from sseproxy.core.events import SSEEvent
from sseproxy.core.verdict import Dialect, ErrorInfo, FinishCategory, State, Usage

FINISH_REASONS = {
    "COMPLETE": (State.COMPLETED, FinishCategory.STOP),
    "STOP_SEQUENCE": (State.COMPLETED, FinishCategory.STOP),
    "TOOL_CALL": (State.COMPLETED, FinishCategory.TOOL_USE),
    "MAX_TOKENS": (State.INCOMPLETE, FinishCategory.LENGTH),
    "TIMEOUT": (State.INCOMPLETE, FinishCategory.OTHER),
    "ERROR": (State.FAILED, FinishCategory.ERROR),
}
COHERE_EVENTS = {
    "message-start",
    "content-start",
    "content-delta",
    "content-end",
    "tool-plan-delta",
    "tool-call-start",
    "tool-call-delta",
    "tool-call-end",
    "citation-start",
    "citation-end",
    "message-end",
    "debug",
}


def number(value: Any) -> int | None:
    """Cohere types token counts as floats (`12.0`); whole floats count as integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return as_int(value)


def cohere_usage(raw: dict[str, Any]) -> Usage:
    tokens = raw.get("tokens") if isinstance(raw.get("tokens"), dict) else {}
    billed = raw.get("billed_units") if isinstance(raw.get("billed_units"), dict) else {}
    assert isinstance(tokens, dict) and isinstance(billed, dict)
    inputs = number(tokens.get("input_tokens", billed.get("input_tokens")))
    outputs = number(tokens.get("output_tokens", billed.get("output_tokens")))
    return Usage(
        input_tokens=inputs,
        output_tokens=outputs,
        total_tokens=None if inputs is None or outputs is None else inputs + outputs,
        cached_tokens=number(raw.get("cached_tokens")),
        raw=raw,
    )


class CohereChatAssembler(Assembler):
    dialect = Dialect.COHERE_CHAT

    def __init__(self) -> None:
        super().__init__()
        self.finish_reason: str | None = None
        self.message_end = False
        self.tool_plan_chars = 0

    def on_event(self, event: SSEEvent) -> None:
        if event.data == "[DONE]":
            self.last_event = "[DONE]"
            self.anomalies["unexpected_done"] += 1
            return
        obj = self.parse(event.data)
        json_type = obj.get("type") if isinstance(obj, dict) else None
        etype = json_type if isinstance(json_type, str) else event.type
        self.last_event = etype if etype != "message" else "chunk"
        if self.message_end:
            self.anomalies["events_after_terminal"] += 1
            return
        if not isinstance(obj, dict):
            if obj is not None:
                self.anomalies["unexpected_payload"] += 1
            return
        if etype not in COHERE_EVENTS:
            if obj.get("message") and not json_type:
                self.set_error(obj)  # an error object in the stream: {"message": ...}
            else:
                self.anomalies["unknown_event_type"] += 1
            return
        index = self.index(obj.get("index"))
        message = dig(obj, "delta", "message")
        if etype == "content-delta" or etype == "content-start":
            content = dig(message, "content")
            if isinstance(content, dict):
                self.add_text((0, index), content.get("text"))
                self.add_reasoning((0, index), content.get("thinking"))
        elif etype == "tool-plan-delta":
            plan = dig(message, "tool_plan")
            if isinstance(plan, str) and plan:
                self.add_reasoning("tool_plan", plan)  # the model's plan: reasoning, not text
        elif etype in ("tool-call-start", "tool-call-delta"):
            self.on_tool_call(etype, index, dig(message, "tool_calls"))
        elif etype == "tool-call-end":
            if index in self.tool_calls:
                self.tool_calls[index].completed = True
        elif etype == "message-start":
            if isinstance(obj.get("id"), str):
                self.response_id = obj["id"]
        elif etype == "message-end":
            self.on_message_end(obj.get("delta"))

    def on_tool_call(self, etype: str, index: int | None, call: Any) -> None:
        if index is None or not isinstance(call, dict):
            return
        if etype == "tool-call-delta" and index not in self.tool_calls:
            self.anomalies["delta_without_block_start"] += 1
        buffer = self.tool_call(index)
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        assert isinstance(function, dict)
        self.set_call_identity(buffer, call.get("id"), function.get("name"))
        self.add_arguments(buffer, function.get("arguments"))

    def on_message_end(self, delta: Any) -> None:
        self.message_end = self.terminal = True
        if not isinstance(delta, dict):
            return
        reason = delta.get("finish_reason")
        self.finish_reason = reason if isinstance(reason, str) and reason else None
        usage = delta.get("usage")
        if isinstance(usage, dict):
            self.usage = cohere_usage(usage)
        error = delta.get("error")
        if isinstance(error, str) and error:
            self.error = ErrorInfo(type=self.finish_reason, code=None, message=error)

    def on_body(self, body: Any) -> None:
        """A non-streamed `/v2/chat` answer, or an error body `{"message": ...}`."""
        if not isinstance(body, dict):
            return
        if "finish_reason" not in body:
            if body.get("message") or body.get("error"):
                self.set_error(body)
            return
        if isinstance(body.get("id"), str):
            self.response_id = body["id"]
        message = body.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        for index, part in enumerate(content if isinstance(content, list) else ()):
            if isinstance(part, dict):
                self.add_text((0, index), part.get("text"))
                self.add_reasoning((0, index), part.get("thinking"))
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for index, call in enumerate(calls if isinstance(calls, list) else ()):
            self.on_tool_call("tool-call-start", index, call)
            self.tool_calls[index].completed = True
        self.on_message_end(body)

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        reason = self.finish_reason
        if self.error is not None:
            return Outcome(State.FAILED, reason, FinishCategory.ERROR)
        if not self.message_end:
            return Outcome(State.INTERRUPTED, None, None)
        if reason is None:
            return Outcome(State.UNCONFIRMED, None, None)
        if reason not in FINISH_REASONS:
            self.anomalies["unknown_finish_reason"] += 1
            return Outcome(State.INCOMPLETE, reason, FinishCategory.OTHER)
        state, category = FINISH_REASONS[reason]
        return Outcome(state, reason, category)


SPEC = DialectSpec(
    dialect=Dialect.COHERE_CHAT,
    assembler=CohereChatAssembler,
    drills=Drills(
        is_terminal=lambda event, raw: (
            event is not None and (event.type == "message-end" or '"message-end"' in event.data)
        ),
        error=lambda _: sse_event(
            {
                "type": "message-end",
                "delta": {"finish_reason": "ERROR", "error": "internal server error (injected)"},
            },
            "message-end",
        ),
        end_marker=sse_event({"type": "message-end", "delta": {}}, "message-end"),
    ),
    path_suffixes=("/v2/chat",),
    event_types=frozenset(COHERE_EVENTS - {"debug"}),
    sniff=lambda obj: isinstance(obj.get("type"), str) and obj["type"] in COHERE_EVENTS - {"debug"},
    otel_provider="cohere",
)
