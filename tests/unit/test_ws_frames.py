"""FrameCursor: where frames end, from their headers alone, whatever the reads' sizes."""

from __future__ import annotations

import random
import struct

import pytest

from sseproxy.shell.websocket.frames import FrameCursor


def frame(payload: bytes, masked: bool = False) -> bytes:
    n = len(payload)
    mask = 0x80 if masked else 0
    if n < 126:
        head = bytes((0x82, n | mask))
    elif n < 1 << 16:
        head = bytes((0x82, 126 | mask)) + struct.pack("!H", n)
    else:
        head = bytes((0x82, 127 | mask)) + struct.pack("!Q", n)
    return head + (b"\x01\x02\x03\x04" if masked else b"") + payload


# lengths on each side of the 7-bit, 16-bit and 64-bit length forms
SIZES = [0, 1, 125, 126, 127, 65535, 65536, 70000]


def ends(frames: list[bytes]) -> list[int]:
    out, at = [], 0
    for f in frames:
        at += len(f)
        out.append(at)
    return out


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("read", [1, 2, 3, 7, 14, 1000, 1 << 20])
def test_each_span_ends_at_most_one_frame_and_the_frames_end_where_they_do(
    masked: bool, read: int
) -> None:
    frames = [frame(bytes(n), masked) for n in SIZES] * 2
    stream = b"".join(frames)
    cursor, at, cuts = FrameCursor(), 0, []
    for start in range(0, len(stream), read):
        data = bytearray(stream[start : start + read])
        while data:
            n = cursor.span(data)
            assert 1 <= n <= len(data)
            del data[:n]
            at += n
            cuts.append(at)
    boundaries = ends(frames)
    # every frame's end is a cut, and no span holds the end of two frames
    assert set(boundaries) <= set(cuts)
    previous = 0
    for cut in cuts:
        assert sum(previous < b <= cut for b in boundaries) <= 1
        previous = cut


def test_random_reads_of_tiny_frames_cut_at_every_frame() -> None:
    rng = random.Random(7)
    frames = [frame(bytes(rng.randrange(4))) for _ in range(2000)]
    stream = b"".join(frames)
    cursor, at, cuts, start = FrameCursor(), 0, set(), 0
    while start < len(stream):
        data = bytearray(stream[start : start + rng.randrange(1, 40)])
        start += len(data)
        while data:
            n = cursor.span(data)
            del data[:n]
            at += n
            cuts.add(at)
    assert set(ends(frames)) <= cuts


def test_nothing_to_take_from_nothing() -> None:
    assert FrameCursor().span(b"") == 0
