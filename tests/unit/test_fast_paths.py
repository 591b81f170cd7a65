"""The dialects' fast paths agree with the full parse: same verdict, same assembled content.

Each case runs a stream twice, fast path on and off, and also states what the right answer
is, so that a fast path that agrees with a broken full path still fails.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sseproxy.core import Dialect, StreamTap, TapOptions, Verdict
from tests.corpus import body, manifest
from tests.fast_paths import ASSEMBLERS, full_parse
from tests.streams import cut

CORPUS = {
    dialect: [body(e) for e in manifest() if e["dialect"] == dialect.value]
    for dialect in ASSEMBLERS
}


def analyse(chunks: list[bytes], dialect: Dialect) -> tuple[Verdict, dict[str, Any]]:
    tap = StreamTap(dialect, options=TapOptions(strict=True))
    for chunk in chunks:
        tap.feed(chunk)
    return tap.close(), tap.describe()


def both_ways(chunks: list[bytes], dialect: Dialect) -> tuple[Verdict, dict[str, Any]]:
    """The result with the fast path on, after checking that it is the one without."""
    fast = analyse(chunks, dialect)
    with full_parse(dialect):
        full = analyse(chunks, dialect)
    assert fast == full
    return fast


def sse(*events: dict[str, Any] | str | bytes, event: str | None = None) -> bytes:
    out = b""
    for e in events:
        data = e if isinstance(e, bytes) else (e if isinstance(e, str) else json.dumps(e)).encode()
        out += (b"event: " + event.encode() + b"\n" if event else b"") + b"data: " + data + b"\n\n"
    return out


# -- Chat ---------------------------------------------------------------------------------------

CHAT_END = sse('{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}', "[DONE]")


def chat_delta(text: bytes, extra: bytes = b"") -> bytes:
    return sse(
        b'{"id":"c","choices":[{"index":0,"delta":{"content":"'
        + text
        + b'"'
        + extra
        + b'},"finish_reason":null}],"obfuscation":"Ab1"}'
    )


def chat_padded(text: bytes, pad: bytes) -> bytes:
    return sse(
        b'{"id":"c","choices":[{"index":0,"delta":{"content":"'
        + text
        + b'"},"finish_reason":null}],"obfuscation":"'
        + pad
        + b'"}'
    )


def test_chat_raw_control_character_is_refused_both_ways() -> None:
    """JSON forbids a raw tab in a string: the event is a decode error, not text."""
    verdict, content = both_ways(
        [chat_delta(b"a") + chat_delta(b"x\ty") + CHAT_END], Dialect.OPENAI_CHAT
    )
    assert content["text"] == "a"
    assert verdict.anomalies == {"json_decode_error": 1}


def test_chat_repeated_content_key_takes_the_last_both_ways() -> None:
    stream = chat_delta(b"a", b',"content":"b"') + chat_delta(b"x", b',"content":"b"') + CHAT_END
    _, content = both_ways([stream], Dialect.OPENAI_CHAT)
    assert content["text"] == "bb"


@pytest.mark.parametrize("pad", [b"x\x01y", b"\\q"])
def test_chat_invalid_padding_is_refused_both_ways(pad: bytes) -> None:
    stream = chat_padded(b"a", b"ok") + chat_padded(b"b", pad) + CHAT_END
    verdict, content = both_ways([stream], Dialect.OPENAI_CHAT)
    assert content["text"] == "a"
    assert verdict.anomalies == {"json_decode_error": 1}


def test_chat_escaped_key_is_not_a_shape() -> None:
    """`\\u0063ontent` is the key `content`: a second one, the last, is the one that counts."""
    stream = chat_delta(b"a", b',"\\u0063ontent":"b"') + chat_delta(b"x", b',"\\u0063ontent":"b"')
    _, content = both_ways([stream + CHAT_END], Dialect.OPENAI_CHAT)
    assert content["text"] == "bb"


# -- every dialect, over the corpus ---------------------------------------------------------------


@pytest.mark.parametrize("dialect", list(ASSEMBLERS))
@given(data=st.data(), points=st.lists(st.integers(min_value=0), max_size=10))
def test_corpus_agrees_both_ways(dialect: Dialect, data: st.DataObject, points: list[int]) -> None:
    stream = data.draw(st.sampled_from(CORPUS[dialect]))
    both_ways(cut(stream, points), dialect)


# -- Anthropic ------------------------------------------------------------------------------------

ANTHROPIC_KINDS = {
    "text": ("text_delta", "text"),
    "thinking": ("thinking_delta", "thinking"),
    "tool": ("input_json_delta", "partial_json"),
}
index_values = st.sampled_from([0, 1, 2, -1, 5000, True, "1", None])
anthropic_op = st.one_of(
    st.tuples(st.just("delta"), st.sampled_from(list(ANTHROPIC_KINDS)), index_values, st.text()),
    st.tuples(st.just("start"), st.sampled_from(["text", "thinking", "tool_use"]), index_values),
    st.tuples(st.just("stop"), index_values),
    st.tuples(st.just("misnamed"), st.text(max_size=4)),
    st.tuples(st.just("not_a_dict_delta"), index_values),
    st.tuples(
        st.just("message_stop"),
    ),
)


def anthropic_event(op: tuple[Any, ...]) -> bytes:
    kind = op[0]
    if kind == "delta":
        dtype, key = ANTHROPIC_KINDS[op[1]]
        obj = {"type": "content_block_delta", "index": op[2], "delta": {"type": dtype, key: op[3]}}
        return sse(obj, event="content_block_delta")
    if kind == "start":
        block = (
            {"type": op[1], "id": "toolu_1", "name": "f"}
            if op[1] == "tool_use"
            else {"type": op[1]}
        )
        return sse(
            {"type": "content_block_start", "index": op[2], "content_block": block},
            event="content_block_start",
        )
    if kind == "stop":
        return sse({"type": "content_block_stop", "index": op[1]}, event="content_block_stop")
    if kind == "misnamed":  # the `event:` line says delta, the JSON says otherwise
        obj = {"type": "ping", "index": 0, "delta": {"type": "text_delta", "text": op[1]}}
        return sse(obj, event="content_block_delta")
    if kind == "not_a_dict_delta":
        return sse(
            {"type": "content_block_delta", "index": op[1], "delta": "x"},
            event="content_block_delta",
        )
    return sse({"type": "message_stop"}, event="message_stop")


ANTHROPIC_START = sse(
    {"type": "message_start", "message": {"id": "m", "model": "c", "usage": {"input_tokens": 1}}},
    event="message_start",
)
ANTHROPIC_END = sse(
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
    event="message_delta",
) + sse({"type": "message_stop"}, event="message_stop")


@given(st.lists(anthropic_op, max_size=16), st.booleans())
def test_anthropic_generated_streams_agree_both_ways(
    ops: list[tuple[Any, ...]], spaced: bool
) -> None:
    """Deltas of every kind at valid, invalid and unstarted indexes, blocks started twice,
    stopped, events after the end, names that disagree: every decision of on_event."""
    events = b"".join(anthropic_event(op) for op in ops)
    if spaced:  # Anthropic pads with spaces before the last brace
        events = events.replace(b"}\n\n", b"}   \n\n")
    both_ways([ANTHROPIC_START + events + ANTHROPIC_END], Dialect.ANTHROPIC_MESSAGES)


@given(st.lists(st.tuples(st.sampled_from(["text", "thinking"]), st.text()), max_size=12))
def test_anthropic_deltas_assemble_both_ways(deltas: list[tuple[str, str]]) -> None:
    starts = sse(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text"}},
        event="content_block_start",
    )
    events = b"".join(
        anthropic_event(("delta", kind, 0 if kind == "thinking" else 1, text))
        for kind, text in deltas
    )
    verdict, content = both_ways(
        [ANTHROPIC_START + starts + events + ANTHROPIC_END], Dialect.ANTHROPIC_MESSAGES
    )
    assert content["text"] == "".join(t for k, t in deltas if k == "text")
    assert content["reasoning"] == "".join(t for k, t in deltas if k == "thinking")
    assert verdict.state == "completed"


# -- Responses ------------------------------------------------------------------------------------

RESPONSES_DELTAS = {
    "text": "response.output_text.delta",
    "refusal": "response.refusal.delta",
    "args": "response.function_call_arguments.delta",
    "reasoning": "response.reasoning_summary_text.delta",
}
sequence_step = st.sampled_from([1, 1, 1, 2, 0, -1, None, True])
responses_op = st.one_of(
    st.tuples(
        st.just("delta"),
        st.sampled_from(list(RESPONSES_DELTAS)),
        st.sampled_from(["msg_1", "msg_2", 7, None]),
        st.sampled_from([0, 1, -1, 5000, True, None]),
        st.text(),
        sequence_step,
    ),
    st.tuples(st.just("text_done"), st.sampled_from(["msg_1", "msg_2"]), st.text(max_size=4)),
    st.tuples(st.just("misnamed"), st.text(max_size=4)),
    st.tuples(
        st.just("completed"),
    ),
)


def responses_events(ops: list[tuple[Any, ...]]) -> bytes:
    out = b""
    seq = 0
    for op in ops:
        if op[0] == "delta":
            etype = RESPONSES_DELTAS[op[1]]
            obj: dict[str, Any] = {"type": etype, "item_id": op[2], "output_index": 0}
            obj["summary_index" if op[1] == "reasoning" else "content_index"] = op[3]
            obj["delta"] = op[4]
            if op[5] is not None:
                seq = seq + op[5] if op[5] is not True else seq
                obj["sequence_number"] = True if op[5] is True else seq
            out += sse(obj, event=etype)
        elif op[0] == "text_done":
            etype = "response.output_text.done"
            out += sse(
                {"type": etype, "item_id": op[1], "content_index": 0, "text": op[2]}, event=etype
            )
        elif op[0] == "misnamed":
            out += sse(
                {"type": "response.refusal.delta", "delta": op[1]},
                event="response.output_text.delta",
            )
        else:
            etype = "response.completed"
            out += sse({"type": etype, "response": {"id": "r", "status": "completed"}}, event=etype)
    return out


@given(st.lists(responses_op, max_size=16))
def test_responses_generated_streams_agree_both_ways(ops: list[tuple[Any, ...]]) -> None:
    """Every delta kind with ids and indexes valid or not, sequence numbers in order, skipping,
    repeating or missing, deltas after a part's snapshot and after the terminal."""
    both_ways([responses_events(ops)], Dialect.OPENAI_RESPONSES)


@given(st.lists(st.text(), max_size=12))
def test_responses_text_assembles_both_ways(texts: list[str]) -> None:
    ops = [("delta", "text", "msg_1", 0, text, 1) for text in texts] + [("completed",)]
    verdict, content = both_ways([responses_events(ops)], Dialect.OPENAI_RESPONSES)
    assert content["text"] == "".join(texts)
    assert verdict.state == "completed" and verdict.anomalies == {}
