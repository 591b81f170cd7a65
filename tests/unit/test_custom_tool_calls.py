"""Custom tool calls carry free text, not JSON; arguments are judged only once a call completed;
a Chat tool-call delta that starts a call without `type` is named (issue 31, point 5).

Wire shapes: the Responses events are built with openai-python's own models
(`ResponseCustomToolCall`, `ResponseCustomToolCallInputDeltaEvent` / `...DoneEvent`,
`ResponseOutputItemAddedEvent` / `...DoneEvent`) and `model_dump`; the Chat chunks with
`ChatCompletionChunk`. openai-node's `ChatCompletionStream` raises
`missing choices[i].tool_calls[j].type` when a call's first delta had no `type`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sseproxy.core import Dialect, EndReason, State
from tests.streams import sse, verdict_of

types = pytest.importorskip("openai.types.responses")
chat_types = pytest.importorskip("openai.types.chat")

PATCH = "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n*** End Patch\n"


def dump(model: Any) -> dict[str, Any]:
    return dict(model.model_dump(mode="json", exclude_none=True, by_alias=True))


def response(status: str, output: list[Any]) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "gpt-5",
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def custom_call_stream(pieces: list[str], done: bool = True) -> bytes:
    """A Responses stream whose one output item is a `custom_tool_call` (apply_patch)."""
    text = "".join(pieces)
    item = types.ResponseCustomToolCall(
        id="ctc_1", call_id="call_1", name="apply_patch", input="", type="custom_tool_call"
    )
    events: list[Any] = [
        {"type": "response.created", "sequence_number": 0, "response": response("in_progress", [])},
        dump(
            types.ResponseOutputItemAddedEvent(
                type="response.output_item.added", output_index=0, item=item, sequence_number=1
            )
        ),
    ]
    seq = 2
    for piece in pieces:
        events.append(
            dump(
                types.ResponseCustomToolCallInputDeltaEvent(
                    type="response.custom_tool_call_input.delta",
                    delta=piece,
                    item_id="ctc_1",
                    output_index=0,
                    sequence_number=seq,
                )
            )
        )
        seq += 1
    if done:
        whole = item.model_copy(update={"input": text})
        events += [
            dump(
                types.ResponseCustomToolCallInputDoneEvent(
                    type="response.custom_tool_call_input.done",
                    input=text,
                    item_id="ctc_1",
                    output_index=0,
                    sequence_number=seq,
                )
            ),
            dump(
                types.ResponseOutputItemDoneEvent(
                    type="response.output_item.done",
                    output_index=0,
                    item=whole,
                    sequence_number=seq + 1,
                )
            ),
            {
                "type": "response.completed",
                "sequence_number": seq + 2,
                "response": response("completed", [dump(whole)]),
            },
        ]
    return sse(*[(e["type"], e) for e in events])


def test_a_completed_custom_tool_call_is_text_not_json() -> None:
    v = verdict_of(custom_call_stream([PATCH[:20], PATCH[20:]]), Dialect.OPENAI_RESPONSES)
    assert v.state is State.COMPLETED
    [call] = v.tool_calls
    assert (call.id, call.name, call.arguments_bytes) == ("call_1", "apply_patch", len(PATCH))
    assert call.arguments_valid_json is None  # never checked as JSON
    assert "invalid_tool_arguments" not in v.anomalies


def test_a_custom_tool_call_in_a_whole_json_body_is_text() -> None:
    whole = types.ResponseCustomToolCall(
        id="ctc_1", call_id="call_1", name="apply_patch", input=PATCH, type="custom_tool_call"
    )
    body = response("completed", [dump(whole)])
    v = verdict_of(json.dumps(body).encode(), Dialect.OPENAI_RESPONSES, bytewise=False)
    assert [c.arguments_valid_json for c in v.tool_calls] == [None]
    assert "invalid_tool_arguments" not in v.anomalies


def test_a_function_call_cut_before_it_completed_is_not_judged() -> None:
    """A cut stream is `interrupted`; its half-streamed call's arguments are no finding."""
    call = chat_types.chat_completion_chunk.ChoiceDeltaToolCall(
        index=0,
        id="call_1",
        type="function",
        function={"name": "get_weather", "arguments": '{"city":"New'},
    )
    chunk = chat_types.ChatCompletionChunk(
        id="c1",
        object="chat.completion.chunk",
        created=1,
        model="gpt-test",
        choices=[{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}],
    )
    v = verdict_of(
        sse(dump(chunk)), Dialect.OPENAI_CHAT, EndReason.UPSTREAM_RESET, http_complete=False
    )
    assert v.state is State.INTERRUPTED
    assert [c.arguments_valid_json for c in v.tool_calls] == [None]
    assert "invalid_tool_arguments" not in v.anomalies


def test_a_completed_function_call_with_broken_json_is_still_named() -> None:
    """The check itself stands for completed JSON calls (the control of the tests above)."""
    data = sse(
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "f", "arguments": '{"a":'},
                            }
                        ]
                    },
                }
            ],
        },
        {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        "[DONE]",
    )
    v = verdict_of(data, Dialect.OPENAI_CHAT)
    assert [c.arguments_valid_json for c in v.tool_calls] == [False]
    assert v.anomalies.get("invalid_tool_arguments") == 1


def chat_tool_stream(first: dict[str, Any], later: dict[str, Any] | None = None) -> bytes:
    deltas = [first] + ([later] if later else [])
    chunks = [
        {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [d]}}]}
        for d in deltas
    ]
    end = {
        "id": "c1",
        "model": "m",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
    }
    return sse(*chunks, end, "[DONE]")


def test_a_chat_tool_call_whose_first_delta_lacks_type_is_named() -> None:
    first = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{}"}}
    v = verdict_of(chat_tool_stream(first), Dialect.OPENAI_CHAT)
    assert v.state is State.COMPLETED
    assert v.anomalies.get("tool_call_type_missing") == 1


def test_later_deltas_without_type_are_the_usual_shape() -> None:
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f"}}
    later = {"index": 0, "function": {"arguments": "{}"}}  # OpenAI's own continuation deltas
    v = verdict_of(chat_tool_stream(first, later), Dialect.OPENAI_CHAT)
    assert v.state is State.COMPLETED and v.anomalies == {}


def test_a_chat_custom_tool_call_is_text() -> None:
    first = {"index": 0, "id": "call_1", "type": "custom", "custom": {"name": "apply_patch"}}
    later = {"index": 0, "custom": {"input": PATCH}}
    v = verdict_of(chat_tool_stream(first, later), Dialect.OPENAI_CHAT)
    assert [(c.name, c.arguments_valid_json) for c in v.tool_calls] == [("apply_patch", None)]
    assert v.anomalies == {}
