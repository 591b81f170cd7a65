"""AG-UI 1.0 (Agent User Interaction protocol) over SSE: one JSON event per `data:`, named by
`type` in upper snake case.

A run is `RUN_STARTED` … `RUN_FINISHED` or `RUN_ERROR`. `RUN_FINISHED`'s `outcome` says why it
ended: `success` (the default when absent; completed, `tool_use` when it leaves
`pendingToolCallIds` for the application), `interrupt` (the agent waits for the user: a pause,
`incomplete`, not a failure) or `cancelled`. `RUN_ERROR` is failed. A stream that ends before
either is `interrupted`. Text is `TEXT_MESSAGE_CONTENT` / `TEXT_MESSAGE_CHUNK` deltas, reasoning
`REASONING_MESSAGE_*`, tool calls `TOOL_CALL_START` / `ARGS` / `END` (or `TOOL_CALL_CHUNK`).
Servers send `: ping` comments every 15 s while nothing else flows (comments, not events).
A new `RUN_STARTED` after a finished run starts the next run of the same stream.
"""

from __future__ import annotations

from typing import Any

from sseproxy.core.dialects.base import Assembler, Outcome, as_int, ident
from sseproxy.core.dialects.spec import DialectSpec, Drills, sse_event
from sseproxy.core.events import SSEEvent
from sseproxy.core.jsonvalue import loads
from sseproxy.core.verdict import Dialect, FinishCategory, State, Usage

RUN_FINISHED = "RUN_FINISHED"
RUN_ERROR = "RUN_ERROR"
RUN_STARTED = "RUN_STARTED"
# ag-ui-protocol 1.0: `EventType` (the spec's schema, `spec/1.0/schema.json`).
QUIET = frozenset(
    {
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_RESULT",
        "STATE_SNAPSHOT",
        "STATE_DELTA",
        "MESSAGES_SNAPSHOT",
        "ACTIVITY_SNAPSHOT",
        "ACTIVITY_DELTA",
        "RAW",
        "CUSTOM",
        "STEP_STARTED",
        "STEP_FINISHED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "REASONING_ENCRYPTED_VALUE",
        "SUBAGENT_STARTED",
        "SUBAGENT_FINISHED",
        "SUBAGENT_ERROR",  # a subagent's failure; the run goes on and says how it ended
    }
)
TEXT = frozenset({"TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CHUNK"})
REASONING = frozenset({"REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_CHUNK"})
TOOLS = frozenset({"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_CHUNK"})
EVENT_TYPES = QUIET | TEXT | REASONING | TOOLS | {RUN_STARTED, RUN_FINISHED, RUN_ERROR}
OUTCOMES: dict[str, tuple[State, FinishCategory]] = {
    "success": (State.COMPLETED, FinishCategory.STOP),
    "interrupt": (State.INCOMPLETE, FinishCategory.PAUSE),
    "cancelled": (State.CANCELLED, FinishCategory.OTHER),
}


