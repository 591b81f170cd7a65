"""One SSE decoder behaviour: the block path and the line path agree on everything.

The block path (LF-only input split into blocks at C speed) is an optimisation of the line
path. For every generated stream and cap, both paths, fed whole, byte by byte or in random
chunks, must give the same frames (with offsets and raw bytes), ids, retry, counts and
discarded bytes. The reference is the line path fed whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sseproxy.core import Comment, LineDecoder, SSEDecoder, SSEEvent
from sseproxy.core.events import Frame, Line
from sseproxy.core.framing import DEFAULT_MAX_EVENT_BYTES, EVENT_NAME_CACHED_BYTES
from tests.corpus import body, manifest
from tests.streams import random_split

CAPS = [1, 6, 7, 8, 16, 24, 64, 200]


@dataclass(frozen=True)
class Observed:
    frames: tuple[Frame, ...]
    last_event_id: str
    retry: int | None
    invalid_utf8: int
    oversized: int
    unknown_fields: int
    partial_bytes: int


def decode(reads: list[bytes], cap: int, block_path: bool) -> Observed:
    decoder = SSEDecoder(cap, block_path=block_path)
    frames: list[Frame] = []
    for read in reads:
        frames += decoder.feed(read)
        # Memory stays bounded on both paths: at most one event's cap plus one read.
        assert decoder.retained_bytes <= cap + len(read) + 3
    frames += decoder.finish()
    return Observed(
        tuple(frames),
        decoder.last_event_id,
        decoder.retry,
        decoder.invalid_utf8,
        decoder.oversized,
        decoder.unknown_fields,
        decoder.partial_bytes,
    )


def cut(data: bytes, sizes: list[int]) -> list[bytes]:
    reads, i, k = [], 0, 0
    while i < len(data):
        size = sizes[k % len(sizes)] if sizes else len(data)
        reads.append(data[i : i + size])
        i += size
        k += 1
    return reads


def line_bodies(cap: int) -> st.SearchStrategy[bytes]:
    """Field lines, comments, blanks and lines whose length sits around the cap."""
    around = st.integers(max(0, cap - 8), cap + 8)
    return st.one_of(
        st.sampled_from(
            [
                b"",
                b"",
                b"data: a",
                b"data:b",
                b"data",
                b"data: \xff",
                b"event: add",
                b"event:",
                b"id: 41",
                b"id: 42",
                b"id",
                b"id: a\x00b",
                b"retry: 150",
                b": ping",
                b":",
                b"foo: bar",
                b"\xef\xbb\xbfdata: bom",
            ]
        ),
        around.map(lambda n: b"data: " + b"x" * n),
        around.map(lambda n: b": " + b"c" * n),
        around.map(lambda n: b"id: " + b"9" * n),
        around.map(lambda n: b"event: " + b"e" * n),
    )


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, int]:
    cap = draw(st.sampled_from(CAPS))
    lines = draw(st.lists(line_bodies(cap), max_size=24))
    ends = draw(
        st.lists(
            st.sampled_from([b"\n", b"\n", b"\n", b"\r\n", b"\r"]),
            min_size=len(lines),
            max_size=len(lines),
        )
    )
    data = b"".join(line + end for line, end in zip(lines, ends, strict=True))
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    if draw(st.booleans()):
        data += draw(line_bodies(cap))  # an unterminated tail
    return data, cap


@given(streams(), st.lists(st.integers(1, 40), max_size=12))
@example((b"id: 41\ndata: a\n\n: c\nid: 42\ndata: " + b"x" * 100 + b"\n\n", 64), [])
@example((b"data: " + b"x" * 58 + b"\n\n", 64), [])
@example((b"data: " + b"x" * 59 + b"\n\n", 64), [1])
@example((b"data: a\ndata: " + b"x" * 52 + b"\n\n", 64), [3])
def test_block_and_line_paths_agree(stream: tuple[bytes, int], sizes: list[int]) -> None:
    data, cap = stream
    reference = decode([data], cap, block_path=False)
    bytewise = [data[i : i + 1] for i in range(len(data))]
    for block_path in (True, False):
        assert decode([data], cap, block_path) == reference
        assert decode(bytewise, cap, block_path) == reference
        assert decode(cut(data, sizes), cap, block_path) == reference


# Typed events: an `event:` line then a `data:` line, the shape Anthropic and Responses send,
# which the block path handles inline, next to every near miss that must take the generic path.
EVENT_NAMES = [
    b"content_block_delta",
    b"response.output_text.delta",
    b"message",
    b"",
    b" ",
    b" lead",
    "événement".encode(),
    "事件".encode(),
    "😀".encode(),
    b"\xff",
    b"caf\xc3",
    b"a\x00b",
    b"x" * (EVENT_NAME_CACHED_BYTES - 7),  # its line exactly at the cached length
    b"x" * (EVENT_NAME_CACHED_BYTES - 6),  # one byte over
]
# First and second lines that are almost, but not, the inlined `event:` and `data:` lines.
NEAR_EVENTS = [b"event", b"Event: x", b"event : x", b"eventx: y", b"events:y", b"data", b": c"]
NEAR_DATA = [b"data", b"Data: x", b"data : x", b"datax: y", b"dat: x", b"", b"data: a\ndata: b"]
PAYLOADS = [b'{"type":"ping"}', b"", b" ", b"x", "é".encode(), b"\xff", b"data: y", b"a:b"]


def typed_lines(cap: int) -> st.SearchStrategy[list[bytes]]:
    """The lines of one block: mostly `event:` + `data:`, often one of its near misses."""
    name = st.sampled_from(EVENT_NAMES) | st.integers(1, 40).map(lambda n: b"e%d" % n)
    event = st.builds(bytes.__add__, st.sampled_from([b"event: ", b"event:", b"event:  "]), name)
    payload = st.sampled_from(PAYLOADS)
    if cap <= 1000:  # payloads around the cap (the default cap is exercised in shape only)
        payload |= st.integers(max(0, cap - 40), cap + 8).map(lambda n: b"x" * n)
    data = st.builds(bytes.__add__, st.sampled_from([b"data: ", b"data:", b"data:  "]), payload)
    extra = st.sampled_from(
        [b"id: 7", b"id: 8", b"id", b"id: a\x00b", b"retry: 9", b"retry: x", b": c", b"foo: bar"]
    )
    typed = st.tuples(event, data).map(list)
    return st.one_of(
        typed,
        typed,
        typed,
        st.tuples(data).map(list),
        st.tuples(event).map(list),
        st.tuples(data, event).map(list),  # data before event
        st.tuples(event, event, data).map(list),  # the last event line wins
        st.tuples(event, data, data).map(list),
        st.tuples(event, extra, data).map(list),  # ids, comments, fields between
        st.tuples(extra, event, data).map(list),
        st.tuples(event, data, extra).map(list),
        st.tuples(st.sampled_from(NEAR_EVENTS), data).map(list),
        st.tuples(event, st.sampled_from(NEAR_DATA)).map(list),
    )


@st.composite
def typed_streams(draw: st.DrawFn) -> tuple[bytes, int, list[int]]:
    """(stream, cap, block sizes): typed blocks, LF-only but for a rare CR, and how many
    blocks each read holds when fed block-aligned (many blocks per read)."""
    cap = draw(st.sampled_from([*CAPS, 1000, DEFAULT_MAX_EVENT_BYTES]))
    blocks = draw(st.lists(typed_lines(cap), max_size=20))
    ends = draw(
        st.lists(
            st.sampled_from([b"\n", b"\n", b"\n", b"\n", b"\n", b"\n", b"\r\n", b"\r"]),
            min_size=len(blocks),
            max_size=len(blocks),
        )
    )
    pieces = [b"\n".join(lines) + end + end for lines, end in zip(blocks, ends, strict=True)]
    if draw(st.booleans()):
        pieces.append(b"\n".join(draw(typed_lines(cap))))  # an unterminated block
    data = b"".join(pieces)
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    groups = draw(st.lists(st.integers(1, 6), max_size=8))
    sizes, i = [], 0
    for n in groups:  # reads that end on block boundaries
        sizes.append(sum(len(p) for p in pieces[i : i + n]) or 1)
        i += n
    return data, cap, sizes


@given(typed_streams(), st.lists(st.integers(1, 300), max_size=12))
@example((b"event: a\ndata: 1\n\nevent:\xff\ndata: 2\n\ndata: 3\nevent: b\n\n", 64, [1]), [])
@example((b"event: x\nevent: y\ndata: 1\n\nevent: z\nid: 5\ndata: 2\n\n", 64, [1]), [])
@example((b"event:x\ndata:y\n\neventx: y\ndata: z\n\nevent: \ndata:  w\n\n", 64, [1]), [])
@example(
    (b"event: a\ndata: " + b"x" * 58 + b"\n\nevent: a\ndata: " + b"x" * 59 + b"\n\n", 64, [1]), []
)
@example((b"event: a\ndata: 1\ndata: 2\n\nevent: a\ndata: 3\nid: 4\n\n", 1000, [1]), [])
def test_typed_blocks_agree(stream: tuple[bytes, int, list[int]], sizes: list[int]) -> None:
    data, cap, block_sizes = stream
    reference = decode([data], cap, block_path=False)
    bytewise = [data[i : i + 1] for i in range(len(data))]
    for block_path in (True, False):
        assert decode([data], cap, block_path) == reference
        assert decode(bytewise, cap, block_path) == reference
        assert decode(cut(data, sizes), cap, block_path) == reference
        assert decode(cut(data, block_sizes), cap, block_path) == reference


@pytest.mark.parametrize("entry", manifest(), ids=lambda e: e["file"])
def test_corpus_streams_agree(entry: dict[str, Any]) -> None:
    data = body(entry)
    reference = decode([data], DEFAULT_MAX_EVENT_BYTES, block_path=False)
    events = sum(isinstance(f, SSEEvent) for f in reference.frames)
    assert events == entry["expected"]["event_count"]
    deliveries = [[data], random_split(data, 1, 97), random_split(data, 2, 4096)]
    for reads in deliveries:
        assert decode(reads, DEFAULT_MAX_EVENT_BYTES, block_path=True) == reference
    # Block-aligned reads of 1 and of 16 events: the hot loop with one and with many blocks.
    blocks = data.split(b"\n\n")
    for per_read in (1, 16):
        reads = [
            b"\n\n".join(blocks[i : i + per_read]) + b"\n\n"
            for i in range(0, len(blocks), per_read)
        ]
        reads[-1] = reads[-1][:-2]
        assert decode(reads, DEFAULT_MAX_EVENT_BYTES, block_path=True) == reference


def test_the_issue_example_agrees_on_the_line_semantics() -> None:
    # A block with a comment, a new id and a data line beyond the cap (issue 13.2): the
    # comment is delivered and the id applies; only the data is dropped, on every path.
    data = b"id: 41\ndata: a\n\n: c\nid: 42\ndata: " + b"x" * 100 + b"\n\n"
    for block_path in (True, False):
        for reads in ([data], [data[i : i + 1] for i in range(len(data))]):
            seen = decode(reads, 64, block_path)
            assert [f.data for f in seen.frames if isinstance(f, SSEEvent)] == ["a"]
            assert sum(isinstance(f, Comment) for f in seen.frames) == 1
            assert seen.last_event_id == "42"
            assert seen.oversized == 1


def test_the_cap_counts_the_line_and_the_data_before_it() -> None:
    # "data: " + 58 bytes is a 64-byte line: within a 64-byte cap; one more byte is not.
    for n, events in ((58, 1), (59, 0)):
        data = b"data: " + b"x" * n + b"\n\n"
        for block_path in (True, False):
            seen = decode([data], 64, block_path)
            assert sum(isinstance(f, SSEEvent) for f in seen.frames) == events
            assert seen.oversized == 1 - events
    # With 2 bytes of data buffered ("a" and its LF), a second line of 6 + k bytes fits a
    # 58-byte cap up to k = 50.
    for k, events in ((50, 1), (51, 0)):
        data = b"data: a\ndata: " + b"x" * k + b"\n\n"
        for block_path in (True, False):
            seen = decode([data], 58, block_path)
            assert sum(isinstance(f, SSEEvent) for f in seen.frames) == events
            assert seen.oversized == 1 - events


def ndjson(reads: list[bytes], cap: int) -> tuple[list[Line], int, int]:
    decoder = LineDecoder(cap)
    lines = [line for read in reads for line in decoder.feed(read)]
    return lines, decoder.finish(), decoder.oversized


@given(
    st.lists(st.sampled_from([b"{}", b'{"a":1}', b"x" * 7, b"y" * 8, b"z" * 9, b"", b" "])),
    st.lists(st.sampled_from([b"\n", b"\r\n"]), min_size=30, max_size=30),
    st.sampled_from([b"", b"{", b"w" * 9]),
    st.lists(st.integers(1, 12), max_size=8),
)
def test_ndjson_lines_do_not_depend_on_chunking(
    bodies: list[bytes], ends: list[bytes], tail: bytes, sizes: list[int]
) -> None:
    data = b"".join(body + end for body, end in zip(bodies, ends, strict=False)) + tail
    reference = ndjson([data], 8)
    assert ndjson([data[i : i + 1] for i in range(len(data))], 8) == reference
    assert ndjson(cut(data, sizes), 8) == reference
    # The cap applies to the bytes before the LF (or of an unterminated tail), however they
    # arrived.
    lines = [len(b + e) - 1 for b, e in zip(bodies, ends, strict=False)]
    assert reference[2] == sum(n > 8 for n in [*lines, len(tail)])
