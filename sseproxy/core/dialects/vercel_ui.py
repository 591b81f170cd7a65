"""Vercel AI SDK UI message stream (`x-vercel-ai-ui-message-stream: v1`), PROTOCOLS.md §7.

`[DONE]` is appended whenever the server-side stream closes, even after `error` or `abort`,
so only a `finish` part is completion evidence.
"""

from __future__ import annotations

from typing import Any

from sseproxy.core.dialects.base import Assembler, Outcome, dumps, ident
from sseproxy.core.dialects.spec import DialectSpec, Drills, done_marker
from sseproxy.core.events import SSEEvent
from sseproxy.core.verdict import Dialect, FinishCategory, State

FINISH = {
    None: (State.COMPLETED, FinishCategory.STOP),
    "stop": (State.COMPLETED, FinishCategory.STOP),
    "tool-calls": (State.COMPLETED, FinishCategory.TOOL_USE),
    "length": (State.INCOMPLETE, FinishCategory.LENGTH),
    "content-filter": (State.INCOMPLETE, FinishCategory.CONTENT_FILTER),
    "other": (State.INCOMPLETE, FinishCategory.OTHER),
    "error": (State.FAILED, FinishCategory.ERROR),
}
QUIET = {
    "start",
    "start-step",
    "finish-step",
    "reset-step",
    "text-start",
    "text-end",
    "reasoning-start",
    "reasoning-end",
    "tool-output-available",
    "tool-output-denied",
    "tool-approval-request",
    "tool-approval-response",
    "source-url",
    "source-document",
    "file",
    "reasoning-file",
    "custom",
    "message-metadata",
}


class VercelUIAssembler(Assembler):
    dialect = Dialect.VERCEL_UI

    def __init__(self) -> None:
        super().__init__()
        self.finished = False
        self.finish_reason: str | None = None
        self.done = False
        self.aborted: str | None = None

    def on_event(self, event: SSEEvent) -> None:
        if self.done:
            self.anomalies["events_after_terminal"] += 1
        if event.data == "[DONE]":
            self.last_event = "[DONE]"
            self.done = self.terminal = True
            return
        obj = self.parse(event.data)
        ptype = obj.get("type") if isinstance(obj, dict) else None
        self.last_event = ptype if isinstance(ptype, str) else "chunk"
        if isinstance(obj, dict) and not isinstance(ptype, str):
            self.in_band_error(obj)
        if not isinstance(obj, dict) or not isinstance(ptype, str):
            return
        if self.finished and ptype != "message-metadata":
            self.anomalies["events_after_terminal"] += 1
        self.on_part(ptype, obj)

    def on_part(self, ptype: str, obj: dict[str, Any]) -> None:
        if ptype == "text-delta":
            self.add_text((0, ident(obj.get("id"))), obj.get("delta"))
        elif ptype == "reasoning-delta":
            self.add_reasoning((0, ident(obj.get("id"))), obj.get("delta"))
        elif ptype == "tool-input-start":
            call = self.tool_call(ident(obj.get("toolCallId")))
            self.set_call_identity(call, obj.get("toolCallId"), obj.get("toolName"))
        elif ptype == "tool-input-delta":
            self.add_arguments(
                self.tool_call(ident(obj.get("toolCallId"))), obj.get("inputTextDelta")
            )
        elif ptype == "tool-input-available":
            call = self.tool_call(ident(obj.get("toolCallId")))
            if call.id is None:
                self.set_call_identity(call, obj.get("toolCallId"), obj.get("toolName"))
            if not call.fragments:
                call.append(dumps(obj.get("input")))
            call.completed = True
        elif ptype in ("tool-input-error", "tool-output-error"):
            self.anomalies[ptype.replace("-", "_")] += 1
        elif ptype == "error":
            self.set_error({"error": {"type": "error", "message": obj.get("errorText")}})
        elif ptype == "abort":
            reason = obj.get("reason")
            self.aborted = reason if isinstance(reason, str) else "abort"
        elif ptype == "finish":
            self.finished = True
            reason = obj.get("finishReason")
            self.finish_reason = reason if isinstance(reason, str) else None
        elif ptype not in QUIET and not ptype.startswith("data-"):
            self.anomalies["unknown_event_type"] += 1

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        reason = self.finish_reason
        if self.error is not None:
            return Outcome(State.FAILED, reason, FinishCategory.ERROR)
        if self.aborted is not None:
            # A server-side abort is a deliberate stop, not an error: the output is not whole.
            return Outcome(State.INCOMPLETE, "abort", FinishCategory.OTHER)
        if not self.finished:
            if self.done:
                self.anomalies["done_without_finish_reason"] += 1
                return Outcome(State.UNCONFIRMED, None, None)
            return Outcome(State.INTERRUPTED, None, None)
        if not self.done and body_complete:
            self.anomalies["missing_done"] += 1
        if reason not in FINISH:
            self.anomalies["unknown_finish_reason"] += 1
            return Outcome(State.INCOMPLETE, reason, FinishCategory.OTHER)
        state, category = FINISH[reason]
        return Outcome(state, reason, category)


PARTS = frozenset(
    {
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "reasoning-start",
        "reasoning-delta",
        "tool-input-start",
        "tool-input-available",
        "finish",
        "finish-step",
        "abort",
    }
)

SPEC = DialectSpec(
    dialect=Dialect.VERCEL_UI,
    assembler=VercelUIAssembler,
    drills=Drills(
        is_terminal=lambda event, raw: (
            done_marker(event, raw)
            or (event is not None and '"type":"finish"' in event.data.replace(" ", ""))
        ),
        error=lambda _: (
            b'data: {"type":"error","errorText":"An error occurred."}\n\ndata: [DONE]\n\n'
        ),
    ),
    response_headers=("x-vercel-ai-ui-message-stream",),
    sniff=lambda obj: isinstance(obj.get("type"), str) and obj["type"] in PARTS,
)
