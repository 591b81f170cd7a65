"""AWS Bedrock ConverseStream (`POST /model/{modelId}/converse-stream`), over the AWS event
stream framing (see `eventstream.py`). Follows the bedrock-runtime API 2023-09-30 as botocore
1.44 models it (`ConverseStreamOutput`).

Events: `messageStart`, `contentBlockStart` / `contentBlockDelta` / `contentBlockStop`,
`messageStop{stopReason}`, then `metadata{usage, metrics}`. `messageStop` is the terminal: it
carries the outcome, and `metadata` after it is accounting only (its absence after a clean end
is the anomaly `metadata_missing`). Exception messages (`:message-type` `exception` or
`error`) are in-band failures.
"""

from __future__ import annotations

import json
from typing import Any

from sseproxy.core.dialects.base import Assembler, Outcome, as_int, dig, dumps
from sseproxy.core.dialects.spec import DialectSpec, Drills
from sseproxy.core.events import Framing
from sseproxy.core.eventstream import (
    EVENTSTREAM_MEDIA_TYPE,
    EventMessage,
    EventStreamDecoder,
    event,
    exception,
)
from sseproxy.core.jsonvalue import loads
from sseproxy.core.verdict import Dialect, ErrorInfo, FinishCategory, State, Usage

STOP_REASONS = {
    "end_turn": (State.COMPLETED, FinishCategory.STOP),
    "stop_sequence": (State.COMPLETED, FinishCategory.STOP),
    "tool_use": (State.COMPLETED, FinishCategory.TOOL_USE),
    "max_tokens": (State.INCOMPLETE, FinishCategory.LENGTH),
    "model_context_window_exceeded": (State.INCOMPLETE, FinishCategory.LENGTH),
    "guardrail_intervened": (State.INCOMPLETE, FinishCategory.CONTENT_FILTER),
    "content_filtered": (State.INCOMPLETE, FinishCategory.CONTENT_FILTER),
    "malformed_model_output": (State.INCOMPLETE, FinishCategory.OTHER),
    "malformed_tool_use": (State.INCOMPLETE, FinishCategory.OTHER),
}
CONVERSE_EVENTS = {
    "messageStart",
    "contentBlockStart",
    "contentBlockDelta",
    "contentBlockStop",
    "messageStop",
    "metadata",
}
KNOWN_DELTAS = {"text", "toolUse", "reasoningContent", "citation", "toolResult", "image"}


def on_exception(assembler: Assembler, message: EventMessage) -> bool:
    """Record an exception or error message on `assembler`; False for an ordinary event."""
    if message.message_type == "event":
        return False
    info = exception_info(message)
    assembler.last_event = info.type or message.message_type
    if assembler.error is None:
        assembler.error = info
    else:
        assembler.anomalies["repeated_error"] += 1
    return True


def exception_info(message: EventMessage) -> ErrorInfo:
    """A modelled exception (`:exception-type`, JSON `{"message": ...}`) or an unmodelled
    error (`:error-code`, `:error-message` headers)."""
    if message.message_type == "error":
        return ErrorInfo(
            type=message.header(":error-code"),
            code=None,
            message=message.header(":error-message"),
        )
    try:
        body = loads(message.payload)
    except ValueError:
        body = None
    text = body.get("message") or body.get("Message") if isinstance(body, dict) else None
    status = as_int(body.get("originalStatusCode")) if isinstance(body, dict) else None
    code = None if status is None else str(status)
    return ErrorInfo(
        type=message.exception_type,
        code=code,
        message=text if isinstance(text, str) else None,
    )


def first_message(raw: bytes) -> EventMessage | None:
    """The message a drill's raw unit holds (the injector splits event streams by message)."""
    messages = EventStreamDecoder().feed(raw)
    return messages[0] if messages else None


def injected_exception(_: int) -> bytes:
    body = {"message": "Model stream error (injected)", "originalStatusCode": 500}
    return exception("modelStreamErrorException", json.dumps(body).encode())


def converse_usage(raw: dict[str, Any]) -> Usage:
    return Usage(
        input_tokens=as_int(raw.get("inputTokens")),
        output_tokens=as_int(raw.get("outputTokens")),
        total_tokens=as_int(raw.get("totalTokens")),
        cached_tokens=as_int(raw.get("cacheReadInputTokens")),
        cache_write_tokens=as_int(raw.get("cacheWriteInputTokens")),
        raw=raw,
    )


