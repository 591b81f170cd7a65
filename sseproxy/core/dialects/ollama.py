"""Ollama native streaming (`/api/chat`, `/api/generate`): NDJSON, one object per line.

The terminal is a line with `done: true`; an `{"error": ...}` line is an in-band failure.
"""

from __future__ import annotations

import json
from typing import Any

from sseproxy.core.dialects.base import Assembler, Outcome, as_int, dumps
from sseproxy.core.dialects.spec import NDJSON_MEDIA_TYPE, DialectSpec, Drills
from sseproxy.core.events import Framing, Line
from sseproxy.core.verdict import Dialect, FinishCategory, State, Usage

DONE_REASONS = {
    "stop": (State.COMPLETED, FinishCategory.STOP),
    "length": (State.INCOMPLETE, FinishCategory.LENGTH),
    # load/unload answer requests that only (un)load a model: complete, but not a generation.
    "load": (State.COMPLETED, FinishCategory.OTHER),
    "unload": (State.COMPLETED, FinishCategory.OTHER),
}


class OllamaAssembler(Assembler):
    dialect = Dialect.OLLAMA

    def __init__(self) -> None:
        super().__init__()
        self.done = False
        self.done_reason: str | None = None

    def on_line(self, line: Line) -> None:
        self.last_event = "chunk"
        obj = self.parse(line.data)
        if isinstance(obj, dict):
            self.on_object(obj)
        elif obj is not None:
            self.anomalies["unexpected_payload"] += 1

    def on_object(self, obj: dict[str, Any]) -> None:
        if self.done:
            self.anomalies["events_after_terminal"] += 1
            return
        if obj.get("error"):
            self.last_event = "error"
            self.set_error(obj)
            return
        if self.model is None and isinstance(obj.get("model"), str):
            self.model = obj["model"]
        message = obj.get("message")
        source = message if isinstance(message, dict) else obj
        self.add_text((0, 0), source.get("content") if source is message else obj.get("response"))
        self.add_reasoning((0, 0), source.get("thinking"))
        calls = source.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict):
                    buffer = self.tool_call(len(self.tool_calls))
                    self.set_call_identity(buffer, call.get("id"), function.get("name"))
                    arguments = function.get("arguments", {})
                    text = arguments if isinstance(arguments, str) else dumps(arguments)
                    self.add_arguments(buffer, text)
                    buffer.completed = True
        if obj.get("done") is True:
            self.done = self.terminal = True
            reason = obj.get("done_reason")
            self.done_reason = reason if isinstance(reason, str) and reason else None
            self.usage = Usage(
                input_tokens=as_int(obj.get("prompt_eval_count")),
                output_tokens=as_int(obj.get("eval_count")),
                total_tokens=_sum(obj.get("prompt_eval_count"), obj.get("eval_count")),
                raw={k: v for k, v in obj.items() if k.endswith(("_count", "_duration"))},
            )

    def on_body(self, body: Any) -> None:
        if isinstance(body, dict):
            self.on_object(body)

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        reason = self.done_reason
        if self.error is not None:
            return Outcome(State.FAILED, reason, FinishCategory.ERROR)
        if not self.done:
            return Outcome(State.INTERRUPTED, None, None)
        if reason is None:
            # Ollama omits done_reason when the runner's connection closed: not a clean end.
            self.anomalies["done_without_finish_reason"] += 1
            return Outcome(State.UNCONFIRMED, None, None)
        if reason not in DONE_REASONS:
            self.anomalies["unknown_finish_reason"] += 1
            return Outcome(State.INCOMPLETE, reason, FinishCategory.OTHER)
        state, category = DONE_REASONS[reason]
        if state is State.COMPLETED and self.tool_calls:
            category = FinishCategory.TOOL_USE
        return Outcome(state, reason, category)


def _sum(a: Any, b: Any) -> int | None:
    x, y = as_int(a), as_int(b)
    return None if x is None or y is None else x + y


RUNNER_STOPPED = {"error": "model runner has unexpectedly stopped (injected)"}

SPEC = DialectSpec(
    dialect=Dialect.OLLAMA,
    assembler=OllamaAssembler,
    drills=Drills(
        is_terminal=lambda event, raw: b'"done":true' in raw.replace(b" ", b""),
        error=lambda _: json.dumps(RUNNER_STOPPED).encode() + b"\n",
        end_marker=b'{"done":true}\n',
        keepalive=b"\n",  # NDJSON has no comment; readers skip blank lines
    ),
    path_suffixes=("/api/chat", "/api/generate"),
    content_types=("ndjson",),
    sniff=lambda obj: "done" in obj and ("message" in obj or "response" in obj),
    media_type=NDJSON_MEDIA_TYPE,
    framing=Framing.NDJSON,
    fallback_for=frozenset({Framing.NDJSON}),  # an NDJSON stream no spec's `sniff` recognised
    otel_provider="ollama",
)
