"""Fuzzing every assembler with structurally plausible events: keys and types each dialect
reads, in random combinations. Nothing may raise (strict taps re-raise internal errors), the
retained state stays bounded, and the verdict does not depend on the chunking."""

from __future__ import annotations

import json

from hypothesis import example, given
from hypothesis import strategies as st

from sseproxy.core import Dialect, StreamTap, TapOptions

KEYS = [
    "type",
    "index",
    "delta",
    "content",
    "choices",
    "finish_reason",
    "tool_calls",
    "function",
    "arguments",
    "id",
    "name",
    "error",
    "usage",
    "message",
    "content_block",
    "text",
    "partial_json",
    "stop_reason",
    "response",
    "output",
    "status",
    "item",
    "item_id",
    "output_index",
    "content_index",
    "sequence_number",
    "candidates",
    "parts",
    "finishReason",
    "functionCall",
    "partialArgs",
    "jsonPath",
    "stringValue",
    "willContinue",
    "args",
    "thought",
    "done",
    "done_reason",
    "thinking",
    "refusal",
    "reasoning_content",
    "promptFeedback",
    "blockReason",
    "toolCallId",
    "inputTextDelta",
    "finishReason",
    "usageMetadata",
    "incomplete_details",
    "reason",
    "arguments",
    "input",
    "call_id",
    "summary_index",
    "obfuscation",
]
EVENT_TYPES = [
    None,
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
    "response.created",
    "response.output_text.delta",
    "response.output_text.done",
    "response.completed",
    "response.failed",
    "response.incomplete",
    "response.output_item.added",
    "response.output_item.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.content_part.done",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 5),
    st.text(max_size=6),
    st.sampled_from(
        [
            "stop",
            "length",
            "tool_calls",
            "end_turn",
            "STOP",
            "text_delta",
            "input_json_delta",
            "function_call",
            "message",
            "text",
            "tool_use",
            "output_text",
            "$.a",
            "$.b[0]",
            "[DONE]",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from(KEYS), children, max_size=5),
    ),
    max_leaves=25,
)
events = st.lists(
    st.tuples(st.sampled_from(EVENT_TYPES), st.one_of(values, st.just("[DONE]"))), max_size=12
)


def encode(items) -> bytes:
    out = b""
    for etype, payload in items:
        data = payload if payload == "[DONE]" else json.dumps(payload)
        out += (f"event: {etype}\n" if etype else "").encode() + f"data: {data}\n\n".encode()
    return out


def run(data: bytes, dialect: Dialect | None, step: int):
    tap = StreamTap(dialect, options=TapOptions(strict=True))
    for i in range(0, len(data), step):
        tap.feed(data[i : i + step])
        assert tap.retained_bytes <= len(data)
    return tap.close()


@given(events, st.sampled_from([None, *Dialect]), st.integers(1, 50))
@example([("response.function_call_arguments.delta", {"type": None, "output_index": []})], None, 1)
@example([("message_delta", {"delta": "0"})], None, 1)
@example([(None, {"type": []})], None, 1)  # an unhashable type while sniffing
def test_assemblers_survive_plausible_nonsense(items, dialect, step) -> None:
    data = encode(items)
    assert run(data, dialect, step) == run(data, dialect, len(data) or 1)


@given(st.lists(values, max_size=10), st.integers(1, 40))
def test_ndjson_survives_plausible_nonsense(objects, step) -> None:
    data = b"".join(json.dumps(o).encode() + b"\n" for o in objects)
    assert run(data, Dialect.OLLAMA, step) == run(data, Dialect.OLLAMA, len(data) or 1)
