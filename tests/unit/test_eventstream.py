"""The AWS event stream decoder, checked against botocore's own parser (an independent
implementation) and against hand-computed bytes; every bound gets one byte more."""

from __future__ import annotations

import struct
import uuid
import zlib
from typing import Any

import pytest
from botocore.eventstream import (
    ChecksumMismatch,
    DuplicateHeader,
    EventStreamBuffer,
    InvalidHeadersLength,
)
from hypothesis import given
from hypothesis import strategies as st

from sseproxy.core.eventstream import (
    MAX_HEADERS_BYTES,
    Corruption,
    EventStreamDecoder,
    encode_message,
)
from tests.streams import random_split

# -- a test-only encoder, written from the Smithy spec, with every header type --------------


def header(name: str, kind: int, value: Any) -> bytes:
    raw = name.encode()
    out = bytes([len(raw)]) + raw + bytes([kind])
    if kind in (0, 1):
        return out
    fixed = {2: ">b", 3: ">h", 4: ">i", 5: ">q", 8: ">q"}
    if kind in fixed:
        return out + struct.pack(fixed[kind], value)
    if kind == 9:
        return out + value
    data = value.encode() if kind == 7 else value
    return out + struct.pack(">H", len(data)) + data


def message(headers: bytes, payload: bytes, *, bad_prelude: bool = False) -> bytes:
    total = 12 + len(headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(headers))
    crc = zlib.crc32(prelude) ^ (1 if bad_prelude else 0)
    body = prelude + struct.pack(">I", crc) + headers + payload
    return body + struct.pack(">I", zlib.crc32(body))


def decode(data: bytes, chunks: list[bytes] | None = None, **kw: Any) -> EventStreamDecoder:
    decoder = EventStreamDecoder(**kw)
    decoder.out = []  # type: ignore[attr-defined]
    for chunk in chunks if chunks is not None else [data]:
        decoder.out += decoder.feed(chunk)  # type: ignore[attr-defined]
    decoder.finish()
    return decoder


def botocore_messages(data: bytes) -> list[tuple[dict[str, Any], bytes]]:
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    return [(m.headers, m.payload) for m in buffer]


UUID = uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF).bytes
EVERY_TYPE = b"".join(
    [
        header("t", 0, None),
        header("f", 1, None),
        header("b", 2, -7),
        header("s", 3, -300),
        header("i", 4, 70000),
        header("l", 5, -(2**40)),
        header("a", 6, b"\x00\xff"),
        header(":event-type", 7, "chunk"),
        header("ts", 8, 1_700_000_000_000),
        header("u", 9, UUID),
    ]
)
EXPECTED_HEADERS = {
    "t": True,
    "f": False,
    "b": -7,
    "s": -300,
    "i": 70000,
    "l": -(2**40),
    "a": b"\x00\xff",
    ":event-type": "chunk",
    "ts": 1_700_000_000_000,
    "u": UUID,
}


def test_every_header_type_decodes_as_written() -> None:
    data = message(EVERY_TYPE, b'{"x":1}')
    d = decode(data)
    assert [(dict(m.headers), m.payload, m.offset) for m in d.out] == [  # type: ignore[attr-defined]
        (EXPECTED_HEADERS, b'{"x":1}', 0)
    ]
    assert botocore_messages(data) == [(EXPECTED_HEADERS, b'{"x":1}')]


def test_a_known_vector() -> None:
    """No headers, no payload: the smallest message, its CRCs written out as literals."""
    data = bytes.fromhex("00000010 00000000 05c248eb 7d98c8ff".replace(" ", ""))
    d = decode(data)
    assert [(dict(m.headers), m.payload) for m in d.out] == [({}, b"")]  # type: ignore[attr-defined]


def test_the_production_encoder_agrees_with_botocore() -> None:
    data = encode_message({":event-type": "messageStop", "n": 5, "ok": True, "raw": b"\x01"}, b"{}")
    assert botocore_messages(data) == [
        ({":event-type": "messageStop", "n": 5, "ok": True, "raw": b"\x01"}, b"{}")
    ]


header_values = st.one_of(
    st.tuples(st.just(0), st.none()),
    st.tuples(st.just(1), st.none()),
    st.tuples(st.just(2), st.integers(-128, 127)),
    st.tuples(st.just(3), st.integers(-(2**15), 2**15 - 1)),
    st.tuples(st.just(4), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just(5), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just(6), st.binary(max_size=40)),
    st.tuples(st.just(7), st.text(max_size=20)),
    st.tuples(st.just(8), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just(9), st.binary(min_size=16, max_size=16)),
)
messages = st.lists(
    st.tuples(
        st.dictionaries(st.text(min_size=1, max_size=10), header_values, max_size=5),
        st.binary(max_size=200),
    ),
    max_size=6,
)


@given(messages, st.integers(min_value=0), st.integers(min_value=1, max_value=64))
def test_any_chunking_gives_what_botocore_gives(
    spec: list[tuple[dict[str, tuple[int, Any]], bytes]], seed: int, largest: int
) -> None:
    data = b"".join(
        message(b"".join(header(n, k, v) for n, (k, v) in headers.items()), payload)
        for headers, payload in spec
    )
    expected = botocore_messages(data)
    whole = decode(data)
    split = decode(data, random_split(data, seed, largest))
    for d in (whole, split):
        assert [(dict(m.headers), m.payload) for m in d.out] == expected  # type: ignore[attr-defined]
        assert d.corrupt is None and d.partial_bytes == 0
    assert [m.offset for m in split.out] == [m.offset for m in whole.out]  # type: ignore[attr-defined]


