"""Anthropic Messages: message_stop is the only terminal; errors after HTTP 200 are failures."""

from __future__ import annotations

from typing import Any

from sseproxy.core import Dialect
from tests.streams import sse, verdict_of

ANT = Dialect.ANTHROPIC_MESSAGES


def ev(etype: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return (etype, {"type": etype, **fields})


START = [
    ev(
        "message_start",
        message={
            "id": "msg_1",
            "model": "claude",
            "usage": {"input_tokens": 12, "output_tokens": 1},
        },
    ),
    ev("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    ev("ping"),
    ev("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"}),
    ev("content_block_stop", index=0),
]


def stop(reason: str | None) -> list[tuple[str, dict[str, Any]]]:
    return [
        ev("message_delta", delta={"stop_reason": reason}, usage={"output_tokens": 3}),
        ev("message_stop"),
    ]


def test_completed() -> None:
    v = verdict_of(sse(*START, *stop("end_turn")), ANT)
    assert (v.state, v.finish_reason, v.finish_category, v.last_event) == (
        "completed",
        "end_turn",
        "stop",
        "message_stop",
    )
    assert v.usage is not None and (v.usage.input_tokens, v.usage.output_tokens) == (12, 3)


def test_incomplete_reasons() -> None:
    for reason, category in (
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "refusal"),
        ("pause_turn", "pause"),
    ):
        v = verdict_of(sse(*START, *stop(reason)), ANT, bytewise=False)
        assert (v.state, v.finish_category) == ("incomplete", category), reason


def test_overloaded_error_after_200_is_failed() -> None:
    error = ev("error", error={"type": "overloaded_error", "message": "Overloaded"})
    v = verdict_of(sse(*START, error), ANT)
    assert v.state == "failed"
    assert v.error is not None and (v.error.type, v.error.message) == (
        "overloaded_error",
        "Overloaded",
    )


def test_stop_reason_without_message_stop_is_interrupted() -> None:
    v = verdict_of(sse(*START, stop("end_turn")[0]), ANT)
    assert (v.state, v.finish_reason) == ("interrupted", "end_turn")
    assert v.anomalies["stop_reason_without_message_stop"] == 1


def test_message_stop_without_stop_reason_is_unconfirmed() -> None:
    v = verdict_of(sse(*START, ev("message_stop")), ANT)
    assert v.state == "unconfirmed"


def test_tool_use_arguments() -> None:
    data = sse(
        ev("message_start", message={"id": "m", "model": "c", "usage": {}}),
        ev(
            "content_block_start",
            index=0,
            content_block={"type": "tool_use", "id": "tu_1", "name": "f", "input": {}},
        ),
        ev("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": ""}),
        ev(
            "content_block_delta",
            index=0,
            delta={"type": "input_json_delta", "partial_json": '{"x": '},
        ),
        ev(
            "content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": "1}"}
        ),
        ev("content_block_stop", index=0),
        ev(
            "content_block_start",
            index=1,
            content_block={"type": "tool_use", "id": "tu_2", "name": "g", "input": {}},
        ),
        ev("content_block_stop", index=1),
        *stop("tool_use"),
    )
    v = verdict_of(data, ANT)
    assert (v.state, v.finish_category) == ("completed", "tool_use")
    assert [(c.id, c.name, c.arguments_valid_json) for c in v.tool_calls] == [
        ("tu_1", "f", True),
        ("tu_2", "g", True),  # no input_json_delta at all means input {}
    ]


def test_thinking_is_reasoning() -> None:
    data = sse(
        ev("message_start", message={"id": "m", "model": "c"}),
        ev("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}),
        ev("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "hmm"}),
        ev("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "sig"}),
        ev("content_block_stop", index=0),
        *stop("end_turn"),
    )
    v = verdict_of(data, ANT)
    assert (v.reasoning_chars, v.text_chars, v.anomalies) == (3, 0, {})


def test_unknown_event_type_is_counted_not_fatal() -> None:
    v = verdict_of(sse(*START, ev("brand_new_event", x=1), *stop("end_turn")), ANT)
    assert v.state == "completed"
    assert v.anomalies["unknown_event_type"] == 1


def test_event_name_mismatch() -> None:
    v = verdict_of(sse(*START, ("message_delta", {"type": "message_stop"}), *stop("end_turn")), ANT)
    assert v.anomalies["event_type_mismatch"] == 1


def test_message_body_non_streamed() -> None:
    body = b'{"id":"m","type":"message","model":"c","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}'
    v = verdict_of(body, ANT)
    assert (v.state, v.finish_reason, v.text_chars) == ("completed", "end_turn", 2)
