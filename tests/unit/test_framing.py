"""SSE and NDJSON framing: each spec case whole, split as written, and one byte at a time."""

from __future__ import annotations

import pytest

from sseproxy.core import Comment, LineDecoder, SSEDecoder, SSEEvent
from sseproxy.core.events import Frame
from sseproxy.core.framing import EVENT_NAME_CACHED_BYTES, EVENT_NAMES_CACHED
from tests.data.framing_cases import CASES, Case


def run(reads: list[bytes], block_path: bool = True) -> tuple[SSEDecoder, list[SSEEvent], int]:
    decoder = SSEDecoder(block_path=block_path)
    frames = []
    for read in reads:
        frames.extend(decoder.feed(read))
    frames.extend(decoder.finish())
    events = [f for f in frames if isinstance(f, SSEEvent)]
    comments = sum(isinstance(f, Comment) for f in frames)
    return decoder, events, comments


def deliveries(case: Case) -> dict[str, list[bytes]]:
    whole = b"".join(case.reads)
    return {
        "as_written": list(case.reads),
        "whole": [whole],
        "bytewise": [whole[i : i + 1] for i in range(len(whole))],
    }


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("delivery", ["as_written", "whole", "bytewise"])
@pytest.mark.parametrize("path", ["block", "line"])
def test_spec_case(case: Case, delivery: str, path: str) -> None:
    decoder, events, comments = run(deliveries(case)[delivery], block_path=path == "block")
    assert [(e.type, e.data, e.id) for e in events] == list(case.events)
    if case.last_event_id is not None:
        assert decoder.last_event_id == case.last_event_id
    if case.retry is not None or case.name.startswith("retry"):
        assert decoder.retry == case.retry
    assert (decoder.partial_bytes > 0) == case.partial
    if case.comments is not None:
        assert comments == case.comments


def test_event_offsets_point_at_the_block_start() -> None:
    data = b"\xef\xbb\xbfdata: a\n\n: ping\nevent: x\ndata: b\r\n\r\n"
    _, events, _ = run([data[i : i + 1] for i in range(len(data))])
    assert [e.offset for e in events] == [3, data.index(b"event: x")]


def test_partial_bytes_count_the_discarded_block() -> None:
    decoder, events, _ = run([b"data: a\n\nid: 9\ndata: b"])
    assert len(events) == 1
    assert decoder.partial_bytes == len(b"id: 9\ndata: b")


def test_invalid_utf8_is_counted() -> None:
    decoder, events, _ = run([b"data: \xff\n\ndata: ok\n\n"])
    assert [e.data for e in events] == ["\ufffd", "ok"]
    assert decoder.invalid_utf8 == 1


def test_oversized_line_is_dropped_and_decoding_resumes() -> None:
    decoder = SSEDecoder(max_event_bytes=64)
    frames = decoder.feed(b"data: " + b"x" * 40)
    frames += decoder.feed(b"y" * 40 + b"\n\ndata: next\n\n")
    decoder.finish()
    assert [f.data for f in frames if isinstance(f, SSEEvent)] == ["next"]
    assert decoder.oversized == 1
    assert decoder.retained_bytes == 0


def test_oversized_multi_line_event_is_dropped() -> None:
    decoder = SSEDecoder(max_event_bytes=64)
    frames = decoder.feed(b"data: " + b"a" * 30 + b"\n" + b"data: " + b"b" * 40 + b"\n\n")
    frames += decoder.feed(b"data: small\n\n")
    assert [f.data for f in frames if isinstance(f, SSEEvent)] == ["small"]
    assert decoder.oversized == 1


def test_retained_bytes_stay_under_the_cap_while_a_line_grows() -> None:
    decoder = SSEDecoder(max_event_bytes=1000)
    for _ in range(100):
        decoder.feed(b"z" * 100)
        assert decoder.retained_bytes <= 1000
    decoder.feed(b"\n\ndata: after\n\n")
    assert decoder.oversized == 1