class AgUiAssembler(Assembler):
    dialect = Dialect.AG_UI

    def __init__(self) -> None:
        super().__init__()
        self.outcome: str | None = None  # the finished run's outcome type
        self.pending_tools = False

    def on_event(self, event: SSEEvent) -> None:
        obj = self.parse(event.data)
        etype = obj.get("type") if isinstance(obj, dict) else None
        if not isinstance(obj, dict) or not isinstance(etype, str):
            self.last_event = "chunk"
            if isinstance(obj, dict) and not self.in_band_error(obj):
                self.anomalies["unexpected_payload"] += 1
            return
        self.last_event = etype[:64]
        if etype == RUN_STARTED:
            if self.terminal and self.error is None:  # the next run of the same stream
                self.terminal, self.outcome, self.pending_tools = False, None, False
            return
        if self.terminal:
            self.anomalies["events_after_terminal"] += 1
            return
        if etype in TEXT:
            self.add_text((0, ident(obj.get("messageId"))), obj.get("delta"))
        elif etype in REASONING:
            self.add_reasoning((0, ident(obj.get("messageId"))), obj.get("delta"))
        elif etype in TOOLS:
            self.on_tool(etype, obj)
        elif etype == RUN_FINISHED:
            self.on_finished(obj)
        elif etype == RUN_ERROR:
            self.set_error({"error": {"code": obj.get("code"), "message": obj.get("message")}})
            self.terminal = True
        elif etype not in QUIET:
            self.anomalies["unknown_event_type"] += 1

    def on_tool(self, etype: str, obj: dict[str, Any]) -> None:
        call_id = obj.get("toolCallId")
        call = self.tool_call(ident(call_id))
        if etype in ("TOOL_CALL_START", "TOOL_CALL_CHUNK"):
            self.set_call_identity(call, call_id, obj.get("toolCallName"), snapshot=True)
        if etype in ("TOOL_CALL_ARGS", "TOOL_CALL_CHUNK"):
            self.add_arguments(call, obj.get("delta"))
        if etype == "TOOL_CALL_END":
            call.completed = True
            call.empty_means_no_arguments = True

    def on_finished(self, obj: dict[str, Any]) -> None:
        self.terminal = True
        outcome = obj.get("outcome")
        kind = outcome.get("type") if isinstance(outcome, dict) else None
        self.outcome = kind[:64] if isinstance(kind, str) else "success"
        if self.outcome not in OUTCOMES:
            self.anomalies["unknown_finish_reason"] += 1
        pending = outcome.get("pendingToolCallIds") if isinstance(outcome, dict) else None
        self.pending_tools = isinstance(pending, list) and bool(pending)
        for call in self.tool_calls.values():  # a finished run ends its calls' arguments
            call.completed = True
            call.empty_means_no_arguments = True
        usage = obj.get("usage")
        if isinstance(usage, list) and usage:
            self.usage = _usage([u for u in usage[:64] if isinstance(u, dict)])

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        if self.error is not None:
            return Outcome(State.FAILED, None, FinishCategory.ERROR)
        if self.outcome is None:
            if body_complete and not partial:
                self.anomalies["no_terminal_signal"] += 1
            return Outcome(State.INTERRUPTED, None, None)
        if self.outcome not in OUTCOMES:
            return Outcome(State.INCOMPLETE, self.outcome, FinishCategory.OTHER)
        state, category = OUTCOMES[self.outcome]
        if self.outcome == "success" and self.pending_tools:
            category = FinishCategory.TOOL_USE
        return Outcome(state, self.outcome, category)


def _usage(entries: list[dict[str, Any]]) -> Usage:
    """The run's usage: every provider's and model's counts, added (None where none said)."""

    def total(name: str) -> int | None:
        values = [v for e in entries if (v := as_int(e.get(name))) is not None]
        return sum(values) if values else None

    return Usage(
        input_tokens=total("inputTokens"),
        output_tokens=total("outputTokens"),
        total_tokens=total("totalTokens"),
        reasoning_tokens=total("reasoningTokens"),
        cached_tokens=total("cachedInputTokens"),
    )


def _is_end(event: SSEEvent | None, raw: bytes) -> bool:
    if event is None:
        return False
    try:
        obj = loads(event.data)
    except ValueError:
        return False
    return isinstance(obj, dict) and obj.get("type") in (RUN_FINISHED, RUN_ERROR)


SPEC = DialectSpec(
    dialect=Dialect.AG_UI,
    assembler=AgUiAssembler,
    drills=Drills(
        is_terminal=_is_end,
        error=lambda _: sse_event({"type": RUN_ERROR, "message": "An error occurred (injected)"}),
        end_marker=b"",
        keepalive=b": ping\n\n",
    ),
    sniff=lambda obj: isinstance(kind := obj.get("type"), str) and kind in EVENT_TYPES,
    otel_operation="invoke_agent",
)
