"""`SSEDecoder.whole_event`, the one-block shortcut, agrees with the line path on any input.

Streams are fed block by block, so the shortcut is tried at every event boundary; the line
path (`block_path=False`), fed the whole stream at once, gives the expected frames and counts.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sseproxy.core import SSEDecoder
from sseproxy.core.events import SSEEvent


def observe(decoder: SSEDecoder, chunks: list[bytes]) -> tuple[object, ...]:
    frames = [tuple(f) for c in chunks for f in decoder.feed(c)]
    frames += [tuple(f) for f in decoder.finish()]
    return (
        frames,
        decoder.last_event_id,
        decoder.invalid_utf8,
        decoder.oversized,
        decoder.unknown_fields,
        decoder.partial_bytes,
        decoder.retry,
        decoder.pos,
    )


def agree(blocks: list[bytes], cap: int = 1 << 24) -> None:
    expected = observe(SSEDecoder(cap, block_path=False), [b"".join(blocks)])
    assert observe(SSEDecoder(cap), blocks) == expected


line = st.sampled_from(
    [
        b"data: {}",
        b'data: {"a":"\xe2\x82\xac"}',
        b"data: \xff",
        b"data:x",
        b"data:",
        b"data:  two spaces",
        b"event: delta",
        b"event:delta",
        b"event:",
        b"event: \xff",
        b"id: 7",
        b"id: 8\x00",
        b"retry: 5",
        b": comment",
        b"bogus: 1",
        b"",
        b"data: a\rb",
    ]
)
block = st.lists(line, min_size=0, max_size=3).map(
    lambda ls: b"".join(x + b"\n" for x in ls) + b"\n"
)


@given(st.lists(block, max_size=12), st.sampled_from([8, 16, 1 << 24]))
@example([b"\xef\xbb\xbfdata: a\n\n", b"data: b\n\n"], 1 << 24)
@example([b"data: a\n\n", b"\n\n", b"event: e\ndata: b\n\n"], 1 << 24)
@example([b"id: 1\n\n", b"data: a\n\n"], 1 << 24)
@example([b"data: 0123456789\n\n", b"data: 01\n\n"], 12)
def test_block_by_block_agrees_with_the_line_path(blocks: list[bytes], cap: int) -> None:
    agree(blocks, cap)


@pytest.mark.parametrize(
    ("chunk", "expected"),
    [
        (b'data: {"a":1}\n\n', ("message", '{"a":1}', b'{"a":1}')),
        (b"event: delta\ndata: x y\n\n", ("delta", "x y", b"x y")),
        (b"event:delta\ndata:x\n\n", ("delta", "x", b"x")),
        (b"event: e\ndata:\n\n", ("e", "", b"")),
        (b"data: \xe2\x82\xac\n\n", ("message", "\u20ac", b"\xe2\x82\xac")),
    ],
)
def test_the_usual_blocks_take_the_shortcut(chunk: bytes, expected: tuple[str, str, bytes]) -> None:
    decoder = SSEDecoder()
    decoder.feed(b"id: 3\ndata: first\n\n")
    event = decoder.whole_event(chunk)
    assert isinstance(event, SSEEvent)
    assert (event.type, event.data, event.raw) == expected
    assert (event.id, event.offset, decoder.pos) == ("3", 19, 19 + len(chunk))


@pytest.mark.parametrize(
    "chunk",
    [
        b"data: a\n\ndata: b\n\n",  # two blocks
        b"data: a\n",  # no blank line
        b"data: a\r\n\r\n",  # CR
        b"data: a\ndata: b\n\n",  # two data lines
        b"id: 1\ndata: a\n\n",  # not an event line first
        b": c\ndata: a\n\n",
        b"event: e\nid: 1\n\n",
        b"data:a\n\n",  # no space: the general path's job
        b"\n\n",
        b"data: " + b"x" * 64 + b"\n\n",  # over the cap
    ],
)
def test_anything_else_is_left_to_feed(chunk: bytes) -> None:
    decoder = SSEDecoder(max_event_bytes=64)
    decoder.feed(b"data: first\n\n")
    assert decoder.whole_event(chunk) is None
    assert decoder.pos == 13
    agree([b"data: first\n\n", chunk], 64)


def test_no_shortcut_before_the_bom_is_decided_or_with_bytes_held() -> None:
    decoder = SSEDecoder()
    assert decoder.whole_event(b"data: a\n\n") is None  # first bytes: a BOM may come
    decoder.feed(b"data: a\n\ndata: b")
    assert decoder.whole_event(b"data: c\n\n") is None  # `data: b` is held
    decoder.feed(b"\n\n")
    assert decoder.whole_event(b"data: c\n\n") is not None
    decoder.feed(b"data: d\r")
    decoder.feed(b"\n\r\n")  # the line path until the boundary; the pair of CR is skipped
    assert decoder.whole_event(b"data: e\n\n") is not None
    decoder.finish()
    assert decoder.whole_event(b"data: f\n\n") is None
