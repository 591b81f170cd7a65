"""Masking a body as it streams (`capture_mask`) and the writer thread's bounded queue
(`capture_writer`): the pieces a capture writes while its stream runs."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sseproxy.capture import mask as capture_mask
from sseproxy.capture.format import CaptureSettings, load_capture
from sseproxy.capture.mask import StreamMask, held_length
from sseproxy.capture.store import CaptureStore
from sseproxy.capture.writer import Writer
from sseproxy.observe.redact import Secrets

KEY = "gsk_" + "k3Y" * 12
BODY = b'data: {"a":"' + KEY.encode() + b'"}\n\ndata: {"b":"Bearer ' + KEY.encode() + b'"}\n\n'
BEARER = f"Bearer {KEY}".encode()  # the header's whole value is a credential too
MASKED = BODY.replace(BEARER, b"*" * len(BEARER)).replace(KEY.encode(), b"*" * len(KEY))


def secrets() -> Secrets:
    return Secrets.from_request({"authorization": f"Bearer {KEY}"}, "/", b"")


def streamed(pieces: list[bytes], cut: bool = False) -> bytes:
    mask = StreamMask(secrets(), None)
    return b"".join(mask.feed(p) for p in pieces) + mask.end(cut=cut)


def test_a_credential_split_at_every_point_is_masked_as_the_whole_body_is() -> None:
    assert secrets().mask(BODY) == MASKED  # the whole-body rule the stream must match
    for at in range(len(BODY) + 1):
        assert streamed([BODY[:at], BODY[at:]]) == MASKED, at
    assert streamed([BODY[i : i + 1] for i in range(len(BODY))]) == MASKED


def test_only_an_end_that_could_begin_a_credential_is_held_back() -> None:
    mask = StreamMask(secrets(), None)
    event = b'data: {"x":1}\n\n'
    assert mask.feed(event) == event  # cannot begin one: all of it goes now
    assert mask.feed(b"data: gsk_k3") == b"data: "  # could: it waits
    assert mask.feed(b"Y and more\n\n") == b"gsk_k3Y and more\n\n"  # it did not
    assert mask.end(cut=False) == b""


def test_a_body_cut_inside_a_credential_masks_what_is_left_of_it() -> None:
    body = b"data: " + KEY[:10].encode()
    assert streamed([body], cut=True) == b"data: " + b"*" * 10
    assert streamed([body], cut=False) == body  # ended there: not the start of a value


def test_a_request_without_credentials_streams_every_byte_as_it_comes() -> None:
    mask = StreamMask(Secrets(), "gzip")
    assert not mask.deferred and mask.feed(b"\x1f\x8b") == b"\x1f\x8b"


def test_the_prefix_search_is_bounded_then_holds_the_longest_end(monkeypatch) -> None:
    monkeypatch.setattr(capture_mask, "MAX_PREFIX_CANDIDATES", 4)
    raw = b"aaaaaaaZ" + b"x" * 12  # 20 bytes: an end of 19 could begin it
    at_bound = b"x" * 14 + b"a" * 4 + b"b"  # 4 places to compare: none begins it
    assert held_length(at_bound, (raw,)) == 0
    past = b"x" * 13 + b"a" * 5 + b"b"  # one more: the whole end is held, uncompared
    assert held_length(past, (raw,)) == 19


def test_a_compressed_body_is_withheld_once_its_decoded_bytes_hold_a_credential() -> None:
    import zlib

    packer = zlib.compressobj(wbits=31)
    first = packer.compress(b"data: " + KEY[:9].encode()) + packer.flush(zlib.Z_SYNC_FLUSH)
    rest = packer.compress(KEY[9:].encode() + b"\n\n") + packer.flush()
    mask = StreamMask(secrets(), "gzip")
    assert mask.deferred
    mask.search(first)
    assert mask.withheld is None  # half of it, so far
    mask.search(rest)
    assert mask.withheld == "gzip body holds a credential of the request"


def blocked(writer: Writer) -> threading.Event:
    """Hold the writer's thread until the returned event is set."""
    release = threading.Event()
    writer.submit(lambda: release.wait(10) and None)
    return release


def test_the_writer_queue_takes_its_bound_and_refuses_one_byte_more() -> None:
    writer = Writer(max_queued=10)
    release = blocked(writer)
    try:
        assert writer.reserve(10)
        assert not writer.reserve(1)
        assert (writer.queued, writer.refused) == (10, 1)
        writer.release(10)
        assert writer.reserve(1)
    finally:
        release.set()
    writer.wait(10)


def test_a_capture_the_writer_falls_behind_stops_there_and_says_so(tmp_path: Path) -> None:
    store = CaptureStore(CaptureSettings(tmp_path))
    store.writer.max_queued = 10
    release = blocked(store.writer)
    cap = store.new("r1", 0.0, {"content_encoding": None, "dialect": "sse"}, Secrets())
    try:
        cap.chunk(b"data: 1\n\n", 0.001)  # 9 bytes: queued
        cap.chunk(b"d", 0.002)  # 10: the bound, still queued
        cap.chunk(b"ata: 2\n\n", 0.003)  # past it: dropped, and nothing after it
        cap.chunk(b"x", 0.004)
    finally:
        release.set()
    store.writer.wait(10)
    assert (cap.size, cap.truncated_at) == (10, 10)
    store.save(cap, {"content_encoding": None, "dialect": "sse", "end": "x"}, Secrets())
    store.writer.wait(10)
    [sidecar_path] = tmp_path.glob("*.json")
    sidecar, body = load_capture(sidecar_path)
    assert body == b"data: 1\n\nd"
    assert (sidecar["truncated_at"], sidecar["truncated_reason"]) == (10, "capture_writer_behind")
    assert [size for _, size, _ in sidecar["chunks"]] == [9, 1, 8, 1]  # every chunk indexed
    assert sidecar["complete"] is True


