"""OpenAI Responses: terminal events, snapshots never appended, sequence numbers checked."""

from __future__ import annotations

from typing import Any

from sseproxy.core import Dialect
from tests.streams import sse, verdict_of

RESP = Dialect.OPENAI_RESPONSES


def ev(etype: str, seq: int, **fields: Any) -> tuple[str, dict[str, Any]]:
    return (etype, {"type": etype, "sequence_number": seq, **fields})


def opening() -> list[tuple[str, dict[str, Any]]]:
    return [
        ev(
            "response.created",
            0,
            response={"id": "resp_1", "model": "gpt", "status": "in_progress"},
        ),
        ev(
            "response.output_item.added", 1, output_index=0, item={"id": "msg_1", "type": "message"}
        ),
        ev(
            "response.output_text.delta",
            2,
            item_id="msg_1",
            output_index=0,
            content_index=0,
            delta="Hel",
        ),
        ev(
            "response.output_text.delta",
            3,
            item_id="msg_1",
            output_index=0,
            content_index=0,
            delta="lo",
        ),
    ]


def text_done(seq: int, text: str = "Hello") -> tuple[str, dict[str, Any]]:
    return ev(
        "response.output_text.done",
        seq,
        item_id="msg_1",
        output_index=0,
        content_index=0,
        text=text,
    )


def final(etype: str, seq: int, status: str, **response: Any) -> tuple[str, dict[str, Any]]:
    output = [
        {"id": "msg_1", "type": "message", "content": [{"type": "output_text", "text": "Hello"}]}
    ]
    body = {"id": "resp_1", "status": status, "output": output, **response}
    return ev(etype, seq, response=body)


USAGE = {
    "input_tokens": 5,
    "output_tokens": 2,
    "total_tokens": 7,
    "output_tokens_details": {"reasoning_tokens": 1},
}


def test_completed() -> None:
    v = verdict_of(
        sse(*opening(), text_done(4), final("response.completed", 5, "completed", usage=USAGE)),
        RESP,
    )
    assert (v.state, v.finish_reason, v.finish_category, v.last_event) == (
        "completed",
        "completed",
        "stop",
        "response.completed",
    )
    assert v.text_chars == 5  # the done snapshot is not appended
    assert v.usage is not None and v.usage.reasoning_tokens == 1
    assert v.anomalies == {}


def test_snapshot_mismatch_is_flagged() -> None:
    v = verdict_of(
        sse(*opening(), text_done(4, "Hellp"), final("response.completed", 5, "completed")), RESP
    )
    assert v.anomalies["snapshot_mismatch"] == 1


def test_delta_after_done_is_flagged() -> None:
    late = ev(
        "response.output_text.delta", 5, item_id="msg_1", output_index=0, content_index=0, delta="!"
    )
    v = verdict_of(sse(*opening(), text_done(4), late), RESP)
    assert v.anomalies["delta_after_done"] == 1


def test_incomplete() -> None:
    data = sse(
        *opening(),
        final(
            "response.incomplete",
            4,
            "incomplete",
            incomplete_details={"reason": "max_output_tokens"},
        ),
    )
    v = verdict_of(data, RESP)
    assert (v.state, v.finish_reason, v.finish_category) == (
        "incomplete",
        "max_output_tokens",
        "length",
    )


def test_failed() -> None:
    data = sse(
        *opening(),
        final("response.failed", 4, "failed", error={"code": "server_error", "message": "boom"}),
    )
    v = verdict_of(data, RESP)
    assert v.state == "failed"
    assert v.error is not None and (v.error.code, v.error.message) == ("server_error", "boom")


def test_error_event_flat_and_nested() -> None:
    flat = ev("error", 4, code="rate_limit_exceeded", message="slow down")
    nested = ev("error", 4, error={"type": "server_error", "code": "x", "message": "nested"})
    for event, message in ((flat, "slow down"), (nested, "nested")):
        v = verdict_of(sse(*opening(), event), RESP)
        assert v.state == "failed"
        assert v.error is not None and v.error.message == message


def test_interrupted_without_terminal() -> None:
    v = verdict_of(sse(*opening()), RESP)
    assert v.state == "interrupted"
    assert v.last_event == "response.output_text.delta"


def test_sequence_gap() -> None:
    events = opening()
    events[3][1]["sequence_number"] = 7
    v = verdict_of(sse(*events, final("response.completed", 8, "completed")), RESP)
    assert v.anomalies["sequence_gap"] == 1


def test_function_call_is_tool_use() -> None:
    item = {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": "f",
        "arguments": "",
    }
    data = sse(
        ev("response.output_item.added", 0, output_index=0, item=item),
        ev(
            "response.function_call_arguments.delta",
            1,
            item_id="fc_1",
            output_index=0,
            delta='{"a"',
        ),
        ev(
            "response.function_call_arguments.delta", 2, item_id="fc_1", output_index=0, delta=":1}"
        ),
        ev(
            "response.function_call_arguments.done",
            3,
            item_id="fc_1",
            output_index=0,
            arguments='{"a":1}',
            name="f",
        ),
        ev("response.output_item.done", 4, output_index=0, item={**item, "arguments": '{"a":1}'}),
        ev(
            "response.completed",
            5,
            response={
                "id": "r",
                "status": "completed",
                "output": [{**item, "arguments": '{"a":1}'}],
            },
        ),
    )
    v = verdict_of(data, RESP)
    assert (v.state, v.finish_category) == ("completed", "tool_use")
    assert [(c.id, c.name, c.arguments_valid_json) for c in v.tool_calls] == [("call_1", "f", True)]
    assert v.anomalies == {}


def test_done_sentinel_after_completed_is_tolerated() -> None:
    v = verdict_of(sse(*opening(), final("response.completed", 4, "completed"), "[DONE]"), RESP)
    assert (v.state, v.last_event) == ("completed", "[DONE]")


def test_events_after_terminal() -> None:
    late = ev(
        "response.output_text.delta", 5, item_id="msg_1", output_index=0, content_index=0, delta="x"
    )
    v = verdict_of(sse(*opening(), final("response.completed", 4, "completed"), late), RESP)
    assert v.anomalies["events_after_terminal"] == 1
    assert v.text_chars == 5


def test_snapshots_are_checked_by_length_when_text_is_not_kept() -> None:
    from sseproxy.core import StreamTap, TapOptions

    for text, mismatches in (("Hello", 0), ("Hello!", 1)):
        data = sse(*opening(), text_done(4, text), final("response.completed", 5, "completed"))
        tap = StreamTap(RESP, options=TapOptions(content_chars=0, strict=True))
        tap.feed(data)
        v = tap.close()
        assert v.anomalies.get("snapshot_mismatch", 0) >= mismatches
        assert v.text_chars == 5 and tap.primary_text() == ""  # counted, not kept
