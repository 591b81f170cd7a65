"""bench.fairness's own arithmetic: the healthz figures it reports and the bombs it sends.

No timing here: the benchmark measures, these check what it computes from its samples, and that
its crafted payloads are what they claim to be (zlib is the judge, not the bench's code).
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path

from bench.healthz_probe import Sample, percentile, read_samples, summarize, window
from bench.hostile_upstream import (
    MIB,
    crc32_repeated,
    deflate_bomb_payload,
    fragments,
    gzip_bomb,
)


def test_percentile_is_nearest_rank_never_interpolated() -> None:
    hundred = [float(v) for v in range(100, 0, -1)]  # unsorted on purpose
    assert percentile(hundred, 99) == 99.0
    assert percentile(hundred, 50) == 50.0
    assert percentile([float(v) for v in range(1, 1001)], 99) == 990.0
    # Two slow probes in 101: the p99 is a slow one (interpolation would land between).
    assert percentile([1.0] * 99 + [500.0, 600.0], 99) == 500.0
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 99))


def test_window_takes_probes_by_when_they_were_sent() -> None:
    samples = [
        Sample(9.99, 0.001, True),  # before the window
        Sample(10.0, 3.0, False),  # sent in it, answered (failed) long after its end
        Sample(10.5, 0.002, True),
        Sample(11.0, 0.001, True),
        Sample(11.01, 0.001, True),  # after
    ]
    chosen = window(samples, 10.0, 11.0)
    assert [s.start for s in chosen] == [10.0, 10.5, 11.0]
    figures = summarize(chosen)
    assert (figures.probes, figures.failed, figures.max) == (3, 1, 3000.0)
    assert figures.p50 == 2.0


def test_read_samples_skips_a_line_cut_by_the_prober_stopping(tmp_path: Path) -> None:
    path = tmp_path / "probes"
    path.write_text("1.000000 0.001000 1\n2.000000 3.000000 0\n3.0000")
    assert read_samples(path) == [Sample(1.0, 0.001, True), Sample(2.0, 3.0, False)]


def test_gzip_bomb_is_valid_gzip_of_blank_lines() -> None:
    body = gzip_bomb(3)  # zlib checks the CRC-32 and length trailer
    assert zlib.decompress(body, 16 + zlib.MAX_WBITS) == b"\n" * (3 * MIB)
    assert len(body) < 4 * 1024
    assert crc32_repeated(b"abc", 1001) == zlib.crc32(b"abc" * 1001)


def test_deflate_bomb_is_a_permessage_deflate_payload() -> None:
    payload = deflate_bomb_payload(2)
    # RFC 7692 7.2.2: the receiver appends 00 00 ff ff before inflating.
    inflated = zlib.decompressobj(-zlib.MAX_WBITS).decompress(payload + b"\x00\x00\xff\xff")
    assert inflated == b" " * (2 * MIB)


def test_fragments_are_n_frames_of_one_message() -> None:
    wire = fragments(5)
    frames, i = [], 0
    while i < len(wire):
        n = wire[i + 1]
        frames.append((wire[i] & 0x80, wire[i] & 0x0F, wire[i + 2 : i + 2 + n]))
        i += 2 + n
    assert [(fin, op) for fin, op, _ in frames] == [(0, 1), (0, 0), (0, 0), (0, 0), (0x80, 0)]
    assert b"".join(p for _, _, p in frames).endswith(b'xxx"}')
