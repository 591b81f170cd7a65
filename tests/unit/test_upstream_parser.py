"""The upstream leg's response parser, fed bytes directly: its facts (head, body, end, what
follows the end) and its bounds, each with one byte more than it allows."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sseproxy.shell.upstream.facts import LIMITS
from sseproxy.shell.upstream.parser import JOIN_BYTES, Framing, ResponseParser


@dataclass
class Parsed:
    status: int | None
    body: bytes
    complete: bool
    error: str | None
    rest: bytes  # what the parser handed back after the final head and after the end
    trailers: list[tuple[bytes, bytes]]


def parse(reads: list[bytes], *, no_body: bool = False, eof: bool = False) -> Parsed:
    """Feed `reads` as a connection would: after the head, the body bytes it handed back
    (a read of their own), then the next reads; what it hands back after the end is kept."""
    parser = ResponseParser(no_body=no_body)
    body: list[bytes] = []
    parser.sink = body.append
    rest = b""
    for data in reads:
        if rest and not parser.complete and parser.error is None:
            rest = parser.feed(rest)
        rest += parser.feed(data)
    if rest and not parser.complete and parser.error is None:
        rest = parser.feed(rest)
    if eof:
        parser.eof()
    head = parser.head
    return Parsed(
        head.status if head else None,
        b"".join(body),
        parser.complete,
        parser.error,
        rest,
        parser.trailers,
    )


CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def chunked(*chunks: bytes, trailers: bytes = b"") -> bytes:
    head = CHUNKED_HEAD
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
    return head + body + b"0\r\n" + trailers + b"\r\n"


EVENTS = [b'data: {"n":%d}\n\n' % i for i in range(5)]


def test_a_chunk_longer_than_its_size_line_is_a_protocol_error_even_split_before_the_excess() -> (
    None
):
    wire = chunked(b"hello", b"world")
    bad = wire.replace(b"5\r\nhello\r\n", b"5\r\nhelloX\r\n")
    at = bad.index(b"X")
    for reads in ([bad], [bad[:at], bad[at:]]):
        got = parse(reads)
        assert got.status == 200 and not got.complete
        assert got.error is not None and "framing" in got.error
        assert got.body == b"hello"


@pytest.mark.parametrize(
    "bad", [b"zz\r\nhello\r\n", b"1" * 20 + b"\r\nhello\r\n", b"5\r\nhello0\r\n\r\n"]
)
def test_a_bad_chunk_size_line_is_a_protocol_error(bad: bytes) -> None:
    got = parse([chunked(b"hi")[: -len(b"0\r\n\r\n")] + bad])
    assert got.body.startswith(b"hi") and not got.complete and got.error is not None


@pytest.mark.parametrize("status", [204, 304])
def test_a_bodiless_status_ends_at_its_head_and_hands_back_what_follows(status: int) -> None:
    head = b"HTTP/1.1 %d X\r\ncontent-length: 5\r\n\r\n" % status
    got = parse([head + b"hello"])
    assert got.status == status and got.complete and got.body == b""
    assert got.rest == b"hello"  # stray: the connection is poisoned by its owner


def test_a_head_response_ends_at_its_head_whatever_its_length_says() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n"
    assert parse([head], no_body=True) == Parsed(200, b"", True, None, b"", [])
    got = parse([head + b"HTTP/1.1 200 OK\r\n\r\n"], no_body=True)
    assert got.complete and got.rest == b"HTTP/1.1 200 OK\r\n\r\n"


def test_a_close_delimited_body_is_complete_at_eof_and_only_then() -> None:
    wire = b"HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: a\n\n"
    assert parse([wire]).complete is False
    got = parse([wire], eof=True)
    assert got.complete and got.body == b"data: a\n\n"


@pytest.mark.parametrize(
    "wire",
    [
        chunked(b"hello")[:-5],  # the last chunk never came
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello",
    ],
)
def test_eof_before_the_framing_end_is_not_complete(wire: bytes) -> None:
    assert parse([wire], eof=True).complete is False


def test_trailers_are_delivered() -> None:
    got = parse([chunked(b"hello", trailers=b"x-checksum: abc\r\nx-more: 1\r\n")])
    assert got.complete and got.trailers == [(b"x-checksum", b"abc"), (b"x-more", b"1")]


def test_llhttp_reports_trailers_after_the_body_and_before_the_end() -> None:
    """httptools hands trailer fields to `on_header` once the body is over and completes the
    message only at the empty line after them: so they are the leg's, never the head's."""
    parser = ResponseParser()
    seen: list[tuple[bytes, int, bool]] = []
    parser.sink = lambda chunk: seen.append((chunk, len(parser.trailers), parser.complete))
    rest = parser.feed(CHUNKED_HEAD)
    assert rest == b"" and parser.head is not None
    # A field is reported once the next line begins (it could have been folded).
    parser.feed(b"5\r\nhello\r\n0\r\nx-usage: 5\r\nx-more: 1\r\n")
    # the body of a read is delivered once the read is parsed: after the fields in it
    assert seen == [(b"hello", 1, False)]
    assert (parser.trailers, parser.complete) == ([(b"x-usage", b"5")], False)
    assert parser.head.raw_headers[-1] == (b"transfer-encoding", b"chunked")  # not in the head
    parser.feed(b"\r\n")
    assert parser.trailers == [(b"x-usage", b"5"), (b"x-more", b"1")] and parser.complete


def test_a_content_length_trailer_is_a_framing_error_for_llhttp() -> None:
    got = parse([chunked(b"hello", trailers=b"content-length: 5\r\n")])
    assert not got.complete and got.error is not None and "Content-Length" in got.error


def test_the_chunks_of_one_read_reach_the_sink_as_one_piece() -> None:
    # A bulk upstream packs dozens of chunks in one read; the relay pays per piece it gets.
    parser = ResponseParser()
    pieces: list[bytes] = []
    parser.sink = pieces.append
    wire = chunked(*EVENTS)
    head_end = wire.index(b"\r\n\r\n") + 4
    assert parser.feed(wire[:head_end]) == b""
    parser.feed(wire[head_end:])
    assert pieces == [b"".join(EVENTS)] and parser.complete


def test_pieces_are_joined_up_to_the_bound_and_no_further() -> None:
    # A transport keeps a whole piece it has sent only part of: joined pieces stay small.
    parser = ResponseParser()
    pieces: list[bytes] = []
    parser.sink = pieces.append
    small = [b"s" * (JOIN_BYTES // 4)] * 5
    wire = chunked(*small, b"b" * JOIN_BYTES, b"t")
    head_end = wire.index(b"\r\n\r\n") + 4
    parser.feed(wire[:head_end])
    parser.feed(wire[head_end:])
    assert [len(p) for p in pieces] == [JOIN_BYTES, JOIN_BYTES // 4 + JOIN_BYTES, 1]
    assert b"".join(pieces) == b"".join([*small, b"b" * JOIN_BYTES, b"t"])


def test_a_receiver_that_fails_fails_the_response_and_its_error_passes() -> None:
    parser = ResponseParser()

    def broken(piece: bytes) -> None:
        raise KeyError("ours")

    parser.sink = broken
    wire = chunked(*EVENTS)
    head_end = wire.index(b"\r\n\r\n") + 4
    parser.feed(wire[:head_end])
    with pytest.raises(KeyError):
        parser.feed(wire[head_end:])
    assert parser.error == "the body's receiver failed" and not parser.complete


LATE = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nno"


@pytest.mark.parametrize("extra", [LATE, b"x", b"\r\n" + LATE, b"junk\r\n\r\nmore"])
@pytest.mark.parametrize("crlf_sse", [False, True])
def test_bytes_after_the_end_in_the_same_read_are_handed_back_to_the_byte(
    extra: bytes, crlf_sse: bool
) -> None:
    event = b"data: a\r\n\r\n" if crlf_sse else b"data: a\n\n"
    length = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % (2 * len(event))
    for wire in (chunked(event, event), length + event * 2):
        got = parse([wire + extra])
        assert got.complete and got.body == event * 2
        assert got.rest == extra or (wire.startswith(CHUNKED_HEAD) and got.rest == extra.lstrip())


def test_a_bare_crlf_after_a_chunked_end_is_tolerated_as_between_messages() -> None:
    # llhttp skips empty lines between messages (RFC 9112 §2.2); they can answer nothing.
    got = parse([chunked(b"hello") + b"\r\n"])
    assert got.complete and got.rest == b""
    got = parse([b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello\r\n"])
    assert got.complete and got.rest == b"\r\n"  # counted to the byte when a length says


def test_interim_heads_are_skipped_and_101_is_refused() -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"
    got = parse([interim + chunked(b"hello")])
    assert got.status == 200 and got.complete and got.body == b"hello"
    got = parse([b"HTTP/1.1 101 Switching\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n"])
    assert got.status is None and got.error is not None and "upgrade" in got.error


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 \xe2\x9c\x93\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx-a: caf\xc3\xa9\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nabc",
    ],
)
def test_a_head_that_cannot_be_forwarded_as_it_was_is_refused(head: bytes) -> None:
    got = parse([head])
    assert got.status is None and got.error is not None and not got.complete


# -- bounds: each with one more than it allows -------------------------------------------------


def _head_of(size: int) -> bytes:
    base = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nx-pad: \r\n\r\n"
    return base.replace(b"x-pad: ", b"x-pad: " + b"p" * (size - len(base)))


def test_a_head_of_the_limit_passes_and_one_byte_more_is_refused() -> None:
    limit = LIMITS.head_bytes
    assert len(_head_of(limit)) == limit
    assert parse([_head_of(limit)]).complete
    over = parse([_head_of(limit + 1)])
    assert over.status is None and over.error is not None and "head over" in over.error
    # counted across reads too, before the head is whole
    over = parse([_head_of(limit + 1)[:-2], b"\r\n"])
    assert over.status is None and over.error is not None


def test_header_fields_are_bounded() -> None:
    def head(fields: int) -> bytes:
        return b"HTTP/1.1 204 No\r\n" + b"x-f: 1\r\n" * fields + b"\r\n"

    assert parse([head(LIMITS.head_fields)]).complete
    got = parse([head(LIMITS.head_fields + 1)])
    assert got.status is None and got.error is not None and "header fields" in got.error


def test_interim_heads_are_bounded() -> None:
    def wire(interim: int) -> bytes:
        return b"HTTP/1.1 100 Continue\r\n\r\n" * interim + b"HTTP/1.1 204 No\r\n\r\n"

    assert parse([wire(LIMITS.interim_heads)]).complete
    assert parse([wire(LIMITS.interim_heads + 1)]).error is not None


def test_chunk_framing_without_body_is_bounded() -> None:
    head = chunked()[: -len(b"0\r\n\r\n")]
    line = b"1;" + b"x" * (LIMITS.chunk_line_bytes - 2)
    ok = parse([head + b"1\r\na\r\n", line, b"\r\nb\r\n0\r\n\r\n"])
    assert ok.complete and ok.body == b"ab"
    over = parse([head + b"1\r\na\r\n", line + b"x"])
    assert over.error is not None and "chunk framing" in over.error
    # byte by byte, as a trickling upstream sends it
    over = parse([head + b"1\r\na\r\n", *(bytes([b]) for b in line + b"x")])
    assert over.error is not None


def test_trailers_are_bounded() -> None:
    name = b"x-t"
    fill = LIMITS.trailer_bytes - len(name)
    ok = parse([chunked(b"a", trailers=name + b": " + b"v" * fill + b"\r\n")])
    assert ok.complete and len(ok.trailers[0][1]) == fill
    over = parse([chunked(b"a", trailers=name + b": " + b"v" * (fill + 1) + b"\r\n")])
    assert not over.complete and over.error is not None and "trailers over" in over.error
    many = b"x: 1\r\n" * LIMITS.trailer_fields
    assert parse([chunked(b"a", trailers=many)]).complete
    assert parse([chunked(b"a", trailers=many + b"x: 1\r\n")]).error is not None


# -- any re-chunking of the bytes gives the same facts -----------------------------------------

RESPONSES = [
    chunked(*EVENTS),
    chunked(*EVENTS, trailers=b"x-t: 1\r\n") + b"HTTP/1.1 200 OK\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\n" + chunked(b"\r\n\r\n", b"0\r\n\r\n", b"x"),
    b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n" + b"data: a\r\n\r\n" + b"tail",
    b"HTTP/1.0 200 OK\r\n\r\n" + b"".join(EVENTS),
    b"HTTP/1.1 204 No\r\ncontent-length: 3\r\n\r\nabc",
    chunked(b"data: a\r\n\r\n", b"data: b\r\n\r\n") + LATE,  # CRLF CRLF in the body, then stray
    chunked(*EVENTS) + b"\r\n" + LATE,
    chunked(*EVENTS).replace(b"\r\n0\r\n", b"\r\nZ\r\n"),  # a bad last-chunk line
    chunked(*EVENTS).replace(b"f\r\n", b"ffffffffffffffffff\r\n", 1),  # a size past 64 bits
    chunked(*EVENTS)[:-9],  # cut before the end
]


@given(
    st.sampled_from(RESPONSES),
    st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_any_rechunking_gives_the_same_head_body_end_and_rest(wire: bytes, cuts: list[int]) -> None:
    points = sorted({min(c, len(wire)) for c in cuts})
    reads = [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True)]
    whole = parse([wire], eof=True)
    split = parse(reads, eof=True)
    assert (split.status, split.body, split.complete, split.trailers) == (
        whole.status,
        whole.body,
        whole.complete,
        whole.trailers,
    )
    assert (split.error is None) == (whole.error is None)
    # The same stray bytes, but for empty lines right after a chunked end, which llhttp may
    # skip as it skips them between messages (they can answer no request).
    assert split.rest.lstrip(b"\r\n") == whole.rest.lstrip(b"\r\n")
    assert bool(split.rest.strip(b"\r\n")) == bool(whole.rest.strip(b"\r\n"))


def test_stray_bytes_after_trailers_ended_across_short_reads_are_all_handed_back() -> None:
    """The trailers' last CRLF in a read of its own, then a read with the rest of the end and
    a stray response: all of the stray bytes come back (before, the end straddling a read of
    under 3 bytes was missed, and only the last stray byte came back)."""
    stray = b"HTTP/1.1 200 OK\r\n\r\n"
    wire = chunked(*EVENTS, trailers=b"x-t: 1\r\n") + stray
    at = len(wire) - len(stray) - 3  # "\r" | "\n" | "\r\n" + stray
    parsed = parse([wire[:at], wire[at : at + 1], wire[at + 1 :]])
    assert parsed.complete and parsed.rest == stray


def test_the_framing_is_a_fact_of_the_head() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n")
    assert parser.head is not None and parser.head.framing is Framing.LENGTH
    assert parser.head.keep_alive and parser.head.version == (1, 1)
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 3\r\n\r\n")
    assert parser.head is not None and not parser.head.keep_alive
