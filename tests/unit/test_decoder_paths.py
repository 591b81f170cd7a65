"""One SSE decoder behaviour: the block path and the line path agree on everything.

The block path (LF-only input split into blocks at C speed) is an optimisation of the line
path. For every generated stream and cap, both paths, fed whole, byte by byte or in random
chunks, must give the same frames (with offsets and raw bytes), ids, retry, counts and
discarded bytes. The reference is the line path fed whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import example, given
from hypothesis import strategies as st

from sseproxy.core import Comment, LineDecoder, SSEDecoder, SSEEvent
from sseproxy.core.events import Frame, Line

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
