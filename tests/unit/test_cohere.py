"""Cohere v2 chat streaming: every state it can reach, tool calls, the plan, drills, detection."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sseproxy.core import Dialect, EndReason, StreamTap, TapOptions
from sseproxy.core.dialects import detect, sniff_body
from sseproxy.core.dialects.cohere import COHERE_EVENTS
from sseproxy.core.inject import Injector, Write, parse_rules
from tests.streams import random_split, sse, verdict_of

CO = Dialect.COHERE_CHAT


def ev(obj: dict[str, Any]) -> bytes:
    return f"event: {obj['type']}\ndata: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


START = {
    "id": "c7a1",
    "type": "message-start",
    "delta": {
        "message": {
            "role": "assistant",
            "content": [],
            "tool_plan": "",
            "tool_calls": [],
            "citations": [],
        }
    },
}
USAGE = {
    "billed_units": {"input_tokens": 5, "output_tokens": 3},
    "tokens": {"input_tokens": 71, "output_tokens": 3},
    "cached_tokens": 64,
}


def text(*pieces: str, finish: str | None = "COMPLETE", end: bool = True) -> bytes:
    out = [
        ev(START),
        ev(
            {
                "type": "content-start",
                "index": 0,
                "delta": {"message": {"content": {"type": "text", "text": ""}}},
            }
        ),
    ]
    out += [
        ev({"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": p}}}})
        for p in pieces
    ]
    out.append(ev({"type": "content-end", "index": 0}))
    if end:
        delta: dict[str, Any] = {"usage": USAGE}
        if finish is not None:
            delta["finish_reason"] = finish
        out.append(ev({"type": "message-end", "id": "c7a1", "delta": delta}))
    return b"".join(out)


def tool_stream() -> bytes:
    return b"".join(
        [
            ev(START),
            ev({"type": "tool-plan-delta", "delta": {"message": {"tool_plan": "I will look"}}}),
            ev(
                {
                    "type": "tool-call-start",
                    "index": 0,
                    "delta": {
                        "message": {
                            "tool_calls": {
                                "id": "get_weather_x1",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": ""},
                            }
                        }
                    },
                }
            ),
            ev(
                {
                    "type": "tool-call-delta",
                    "index": 0,
                    "delta": {"message": {"tool_calls": {"function": {"arguments": '{"city":'}}}},
                }
            ),
            ev(
                {
                    "type": "tool-call-delta",
                    "index": 0,
                    "delta": {"message": {"tool_calls": {"function": {"arguments": '"Paris"}'}}}},
                }
            ),
            ev({"type": "tool-call-end", "index": 0}),
            ev({"type": "message-end", "delta": {"finish_reason": "TOOL_CALL", "usage": USAGE}}),
        ]
    )


class TestStates:
    def test_completed(self) -> None:
        v = verdict_of(text("Bon", "jour"), CO)
        assert (v.state, v.finish_reason, v.finish_category, v.text_chars) == (
            "completed",
            "COMPLETE",
            "stop",
            7,
        )
        assert (v.response_id, v.last_event, v.anomalies) == ("c7a1", "message-end", {})
        assert v.usage is not None
        assert (v.usage.input_tokens, v.usage.output_tokens, v.usage.cached_tokens) == (71, 3, 64)

    def test_tool_call(self) -> None:
        v = verdict_of(tool_stream(), CO)
        assert (v.state, v.finish_category, v.reasoning_chars, v.text_chars) == (
            "completed",
            "tool_use",
            len("I will look"),
            0,
        )
        assert [(c.id, c.name, c.arguments_valid_json) for c in v.tool_calls] == [
            ("get_weather_x1", "get_weather", True)
        ]

    def test_thinking_is_reasoning(self) -> None:
        thinking = ev(
            {
                "type": "content-delta",
                "index": 0,
                "delta": {"message": {"content": {"thinking": "hm"}}},
            }
        )
        v = verdict_of(
            text("a").replace(b"event: content-end", thinking + b"event: content-end", 1), CO
        )
        assert (v.reasoning_chars, v.text_chars) == (2, 1)

    def test_max_tokens_is_incomplete(self) -> None:
        v = verdict_of(text("a", finish="MAX_TOKENS"), CO)
        assert (v.state, v.finish_category) == ("incomplete", "length")

    def test_error_finish_is_failed(self) -> None:
        data = text("a", end=False) + ev(
            {"type": "message-end", "delta": {"finish_reason": "ERROR", "error": "internal"}}
        )
        v = verdict_of(data, CO)
        assert (v.state, v.finish_category) == ("failed", "error")
        assert v.error is not None and (v.error.type, v.error.message) == ("ERROR", "internal")

    def test_no_message_end_is_interrupted(self) -> None:
        v = verdict_of(text("Hel", end=False), CO)
        assert (v.state, v.text_chars) == ("interrupted", 3)

    def test_truncated_after_message_end_is_interrupted_with_its_finish_reason(self) -> None:
        """The cohere SDK raises on the cut after `message-end`."""
        v = verdict_of(text("a"), CO, http_complete=False)
        assert (v.state, v.anomalies) == ("interrupted", {"truncated_after_terminal": 1})
        assert (v.finish_reason, v.finish_category) == ("COMPLETE", "stop")

    def test_cut_mid_event_is_interrupted(self) -> None:
        data = text("Hello")
        v = verdict_of(data[:-20], CO, EndReason.UPSTREAM_CLOSED, http_complete=False)
        assert v.state == "interrupted"
        assert v.interruption is not None and v.interruption.partial_event_bytes > 0

    def test_message_end_without_finish_reason_is_unconfirmed(self) -> None:
        assert verdict_of(text("a", finish=None), CO).state == "unconfirmed"

    def test_unknown_finish_reason_is_never_success(self) -> None:
        v = verdict_of(text("a", finish="SOMETHING_NEW"), CO)
        assert (v.state, v.anomalies) == ("incomplete", {"unknown_finish_reason": 1})

    def test_events_after_message_end_are_not_content(self) -> None:
        late = ev(
            {"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": "zz"}}}}
        )
        v = verdict_of(text("a") + late, CO)
        assert (v.state, v.text_chars, v.anomalies) == (
            "completed",
            1,
            {"events_after_terminal": 1},
        )

    def test_unknown_event_is_counted(self) -> None:
        v = verdict_of(ev({"type": "hologram-delta"}) + text("a"), CO)
        assert (v.state, v.anomalies) == ("completed", {"unknown_event_type": 1})

    def test_error_body_on_http_error(self) -> None:
        v = verdict_of(json.dumps({"id": "x", "message": "invalid api token"}).encode(), CO)
        assert v.error is not None and v.error.message == "invalid api token"

    def test_non_streamed_body(self) -> None:
        body = {
            "id": "c1",
            "finish_reason": "COMPLETE",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "Hi!"}]},
            "usage": USAGE,
        }
        v = verdict_of(json.dumps(body).encode(), CO)
        assert (v.state, v.text_chars) == ("completed", 3)


def test_detected_from_the_path_and_sniffed_from_the_events() -> None:
    assert detect("POST", "/v2/chat") is CO
    assert detect("POST", "/cohere/v2/chat") is CO
    assert sniff_body(START) is CO
    v = verdict_of(text("a"), None)
    assert (v.dialect, v.state) == ("cohere-chat", "completed")


def drill(rules: str, data: bytes) -> bytes:
    injector = Injector(parse_rules(rules), CO)
    steps = []
    for i in range(0, len(data), 11):
        steps += injector.feed(data[i : i + 11])
    steps += injector.finish()
    return b"".join(s.data for s in steps if isinstance(s, Write))


def test_drill_drop_terminal() -> None:
    v = verdict_of(drill("drop-terminal", text("Hello")), CO)
    assert (v.state, v.last_event) == ("interrupted", "content-end")


def test_drill_inject_error() -> None:
    v = verdict_of(drill("inject-error=2", text("Hello")), CO)
    assert (v.state, v.events) == ("failed", 3)
    assert v.error is not None and v.error.message == "internal server error (injected)"


def test_drill_done_after_cut_is_unconfirmed() -> None:
    assert verdict_of(drill("done-after-cut=2", text("Hello")), CO).state == "unconfirmed"


@pytest.mark.parametrize("stream", [text("Hé", "llo 🌍"), tool_stream()])
@given(seed=st.integers(min_value=0), largest=st.integers(min_value=1, max_value=40))
def test_any_chunking_gives_the_same_verdict(stream: bytes, seed: int, largest: int) -> None:
    whole = StreamTap(CO, options=TapOptions(strict=True))
    whole.feed(stream)
    expected = whole.close()
    split = StreamTap(CO, options=TapOptions(strict=True))
    for piece in random_split(stream, seed, largest):
        split.feed(piece)
    assert split.close() == expected and expected.state == "completed"


def test_a_non_string_type_sniffs_as_nothing() -> None:
    """`{"type": []}` once raised inside sniffing (unhashable in a set): the tap went blind."""
    v = verdict_of(sse({"type": []}, {"type": {"a": 1}}), None)
    assert (v.dialect, v.anomalies) == ("sse", {"no_terminal_signal": 1})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
cohere_events = st.builds(
    lambda etype, body, extra: {"type": etype, **body, **extra},
    st.sampled_from(sorted(COHERE_EVENTS)),
    st.fixed_dictionaries(
        {},
        optional={
            "index": json_values,
            "id": json_values,
            "delta": st.fixed_dictionaries(
                {},
                optional={
                    "message": st.dictionaries(
                        st.sampled_from(["content", "tool_plan", "tool_calls", "citations"]),
                        json_values,
                        max_size=3,
                    ),
                    "finish_reason": json_values,
                    "usage": json_values,
                    "error": json_values,
                },
            ),
        },
    ),
    st.dictionaries(st.text(max_size=5), json_values, max_size=2),
)


@given(
    st.lists(cohere_events, max_size=8),
    st.booleans(),
    st.integers(min_value=0),
    st.integers(min_value=1, max_value=40),
)
def test_arbitrary_events_give_one_verdict_whatever_the_chunking(
    events: list[dict[str, Any]], complete: bool, seed: int, largest: int
) -> None:
    """Strict taps re-raise internal errors: none may come from what a peer sends."""
    data = b"".join(ev(e) for e in events)
    whole = StreamTap(CO, options=TapOptions(strict=True))
    whole.feed(data)
    split = StreamTap(CO, options=TapOptions(strict=True))
    for piece in random_split(data, seed, largest):
        split.feed(piece)
    assert split.close(http_complete=complete) == whole.close(http_complete=complete)
