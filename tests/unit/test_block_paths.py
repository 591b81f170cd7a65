"""The tap's block path (`Assembler.take_block`: the blocks of a chunk taken without events)
and the Chat `Shape` agree with the full path on the same chunks, whatever the chunks hold.

Streams are fed one block per chunk, or several, so the block path is tried on each block;
the same chunks with the fast paths off give the expected verdict, content and counts. Near misses (escapes,
unicode, extra keys, other key orders, invalid JSON or UTF-8, CR line ends, two events in a
chunk, an oversized event) must fall off the fast path and still agree.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sseproxy.core import Dialect, StreamTap, TapOptions
from sseproxy.core.dialects.anthropic_messages import AnthropicMessagesAssembler
from sseproxy.core.dialects.fastpath import PAD, SHAPE_MAX_BYTES, TEXT, Shape
from sseproxy.core.dialects.openai_chat import OpenAIChatAssembler
from sseproxy.core.dialects.openai_responses import OpenAIResponsesAssembler
from tests.fast_paths import full_parse


def observe(chunks: list[bytes], dialect: Dialect, cap: int) -> tuple[Any, ...]:
    tap = StreamTap(dialect, options=TapOptions(max_event_bytes=cap, strict=True))
    for chunk in chunks:
        tap.feed(chunk)
    verdict = tap.close()
    assert tap._reader is not None
    decoder = tap._reader.decoder  # type: ignore[attr-defined]
    return verdict, tap.describe(), tap.events, decoder.pos, decoder.last_event_id


def both_ways(
    chunks: list[bytes], dialect: Dialect, cap: int = 1 << 20, joins: list[bool] | None = None
) -> tuple[Any, ...]:
    """The result with the fast paths on, after checking that it is the one without. With
    `joins`, a chunk is joined with the next where it says True (several blocks per chunk)."""
    if joins:
        grouped = [chunks[0]]
        for chunk, join in zip(chunks[1:], joins + [False] * len(chunks), strict=False):
            if join:
                grouped[-1] += chunk
            else:
                grouped.append(chunk)
        chunks = grouped
    fast = observe(chunks, dialect, cap)
    with full_parse(dialect):
        full = observe(chunks, dialect, cap)
    assert fast == full
    return fast


joins = st.lists(st.booleans(), max_size=12)


def take(assembler: Any, chunk: bytes) -> bool:
    """`take_block` as the tap calls it: from a block boundary to the first blank line."""
    end = chunk.find(b"\n\n") + 2
    return end >= 2 and bool(assembler.take_block(chunk, 0, end))


def block(data: bytes, event: str | None = None) -> bytes:
    return (b"event: " + event.encode() + b"\n" if event else b"") + b"data: " + data + b"\n\n"


# -- Chat -----------------------------------------------------------------------------------------


def chat(text: bytes = b"hi", pad: bytes = b"Ab1", *, head: bytes = b'"id":"c",') -> bytes:
    return block(
        b"{"
        + head
        + b'"choices":[{"index":0,"delta":{"content":"'
        + text
        + b'"},"finish_reason":null}],"obfuscation":"'
        + pad
        + b'"}'
    )


CHAT_END = block(b'{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}') + block(
    b"[DONE]"
)
CHAT_VARIANTS = {
    "plain": chat(),
    "other text": chat(b"there you go"),
    "empty text": chat(b""),
    "unicode": chat("流式 ☃".encode()),
    "escapes": chat(b'\\"q\\" \\\\ \\n \\u6d41'),
    "escaped backslash last": chat(b"a\\\\"),
    "escaped quote then more": chat(b'a\\"},"x":"'),
    "lone surrogate": chat(b"\\ud800"),
    "raw control": chat(b"a\tb"),
    "invalid utf-8": chat(b"a\xffb"),
    "invalid escape": chat(b"\\q"),
    "pad escapes": chat(pad=b"a\\u0041"),
    "pad invalid": chat(pad=b"a\x01"),
    "pad quote": chat(pad=b'a","content":"x'),
    "empty pad": chat(pad=b""),
    "extra key": chat(head=b'"id":"c","x":1,'),
    "other id": chat(head=b'"id":"d",'),
    "key order": block(
        b'{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}],'
        b'"id":"c","obfuscation":"Ab1"}'
    ),
    "repeated content": block(
        b'{"id":"c","choices":[{"index":0,"delta":{"content":"a","content":"b"},'
        b'"finish_reason":null}],"obfuscation":"Ab1"}'
    ),
    "escaped key": block(
        b'{"id":"c","choices":[{"index":0,"delta":{"\\u0063ontent":"a"},'
        b'"finish_reason":null}],"obfuscation":"Ab1"}'
    ),
    "spaces": chat().replace(b'"content":"', b'"content": "'),
    "trailing space": chat().replace(b"}\n\n", b"} \n\n"),
    "no space after data:": chat().replace(b"data: ", b"data:"),
    "crlf": chat().replace(b"\n", b"\r\n"),
    "two in one chunk": chat(b"a") + chat(b"b"),
    "half a block": chat(b"half")[:-1],
    "named": b"event: x\n" + chat(),
    "id line": b"id: 9\n" + chat(),
    "invalid json": chat().replace(b'"}\n', b'"\n'),
    "oversized": chat(b"x" * 300),
}


@pytest.mark.parametrize("name", list(CHAT_VARIANTS))
def test_chat_variant_agrees(name: str) -> None:
    chunks = [chat(), CHAT_VARIANTS[name], chat(b"after"), CHAT_END]
    both_ways(chunks, Dialect.OPENAI_CHAT, cap=256)


@given(st.lists(st.sampled_from(list(CHAT_VARIANTS)), max_size=10), st.booleans(), joins)
def test_chat_variant_streams_agree(names: list[str], end: bool, joined: list[bool]) -> None:
    chunks = [chat(), *(CHAT_VARIANTS[n] for n in names)] + ([CHAT_END] if end else [])
    both_ways(chunks, Dialect.OPENAI_CHAT, cap=256, joins=joined)


def test_chat_blocks_take_the_block_path() -> None:
    """The usual chunks are taken without an event, and the text is the one sent."""
    chunks = [chat(), chat("流式 ".encode()), chat(b'\\"q\\"'), chat(pad=b"t1700"), CHAT_END]
    tap = StreamTap(Dialect.OPENAI_CHAT, options=TapOptions(strict=True))
    tap.feed(chunks[0])
    assembler = tap.assembler
    assert isinstance(assembler, OpenAIChatAssembler)
    assert not take(assembler, chunks[1])  # the shape is learnt from the second plain delta
    tap.feed(chat(b""))
    for chunk in chunks[1:4]:
        assert take(assembler, chunk)
    two = chat(b"a") + chat(b"b")
    assert not assembler.take_block(two, 0, len(two))  # a range of two blocks is not one
    assert not take(assembler, chat(b"a\\q"))
    for chunk in chunks[1:]:
        tap.feed(chunk)
    verdict = tap.close()
    assert tap.primary_text() == 'hi流式 "q"' * 2 + "hi"
    assert verdict.state == "completed" and verdict.anomalies == {}


def test_chat_shape_of_an_event_with_escaped_or_repeated_keys_is_refused() -> None:
    escaped = b'{"\\u0069d":"c","choices":[{"delta":{"content":"a"}}]}'
    repeated = b'{"choices":[{"delta":{"content":"a","content":"a"}}]}'
    assert Shape.learn("message", escaped, [(b'"content"', TEXT, "a")]) is None
    assert Shape.learn("message", repeated, [(b'"content"', TEXT, "a")]) is None
    data = b'{"choices":[{"delta":{"content":"a"}}],"obfuscation":"x"}'
    assert Shape.learn("message", data, [(b'"content"', TEXT, "b")]) is None  # not what was read
    shape = Shape.learn("message", data, [(b'"content"', TEXT, "a"), (b'"obfuscation"', PAD, "x")])
    assert shape is not None
    assert shape.match(data.replace(b'"a"', b'"zz"')) == "zz"
    chunk = b"xx" + b"data: " + data + b"\n\n" + b"data: " + data + b"\n\n"
    assert shape.match_block(chunk, 2, len(chunk) // 2 + 1) == "a"
    assert shape.match_block(chunk, 2, len(chunk)) is None  # two blocks
    assert shape.match(data.replace(b'"a"', b'"z\\"') + b"x") is None


CHAT_DATA = b'{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}],"obfuscation":"x"}'
CHAT_HOLES = [(b'"content"', TEXT, "a"), (b'"obfuscation"', PAD, "x")]
# Hole contents near the pattern's edges: escapes, quotes, controls, invalid UTF-8, non-ASCII.
HOLE_BYTES = st.lists(
    st.sampled_from(
        [
            b"a",
            b"Z9",
            b" ",
            b'\\"',
            b"\\\\",
            b"\\u00e9",
            b"\\n",
            b'"',
            b"\x01",
            b"\xff",
            "流".encode(),
            b"\\",
            b"-",
            b"}",
            b"\n",
        ]
    ),
    max_size=6,
).map(b"".join)


@given(HOLE_BYTES, HOLE_BYTES, st.booleans(), st.integers(min_value=1, max_value=2))
def test_chat_shape_pattern_and_scan_agree_whatever_the_holes_hold(
    text: bytes, pad: bytes, block: bool, blocks: int
) -> None:
    shape = Shape.learn("message", CHAT_DATA, CHAT_HOLES)
    assert shape is not None
    data = CHAT_DATA.replace(b'"a"', b'"' + text + b'"').replace(b'"x"', b'"' + pad + b'"')
    buf = (b"data: " + data + b"\n\n") * blocks if block else data
    assert shape.match_block(buf, 0, len(buf), block) == shape._scan(buf, 0, len(buf), block)


def test_the_usual_chat_delta_is_matched_by_the_pattern_alone(monkeypatch: Any) -> None:
    shape = Shape.learn("message", CHAT_DATA, CHAT_HOLES)
    assert shape is not None

    def scan(*args: Any) -> None:
        raise AssertionError("the per-byte scan ran")

    monkeypatch.setattr(Shape, "_scan", scan)
    block = b"data: " + CHAT_DATA.replace(b'"a"', '"流式 7"'.encode()) + b"\n\n"
    assert shape.match_block(block, 0, len(block)) == "流式 7"
    assert shape.match(CHAT_DATA.replace(b'"x"', b'"t1234"')) == "a"


# -- Anthropic ------------------------------------------------------------------------------------

ANTHROPIC_START = block(
    json.dumps(
        {
            "type": "message_start",
            "message": {"id": "m", "model": "c", "usage": {"input_tokens": 1}},
        }
    ).encode(),
    "message_start",
) + b"".join(
    block(
        json.dumps({"type": "content_block_start", "index": i, "content_block": b}).encode(),
        "content_block_start",
    )
    for i, b in enumerate(
        [{"type": "thinking"}, {"type": "text"}, {"type": "tool_use", "id": "t", "name": "f"}]
    )
)
ANTHROPIC_END = block(
    b'{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}',
    "message_delta",
) + block(b'{"type":"message_stop"}', "message_stop")


def delta(kind: str, text: bytes, index: int = 1, extra: bytes = b"") -> bytes:
    key = {
        "text_delta": b"text",
        "thinking_delta": b"thinking",
        "input_json_delta": b"partial_json",
    }
    return block(
        b'{"type":"content_block_delta","index":%d,"delta":{"type":"%s","%s":"%s"}%s}'
        % (index, kind.encode(), key[kind], text, extra),
        "content_block_delta",
    )


ANTHROPIC_VARIANTS = {
    "text": delta("text_delta", b"hi"),
    "thinking": delta("thinking_delta", b"hm", 0),
    "tool": delta("input_json_delta", b'{\\"a\\":1}', 2),
    "escapes and unicode": delta("text_delta", "\\u6d41 流 \\n".encode()),
    "extra key": delta("text_delta", b"x", extra=b',"t":12'),
    "padded": delta("text_delta", b"x").replace(b"}\n\n", b"}      \n\n"),
    "unstarted index": delta("text_delta", b"x", 7),
    "index out of range": delta("text_delta", b"x", 5000),
    "misnamed": block(b'{"type":"ping"}', "content_block_delta"),
    "json type only": block(b'{"type":"content_block_delta","index":1,"delta":"x"}'),
    "invalid json": delta("text_delta", b"x").replace(b"}}", b"}"),
    "invalid utf-8": delta("text_delta", b"\xff"),
    "big int": delta("text_delta", b"x", extra=b',"n":123456789012345678901234567890'),
    "not a dict": block(b"[1]", "content_block_delta"),
    "crlf": delta("text_delta", b"x").replace(b"\n", b"\r\n"),
    "two in one chunk": delta("text_delta", b"a") + delta("text_delta", b"b"),
    "two data lines": delta("text_delta", b"a").replace(b"data: {", b"data: {\ndata: "),
    "no space after data:": delta("text_delta", b"x").replace(b"data: ", b"data:"),
    "unknown delta": block(
        b'{"type":"content_block_delta","index":1,"delta":{"type":"new_delta"}}',
        "content_block_delta",
    ),
    "ping": block(b'{"type":"ping"}', "ping"),
    "oversized": delta("text_delta", b"x" * 300),
    "stop": block(b'{"type":"message_stop"}', "message_stop"),
}


@given(st.lists(st.sampled_from(list(ANTHROPIC_VARIANTS)), max_size=10), st.booleans(), joins)
def test_anthropic_variant_streams_agree(names: list[str], end: bool, joined: list[bool]) -> None:
    chunks = [ANTHROPIC_START, *(ANTHROPIC_VARIANTS[n] for n in names)]
    chunks += [ANTHROPIC_END] if end else []
    both_ways(chunks, Dialect.ANTHROPIC_MESSAGES, cap=256, joins=joined)


@pytest.mark.parametrize("name", list(ANTHROPIC_VARIANTS))
def test_anthropic_variant_agrees(name: str) -> None:
    chunks = [ANTHROPIC_START, ANTHROPIC_VARIANTS[name], delta("text_delta", b"!"), ANTHROPIC_END]
    both_ways(chunks, Dialect.ANTHROPIC_MESSAGES, cap=256)


def test_anthropic_deltas_take_the_block_path() -> None:
    tap = StreamTap(Dialect.ANTHROPIC_MESSAGES, options=TapOptions(strict=True))
    tap.feed(ANTHROPIC_START)
    assembler = tap.assembler
    assert isinstance(assembler, AnthropicMessagesAssembler)
    for name in ("text", "thinking", "tool", "escapes and unicode", "extra key", "padded"):
        assert take(assembler, ANTHROPIC_VARIANTS[name])
    for name in ("misnamed", "invalid json", "invalid utf-8", "crlf", "two data lines"):
        assert not take(assembler, ANTHROPIC_VARIANTS[name])
    content = assembler.text.all_text(), assembler.reasoning.all_text()
    assert content == ("hi流 流 \nxx", "hm")
    assert assembler.tool_calls[2].arguments == '{"a":1}'


# -- Responses ------------------------------------------------------------------------------------

TEXT_DELTA = "response.output_text.delta"
RESPONSES_START = block(
    b'{"type":"response.created","sequence_number":0,"response":{"id":"r","status":"in_progress"}}',
    "response.created",
)
RESPONSES_END = block(
    b'{"type":"response.completed","response":{"id":"r","status":"completed"}}',
    "response.completed",
)


def rdelta(text: bytes, seq: int | None = 1, name: str = TEXT_DELTA, extra: bytes = b"") -> bytes:
    number = b'"sequence_number":%d,' % seq if seq is not None else b""
    return block(
        b'{"type":"%s",%s"item_id":"msg_1","output_index":0,"content_index":0,"delta":"%s"%s}'
        % (name.encode(), number, text, extra),
        name,
    )


RESPONSES_VARIANTS = {
    "text": rdelta(b"hi"),
    "no sequence": rdelta(b"x", None),
    "sequence repeats": rdelta(b"x", 1),
    "sequence jumps": rdelta(b"x", 90),
    "escapes and unicode": rdelta("\\u6d41 流".encode()),
    "obfuscation": rdelta(b"x", extra=b',"obfuscation":"Zz9"'),
    "refusal": rdelta(b"no", name="response.refusal.delta"),
    "reasoning": block(
        b'{"type":"response.reasoning_summary_text.delta","item_id":"rs","summary_index":0,'
        b'"delta":"hm"}',
        "response.reasoning_summary_text.delta",
    ),
    "args": block(
        b'{"type":"response.function_call_arguments.delta","item_id":"fc","delta":"{}"}',
        "response.function_call_arguments.delta",
    ),
    "misnamed": rdelta(b"x").replace(b'"type":"response.output_text.delta"', b'"type":"x"'),
    "text done": block(
        b'{"type":"response.output_text.done","item_id":"msg_1","content_index":0,"text":"q"}',
        "response.output_text.done",
    ),
    "invalid json": rdelta(b"x").replace(b'"}\n', b'"\n'),
    "invalid utf-8": rdelta(b"\xfe"),
    "big int": rdelta(b"x", extra=b',"n":123456789012345678901234567890'),
    "crlf": rdelta(b"x").replace(b"\n", b"\r\n"),
    "two in one chunk": rdelta(b"a") + rdelta(b"b"),
    "not a known delta": block(b'{"type":"response.in_progress"}', "response.in_progress"),
    "oversized": rdelta(b"x" * 300),
    "completed": RESPONSES_END,
}


def renumber(chunks: list[bytes]) -> list[bytes]:
    """Sequence numbers in order (1, 2, ...) where a delta carries the placeholder 1."""
    out = []
    for n, chunk in enumerate(chunks, start=1):
        out.append(chunk.replace(b'"sequence_number":1,', b'"sequence_number":%d,' % n))
    return out


@given(st.lists(st.sampled_from(list(RESPONSES_VARIANTS)), max_size=10), st.booleans(), joins)
def test_responses_variant_streams_agree(names: list[str], end: bool, joined: list[bool]) -> None:
    chunks = renumber([RESPONSES_VARIANTS[n] for n in names])
    stream = [RESPONSES_START, *chunks] + ([RESPONSES_END] if end else [])
    both_ways(stream, Dialect.OPENAI_RESPONSES, cap=256, joins=joined)


@pytest.mark.parametrize("name", list(RESPONSES_VARIANTS))
def test_responses_variant_agrees(name: str) -> None:
    chunks = [RESPONSES_START, *renumber([rdelta(b"a"), RESPONSES_VARIANTS[name], rdelta(b"b")])]
    both_ways([*chunks, RESPONSES_END], Dialect.OPENAI_RESPONSES, cap=256)


def test_responses_deltas_take_the_block_path() -> None:
    tap = StreamTap(Dialect.OPENAI_RESPONSES, options=TapOptions(strict=True))
    tap.feed(RESPONSES_START)
    assembler = tap.assembler
    assert isinstance(assembler, OpenAIResponsesAssembler)
    taken = renumber(
        [RESPONSES_VARIANTS[n] for n in ("text", "escapes and unicode", "obfuscation")]
    )
    for chunk in taken:
        assert take(assembler, chunk)
    for name in ("misnamed", "invalid json", "invalid utf-8", "crlf", "not a known delta"):
        assert not take(assembler, RESPONSES_VARIANTS[name])
    assert assembler.text.all_text() == "hi流 流x"
    assert assembler.last_sequence == 3 and assembler.anomalies == {}


def test_shapes_are_learnt_from_events_up_to_the_bound() -> None:
    def data(size: int) -> bytes:
        head = b'{"id":"'
        tail = b'","choices":[{"delta":{"content":"a"}}]}'
        return head + b"x" * (size - len(head) - len(tail)) + tail

    holes = [(b'"content"', TEXT, "a")]
    assert len(data(SHAPE_MAX_BYTES)) == SHAPE_MAX_BYTES
    assert Shape.learn("message", data(SHAPE_MAX_BYTES), holes) is not None
    assert Shape.learn("message", data(SHAPE_MAX_BYTES + 1), holes) is None
