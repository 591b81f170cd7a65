"""AWS Bedrock InvokeModelWithResponseStream (`POST /model/{modelId}/invoke-with-response-stream`).

Each event stream `chunk` event carries `{"bytes": "<base64>"}`: the model's own stream event,
in its own format. Anthropic models send the Messages events (`message_start` ...
`message_stop`) and are assembled with the Anthropic rules (this class *is* the Anthropic
assembler, fed decoded payloads). Any other model is read as a generic stream: its text from
the fields the Bedrock model families use, its stop reason where the payload names one, and
Bedrock's own `amazon-bedrock-invocationMetrics` (added to the last chunk of every model) as
the end marker.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from sseproxy.core.dialects.anthropic_messages import EVENTS, AnthropicMessagesAssembler
from sseproxy.core.dialects.base import Outcome, as_int, dig
from sseproxy.core.dialects.bedrock_converse import first_message, injected_exception, on_exception
from sseproxy.core.dialects.spec import DialectSpec, Drills
from sseproxy.core.events import Framing, SSEEvent
from sseproxy.core.eventstream import EVENTSTREAM_MEDIA_TYPE, EventMessage, event
from sseproxy.core.jsonvalue import loads
from sseproxy.core.verdict import Dialect, FinishCategory, State, Usage

ANTHROPIC_TYPES = EVENTS | {"ping", "error"}
METRICS = "amazon-bedrock-invocationMetrics"
# Generic stop reasons, lower-cased: Llama `stop_reason`, Mistral `outputs[].stop_reason`,
# Titan `completionReason`, Cohere `finish_reason`, Nova `messageStop.stopReason`, OpenAI-shaped
# `choices[].finish_reason`.
GENERIC_REASONS = {
    "stop": (State.COMPLETED, FinishCategory.STOP),
    "end_turn": (State.COMPLETED, FinishCategory.STOP),
    "stop_sequence": (State.COMPLETED, FinishCategory.STOP),
    "finish": (State.COMPLETED, FinishCategory.STOP),
    "complete": (State.COMPLETED, FinishCategory.STOP),
    "tool_use": (State.COMPLETED, FinishCategory.TOOL_USE),
    "tool_calls": (State.COMPLETED, FinishCategory.TOOL_USE),
    "tool_call": (State.COMPLETED, FinishCategory.TOOL_USE),
    "length": (State.INCOMPLETE, FinishCategory.LENGTH),
    "max_tokens": (State.INCOMPLETE, FinishCategory.LENGTH),
    "content_filtered": (State.INCOMPLETE, FinishCategory.CONTENT_FILTER),
    "content_filter": (State.INCOMPLETE, FinishCategory.CONTENT_FILTER),
    "guardrail_intervened": (State.INCOMPLETE, FinishCategory.CONTENT_FILTER),
    "error": (State.FAILED, FinishCategory.ERROR),
}
REASON_KEYS = ("stop_reason", "finish_reason", "completionReason", "stopReason")
TEXT_KEYS = ("generation", "outputText", "completion", "text")


def first_choice(obj: dict[str, Any]) -> dict[str, Any] | None:
    for key in ("outputs", "choices", "generations"):
        items = obj.get(key)
        if isinstance(items, list) and items and isinstance(items[0], dict):
            return items[0]
    return None


def generic_reason(obj: dict[str, Any]) -> str | None:
    for where in (obj, first_choice(obj), obj.get("messageStop")):
        if isinstance(where, dict):
            for key in REASON_KEYS:
                value = where.get(key)
                if isinstance(value, str) and value:
                    return value
    return None


def generic_text(obj: dict[str, Any]) -> str | None:
    for where in (obj, first_choice(obj)):
        if isinstance(where, dict):
            for key in TEXT_KEYS:
                value = where.get(key)
                if isinstance(value, str):
                    return value
    choice = first_choice(obj)
    for value in (
        dig(choice, "delta", "content"),
        dig(obj, "contentBlockDelta", "delta", "text"),  # Amazon Nova
    ):
        if isinstance(value, str):
            return value
    return None


class BedrockInvokeAssembler(AnthropicMessagesAssembler):
    dialect = Dialect.BEDROCK_INVOKE

    def __init__(self) -> None:
        super().__init__()
        self.anthropic: bool | None = None  # decided by the first decoded payload
        self.generic_reason: str | None = None
        self.metrics = False

    def on_aws_message(self, message: EventMessage) -> None:
        if on_exception(self, message):
            return
        if message.event_type != "chunk":
            self.last_event = message.event_type or "unknown"
            self.anomalies["unknown_event_type"] += 1
            return
        envelope = self.parse(message.payload)
        encoded = envelope.get("bytes") if isinstance(envelope, dict) else None
        try:
            if not isinstance(encoded, str):
                raise ValueError("no bytes")
            payload = binascii.a2b_base64(encoded.encode("ascii"), strict_mode=True)
        except (ValueError, UnicodeEncodeError):
            self.last_event = "chunk"
            self.anomalies["invalid_chunk_bytes"] += 1
            return
        obj = self.parse(payload)
        if not isinstance(obj, dict):
            self.last_event = "chunk"
            if obj is not None:
                self.anomalies["unexpected_payload"] += 1
            return
        if self.anthropic is None:
            otype = obj.get("type")
            self.anthropic = isinstance(otype, str) and otype in ANTHROPIC_TYPES
        if not self.anthropic and self.terminal:
            self.last_event = "chunk"
            self.anomalies["events_after_terminal"] += 1
            return
        if METRICS in obj:
            self.on_metrics(obj[METRICS])
        if self.anthropic:
            etype = obj.get("type")
            name = etype if isinstance(etype, str) else "message"
            self.on_event(SSEEvent(name, payload.decode("utf-8", "replace"), "", 0, payload))
        else:
            self.on_generic(obj)

    def on_metrics(self, metrics: Any) -> None:
        self.metrics = True
        if not self.anthropic:
            self.terminal = True
        if self.usage is None and isinstance(metrics, dict):
            inputs = as_int(metrics.get("inputTokenCount"))
            outputs = as_int(metrics.get("outputTokenCount"))
            total = None if inputs is None or outputs is None else inputs + outputs
            self.usage = Usage(
                input_tokens=inputs, output_tokens=outputs, total_tokens=total, raw=metrics
            )

    def on_generic(self, obj: dict[str, Any]) -> None:
        self.last_event = "chunk"
        if obj.get("error") or obj.get("type") == "error":
            self.set_error(obj)
        self.add_text((0, 0), generic_text(obj))
        reason = generic_reason(obj)
        if reason is not None:
            self.generic_reason = reason

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        if self.anthropic is not False:
            return super().conclude(partial, body_complete)
        reason = self.generic_reason
        if self.error is not None:
            return Outcome(State.FAILED, reason, FinishCategory.ERROR)
        if reason is None:
            return Outcome(State.UNCONFIRMED if self.metrics else State.INTERRUPTED)
        if not self.metrics and body_complete:
            self.anomalies["invocation_metrics_missing"] += 1
        known = GENERIC_REASONS.get(reason.lower())
        if known is None:
            self.anomalies["unknown_finish_reason"] += 1
            return Outcome(State.INCOMPLETE, reason, FinishCategory.OTHER)
        return Outcome(known[0], reason, known[1])


def _is_terminal_chunk(_: Any, raw: bytes) -> bool:
    """The chunk holding Anthropic's `message_stop` or Bedrock's invocation metrics."""
    message = first_message(raw)
    if message is None or message.event_type != "chunk":
        return False
    try:
        payload = base64.b64decode(loads(message.payload)["bytes"])
    except (ValueError, KeyError, TypeError):
        return False
    return b'"message_stop"' in payload or METRICS.encode() in payload


def _chunk(payload: bytes) -> bytes:
    return event("chunk", json.dumps({"bytes": base64.b64encode(payload).decode()}).encode())


SPEC = DialectSpec(
    dialect=Dialect.BEDROCK_INVOKE,
    assembler=BedrockInvokeAssembler,
    drills=Drills(
        is_terminal=_is_terminal_chunk,
        error=injected_exception,
        end_marker=_chunk(b'{"type":"message_stop"}'),
        keepalive=b"",
    ),
    path_suffixes=("/invoke-with-response-stream",),
    sniff_message=lambda message: message.message_type == "event" and message.event_type == "chunk",
    media_type=EVENTSTREAM_MEDIA_TYPE,
    framing=Framing.EVENTSTREAM,
    otel_provider="aws.bedrock",
)
