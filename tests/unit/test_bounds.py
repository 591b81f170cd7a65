"""Bounds against one bad peer, in the core: decompression bombs and input-driven sizes."""

from __future__ import annotations

import gzip
import zlib

import pytest

from sseproxy.core import Dialect, StreamTap
from sseproxy.core.encoding import SLICE_BYTES, BodyDecoder
from sseproxy.core.tap import DEFAULT_MAX_DECODED_BYTES, TapOptions
from tests.streams import chat_chunk, sse

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


def test_a_gzip_bomb_is_analysed_in_slices_under_a_budget() -> None:
    options = TapOptions(max_event_bytes=MIB)
    tap = StreamTap(Dialect.OPENAI_CHAT, content_encoding="gzip", options=options)
    steps = 0
    for i in range(0, len(BOMB), 16384):
        before = tap.decoded_bytes
        tap.feed(BOMB[i : i + 16384])
        steps += 1
        assert tap.decoded_bytes - before <= SLICE_BYTES
        assert tap.retained_bytes <= options.max_event_bytes + SLICE_BYTES + len(BOMB)
        while tap.backlog:
            before = tap.decoded_bytes
            tap.pump()
            steps += 1
            assert tap.decoded_bytes - before <= SLICE_BYTES
            assert tap.retained_bytes <= options.max_event_bytes + SLICE_BYTES + len(BOMB)
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