@given(st.binary(max_size=300), st.integers(min_value=0), st.integers(min_value=1, max_value=40))
def test_arbitrary_bytes_never_raise_and_stay_bounded(data: bytes, seed: int, largest: int) -> None:
    decoder = EventStreamDecoder(max_message_bytes=64)
    for chunk in random_split(data, seed, largest):
        decoder.feed(chunk)
        assert decoder.retained_bytes < 64
    assert 0 <= decoder.finish() <= len(data)


def test_bad_prelude_crc_stops_the_decoder() -> None:
    good = message(b"", b"a")
    d = decode(good + message(b"", b"b", bad_prelude=True) + good)
    assert [m.payload for m in d.out] == [b"a"]  # type: ignore[attr-defined]
    assert d.corrupt is Corruption.PRELUDE_CRC
    assert d.retained_bytes == 0 and d.partial_bytes == 0


def test_bad_message_crc_stops_the_decoder_as_botocore_raises() -> None:
    bad = bytearray(message(b"", b"payload"))
    bad[14] ^= 0xFF  # inside the payload
    with pytest.raises(ChecksumMismatch):
        botocore_messages(bytes(bad))
    d = decode(message(b"", b"a") + bytes(bad) + message(b"", b"c"))
    assert [m.payload for m in d.out] == [b"a"]  # type: ignore[attr-defined]
    assert d.corrupt is Corruption.MESSAGE_CRC


@pytest.mark.parametrize(
    ("total", "headers_length"),
    [(15, 0), (0, 0), (16, 1), (100, 85)],
)
def test_impossible_lengths_stop_the_decoder(total: int, headers_length: int) -> None:
    prelude = struct.pack(">II", total, headers_length)
    data = prelude + struct.pack(">I", zlib.crc32(prelude)) + b"\0" * 200
    d = decode(data)
    assert d.out == [] and d.corrupt is Corruption.LENGTH  # type: ignore[attr-defined]


def test_headers_at_the_cap_decode_and_one_byte_more_stops() -> None:
    at_cap = header("a", 6, b"x" * 65535) + header("b", 6, b"y" * (65527))
    assert len(at_cap) == MAX_HEADERS_BYTES
    d = decode(message(at_cap, b""))
    assert len(d.out) == 1 and d.corrupt is None  # type: ignore[attr-defined]
    over = header("a", 6, b"x" * 65535) + header("b", 6, b"y" * (65528))
    with pytest.raises(InvalidHeadersLength):
        botocore_messages(message(over, b""))
    assert decode(message(over, b"")).corrupt is Corruption.LENGTH


@pytest.mark.parametrize(
    "bad_headers",
    [
        header("x", 7, "a") + header("x", 7, "b"),  # duplicate, as botocore refuses
        b"\x01x\x0a",  # type 10 does not exist
        b"\x05ab",  # name longer than the headers
        header("x", 7, "abc")[:-1],  # string shorter than its length
        b"\x01\xff\x07\x00\x00",  # name is not UTF-8
    ],
)
def test_malformed_headers_stop_the_decoder(bad_headers: bytes) -> None:
    d = decode(message(bad_headers, b"p") + message(b"", b"q"))
    assert d.out == [] and d.corrupt is Corruption.HEADERS  # type: ignore[attr-defined]


def test_duplicate_header_is_what_botocore_refuses_too() -> None:
    with pytest.raises(DuplicateHeader):
        botocore_messages(message(header("x", 7, "a") + header("x", 7, "b"), b""))


def test_a_message_at_the_cap_decodes_one_byte_more_is_skipped_unbuffered() -> None:
    cap = 64
    at_cap = message(b"", b"a" * (cap - 16))
    over = message(b"", b"b" * (cap - 15))
    after = message(b"", b"c")
    data = at_cap + over + after
    decoder = EventStreamDecoder(max_message_bytes=cap)
    out = []
    for i in range(len(data)):
        out += decoder.feed(data[i : i + 1])
        assert decoder.retained_bytes < cap
    assert decoder.finish() == 0
    assert [m.payload for m in out] == [b"a" * (cap - 16), b"c"]
    assert [m.offset for m in out] == [0, 2 * cap + 1]
    assert decoder.oversized == 1 and decoder.corrupt is None


def test_a_cut_message_is_partial() -> None:
    first, second = message(b"", b"one"), message(b"", b"two")
    d = decode(first + second[:-3])
    assert [m.payload for m in d.out] == [b"one"]  # type: ignore[attr-defined]
    assert d.partial_bytes == len(second) - 3


def test_a_cut_inside_an_oversized_message_is_partial() -> None:
    over = message(b"", b"z" * 100)
    d = decode(over[:50], max_message_bytes=64)
    assert d.oversized == 1 and d.partial_bytes == 50


def test_header_cache_is_bounded_and_never_changes_a_result() -> None:
    from sseproxy.core.eventstream import HEADER_CACHE_ENTRIES

    blocks = [header(":event-type", 7, f"e{i}") for i in range(HEADER_CACHE_ENTRIES + 1)]
    data = b"".join(message(b, b"x") for b in blocks * 2)
    decoder = EventStreamDecoder()
    out = decoder.feed(data)
    assert [m.event_type for m in out] == [f"e{i}" for i in range(HEADER_CACHE_ENTRIES + 1)] * 2
    assert len(decoder._headers) == HEADER_CACHE_ENTRIES  # one more block was not kept
    assert out[0].headers is out[HEADER_CACHE_ENTRIES + 1].headers  # reused, read-only
