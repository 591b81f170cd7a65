"""Drill rules, byte by byte, on the pure Injector; verdicts of what a client would receive."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sseproxy.core import Dialect, StreamTap
from sseproxy.core.inject import (
    Close,
    InjectionError,
    Injector,
    Pause,
    RawEvents,
    Stall,
    Write,
    parse_rules,
)
from tests.streams import chat_chunk as chat
from tests.streams import ndjson, sse

CHAT = sse(chat("日本"), chat("語で"), chat("す"), chat(finish="stop"), "[DONE]")
CHAT_EVENTS = [e + b"\n\n" for e in CHAT.split(b"\n\n")[:-1]]


RULE_SAMPLES = {
    "stall-after=1",
    "cut-after=2",
    "cut-mid-event=2",
    "drop-terminal",
    "done-after-cut=1",
    "inject-error=1",
    "duplicate-snapshot",
    "crlf",
    "crlf,rechunk=2,cut-after=3",
}


def run(rules: str, data: bytes, dialect: Dialect | None = Dialect.OPENAI_CHAT, chunk: int = 7):
    injector = Injector(parse_rules(rules), dialect)
    steps = []
    for i in range(0, len(data), chunk):
        steps += injector.feed(data[i : i + chunk])
    steps += injector.finish()
    return steps


def written(steps) -> bytes:
    return b"".join(s.data for s in steps if isinstance(s, Write))


def verdict_of(data: bytes, dialect: Dialect | None = Dialect.OPENAI_CHAT):
    tap = StreamTap(dialect)
    tap.feed(data)
    return tap.close()


def test_parse_rules() -> None:
    rules = parse_rules("rechunk=1, split-utf8,cut-mid-event,inject-error=5")
    assert [str(r) for r in rules] == [
        "rechunk=1",
        "split-utf8",
        "cut-mid-event=3",
        "inject-error=5",
    ]
    for bad in ("nope", "rechunk", "rechunk=0", "delay=x"):
        with pytest.raises(InjectionError):
            parse_rules(bad)


def test_no_rules_changes_nothing() -> None:
    assert written(run("", CHAT)) == CHAT


def test_rechunk_one_byte() -> None:
    steps = run("rechunk=1", CHAT)
    assert all(len(s.data) == 1 for s in steps)
    assert written(steps) == CHAT


def test_split_utf8_cuts_inside_every_character() -> None:
    steps = run("split-utf8", CHAT)
    assert written(steps) == CHAT
    boundaries, position = set(), 0
    for step in steps:
        position += len(step.data)
        boundaries.add(position)
    text, offset = CHAT.decode(), 0
    multibyte = 0
    for char in text:
        size = len(char.encode())
        if size > 1:
            multibyte += 1
            assert any(offset < b < offset + size for b in boundaries), char
        offset += size
    assert multibyte == 5
    assert verdict_of(written(steps)) == verdict_of(CHAT)


def test_delay_between_writes() -> None:
    steps = run("delay=30", CHAT)
    assert [type(s) for s in steps[:3]] == [Write, Pause, Write]
    assert all(s.milliseconds == 30 for s in steps if isinstance(s, Pause))


def test_stall_after() -> None:
    steps = run("stall-after=2", CHAT)
    assert written(steps) == b"".join(CHAT_EVENTS[:2])
    assert isinstance(steps[-1], Stall)


def test_cut_after() -> None:
    steps = run("cut-after=2", CHAT)
    assert written(steps) == b"".join(CHAT_EVENTS[:2])
    assert isinstance(steps[-1], Close)
    assert verdict_of(written(steps)).state == "interrupted"


def test_cut_mid_event() -> None:
    steps = run("cut-mid-event=2", CHAT)
    assert written(steps) == CHAT_EVENTS[0] + CHAT_EVENTS[1][: len(CHAT_EVENTS[1]) // 2]
    assert isinstance(steps[-1], Close)
    v = verdict_of(written(steps))
    assert v.state == "interrupted" and v.interruption.partial_event_bytes > 0


def test_done_after_cut_masks_the_failure_as_unconfirmed() -> None:
    data = written(run("done-after-cut=2", CHAT))
    assert data == b"".join(CHAT_EVENTS[:2]) + b"data: [DONE]\n\n"
    assert verdict_of(data).state == "unconfirmed"


def anthropic_stream() -> bytes:
    def ev(t, **f):
        return (t, {"type": t, **f})

    return sse(
        ev("message_start", message={"id": "m", "model": "c", "usage": {}}),
        ev("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        ev("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"}),
        ev("content_block_stop", index=0),
        ev("message_delta", delta={"stop_reason": "end_turn"}),
        ev("message_stop"),
    )


def responses_stream() -> bytes:
    def ev(t, seq, **f):
        return (t, {"type": t, "sequence_number": seq, **f})

    return sse(
        ev("response.created", 0, response={"id": "r"}),
        ev("response.output_text.delta", 1, item_id="i", content_index=0, delta="Hi"),
        ev("response.output_text.done", 2, item_id="i", content_index=0, text="Hi"),
        ev("response.completed", 3, response={"id": "r", "status": "completed"}),
    )


GEMINI = sse(
    {"candidates": [{"content": {"parts": [{"text": "Hi"}]}}]},
    {"candidates": [{"content": {"parts": [{"text": "!"}]}, "finishReason": "STOP"}]},
)
OLLAMA = ndjson(
    {"model": "l", "response": "Hi", "done": False},
    {"model": "l", "response": "", "done": True, "done_reason": "stop"},
)


@pytest.mark.parametrize(
    ("dialect", "data"),
    [
        (Dialect.OPENAI_CHAT, CHAT),
        (Dialect.ANTHROPIC_MESSAGES, anthropic_stream()),
        (Dialect.OPENAI_RESPONSES, responses_stream()),
        (Dialect.GEMINI, GEMINI),
        (Dialect.OLLAMA, OLLAMA),
    ],
)
def test_drop_terminal(dialect: Dialect, data: bytes) -> None:
    assert verdict_of(data, dialect).state == "completed"
    dropped = written(run("drop-terminal", data, dialect))
    assert len(dropped) < len(data)
    # "The terminal signal never comes": for Chat that is the finish_reason as well as [DONE].
    assert verdict_of(dropped, dialect).state == "interrupted"


@pytest.mark.parametrize(
    ("dialect", "data", "error_type"),
    [
        (Dialect.OPENAI_CHAT, CHAT, "server_error"),
        (Dialect.ANTHROPIC_MESSAGES, anthropic_stream(), "overloaded_error"),
        (Dialect.OPENAI_RESPONSES, responses_stream(), None),  # it has a code, no type
        (Dialect.GEMINI, GEMINI, "UNAVAILABLE"),
        (Dialect.OLLAMA, OLLAMA, None),
    ],
)
def test_inject_error_is_the_dialects_own(dialect, data, error_type) -> None:
    injected = written(run("inject-error=1", data, dialect))
    v = verdict_of(injected, dialect)
    assert v.state == "failed"
    assert v.error is not None and v.error.type == error_type
    assert v.error.message is not None and v.error.message != ""


def test_injected_responses_error_continues_the_sequence() -> None:
    """Real `error` events carry `sequence_number`; the Vercel AI SDK rejects one without."""
    injected = written(run("inject-error=2", responses_stream(), Dialect.OPENAI_RESPONSES))
    events = [e for e in injected.split(b"\n\n") if e]
    numbers = [json.loads(e.split(b"data: ", 1)[1])["sequence_number"] for e in events]
    assert numbers == list(range(len(events)))
    assert b'"type": "error"' in events[-1]


def test_dialect_is_sniffed_when_unknown() -> None:
    injected = written(run("inject-error=3", anthropic_stream(), None))
    assert b"overloaded_error" in injected


def test_duplicate_snapshot() -> None:
    data = responses_stream()
    injected = written(run("duplicate-snapshot", data, Dialect.OPENAI_RESPONSES))
    assert injected.count(b"response.output_text.done") == 2 * data.count(
        b"response.output_text.done"
    )
    assert verdict_of(injected, Dialect.OPENAI_RESPONSES).text_chars == 2  # never appended


def test_crlf() -> None:
    injected = written(run("crlf", CHAT))
    assert b"\n" not in injected.replace(b"\r\n", b"")
    assert injected.count(b"\r\n") == CHAT.count(b"\n")
    assert verdict_of(injected) == verdict_of(CHAT).replace(bytes=len(injected))


def test_rules_combine() -> None:
    steps = run("crlf,rechunk=2,cut-after=3", CHAT)
    assert all(len(s.data) <= 2 for s in steps if isinstance(s, Write))
    assert isinstance(steps[-1], Close)
    assert written(steps) == b"".join(CHAT_EVENTS[:3]).replace(b"\n", b"\r\n")


def test_ndjson_events_are_lines() -> None:
    steps = run("cut-after=1", OLLAMA, Dialect.OLLAMA)
    assert written(steps) == OLLAMA.split(b"\n", 1)[0] + b"\n"


def test_json_of_error_events_parses() -> None:
    injected = written(run("inject-error=1", CHAT))
    last = injected.split(b"\n\n")[-2]
    assert json.loads(last[len(b"data: ") :])["error"]["code"] == "injected"


@given(
    st.binary(max_size=300),
    st.lists(st.integers(1, 40), min_size=1, max_size=6),
    st.sampled_from(["rechunk=3", "split-utf8", "rechunk=1,split-utf8", "delay=1"]),
    st.sampled_from([None, *Dialect]),
)
def test_byte_rules_never_change_the_bytes(data, sizes, rules, dialect) -> None:
    injector = Injector(parse_rules(rules), dialect)
    steps, i = [], 0
    for size in sizes * (len(data) // max(1, sum(sizes)) + 1):
        steps += injector.feed(data[i : i + size])
        i += size
        if i >= len(data):
            break
    steps += injector.finish()
    assert written(steps) == data


@given(
    st.binary(max_size=300),
    st.sampled_from(sorted(RULE_SAMPLES)),
    st.sampled_from([None, *Dialect]),
)
def test_event_rules_never_raise(data, rules, dialect) -> None:
    run(rules, data, dialect, chunk=5)


# -- RawEvents: every byte kept, any chunking, linear work ---------------------------------


def raw_events(reads: list[bytes], ndjson: bool = False) -> tuple[list[bytes], bytes]:
    splitter = RawEvents(ndjson)
    events = [event for read in reads for event in splitter.feed(read)]
    return events, splitter.rest()


def test_raw_events_keep_line_ends_and_split_crlf() -> None:
    reads = [b"data: a\r", b"\n\r", b"\ndata: b\r\rdata: c\n", b"\n: tail"]
    assert raw_events(reads) == (
        [b"data: a\r\n\r\n", b"data: b\r\r", b"data: c\n\n"],
        b": tail",
    )


def test_raw_events_a_cr_at_the_end_of_a_read_waits_for_the_next() -> None:
    # A CR that is not followed by LF ends its line on its own: the next read starts a line.
    assert raw_events([b"data: a\r", b"\r", b"x"]) == ([b"data: a\r\r"], b"x")
    assert raw_events([b"data: a\n\r"]) == ([], b"data: a\n\r")


@given(
    st.lists(st.sampled_from([b"a", b"b", b"\r", b"\n", b"\r\n", b":"]), max_size=60),
    st.lists(st.integers(1, 7), min_size=1, max_size=60),
    st.booleans(),
)
def test_raw_events_are_chunking_invariant(
    tokens: list[bytes], sizes: list[int], ndjson: bool
) -> None:
    data = b"".join(tokens)
    reads, i = [], 0
    for size in sizes * (len(data) + 1):
        if i >= len(data):
            break
        reads.append(data[i : i + size])
        i += size
    events, rest = raw_events(reads, ndjson)
    assert b"".join(events) + rest == data
    assert (events, rest) == raw_events([data[i : i + 1] for i in range(len(data))], ndjson)


def test_raw_events_a_long_line_in_small_reads_costs_linear_work() -> None:
    line = b"data: " + b"x" * (4 * 1024 * 1024) + b"\n\n"
    splitter = RawEvents(ndjson=False)
    events = []
    for i in range(0, len(line), 1024):
        events += splitter.feed(line[i : i + 1024])
    assert events == [line]
    # Re-joining the held bytes per read (the old way) did ~4096 times the input here.
    assert splitter.work <= 3 * len(line)
