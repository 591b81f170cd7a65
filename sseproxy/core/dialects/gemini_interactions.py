"""Gemini Interactions API streaming (`POST /v1beta/interactions`, `stream: true`).

Every event names itself in `event_type`: `interaction.created`, `step.start` / `step.delta` /
`step.stop` (the output, one step at a time: `model_output`, `thought`, `function_call`, the
server tools' calls and results), `interaction.status_update`, `interaction.completed` (the
end marker: its interaction's `status` is the outcome) and `error`. `interaction.completed`
carries the interaction without its outputs, so the text is what the `step.delta` events said.

Statuses: `completed`; `failed` (failed); `cancelled`; `incomplete` and `budget_exceeded`
(incomplete); `requires_action` (function results wanted) and `requires_continuation` (the
client resumes from its continuation token) are a pause, not a failure; `in_progress`,
`queued` and `idle` end nothing. A stream that ends before `interaction.completed` or `error`
is `interrupted`. Every event carries an `event_id`: a stream resumes with
`GET /v1beta/interactions/{id}?stream=true&last_event_id=...` (the resume ledger links it).
"""

from __future__ import annotations

from typing import Any

from sseproxy.core.dialects.base import MAX_TOOL_CALLS, Assembler, Outcome, as_int, dumps
from sseproxy.core.dialects.spec import DialectSpec, Drills, sse_event
from sseproxy.core.events import SSEEvent
from sseproxy.core.jsonvalue import loads
from sseproxy.core.verdict import Dialect, FinishCategory, State, Usage

COMPLETED = "interaction.completed"
ERROR = "error"
ENDS: dict[str, tuple[State, FinishCategory]] = {
    "completed": (State.COMPLETED, FinishCategory.STOP),
    "failed": (State.FAILED, FinishCategory.ERROR),
    "cancelled": (State.CANCELLED, FinishCategory.OTHER),
    "incomplete": (State.INCOMPLETE, FinishCategory.OTHER),
    "budget_exceeded": (State.INCOMPLETE, FinishCategory.LENGTH),
    "requires_action": (State.INCOMPLETE, FinishCategory.PAUSE),
    "requires_continuation": (State.INCOMPLETE, FinishCategory.PAUSE),
}
RUNNING = frozenset({"in_progress", "queued", "idle"})
EVENTS = frozenset(
    {
        "interaction.created",
        "step.start",
        "step.delta",
        "step.stop",
        "interaction.status_update",
        COMPLETED,
        ERROR,
    }
)
SNIFFED = EVENTS - {ERROR}  # an `error` event alone could be anyone's
# `step.delta` kinds that are neither the answer's text nor a function's arguments
# (google-genai 3.6: `StepDeltaData`): media, server tools' calls and results, annotations.
QUIET_DELTAS = frozenset(
    {
        "audio",
        "code_execution_call",
        "code_execution_result",
        "document",
        "file_search_call",
        "file_search_result",
        "function_result",
        "google_maps_call",
        "google_maps_result",
        "google_search_call",
        "google_search_result",
        "image",
        "mcp_server_tool_call",
        "mcp_server_tool_result",
        "processing_call",
        "processing_result",
        "retrieval_call",
        "retrieval_result",
        "text_annotation_delta",
        "thought_signature",
        "tool_search_call",
        "tool_search_result",
        "url_context_call",
        "url_context_result",
        "video",
    }
)


