"""OpenAI Chat Completions: every state, and the anomalies real relays produce."""

from __future__ import annotations

from sseproxy.core import Dialect
from tests.streams import sse, verdict_of

CHAT = Dialect.OPENAI_CHAT


def chunk(delta: dict | None = None, finish: str | None = None, index: int = 0, **extra) -> dict:
    choice = {"index": index, "delta": delta or {}, "finish_reason": finish}
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [choice],
        **extra,
    }


HELLO = [chunk({"role": "assistant", "content": "Hel"}), chunk({"content": "lo"})]


def test_completed_with_usage() -> None:
    usage = {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    data = sse(*HELLO, chunk(finish="stop"), {"id": "c1", "choices": [], "usage": usage}, "[DONE]")
    v = verdict_of(data, CHAT)
    assert (v.state, v.finish_reason, v.finish_category, v.last_event) == (
        "completed",
        "stop",
        "stop",
        "[DONE]",
    )
    assert v.text_chars == 5
    assert v.usage is not None and (v.usage.input_tokens, v.usage.output_tokens) == (9, 2)
    assert v.anomalies == {}


def test_length_is_incomplete() -> None:
    v = verdict_of(sse(*HELLO, chunk(finish="length"), "[DONE]"), CHAT)
    assert (v.state, v.finish_category) == ("incomplete", "length")


def test_content_filter_is_incomplete() -> None:
    v = verdict_of(sse(*HELLO, chunk(finish="content_filter"), "[DONE]"), CHAT)
    assert (v.state, v.finish_category) == ("incomplete", "content_filter")


def test_in_band_error_then_done_is_failed() -> None:
    error = {"error": {"message": "The server had an error", "type": "server_error"}}
    v = verdict_of(sse(*HELLO, error, "[DONE]"), CHAT)
    assert v.state == "failed"
    assert v.error is not None and v.error.type == "server_error"
    assert v.anomalies.get("done_after_error") == 1


def test_openrouter_finish_reason_error_is_failed() -> None:
    v = verdict_of(sse(*HELLO, chunk(finish="error"), "[DONE]"), CHAT)
    assert (v.state, v.finish_category) == ("failed", "error")


def test_cut_before_done_is_interrupted() -> None:
    v = verdict_of(sse(*HELLO), CHAT)
    assert v.state == "interrupted"
    assert v.interruption is not None and v.interruption.reason == "end_of_input"
    assert v.interruption.partial_event_bytes == 0


def test_cut_mid_event_reports_partial_bytes() -> None:
    data = sse(*HELLO) + b'data: {"id":"c1","choi'
    v = verdict_of(data, CHAT)
    assert v.state == "interrupted"
    assert v.interruption is not None and v.interruption.partial_event_bytes == 22
    assert v.anomalies["partial_event_discarded"] == 1


def test_done_without_finish_reason_is_unconfirmed() -> None:
    v = verdict_of(sse(*HELLO, "[DONE]"), CHAT)
    assert v.state == "unconfirmed"
    assert v.anomalies["done_without_finish_reason"] == 1


def test_finish_without_done_is_completed_with_anomaly() -> None:
    v = verdict_of(sse(*HELLO, chunk(finish="stop")), CHAT)
    assert v.state == "completed"
    assert v.anomalies["missing_done"] == 1


def test_n2_needs_every_choice_finished() -> None:
    data = sse(
        chunk({"content": "a"}, index=0),
        chunk({"content": "b"}, index=1),
        chunk(finish="stop", index=0),
        "[DONE]",
    )
    v = verdict_of(data, CHAT)
    assert v.state == "unconfirmed"
    assert (v.finish_reason, v.finish_reasons) == ("stop", ("stop", None))


def test_tool_call_arguments_concatenate_and_identity_does_not() -> None:
    calls = [
        {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "f", "arguments": ""},
        },
        {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": '{"a":'}},
        {"index": 0, "function": {"arguments": " 1}"}},
    ]
    data = sse(*[chunk({"tool_calls": [c]}) for c in calls], chunk(finish="tool_calls"), "[DONE]")
    v = verdict_of(data, CHAT)
    assert (v.state, v.finish_category) == ("completed", "tool_use")
    [call] = v.tool_calls
    assert (call.id, call.name, call.arguments_bytes, call.arguments_valid_json) == (
        "call_1",
        "f",
        len('{"a": 1}'),
        True,
    )
    assert v.anomalies["repeated_tool_call_fields"] == 2


def test_invalid_tool_arguments_are_flagged() -> None:
    call = {"index": 0, "id": "c", "function": {"name": "f", "arguments": '{"a": '}}
    v = verdict_of(sse(chunk({"tool_calls": [call]}), chunk(finish="tool_calls"), "[DONE]"), CHAT)
    assert v.tool_calls[0].arguments_valid_json is False
    assert v.anomalies["invalid_tool_arguments"] == 1


def test_tool_calls_without_index_split_by_id() -> None:
    a = {"id": "a", "function": {"name": "f", "arguments": "{}"}}
    b = {"id": "b", "function": {"name": "g", "arguments": "{}"}}
    v = verdict_of(
        sse(
            chunk({"tool_calls": [a]}),
            chunk({"tool_calls": [b]}),
            chunk(finish="tool_calls"),
            "[DONE]",
        ),
        CHAT,
    )
    assert [(c.id, c.name) for c in v.tool_calls] == [("a", "f"), ("b", "g")]


def test_refusal_is_kept_apart_and_categorised() -> None:
    data = sse(chunk({"refusal": "I can't"}), chunk(finish="stop"), "[DONE]")
    v = verdict_of(data, CHAT)
    assert (v.state, v.finish_category, v.text_chars, v.refusal_chars) == (
        "completed",
        "refusal",
        0,
        7,
    )


def test_reasoning_content_is_not_text() -> None:
    data = sse(
        chunk({"reasoning_content": "think"}),
        chunk({"content": "ok"}),
        chunk(finish="stop"),
        "[DONE]",
    )
    v = verdict_of(data, CHAT)
    assert (v.reasoning_chars, v.text_chars) == (5, 2)


def test_events_after_done_are_an_anomaly() -> None:
    v = verdict_of(sse(*HELLO, chunk(finish="stop"), "[DONE]", chunk({"content": "x"})), CHAT)
    assert v.state == "completed"
    assert v.anomalies["events_after_terminal"] == 1
    assert v.text_chars == 5


def test_unknown_finish_reason_is_never_success() -> None:
    v = verdict_of(sse(*HELLO, chunk(finish="insufficient_system_resource"), "[DONE]"), CHAT)
    assert (v.state, v.finish_category) == ("incomplete", "other")
    assert v.anomalies["unknown_finish_reason"] == 1


def test_bad_json_is_an_anomaly_not_an_exception() -> None:
    v = verdict_of(sse(*HELLO, "{not json", chunk(finish="stop"), "[DONE]"), CHAT)
    assert v.state == "completed"
    assert v.anomalies["json_decode_error"] == 1


def test_keepalive_comments_are_counted_not_content() -> None:
    data = b": keep-alive\n\n" * 3 + sse(*HELLO, chunk(finish="stop"), "[DONE]")
    v = verdict_of(data, CHAT)
    assert (v.comments, v.events, v.text_chars) == (3, 4, 5)


def test_non_streamed_completion_body() -> None:
    body = b'{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
    v = verdict_of(body, CHAT)
    assert (v.state, v.finish_reason, v.text_chars, v.events) == ("completed", "stop", 2, 0)


def test_error_body() -> None:
    body = b'{"error":{"message":"Rate limit reached","type":"tokens","param":null,"code":"rate_limit_exceeded"}}'
    v = verdict_of(body, CHAT)
    assert v.state == "failed"
    assert v.error is not None and v.error.code == "rate_limit_exceeded"
