"""Anthropic Messages: message_start, content blocks, message_delta, message_stop.

`message_stop` is the only terminal; a `stop_reason` without it means the bytes were cut, and a
`message_stop` without a `stop_reason` proves nothing (`unconfirmed`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson

from sseproxy.core.dialects.base import Assembler, Outcome, as_int, dig, dumps
from sseproxy.core.dialects.spec import DialectSpec, Drills, sse_event
from sseproxy.core.events import SSEEvent
from sseproxy.core.verdict import Dialect, Fallback, FinishCategory, State, Usage

STOP_REASONS = {
    "end_turn": (State.COMPLETED, FinishCategory.STOP),
    "stop_sequence": (State.COMPLETED, FinishCategory.STOP),
    "tool_use": (State.COMPLETED, FinishCategory.TOOL_USE),
    "max_tokens": (State.INCOMPLETE, FinishCategory.LENGTH),
    "model_context_window_exceeded": (State.INCOMPLETE, FinishCategory.LENGTH),
    "refusal": (State.INCOMPLETE, FinishCategory.REFUSAL),
    "pause_turn": (State.INCOMPLETE, FinishCategory.PAUSE),
    "compaction": (State.INCOMPLETE, FinishCategory.PAUSE),  # paused after compacting: continue
}
SERVER_TOOL_BLOCKS = {"server_tool_use", "mcp_tool_use"}
# How the block of a delta starts: `take_block` recognises it without building an event.
DELTA_BLOCK = b"event: content_block_delta\ndata: "
_DATA = len(DELTA_BLOCK)
# A model id longer than this is no model id; the record keeps none (the peer writes it).
MAX_MODEL_CHARS = 256
# `usage.iterations` entries read for a `fallback_message`: one per sampling iteration of the
# turn; a list longer than this is no real turn's and the rest is not read.
MAX_ITERATIONS = 256
USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


class AnthropicMessagesAssembler(Assembler):
    dialect = Dialect.ANTHROPIC_MESSAGES
    fast_path: ClassVar[bool] = (
        True  # the short way for deltas below; tests switch it off to compare
    )

    def __init__(self) -> None:
        super().__init__()
        self.stop_reason: str | None = None
        self.message_stop = False
        self.blocks: dict[int, str] = {}  # index -> block type
        self.usage_raw: dict[str, Any] = {}
        self.redacted_thinking_blocks = 0
        # Server-side fallback (betas `server-side-fallback-2026-*`): `fallback` blocks seen,
        # the last block's `to` model, and the model of a `fallback_message` iteration.
        self.fallback_hops = 0
        self.fallback_to: str | None = None
        self.fallback_served_by: str | None = None

    def take_block(self, buf: bytes, start: int, stop: int) -> bool:
        """A delta's block, its JSON parsed from the chunk (no event, no decoded copy)."""
        if not buf.startswith(DELTA_BLOCK, start) or self.message_stop or not self.fast_path:
            return False
        first = start + _DATA
        end = stop - 2
        if (
            buf.find(b"\n", first, stop) != end
            or buf[stop - 1] != 10
            or buf.find(b"\r", start, stop) >= 0
        ):
            return False  # not exactly one `data:` line, then the blank line
        try:
            obj = orjson.loads(buf[first:end])
        except orjson.JSONDecodeError:
            return False  # invalid JSON or UTF-8: the full path counts it
        if type(obj) is not dict or obj.get("type") != "content_block_delta":
            return False  # the full path decides what it is
        self.last_event = "content_block_delta"
        self.on_delta(obj)
        return True

    def on_event(self, event: SSEEvent) -> None:
        obj = self.parse(event.data)
        if (
            event.type == "content_block_delta"
            and self.fast_path
            and type(obj) is dict
            and obj.get("type") == "content_block_delta"
            and not self.message_stop
        ):
            # Nearly every event: a delta named alike by `event:` and JSON. What the checks
            # below would decide for it, decided at once.
            self.last_event = "content_block_delta"
            self.on_delta(obj)
            return
        json_type = obj.get("type") if isinstance(obj, dict) else None
        # Classify by the `event:` name (as the SDK does); fall back to the JSON type.
        etype = event.type if event.type != "message" else json_type
        if not isinstance(etype, str):
            etype = "chunk"
        if isinstance(json_type, str) and event.type != "message" and json_type != event.type:
            self.anomalies["event_type_mismatch"] += 1
        self.last_event = etype
        if self.message_stop:
            self.anomalies["events_after_terminal"] += 1
            return
        if not isinstance(obj, dict):
            return
        if etype == "content_block_delta":
            self.on_delta(obj)
        elif etype == "ping":
            pass
        elif etype == "content_block_start":
            self.on_block_start(obj)
        elif etype == "content_block_stop":
            self.on_block_stop(obj)
        elif etype == "message_start":
            self.on_message(obj.get("message"))
        elif etype == "message_delta":
            self.on_message_delta(obj)
        elif etype == "message_stop":
            self.message_stop = self.terminal = True
        elif etype == "error":
            self.set_error(obj)
        elif not (json_type is None and self.in_band_error(obj)):
            self.anomalies["unknown_event_type"] += 1

    def on_message(self, message: Any) -> None:
        if not isinstance(message, dict):
            return
        if isinstance(message.get("id"), str):
            self.response_id = message["id"]
        if isinstance(message.get("model"), str):
            self.model = message["model"]
        self.merge_usage(message.get("usage"))

    def on_block_start(self, obj: dict[str, Any]) -> None:
        index = self.index(obj.get("index"))
        block = obj.get("content_block")
        if index is None or not isinstance(block, dict):
            return
        btype = block.get("type")
        self.blocks[index] = btype if isinstance(btype, str) else "unknown"
        if btype == "text":
            self.add_text((0, index), block.get("text"))
        elif btype == "compaction":
            self.add_text((0, index), block.get("content"))
        elif btype == "thinking":
            self.add_reasoning((0, index), block.get("thinking"))
        elif btype == "redacted_thinking":
            self.redacted_thinking_blocks += 1
        elif btype == "tool_use":
            call = self.tool_call(index)
            call.empty_means_no_arguments = True  # no input_json_delta means input {}
            self.set_call_identity(call, block.get("id"), block.get("name"))
        elif btype in SERVER_TOOL_BLOCKS:
            name = block.get("name")
            self.server_tool_calls.append(name if isinstance(name, str) else str(btype))
        elif btype == "fallback":  # one model gives way to the next; no deltas follow
            self.fallback_hops += 1
            to = block.get("to")
            self.fallback_to = _model(to.get("model") if isinstance(to, dict) else None)

    def fallback(self) -> Fallback | None:
        if not self.fallback_hops and self.fallback_served_by is None:
            return None
        return Fallback(self.fallback_hops, self.fallback_served_by or self.fallback_to)

    def on_delta(self, obj: dict[str, Any]) -> None:
        index = obj.get("index")
        delta = obj.get("delta")
        if type(index) is not int or index not in self.blocks or type(delta) is not dict:
            # Not the usual delta of a started block (whose index was checked at its start).
            index = self.index(index)
            if index is None or not isinstance(delta, dict):
                return
            if index not in self.blocks:
                self.anomalies["delta_without_block_start"] += 1
        dtype = delta.get("type")
        if dtype == "text_delta":
            text = delta.get("text")
            if type(text) is str and text:  # add_text, inlined: nearly every event
                self.text.add((0, index), text)
                self.content_deltas += 1
        elif dtype == "input_json_delta":
            if index in self.tool_calls:
                self.add_arguments(self.tool_calls[index], delta.get("partial_json"))
            elif isinstance(delta.get("partial_json"), str) and delta["partial_json"]:
                self.content_deltas += 1  # server tool input: progress, not a client call
        elif dtype == "thinking_delta":
            self.add_reasoning((0, index), delta.get("thinking"))
        elif dtype == "compaction_delta":
            self.add_text((0, index), delta.get("content"))  # the summary clients show
        elif dtype not in ("signature_delta", "citations_delta"):
            self.anomalies["unknown_delta_type"] += 1

    def on_block_stop(self, obj: dict[str, Any]) -> None:
        index = self.index(obj.get("index"))
        if index in self.tool_calls:
            self.tool_calls[index].completed = True

    def on_message_delta(self, obj: dict[str, Any]) -> None:
        reason = dig(obj, "delta", "stop_reason")
        if isinstance(reason, str) and reason:
            self.stop_reason = reason
        self.merge_usage(obj.get("usage"))

    def merge_usage(self, usage: Any) -> None:
        """Cumulative counts: the last value of each field wins (as the official SDK does)."""
        if not isinstance(usage, dict):
            return
        self.usage_raw.update({k: v for k, v in usage.items() if v is not None})
        raw = self.usage_raw
        inputs = [as_int(raw.get(k)) for k in USAGE_FIELDS if k != "output_tokens"]
        input_total = (
            sum(v for v in inputs if v is not None) if any(v is not None for v in inputs) else None
        )
        output = as_int(raw.get("output_tokens"))
        total = None if input_total is None or output is None else input_total + output
        self.usage = Usage(
            input_tokens=input_total,
            output_tokens=output,
            total_tokens=total,
            cached_tokens=as_int(raw.get("cache_read_input_tokens")),
            cache_write_tokens=as_int(raw.get("cache_creation_input_tokens")),
            raw=dict(raw),
        )
        iterations = usage.get("iterations")
        if isinstance(iterations, list):
            for entry in iterations[:MAX_ITERATIONS]:
                if isinstance(entry, dict) and entry.get("type") == "fallback_message":
                    self.fallback_served_by = _model(entry.get("model"))

    def on_body(self, body: Any) -> None:
        super().on_body(body)
        if isinstance(body, dict) and body.get("type") == "message":
            self.on_message(body)
            content = body.get("content")
            for index, block in enumerate(content if isinstance(content, list) else ()):
                self.on_block_start({"index": index, "content_block": block})
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    call = self.tool_calls[index]
                    self.add_arguments(call, dumps(block.get("input")))
                    call.completed = True
            reason = body.get("stop_reason")
            self.stop_reason = reason if isinstance(reason, str) else None
            self.message_stop = self.terminal = True

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        reason = self.stop_reason
        if self.error is not None:
            return Outcome(State.FAILED, reason, FinishCategory.ERROR)
        if not self.message_stop and (body_complete or reason is None):
            if reason is not None:
                self.anomalies["stop_reason_without_message_stop"] += 1
            return Outcome(State.INTERRUPTED, reason, None)
        if reason is None:
            return Outcome(State.UNCONFIRMED, None, None)
        if reason not in STOP_REASONS:
            self.anomalies["unknown_finish_reason"] += 1
            return Outcome(State.INCOMPLETE, reason, FinishCategory.OTHER)
        state, category = STOP_REASONS[reason]
        return Outcome(state, reason, category)


EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    }
)
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}

SPEC = DialectSpec(
    dialect=Dialect.ANTHROPIC_MESSAGES,
    assembler=AnthropicMessagesAssembler,
    drills=Drills(
        is_terminal=lambda event, raw: (
            event is not None and (event.type == "message_stop" or '"message_stop"' in event.data)
        ),
        error=lambda _: sse_event(OVERLOADED, "error"),
        end_marker=sse_event({"type": "message_stop"}, "message_stop"),
        keepalive=sse_event({"type": "ping"}, "ping"),
    ),
    path_suffixes=("/messages", ":streamRawPredict", ":rawPredict"),
    event_types=EVENTS,
    sniff=lambda obj: (
        isinstance(obj.get("type"), str) and (obj["type"] in EVENTS or obj["type"] == "message")
    ),
    otel_provider="anthropic",
)


def _model(value: Any) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= MAX_MODEL_CHARS else None
