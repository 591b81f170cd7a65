"""OpenAI Responses API: typed events, no `[DONE]`; the terminal is a `response.*` event.

`*.done` events and the final `response.output` are snapshots of what the deltas already
said. They are compared with the deltas (`snapshot_mismatch`) and never appended.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson

from sseproxy.core.dialects.base import (
    MAX_INDEX,
    Assembler,
    ContentStore,
    Outcome,
    ToolCallBuffer,
    as_int,
    dig,
    error_info,
    ident,
)
from sseproxy.core.dialects.spec import DialectSpec, Drills, sse_event
from sseproxy.core.events import SSEEvent
from sseproxy.core.verdict import Dialect, FinishCategory, State, Usage

TERMINALS = {
    "response.completed": State.COMPLETED,
    "response.incomplete": State.INCOMPLETE,
    "response.failed": State.FAILED,
    "error": State.FAILED,
}
FINAL_STATUSES = {"completed", "incomplete", "failed", "cancelled"}
INCOMPLETE_CATEGORY = {
    "max_output_tokens": FinishCategory.LENGTH,
    "content_filter": FinishCategory.CONTENT_FILTER,
    # over a WebSocket, `response.steer` ended it at a safe boundary and a successor the server
    # makes continues it: a pause handed over (core/sessions/responses.py), not a failure
    "steered": FinishCategory.PAUSE,
}
CLIENT_TOOL_ITEMS = {"function_call", "custom_tool_call"}
# Progress events that carry nothing to assemble; listed so that anything else is "unknown".
QUIET_PREFIXES = (
    "response.web_search_call.",
    "response.file_search_call.",
    "response.code_interpreter_call",
    "response.image_generation_call.",
    "response.mcp_",
    "response.shell_call",
    "response.audio.",
    "response.compaction.",
    "response.output_text.annotation.added",
    "response.content_part.added",
    "response.reasoning_summary_part.added",
)
# The deltas `on_event` takes the short way (see there).
FAST_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.function_call_arguments.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta",
        "response.refusal.delta",
        "response.custom_tool_call_input.delta",
    }
)

# The `event:` line of a block that `take_block` recognises -> the type it sets.
FAST_DELTA_LINES = {name.encode(): name for name in FAST_DELTAS}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def responses_usage(raw: dict[str, Any]) -> Usage:
    return Usage(
        input_tokens=as_int(raw.get("input_tokens")),
        output_tokens=as_int(raw.get("output_tokens")),
        total_tokens=as_int(raw.get("total_tokens")),
        reasoning_tokens=as_int(dig(raw, "output_tokens_details", "reasoning_tokens")),
        cached_tokens=as_int(dig(raw, "input_tokens_details", "cached_tokens")),
        cache_write_tokens=as_int(dig(raw, "input_tokens_details", "cache_write_tokens")),
        raw=raw,
    )


class OpenAIResponsesAssembler(Assembler):
    dialect = Dialect.OPENAI_RESPONSES
    fast_path: ClassVar[bool] = True  # the short way for deltas; tests switch it off to compare

    def __init__(self) -> None:
        super().__init__()
        self.outcome_state: State | None = None
        self.status: str | None = None
        self.incomplete_reason: str | None = None
        self.last_sequence: int | None = None
        self.done_parts: set[tuple[str, str, int]] = set()
        self.has_function_calls = False

    def take_block(self, buf: bytes, start: int, stop: int) -> bool:
        """A delta's block, its JSON parsed from the chunk (no event, no decoded copy)."""
        if not buf.startswith(b"event: ", start) or self.terminal or not self.fast_path:
            return False
        first = buf.find(b"\n", start, stop)
        name = FAST_DELTA_LINES.get(buf[start + 7 : first])
        end = stop - 2
        if (
            name is None
            or buf.find(b"\n", first + 1, stop) != end
            or buf[stop - 1] != 10
            or not buf.startswith(b"data: ", first + 1)
            or buf.find(b"\r", start, stop) >= 0
        ):
            return False  # not a known delta's `event:` line, one `data:` line, a blank line
        try:
            obj = orjson.loads(buf[first + 7 : end])
        except orjson.JSONDecodeError:
            return False  # invalid JSON or UTF-8: the full path counts it
        if type(obj) is not dict or obj.get("type") != name:
            return False  # the full path decides what it is
        self.on_delta(name, obj)
        return True

    def on_event(self, event: SSEEvent) -> None:
        if event.data == "[DONE]":  # not Responses protocol; OpenRouter appends it
            self.last_event = "[DONE]"
            return
        obj = self.parse(event.data)
        name = event.type
        if (
            name in FAST_DELTAS
            and self.fast_path
            and type(obj) is dict
            and obj.get("type") == name
            and not self.terminal
        ):
            self.on_delta(name, obj)
            return
        if not isinstance(obj, dict):
            self.last_event = event.type if event.type != "message" else "chunk"
            return
        json_type = obj.get("type")
        etype = event.type if event.type != "message" else json_type
        if not isinstance(etype, str):
            etype = "chunk"
        if isinstance(json_type, str) and event.type != "message" and json_type != event.type:
            self.anomalies["event_type_mismatch"] += 1
        self.last_event = etype
        if json_type is None and event.type == "message" and self.in_band_error(obj):
            return
        self.check_sequence(obj.get("sequence_number"))
        if self.terminal and not (
            etype == "response.failed" and self.outcome_state is State.FAILED
        ):
            self.anomalies["events_after_terminal"] += 1
            return
        self.dispatch(etype, obj)

    def on_delta(self, name: str, obj: dict[str, Any]) -> None:
        """Nearly every event: a delta named alike by `event:` and JSON, before the terminal.
        What the checks of `on_event` would decide for it, decided at once."""
        self.last_event = name
        seq = obj.get("sequence_number")
        if type(seq) is int and self.last_sequence is not None and seq == self.last_sequence + 1:
            self.last_sequence = seq  # the next one, as `check_sequence` would record it
        else:
            self.check_sequence(seq)
        if name == "response.output_text.delta":
            self.on_part_delta("text", obj)  # what dispatch does first, one call sooner
        else:
            self.dispatch(name, obj)

    def check_sequence(self, seq: Any) -> None:
        if not isinstance(seq, int):
            return
        if self.last_sequence is not None:
            if seq > self.last_sequence + 1:
                self.anomalies["sequence_gap"] += 1
            elif seq <= self.last_sequence:
                self.anomalies["sequence_regression"] += 1
        self.last_sequence = seq

    def dispatch(self, etype: str, obj: dict[str, Any]) -> None:
        if etype == "response.output_text.delta":
            self.on_part_delta("text", obj)
        elif etype == "response.function_call_arguments.delta":
            self.add_arguments(self.call_for(obj), obj.get("delta"))
        elif etype == "response.custom_tool_call_input.delta":
            call = self.call_for(obj)
            call.free_text = True  # a custom tool's input is text (apply_patch, a grammar)
            self.add_arguments(call, obj.get("delta"))
        elif etype in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            index = ident(obj.get("summary_index", obj.get("content_index")))
            self.add_reasoning((ident(obj.get("item_id")), etype, index), obj.get("delta"))
        elif etype == "response.refusal.delta":
            self.on_part_delta("refusal", obj)
        elif etype in TERMINALS:
            self.on_terminal(etype, obj)
        elif etype in ("response.created", "response.in_progress", "response.queued"):
            self.on_snapshot(obj.get("response"))
        elif etype == "response.output_item.added":
            self.on_item(obj.get("item"), done=False)
        elif etype == "response.output_item.done":
            self.on_item(obj.get("item"), done=True)
        elif etype.endswith(".done"):
            self.on_done_snapshot(etype, obj)
        elif not etype.startswith(QUIET_PREFIXES):
            self.anomalies["unknown_event_type"] += 1

    def on_part_delta(self, kind: str, obj: dict[str, Any]) -> None:
        index = obj.get("content_index")
        if type(index) is not int or not 0 <= index < MAX_INDEX:
            index = self.index(index, 0)
            if index is None:
                return
        item = obj.get("item_id")
        key = (item if type(item) is str else ident(item), index)
        if self.done_parts and (str(key[0]), kind, index) in self.done_parts:
            self.anomalies["delta_after_done"] += 1
        delta = obj.get("delta")
        if type(delta) is str and delta:  # add_text / add_refusal, inlined
            (self.text if kind == "text" else self.refusal).add(key, delta)
            self.content_deltas += 1

    def call_for(self, obj: dict[str, Any]) -> ToolCallBuffer:
        self.has_function_calls = True
        item_id = ident(obj.get("item_id"))
        if item_id:
            return self.tool_call(item_id)
        index = self.index(obj.get("output_index"))
        if index is None and obj.get("output_index") is not None:
            return ToolCallBuffer()  # out of range: counted, not kept
        return self.tool_call(index)

    def on_item(self, item: Any, done: bool) -> None:
        if not isinstance(item, dict):
            return
        itype = item.get("type")
        if itype in CLIENT_TOOL_ITEMS:
            self.has_function_calls = True
            call = self.tool_call(ident(item.get("id")))
            call.free_text = call.free_text or itype == "custom_tool_call"
            self.set_call_identity(call, item.get("call_id"), item.get("name"), snapshot=done)
            if done:
                self.compare(call.arguments, item.get("arguments", item.get("input")))
                call.completed = True
        elif isinstance(itype, str) and itype.endswith("_call") and not done:
            self.server_tool_calls.append(itype)
        if done and itype == "message":
            for index, part in enumerate(_list(item.get("content"))):
                self.compare_part(ident(item.get("id")), index, part)

    def on_done_snapshot(self, etype: str, obj: dict[str, Any]) -> None:
        item_id = ident(obj.get("item_id"))
        index = self.index(obj.get("content_index"), 0)
        if index is None:
            return
        if etype == "response.output_text.done":
            self.done_parts.add((str(item_id), "text", index))
            self.compare_store(self.text, (item_id, index), obj.get("text"))
        elif etype == "response.refusal.done":
            self.done_parts.add((str(item_id), "refusal", index))
            self.compare_store(self.refusal, (item_id, index), obj.get("refusal"))
        elif etype in (
            "response.function_call_arguments.done",
            "response.custom_tool_call_input.done",
        ):
            call = self.call_for(obj)
            call.free_text = call.free_text or etype == "response.custom_tool_call_input.done"
            self.set_call_identity(call, None, obj.get("name"), snapshot=True)
            self.compare(call.arguments, obj.get("arguments", obj.get("input")), call.truncated)
            call.completed = True
        elif etype == "response.content_part.done":
            self.compare_part(item_id, index, obj.get("part"))

    def compare_part(self, item_id: Any, index: int, part: Any) -> None:
        if not isinstance(part, dict):
            return
        key = (item_id, index)
        if part.get("type") == "output_text":
            self.compare_store(self.text, key, part.get("text"))
        elif part.get("type") == "refusal":
            self.compare_store(self.refusal, key, part.get("refusal"))

    def compare_store(self, store: ContentStore, key: Any, snapshot: Any) -> None:
        if isinstance(snapshot, str) and not store.matches(key, snapshot):
            self.anomalies["snapshot_mismatch"] += 1

    def compare(self, assembled: str, snapshot: Any, truncated: bool = False) -> None:
        if isinstance(snapshot, str) and not truncated and snapshot != assembled:
            self.anomalies["snapshot_mismatch"] += 1

    def on_snapshot(self, response: Any) -> None:
        if not isinstance(response, dict):
            return
        if isinstance(response.get("id"), str):
            self.response_id = response["id"]
        if isinstance(response.get("model"), str):
            self.model = response["model"]
        if isinstance(response.get("status"), str):
            self.status = response["status"]
        if isinstance(response.get("usage"), dict):
            self.usage = responses_usage(response["usage"])

    def on_terminal(self, etype: str, obj: dict[str, Any]) -> None:
        self.terminal = True
        self.outcome_state = TERMINALS[etype]
        response = obj.get("response")
        self.on_snapshot(response)
        if etype == "error":
            self.set_error(obj)
        elif etype == "response.failed":
            self.status = "failed"  # the event says so even if its snapshot does not
            if self.error is None:
                self.error = error_info({"error": dig(response, "error") or {}})
        elif etype == "response.incomplete":
            reason = dig(response, "incomplete_details", "reason")
            self.incomplete_reason = reason if isinstance(reason, str) else None
        if isinstance(response, dict) and isinstance(response.get("output"), list):
            for item in response["output"]:
                if isinstance(item, dict) and item.get("type") == "message":
                    for index, part in enumerate(_list(item.get("content"))):
                        self.compare_part(ident(item.get("id")), index, part)
                elif isinstance(item, dict) and item.get("type") in CLIENT_TOOL_ITEMS:
                    call = self.tool_calls.get(ident(item.get("id")))
                    if call is not None:
                        self.compare(call.arguments, item.get("arguments"), call.truncated)

    def on_body(self, body: Any) -> None:
        super().on_body(body)
        if isinstance(body, dict) and body.get("object") == "response":
            self.on_snapshot(body)
            status = body.get("status")
            state = {"completed": State.COMPLETED, "incomplete": State.INCOMPLETE}.get(
                str(status), State.FAILED if status == "failed" else None
            )
            if state is not None:
                self.terminal = True
                self.outcome_state = state
                reason = dig(body, "incomplete_details", "reason")
                self.incomplete_reason = reason if isinstance(reason, str) else None
            for item in _list(body.get("output")):
                if isinstance(item, dict) and item.get("type") == "message":
                    for part in _list(item.get("content")):
                        if isinstance(part, dict):
                            self.add_text((ident(item.get("id")), 0), part.get("text"))
                            self.add_refusal((ident(item.get("id")), 0), part.get("refusal"))
                elif isinstance(item, dict) and item.get("type") in CLIENT_TOOL_ITEMS:
                    call = self.tool_call(ident(item.get("id")))
                    call.free_text = item.get("type") == "custom_tool_call"
                    self.set_call_identity(call, item.get("call_id"), item.get("name"))
                    self.add_arguments(call, item.get("arguments", item.get("input")))
                    call.completed = True
                    self.has_function_calls = True

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        # The reason is a final status or `incomplete_details`; never a snapshot's
        # `in_progress` / `queued` (a stream that ended on an `error` event has no status).
        final = self.status if self.status in FINAL_STATUSES else None
        if self.error is not None or self.outcome_state is State.FAILED:
            return Outcome(State.FAILED, final, FinishCategory.ERROR)
        if self.outcome_state is State.INCOMPLETE:
            reason = self.incomplete_reason or final or "incomplete"
            category = INCOMPLETE_CATEGORY.get(reason, FinishCategory.OTHER)
            return Outcome(State.INCOMPLETE, reason, category)
        if self.outcome_state is State.COMPLETED:
            if self.has_function_calls:
                category = FinishCategory.TOOL_USE
            elif self.refusal.chars and not self.text.chars:
                category = FinishCategory.REFUSAL
            else:
                category = FinishCategory.STOP
            return Outcome(State.COMPLETED, final or "completed", category)
        return Outcome(State.INTERRUPTED, None, None)