class BedrockConverseAssembler(Assembler):
    dialect = Dialect.BEDROCK_CONVERSE

    def __init__(self) -> None:
        super().__init__()
        self.stop_reason: str | None = None
        self.message_stop = False
        self.metadata = False
        self.blocks: set[int] = set()

    def on_aws_message(self, message: EventMessage) -> None:
        if on_exception(self, message):
            return
        etype = message.event_type or "unknown"
        self.last_event = etype
        if self.metadata or (self.message_stop and etype != "metadata"):
            self.anomalies["events_after_terminal"] += 1
            return
        obj = self.parse(message.payload)
        if not isinstance(obj, dict):
            if obj is not None:
                self.anomalies["unexpected_payload"] += 1
            return
        index = self.index(obj.get("contentBlockIndex"))
        if etype == "contentBlockDelta":
            self.on_delta(index, obj.get("delta"))
        elif etype == "contentBlockStart":
            self.on_block_start(index, obj.get("start"))
        elif etype == "contentBlockStop":
            if index in self.tool_calls:
                self.tool_calls[index].completed = True
        elif etype == "messageStart":
            pass
        elif etype == "messageStop":
            reason = obj.get("stopReason")
            self.stop_reason = reason if isinstance(reason, str) and reason else None
            self.message_stop = self.terminal = True
        elif etype == "metadata":
            self.metadata = True
            usage = obj.get("usage")
            if isinstance(usage, dict):
                self.usage = converse_usage(usage)
        else:
            self.anomalies["unknown_event_type"] += 1

    def on_block_start(self, index: int | None, start: Any) -> None:
        if index is None or not isinstance(start, dict):
            return
        self.blocks.add(index)
        tool = start.get("toolUse")
        if isinstance(tool, dict):
            if tool.get("type") == "server_tool_use":
                name = tool.get("name")
                self.server_tool_calls.append(name if isinstance(name, str) else "server_tool")
                return
            call = self.tool_call(index)
            call.empty_means_no_arguments = True  # a tool without parameters sends no input
            self.set_call_identity(call, tool.get("toolUseId"), tool.get("name"))

    def on_delta(self, index: int | None, delta: Any) -> None:
        if index is None or not isinstance(delta, dict):
            return
        if not delta.keys() & KNOWN_DELTAS:
            self.anomalies["unknown_delta_type"] += 1
            return
        self.add_text((0, index), delta.get("text"))
        tool = delta.get("toolUse")
        if isinstance(tool, dict):
            if index in self.tool_calls:
                self.add_arguments(self.tool_calls[index], tool.get("input"))
            else:
                self.anomalies["delta_without_block_start"] += 1
        reasoning = delta.get("reasoningContent")
        if isinstance(reasoning, dict):
            self.add_reasoning((0, index), reasoning.get("text"))
        if "toolResult" in delta or "image" in delta or "citation" in delta:
            self.content_deltas += 1  # server tool results, images, citations: progress

    def on_body(self, body: Any) -> None:
        """A non-streamed `/converse` answer, or an error body (`{"message": ...}`)."""
        if not isinstance(body, dict):
            return
        if "stopReason" not in body:
            if isinstance(body.get("message"), str) or body.get("error"):
                self.set_error(body)
            return
        content = dig(body, "output", "message", "content")
        for index, block in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(block, dict):
                continue
            self.add_text((0, index), block.get("text"))
            self.add_reasoning((0, index), dig(block, "reasoningContent", "reasoningText", "text"))
            tool = block.get("toolUse")
            if isinstance(tool, dict):
                self.on_block_start(index, {"toolUse": tool})
                if index in self.tool_calls:
                    self.add_arguments(self.tool_calls[index], dumps(tool.get("input")))
                    self.tool_calls[index].completed = True
        reason = body.get("stopReason")
        self.stop_reason = reason if isinstance(reason, str) and reason else None
        self.message_stop = self.terminal = self.metadata = True
        if isinstance(body.get("usage"), dict):
            self.usage = converse_usage(body["usage"])

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        reason = self.stop_reason
        if self.error is not None:
            return Outcome(State.FAILED, reason, FinishCategory.ERROR)
        if not self.message_stop:
            return Outcome(State.INTERRUPTED, None, None)
        if reason is None:
            return Outcome(State.UNCONFIRMED, None, None)
        if not self.metadata and body_complete and not partial:
            self.anomalies["metadata_missing"] += 1
        if reason not in STOP_REASONS:
            self.anomalies["unknown_finish_reason"] += 1
            return Outcome(State.INCOMPLETE, reason, FinishCategory.OTHER)
        state, category = STOP_REASONS[reason]
        return Outcome(state, reason, category)


def _is_message_stop(_: Any, raw: bytes) -> bool:
    message = first_message(raw)
    return message is not None and message.event_type == "messageStop"


SPEC = DialectSpec(
    dialect=Dialect.BEDROCK_CONVERSE,
    assembler=BedrockConverseAssembler,
    drills=Drills(
        is_terminal=_is_message_stop,
        error=injected_exception,
        end_marker=event("messageStop", b"{}"),  # a relay's end without a stop reason
        keepalive=b"",  # event streams have no keep-alive: the stall is silent
    ),
    path_suffixes=("/converse-stream", "/converse"),
    sniff=lambda obj: "stopReason" in obj and "output" in obj,  # a non-streamed answer
    media_type=EVENTSTREAM_MEDIA_TYPE,
    framing=Framing.EVENTSTREAM,
    # An event stream whose first message is no Invoke `chunk` (an exception first, too) is
    # read as Converse, whose exception handling is the same.
    fallback_for=frozenset({Framing.EVENTSTREAM}),
    otel_provider="aws.bedrock",
)