def test_typed_blocks_are_inlined_and_near_misses_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    generic: list[bytes] = []
    original = SSEDecoder._block

    def spy(self: SSEDecoder, block: bytes, start: int, out: list[Frame]) -> None:
        generic.append(block)
        original(self, block, start, out)

    monkeypatch.setattr(SSEDecoder, "_block", spy)
    inlined = [
        b"event: a\ndata: 1",
        b"event:b\ndata:2",
        b"event: \ndata: 3",
        "event: é\ndata:  4".encode(),
        b"event: message\ndata: 5",
    ]
    generic_shapes = [
        b"data: 6\nevent: c",
        b"event: d\nevent: e\ndata: 7",
        b"event: f\nid: 9\ndata: 8",
        b"event: \xff\ndata: 9",
    ]
    frames = SSEDecoder().feed(b"\n\n".join(inlined + generic_shapes) + b"\n\n")
    assert [(f.type, f.data, f.id) for f in frames if isinstance(f, SSEEvent)] == [
        ("a", "1", ""),
        ("b", "2", ""),
        ("message", "3", ""),
        ("é", " 4", ""),
        ("message", "5", ""),
        ("c", "6", ""),
        ("e", "7", ""),
        ("f", "8", "9"),
        ("\ufffd", "9", "9"),
    ]
    assert generic == generic_shapes


def test_the_event_name_cache_is_bounded() -> None:
    decoder = SSEDecoder()
    names = EVENT_NAMES_CACHED + 1
    typed = b"".join(b"event: e%d\ndata: %d\n\n" % (i, i) for i in range(names))
    frames = decoder.feed(typed + typed)  # the second time from the cache, but the last
    assert [f.type for f in frames] == [f"e{i}" for i in range(names)] * 2
    assert len(decoder._names) == EVENT_NAMES_CACHED
    # Only lines up to EVENT_NAME_CACHED_BYTES are remembered.
    longest = b"event: " + b"x" * (EVENT_NAME_CACHED_BYTES - 7)
    decoder = SSEDecoder()
    frames = decoder.feed(longest + b"x\ndata: 1\n\n" + longest + b"\ndata: 2\n\n")
    assert [len(f.type) for f in frames] == [
        EVENT_NAME_CACHED_BYTES - 6,
        EVENT_NAME_CACHED_BYTES - 7,
    ]
    assert list(decoder._names) == [longest]


def test_invalid_utf8_in_an_event_name_is_counted_per_event() -> None:
    for block_path in (True, False):
        decoder, events, _ = run([b"event: \xff\ndata: a\n\n" * 2], block_path)
        assert [e.type for e in events] == ["\ufffd"] * 2
        assert decoder.invalid_utf8 == 2


def test_feed_after_finish_is_a_caller_bug() -> None:
    decoder = SSEDecoder()
    decoder.finish()
    with pytest.raises(RuntimeError):
        decoder.feed(b"data: a\n\n")


@pytest.mark.parametrize(
    ("reads", "lines", "partial"),
    [
        ([b'{"a":1}\n{"b":2}\n'], [b'{"a":1}', b'{"b":2}'], False),
        ([b'{"a"', b":1}\r\n", b"\n", b'{"b":2}'], [b'{"a":1}'], True),
        ([b"\n  \n", b'{"c":3}\n'], [b'{"c":3}'], False),
    ],
)
def test_ndjson_lines(reads: list[bytes], lines: list[bytes], partial: bool) -> None:
    whole = b"".join(reads)
    for delivery in (reads, [whole], [whole[i : i + 1] for i in range(len(whole))]):
        decoder = LineDecoder()
        got = [line.data for read in delivery for line in decoder.feed(read)]
        assert got == lines
        assert (decoder.finish() > 0) == partial


def test_ndjson_oversized_line_is_dropped() -> None:
    decoder = LineDecoder(max_line_bytes=10)
    got = decoder.feed(b"x" * 8) + decoder.feed(b"x" * 8 + b'\n{"ok":1}\n')
    assert [line.data for line in got] == [b'{"ok":1}']
    assert decoder.oversized == 1