class GeminiInteractionsAssembler(Assembler):
    dialect = Dialect.GEMINI_INTERACTIONS

    def __init__(self) -> None:
        super().__init__()
        self.status: str | None = None
        self.completed = False  # `interaction.completed` arrived

    def on_event(self, event: SSEEvent) -> None:
        obj = self.parse(event.data)
        if not isinstance(obj, dict):
            self.last_event = event.type if event.type != "message" else "chunk"
            return
        etype = obj.get("event_type")
        if not isinstance(etype, str):
            self.last_event = "chunk"
            if not self.in_band_error(obj):
                self.anomalies["unexpected_payload"] += 1
            return
        self.last_event = etype
        if self.terminal:
            self.anomalies["events_after_terminal"] += 1
            return
        if etype == "step.delta":
            self.on_delta(obj)
        elif etype == "step.start":
            self.on_step_start(obj)
        elif etype == "step.stop":
            self.on_step_stop(obj)
        elif etype == "interaction.status_update":
            self.on_status(obj.get("status"))
            self.on_usage(obj.get("usage"))
        elif etype in ("interaction.created", COMPLETED):
            self.on_interaction(obj.get("interaction"))
            if etype == COMPLETED:
                self.completed = self.terminal = True
        elif etype == ERROR:
            self.set_error(obj)
            self.terminal = True
        else:
            self.anomalies["unknown_event_type"] += 1

    def step_index(self, obj: dict[str, Any]) -> int | None:
        return self.index(obj.get("index"), 0)

    def on_step_start(self, obj: dict[str, Any]) -> None:
        index = self.step_index(obj)
        step = obj.get("step")
        if index is None or not isinstance(step, dict):
            return
        stype = step.get("type")
        if not isinstance(stype, str):
            return
        if stype == "function_call":
            call = self.tool_call(index)
            self.set_call_identity(call, step.get("id"), step.get("name"), snapshot=True)
            arguments = step.get("arguments")
            if isinstance(arguments, dict) and arguments:
                call.append(dumps(arguments))
            call.empty_means_no_arguments = True
        elif stype.endswith("_call") and len(self.server_tool_calls) < MAX_TOOL_CALLS:
            self.server_tool_calls.append(stype[:64])

    def on_delta(self, obj: dict[str, Any]) -> None:
        index = self.step_index(obj)
        delta = obj.get("delta")
        if index is None or not isinstance(delta, dict):
            return
        dtype = delta.get("type")
        if not isinstance(dtype, str):
            self.anomalies["unknown_delta_type"] += 1
        elif dtype == "text":
            self.add_text((0, index), delta.get("text"))
        elif dtype == "thought_summary":
            content = delta.get("content")
            if isinstance(content, dict):
                self.add_reasoning((0, index), content.get("text"))
        elif dtype == "arguments_delta":
            self.add_arguments(self.tool_call(index), delta.get("arguments"))
        elif dtype not in QUIET_DELTAS:
            self.anomalies["unknown_delta_type"] += 1

    def on_step_stop(self, obj: dict[str, Any]) -> None:
        index = self.step_index(obj)
        if index is not None and index in self.tool_calls:
            self.tool_calls[index].completed = True
        self.on_usage(obj.get("usage"))

    def on_interaction(self, interaction: Any) -> None:
        if not isinstance(interaction, dict):
            return
        if self.response_id is None and isinstance(interaction.get("id"), str):
            self.response_id = interaction["id"][:256]
        if isinstance(interaction.get("model"), str):
            self.model = interaction["model"][:256]
        self.on_status(interaction.get("status"))
        self.on_usage(interaction.get("usage"))

    def on_status(self, status: Any) -> None:
        if isinstance(status, str) and status:
            if status not in ENDS and status not in RUNNING:
                self.anomalies["unknown_finish_reason"] += 1
            self.status = status[:64]

    def on_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        self.usage = Usage(
            input_tokens=as_int(usage.get("total_input_tokens")),
            output_tokens=as_int(usage.get("total_output_tokens")),
            total_tokens=as_int(usage.get("total_tokens")),
            reasoning_tokens=as_int(usage.get("total_thought_tokens")),
            cached_tokens=as_int(usage.get("total_cached_tokens")),
            raw=usage,
        )

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        status = self.status
        if self.error is not None:
            return Outcome(State.FAILED, status if status in ENDS else None, FinishCategory.ERROR)
        if not self.completed and status in ENDS:
            # A final `interaction.status_update` decided it; google-genai ends the stream there
            # without an error, so a clean end without `interaction.completed` stands (named).
            if body_complete and not partial:
                self.anomalies["missing_done"] += 1
        elif not self.completed:
            if body_complete and not partial:
                self.anomalies["no_terminal_signal"] += 1
            return Outcome(State.INTERRUPTED, None, None)
        if status not in ENDS:  # completed while still running, or a status of no known kind
            return Outcome(State.UNCONFIRMED, status, None)
        state, category = ENDS[status]
        if status == "completed" and self.tool_calls:
            category = FinishCategory.TOOL_USE
        return Outcome(state, status, category)


def _injected_error(sequence_number: int) -> bytes:
    error = {"code": "internal", "message": "The service had an error (injected)"}
    return sse_event({"event_type": ERROR, "error": error}, ERROR)


def _is_end(event: SSEEvent | None, raw: bytes) -> bool:
    """What `drop-terminal` removes: the end marker and a final status (either decides)."""
    if event is None:
        return False
    try:
        obj = loads(event.data)
    except ValueError:
        return False
    if not isinstance(obj, dict):
        return False
    status = obj.get("status")
    final = obj.get("event_type") == "interaction.status_update" and (
        isinstance(status, str) and status in ENDS
    )
    return final or obj.get("event_type") in (COMPLETED, ERROR)


SPEC = DialectSpec(
    dialect=Dialect.GEMINI_INTERACTIONS,
    assembler=GeminiInteractionsAssembler,
    drills=Drills(is_terminal=_is_end, error=_injected_error, end_marker=b""),
    path_contains=("/v1beta/interactions", "/v1alpha/interactions", "/v1/interactions"),
    event_types=SNIFFED,
    sniff=lambda obj: isinstance(kind := obj.get("event_type"), str) and kind in SNIFFED,
    otel_provider="gcp.gemini",
    primary_group=0,
    output_includes_reasoning=False,
    # Any interaction stream resumes with `last_event_id` (the events carry `event_id`), and
    # the interaction goes on when its client leaves (`…/interactions/{id}:cancel` cancels it).
    resumable=lambda asked: True,
    disconnect_cancels=False,
)