def test_the_writer_thread_ends_when_idle_and_starts_again(monkeypatch) -> None:
    from sseproxy.capture import writer as capture_writer

    monkeypatch.setattr(capture_writer, "IDLE_SECONDS", 0.01)
    writer = Writer()
    done: list[int] = []
    writer.submit(lambda: done.append(1))
    writer.wait(10)
    for _ in range(500):  # up to 5 s for the idle thread to end
        if not writer._alive:
            break
        threading.Event().wait(0.01)
    assert not writer._alive
    writer.submit(lambda: done.append(2))
    writer.wait(10)
    assert done == [1, 2]


@pytest.mark.parametrize("pieces", [[BODY], [BODY[:30], BODY[30:]]])
def test_a_streamed_capture_file_is_masked_on_disk(tmp_path: Path, pieces: list[bytes]) -> None:
    store = CaptureStore(CaptureSettings(tmp_path))
    cap = store.new("r1", 0.0, {"content_encoding": None, "dialect": "sse"}, secrets())
    for piece in pieces:
        cap.chunk(piece, 0.001)
    store.save(cap, {"content_encoding": None, "dialect": "sse"}, secrets())
    store.writer.wait(10)
    [sidecar_path] = tmp_path.glob("*.json")
    _, body = load_capture(sidecar_path)
    assert body == MASKED


def test_a_session_the_writer_falls_behind_keeps_its_first_messages(tmp_path: Path) -> None:
    from sseproxy.capture.sessions import LINE_OVERHEAD, Direction, Kind, load_session

    store = CaptureStore(CaptureSettings(tmp_path))
    store.writer.max_queued = 2 * LINE_OVERHEAD + 10
    release = blocked(store.writer)
    head = {"dialect": "openai-realtime", "path": "/v1/realtime"}
    cap = store.session("s1", 0.0, head, Secrets())
    try:
        cap.message(Direction.UPSTREAM, Kind.TEXT, b"x" * 10, 0.001)
        cap.message(Direction.UPSTREAM, Kind.TEXT, b"", 0.002)  # the bound, exactly
        cap.message(Direction.UPSTREAM, Kind.TEXT, b"y", 0.003)  # one byte more: dropped
        cap.message(Direction.UPSTREAM, Kind.TEXT, b"", 0.004)  # nor is any later one kept
    finally:
        release.set()
    store.save_session(cap, {"dialect": "openai-realtime", "session": {}}, Secrets())
    store.writer.wait(10)
    [sidecar_path] = tmp_path.glob("*.json")
    file = load_session(sidecar_path)
    assert [line["size"] for line in file.lines] == [10, 0]
    sidecar = file.sidecar
    assert (sidecar["truncated_at"], sidecar["truncated_reason"]) == (2, "capture_writer_behind")
    assert (sidecar["messages"], sidecar["messages_seen"], sidecar["complete"]) == (2, 4, True)


def union_masked(body: bytes, values: list[bytes]) -> bytes:
    """Every byte any occurrence of any value covers, as `*` (overlaps included: none of the
    values below overlaps itself, where the mask takes its occurrences as `replace` does)."""
    out = bytearray(body)
    for value in values:
        for at in range(len(body) - len(value) + 1):
            if body[at : at + len(value)] == value:
                out[at : at + len(value)] = b"*" * len(value)
    return bytes(out)


def test_any_pieces_of_a_body_with_overlapping_credentials_mask_every_occurrence() -> None:
    import random

    cookie = "sess=abcdefgh12; theme=ijklmnop34"  # the whole value and each pair's value
    found = Secrets.from_request({"cookie": cookie, "x-api-key": "abcdefgh12345678"}, "/", b"")
    values = list(found.raw)
    rng = random.Random(7)
    alphabet = [b"x", b";", b" ", *values, *(v[: len(v) // 2] for v in values)]
    for _ in range(300):
        body = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        cuts = sorted(rng.randint(0, len(body)) for _ in range(rng.randint(0, 5)))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
        mask = StreamMask(found, None)
        got = b"".join(mask.feed(p) for p in pieces) + mask.end(cut=False)
        assert got == union_masked(body, values), (body, cuts)


def test_a_body_made_of_a_periodic_credential_costs_linear_work() -> None:
    # A client's key of 8,000 `a` and an upstream body of 4 MiB of `a`: one value's own
    # occurrences are taken without overlap (as the whole-body `replace` did), so masking is
    # one pass, not one comparison of the key per byte (8,000 x 4 Mi: it would not finish).
    key = "a" * 8000
    found = Secrets.from_request({"x-api-key": key}, "/", b"")
    body = b"a" * (4 * 1024 * 1024)
    mask = StreamMask(found, None)
    out = mask.feed(body[:1000]) + mask.feed(body[1000:]) + mask.end(cut=False)
    assert len(out) == len(body)
    assert out[: len(body) - len(body) % 8000] == b"*" * (len(body) - len(body) % 8000)
