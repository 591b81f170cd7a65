"""Bounds against one bad peer, in the core: decompression bombs and input-driven sizes."""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sseproxy.core import Dialect, EndReason, StreamTap
from sseproxy.core.dialects.base import MAX_CHOICES, MAX_INDEX, MAX_TOOL_CALLS
from sseproxy.core.dialects.gemini import MAX_PATH_DEPTH
from sseproxy.core.encoding import (
    INPUT_BYTES,
    LINES_PER_READ,
    LINES_PER_SLICE,
    MIN_SLICE_BYTES,
    SLICE_BYTES,
    BodyDecoder,
    must_slice,
)
from sseproxy.core.tap import DEFAULT_MAX_DECODED_BYTES, TapOptions
from tests.streams import chat_chunk, ndjson, sse

MIB = 1024 * 1024


def gzip_bomb(expanded: int, unit: bytes = b"a") -> bytes:
    """A gzip body of `expanded` bytes of `unit`, compressed without building it whole."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = unit * (MIB // len(unit))
    parts = [compressor.compress(b"data: ")]
    for _ in range(expanded // len(block)):
        parts.append(compressor.compress(block))
    parts.append(compressor.flush())
    return b"".join(parts)


BOMB = gzip_bomb(100 * MIB)  # ~100 KB of gzip


def test_the_bomb_is_what_the_issue_describes() -> None:
    assert len(BOMB) < 128 * 1024
    assert len(zlib.decompress(BOMB, 16 + zlib.MAX_WBITS)) >= 100 * MIB


def test_decoder_returns_at_most_one_slice_per_call() -> None:
    decoder = BodyDecoder("gzip")
    sizes = [len(decoder.decode(BOMB[i : i + 16384])) for i in range(0, len(BOMB), 16384)]
    while decoder.pending:
        sizes.append(len(decoder.decode(b"")))
        assert decoder.retained_bytes <= len(BOMB)
    assert max(sizes) == SLICE_BYTES
    assert sum(sizes) == 100 * MIB + len(b"data: ")
    assert decoder.finish()


def test_deflate_keeps_input_while_output_is_pending() -> None:
    raw = zlib.compress(b"data: " + b"b" * (3 * SLICE_BYTES) + b"\n\n")
    decoder = BodyDecoder("deflate")
    out = [decoder.decode(raw[:1]), decoder.decode(raw[1:])]
    while decoder.pending:
        out.append(decoder.decode(b""))
    assert max(map(len, out)) <= SLICE_BYTES
    assert b"".join(out) == b"data: " + b"b" * (3 * SLICE_BYTES) + b"\n\n"


@given(
    st.sampled_from(["gzip", "deflate", "raw-deflate"]),
    st.integers(0, 3 * SLICE_BYTES),
    st.lists(st.tuples(st.integers(1, 40000), st.integers(0, 3)), min_size=1, max_size=20),
)
@settings(max_examples=40)
def test_sliced_decoding_gives_the_body_whatever_the_reads_and_pumps(
    encoding: str, size: int, plan: list[tuple[int, int]]
) -> None:
    body = (b"data: 0123456789abcdef\n\n" * (size // 24 + 1))[:size]
    if encoding == "gzip":
        compressed = gzip.compress(body)
    else:
        compressed = zlib.compress(body)
        if encoding == "raw-deflate":
            compressed = compressed[2:-4]  # no zlib header or checksum
    decoder = BodyDecoder("gzip" if encoding == "gzip" else "deflate")
    out, i, step = [], 0, 0
    while i < len(compressed):
        read, pumps = plan[step % len(plan)]
        out.append(decoder.decode(compressed[i : i + read]))
        i, step = i + read, step + 1
        for _ in range(pumps):
            if decoder.pending:
                out.append(decoder.decode(b""))
    while decoder.pending:
        out.append(decoder.decode(b""))
    assert max(map(len, out)) <= SLICE_BYTES
    assert b"".join(out) == body
    assert decoder.finish()


def test_a_gzip_bomb_is_analysed_in_slices_under_a_budget() -> None:
    options = TapOptions(max_event_bytes=MIB)
    tap = StreamTap(Dialect.OPENAI_CHAT, content_encoding="gzip", options=options)
    # Held at most: one event's cap of decoded bytes and the rest of one 16 KiB read.
    bound = options.max_event_bytes + 16384
    steps = 0
    for i in range(0, len(BOMB), 16384):
        before = tap.decoded_bytes
        tap.feed(BOMB[i : i + 16384])
        steps += 1
        assert tap.decoded_bytes - before <= SLICE_BYTES
        assert tap.retained_bytes <= bound
        while tap.backlog:
            before = tap.decoded_bytes
            tap.pump()
            steps += 1
            assert tap.decoded_bytes - before <= SLICE_BYTES
            assert tap.retained_bytes <= bound
    assert tap.decoded_bytes <= DEFAULT_MAX_DECODED_BYTES
    assert steps >= DEFAULT_MAX_DECODED_BYTES // SLICE_BYTES  # many short calls, not one
    assert not tap.backlog
    assert tap.pump() == 0
    verdict = tap.close()
    assert verdict.anomalies.get("analysis_budget_exceeded") == 1
    assert verdict.state == "unconfirmed"
    assert verdict.bytes == len(BOMB)  # forwarding is counted whole; only analysis stopped


def test_one_byte_over_the_budget_stops_the_analysis() -> None:
    body = sse(chat_chunk("hi"), chat_chunk(finish="stop"), "[DONE]")
    for budget, blind in ((len(body), False), (len(body) - 1, True)):
        options = TapOptions(max_decoded_bytes=budget)
        tap = StreamTap(Dialect.OPENAI_CHAT, content_encoding="gzip", options=options)
        tap.feed(gzip.compress(body))
        verdict = tap.close()
        assert ("analysis_budget_exceeded" in verdict.anomalies) is blind
        assert verdict.state == ("unconfirmed" if blind else "completed")


def test_a_large_compressed_stream_is_analysed_whole_across_pumps() -> None:
    body = sse(*[chat_chunk("x" * 1000) for _ in range(2000)], chat_chunk(finish="stop"), "[DONE]")
    assert len(body) > 4 * SLICE_BYTES
    tap = StreamTap(Dialect.OPENAI_CHAT, content_encoding="gzip")
    deltas = tap.feed(gzip.compress(body))
    assert tap.backlog
    while tap.backlog:
        deltas += tap.pump()
    verdict = tap.close()
    assert verdict.state == "completed"
    assert deltas == 2000
    assert verdict.text_chars == 2000 * 1000


@pytest.mark.parametrize("pump", [True, False])
def test_close_analyses_a_backlog_left_unpumped(pump: bool) -> None:
    body = sse(*[chat_chunk("y" * 1000) for _ in range(1000)], chat_chunk(finish="stop"), "[DONE]")
    tap = StreamTap(Dialect.OPENAI_CHAT, content_encoding="gzip")
    tap.feed(gzip.compress(body))
    while pump and tap.backlog:
        tap.pump()
    verdict = tap.close()
    assert verdict.state == "completed"
    assert verdict.text_chars == 1000 * 1000


def test_one_call_gives_the_inflater_at_most_input_bytes_of_a_large_read() -> None:
    """A quarter megabyte of compressed input in one read: what the inflater holds unconsumed (and
    copies on every call) stays within INPUT_BYTES; the rest waits in the queue (before, the
    whole read was the inflater's tail, copied again on every one of thousands of calls)."""
    body = gzip_bomb(256 * MIB, b"\n")
    assert len(body) > 8 * INPUT_BYTES
    decoder = BodyDecoder("gzip")
    out = decoder.decode(body)
    calls = 1
    while decoder.pending and calls < 64:
        assert len(decoder._zlib.unconsumed_tail) <= INPUT_BYTES
        out = decoder.decode(b"")
        calls += 1
    assert len(out) == MIN_SLICE_BYTES  # blank lines: slices of LINES_PER_SLICE lines at most
    assert decoder.retained_bytes <= len(body)


def test_slices_shrink_to_a_bounded_count_of_lines_and_grow_back() -> None:
    """The analysis of a slice costs per line: after a slice with more than LINES_PER_SLICE
    line ends the next holds about that many (never under MIN_SLICE_BYTES); a slice at the
    bound keeps the next at SLICE_BYTES."""
    at_bound = (b"x" * (SLICE_BYTES // LINES_PER_SLICE - 1) + b"\n") * LINES_PER_SLICE
    one_more = b"\n" + at_bound[1:]  # the same size, one line end more
    sizes = []
    for body in (at_bound, one_more):
        decoder = BodyDecoder("gzip")
        assert decoder.decode(gzip.compress(body + b"y" * SLICE_BYTES)) == body
        sizes.append(len(decoder.decode(b"")))
    assert sizes[0] == SLICE_BYTES and sizes[1] < SLICE_BYTES
    dense = BodyDecoder("gzip")
    assert len(dense.decode(gzip.compress(b"\n" * 4 * SLICE_BYTES))) == SLICE_BYTES
    assert len(dense.decode(b"")) == MIN_SLICE_BYTES


def test_a_body_of_line_ends_stays_in_slices_of_lines_per_slice() -> None:
    """Every slice of a body of blank lines holds LINES_PER_SLICE line ends at most (before, a
    slice at the bound reset the next to SLICE_BYTES: 1 KiB and 16 KiB slices alternated, the
    16 KiB ones ~5 ms of analysis each); sparse lines after them bring SLICE_BYTES back."""
    decoder = BodyDecoder("gzip")
    body = b"\n" * 64 * SLICE_BYTES + (b"x" * 255 + b"\n") * 4 * LINES_PER_SLICE
    first = decoder.decode(gzip.compress(body))
    lines = [first.count(b"\n")]
    sizes = [len(first)]
    while decoder.pending:
        out = decoder.decode(b"")
        lines.append(out.count(b"\n"))
        sizes.append(len(out))
    assert sum(sizes) == len(body)
    assert lines[0] == SLICE_BYTES  # the first slice, before any density was seen
    dense = lines[1 : 64 * SLICE_BYTES // MIN_SLICE_BYTES - 15]
    assert dense and max(dense) == LINES_PER_SLICE
    assert sizes[-2] == SLICE_BYTES  # the sparse lines: whole slices again


def test_an_identity_read_is_whole_up_to_a_slice_or_its_lines_and_sliced_beyond() -> None:
    decoder = BodyDecoder(None)
    dense = b"\n" * SLICE_BYTES  # a slice of line ends: returned whole
    assert decoder.decode(dense) is dense and not decoder.pending
    # Larger than a slice with LINES_PER_READ line ends (CR counts too): whole, uncopied.
    sparse = (b"x" * 99 + b"\r") * LINES_PER_READ + b"y" * SLICE_BYTES
    assert decoder.decode(sparse) is sparse and not decoder.pending
    # One line end more: sliced, in order, held bytes first.
    costly = b"\n" + sparse
    assert decoder.decode(costly) == costly[:SLICE_BYTES] and decoder.pending
    assert decoder.retained_bytes == len(costly) - SLICE_BYTES
    out = [decoder.decode(b"z")]
    while decoder.pending:
        out.append(decoder.decode(b""))
    assert b"".join(out) == costly[SLICE_BYTES:] + b"z"
    assert max(map(len, out)) <= SLICE_BYTES


PAD = b"y" * SLICE_BYTES  # makes any read larger than a slice


@pytest.mark.parametrize(
    ("read", "costly"),
    [
        (b"\n" * SLICE_BYTES, False),  # a slice of line ends: never more than a slice
        (b"\n" * LINES_PER_READ + PAD, False),  # LF at the bound
        (b"\n" * (LINES_PER_READ + 1) + PAD, True),  # and one more
        (b"\r" * (LINES_PER_READ + 1) + PAD, True),  # CR alone counts
        (b"\r\n" * (LINES_PER_READ // 2) + PAD, False),  # CRLF: both count, at the bound
        (b"\r\n" * (LINES_PER_READ // 2) + b"\r" + PAD, True),  # and one more
        (b"\n" * (LINES_PER_READ - 1) + b"\r" + PAD, False),  # LF and a CR, at the bound
        (b"\n" * (LINES_PER_READ - 1) + b"\r\r" + PAD, True),  # and one more
    ],
    ids=[
        "slice",
        "lf-bound",
        "lf-over",
        "cr-over",
        "crlf-bound",
        "crlf-over",
        "mixed-bound",
        "mixed-over",
    ],
)
def test_a_read_is_costly_past_lines_per_read_line_ends_of_either_kind(
    read: bytes, costly: bool
) -> None:
    assert must_slice(read) is costly


TINY = b"data:x\n\n"  # the costliest events a peer can send per byte (each one a JSON error)


@pytest.mark.parametrize("dialect", [Dialect.OPENAI_CHAT, None])
def test_one_large_identity_read_is_analysed_a_slice_per_call(dialect: Dialect | None) -> None:
    """64 KiB of 8-byte events in one read: one call analyses at most SLICE_BYTES of them
    (before: all 8,192 in one call), pumps do the rest, and the verdict is the one small
    reads give."""
    body = TINY * (64 * 1024 // len(TINY)) + sse(chat_chunk(finish="stop"), "[DONE]")
    tap = StreamTap(dialect, content_type="text/event-stream", options=TapOptions(strict=True))
    tap.feed(body[:100])  # the hot path is on: plain SSE of a known dialect
    tap.feed(body[100:])
    assert tap.events <= (100 + SLICE_BYTES) // len(TINY)
    assert tap.backlog
    pumps = 0
    while tap.backlog:
        before = tap.events
        tap.pump()
        pumps += 1
        assert tap.events - before <= SLICE_BYTES // len(TINY) + 1
    assert pumps >= len(body) // SLICE_BYTES - 1
    verdict = tap.close(EndReason.UPSTREAM_CLOSED)
    small = StreamTap(dialect, content_type="text/event-stream", options=TapOptions(strict=True))
    for i in range(0, len(body), 1000):
        small.feed(body[i : i + 1000])
    assert verdict == small.close(EndReason.UPSTREAM_CLOSED)
    assert verdict.events == 64 * 1024 // len(TINY) + 2


def test_the_events_within_what_was_fed_are_counted_when_the_analysis_gets_there() -> None:
    """A client that got a 64 KiB read and then left: the events within that read are what
    it was sent, though the analysis had done only a slice of it at the break; the events of
    the read after it are not counted."""
    first = TINY * (64 * 1024 // len(TINY))
    tap = StreamTap(Dialect.OPENAI_CHAT, content_type="text/event-stream")
    tap.feed(first)
    assert tap.mark_fed()  # analysis trails: the count comes later
    tap.feed(first + b"data: {}")  # the next read, written to nobody
    assert tap.at_mark is None
    tap.close(EndReason.CLIENT_DISCONNECTED, http_complete=None)
    assert tap.at_mark is not None and tap.at_mark[0] == first.count(b"\n\n")
    caught_up = StreamTap(Dialect.OPENAI_CHAT, content_type="text/event-stream")
    caught_up.feed(TINY * 10)
    assert not caught_up.mark_fed()  # nothing trails: `events` is the count


def test_a_read_of_exactly_a_slice_is_analysed_at_once() -> None:
    body = (TINY * (SLICE_BYTES // len(TINY) + 1))[:SLICE_BYTES]
    tap = StreamTap(Dialect.OPENAI_CHAT, content_type="text/event-stream")
    tap.feed(body)
    assert not tap.backlog and tap.events == SLICE_BYTES // len(TINY)
    tap.feed(body + b"\n")  # a byte more: the last slice waits for a pump
    assert tap.backlog


def test_the_decompressed_budget_is_exact() -> None:
    """`max_decoded_bytes` are analysed, and no byte more: the events within the budget are
    counted, the one it cuts is not."""
    body = sse(*[chat_chunk("z" * 100) for _ in range(50)], chat_chunk(finish="stop"), "[DONE]")
    for budget in (len(body) // 2, len(body) // 2 + 1):
        options = TapOptions(max_decoded_bytes=budget)
        tap = StreamTap(Dialect.OPENAI_CHAT, content_encoding="gzip", options=options)
        tap.feed(gzip.compress(body))
        while tap.backlog:
            tap.pump()
        verdict = tap.close()
        assert tap.decoded_bytes == budget
        assert verdict.anomalies.get("analysis_budget_exceeded") == 1
        assert verdict.events == body[:budget].count(b"\n\n")


def test_analysis_stopped_by_the_shell_says_it_was_cut_short() -> None:
    body = sse(*[chat_chunk("w" * 1000) for _ in range(100)], chat_chunk(finish="stop"), "[DONE]")
    tap = StreamTap(Dialect.OPENAI_CHAT, content_encoding="gzip")
    tap.feed(gzip.compress(body))
    assert tap.backlog
    tap.stop_analysis()
    assert not tap.backlog
    verdict = tap.close()
    assert verdict.anomalies.get("analysis_cut_short") == 1
    assert verdict.state == "unconfirmed"
    assert verdict.bytes == len(gzip.compress(body))


# -- every index a peer sends is capped ----------------------------------------------------


def gemini_streamed(*paths: str) -> bytes:
    def candidate(call: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"content": {"role": "model", "parts": [{"functionCall": call}]}}
        if finish:
            out["finishReason"] = finish
        return {"candidates": [out]}

    fragments = [{"jsonPath": p, "stringValue": "v"} for p in paths]
    return sse(
        candidate({"name": "f", "willContinue": True}),
        candidate({"partialArgs": fragments, "willContinue": True}),
        candidate({}, finish="STOP"),
    )


def gemini_args(*paths: str) -> tuple[Any, dict[str, int]]:
    tap = StreamTap(Dialect.GEMINI, options=TapOptions(strict=True))
    tap.feed(gemini_streamed(*paths))
    verdict = tap.close()
    assert verdict.state == "completed"
    return json.loads(tap.describe()["tool_calls"][0]["arguments"]), verdict.anomalies


def test_gemini_partial_args_index_cap_and_one_more() -> None:
    args, anomalies = gemini_args(f"$.a[{MAX_INDEX - 1}]")
    assert len(args["a"]) == MAX_INDEX and args["a"][-1] == "v"
    assert "index_out_of_range" not in anomalies
    args, anomalies = gemini_args(f"$.a[{MAX_INDEX}]")
    assert args == {}
    assert anomalies["index_out_of_range"] == 1


def test_gemini_partial_args_of_the_attack_allocate_nothing() -> None:
    # 289 bytes that allocated ~400 MB; and an index too long for int() to parse.
    args, anomalies = gemini_args("$.a[20000000]", "$.b[" + "9" * 5000 + "]")
    assert args == {}
    assert anomalies["index_out_of_range"] == 2


def test_gemini_partial_args_gaps_share_one_budget() -> None:
    # Each path alone is in range; together they would skip more slots than one response may.
    args, anomalies = gemini_args(f"$.a[{MAX_INDEX - 1}]", f"$.b[{MAX_INDEX - 1}]", "$.c[0]")
    assert len(args["a"]) == MAX_INDEX
    assert "b" not in args or args["b"] == []
    assert args["c"] == ["v"]
    assert anomalies["index_out_of_range"] == 1


def test_gemini_partial_args_depth_cap_and_one_more() -> None:
    args, anomalies = gemini_args("$" + ".k" * MAX_PATH_DEPTH)
    node = args
    for _ in range(MAX_PATH_DEPTH - 1):
        node = node["k"]
    assert node == {"k": "v"}
    args, anomalies = gemini_args("$" + ".k" * (MAX_PATH_DEPTH + 1))
    assert args == {}
    assert anomalies["index_out_of_range"] == 1


def chat_choice(index: int) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": index, "delta": {"content": "x"}}]}


@pytest.mark.parametrize(("index", "kept"), [(MAX_CHOICES - 1, True), (MAX_CHOICES, False)])
def test_chat_choice_index_cap_and_one_more(index: int, kept: bool) -> None:
    tap = StreamTap(Dialect.OPENAI_CHAT)
    tap.feed(sse(chat_choice(0), chat_choice(index)))
    verdict = tap.close()
    assert verdict.text_chars == (2 if kept else 1)
    assert ("index_out_of_range" in verdict.anomalies) is not kept
    reasons = verdict.finish_reasons
    assert (reasons is not None and len(reasons) == 2) is kept


@pytest.mark.parametrize(("index", "kept"), [(MAX_INDEX - 1, True), (MAX_INDEX, False)])
def test_chat_tool_call_index_cap_and_one_more(index: int, kept: bool) -> None:
    call = {"index": index, "id": "t", "function": {"name": "f", "arguments": "{}"}}
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
    tap = StreamTap(Dialect.OPENAI_CHAT)
    tap.feed(sse(chunk))
    verdict = tap.close()
    assert len(verdict.tool_calls) == (1 if kept else 0)
    assert ("index_out_of_range" in verdict.anomalies) is not kept


@pytest.mark.parametrize(("index", "kept"), [(MAX_CHOICES - 1, True), (MAX_CHOICES, False)])
def test_gemini_candidate_index_cap_and_one_more(index: int, kept: bool) -> None:
    chunk = {"candidates": [{"index": index, "content": {"parts": [{"text": "x"}]}}]}
    tap = StreamTap(Dialect.GEMINI)
    tap.feed(sse(chunk))
    verdict = tap.close()
    assert verdict.text_chars == (1 if kept else 0)
    assert ("index_out_of_range" in verdict.anomalies) is not kept


@pytest.mark.parametrize(("index", "kept"), [(MAX_INDEX - 1, True), (MAX_INDEX, False)])
def test_anthropic_block_index_cap_and_one_more(index: int, kept: bool) -> None:
    start = {"type": "content_block_start", "index": index, "content_block": {"type": "text"}}
    delta = {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta"}}
    delta["delta"]["text"] = "xy"
    tap = StreamTap(Dialect.ANTHROPIC_MESSAGES)
    tap.feed(sse(("content_block_start", start), ("content_block_delta", delta)))
    verdict = tap.close()
    assert verdict.text_chars == (2 if kept else 0)
    assert verdict.anomalies.get("index_out_of_range", 0) == (0 if kept else 2)


@pytest.mark.parametrize(("index", "kept"), [(MAX_INDEX - 1, True), (MAX_INDEX, False)])
def test_responses_content_index_cap_and_one_more(index: int, kept: bool) -> None:
    delta = {"type": "response.output_text.delta", "item_id": "m", "content_index": index}
    delta["delta"] = "xyz"
    tap = StreamTap(Dialect.OPENAI_RESPONSES)
    tap.feed(sse(("response.output_text.delta", delta)))
    verdict = tap.close()
    assert verdict.text_chars == (3 if kept else 0)
    assert ("index_out_of_range" in verdict.anomalies) is not kept


@pytest.mark.parametrize(("index", "kept"), [(MAX_INDEX - 1, True), (MAX_INDEX, False)])
def test_responses_output_index_cap_and_one_more(index: int, kept: bool) -> None:
    etype = "response.function_call_arguments.delta"
    tap = StreamTap(Dialect.OPENAI_RESPONSES)
    tap.feed(sse((etype, {"type": etype, "output_index": index, "delta": "{}"})))
    verdict = tap.close()
    assert ("index_out_of_range" in verdict.anomalies) is not kept
    assert len(verdict.tool_calls) == (1 if kept else 0)


def test_tool_calls_per_response_cap_and_one_more() -> None:
    def calls(n: int) -> bytes:
        return b"".join(
            ndjson({"message": {"tool_calls": [{"function": {"name": "f", "arguments": {}}}]}})
            for _ in range(n)
        )

    for n, over in ((MAX_TOOL_CALLS, False), (MAX_TOOL_CALLS + 1, True)):
        tap = StreamTap(Dialect.OLLAMA)
        tap.feed(calls(n))
        verdict = tap.close()
        assert len(verdict.tool_calls) == MAX_TOOL_CALLS
        assert verdict.anomalies.get("too_many_tool_calls", 0) == (1 if over else 0)