def _responses_error(sequence_number: int) -> bytes:
    # Shaped as OpenAI's ResponseErrorEvent (the Vercel AI SDK rejects an event without
    # `sequence_number` as a schema mismatch and never shows the message).
    event = {
        "type": "error",
        "code": "server_error",
        "message": "The server had an error (injected)",
        "param": None,
        "sequence_number": sequence_number,
    }
    return sse_event(event, "error")


SPEC = DialectSpec(
    dialect=Dialect.OPENAI_RESPONSES,
    assembler=OpenAIResponsesAssembler,
    drills=Drills(
        is_terminal=lambda event, raw: event is not None and event.type in TERMINALS,
        error=_responses_error,
        sequenced=True,
        # `response.output_text.done`, `response.output_item.done`, ...: the full text again
        is_snapshot=lambda event: (
            event.type.startswith("response.") and event.type.endswith(".done")
        ),
    ),
    path_suffixes=("/responses",),
    path_contains=("/responses/",),
    event_prefix="response.",
    sniff=lambda obj: (
        str(obj.get("type")).startswith("response.") or obj.get("object") == "response"
    ),
    otel_provider="openai",
    # Only background responses resume (`starting_after`): asked with `background: true`, or
    # the resumed stream itself (a GET, no body), which can be cut and resumed again.
    resumable=lambda asked: asked.background or asked.stream is None,
)
