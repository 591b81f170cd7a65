"""The upstream leg's permessage-deflate inflater: whole messages back, never more than a
step's bytes per call, the context kept across messages unless negotiated away."""

from __future__ import annotations

import zlib

import pytest

from sseproxy.shell.websocket.inflate import IN_SLICE, Inflater


def deflated(data: bytes, deflater: zlib._Compress) -> bytes:
    """One message as permessage-deflate sends it (the sync flush's last 4 bytes taken off)."""
    return (deflater.compress(data) + deflater.flush(zlib.Z_SYNC_FLUSH))[:-4]


def inflate(inflater: Inflater, frames: list[tuple[bytes, bool]], limit: int) -> bytes:
    out = []
    for i, (payload, fin) in enumerate(frames):
        inflater.start(payload, i == 0, fin)
        while inflater.busy:
            chunk = inflater.step(limit)
            assert len(chunk) <= limit
            out.append(chunk)
    return b"".join(out)


MESSAGES = [b"", b"x", b"y" * 65536, bytes(range(256)) * 5000, b" " * (3 * 1024 * 1024)]


@pytest.mark.parametrize("limit", [1, 4096, 65536, 1024 * 1024])
@pytest.mark.parametrize("takeover", [True, False])
def test_messages_come_back_whole_within_each_steps_limit(limit: int, takeover: bool) -> None:
    inflater = Inflater(15, no_context_takeover=not takeover)
    deflater = zlib.compressobj(wbits=-15)
    for data in MESSAGES:
        if limit == 1 and len(data) > 100_000:
            continue  # (a byte a step: slow, nothing more to learn)
        if not takeover:
            deflater = zlib.compressobj(wbits=-15)
        body = deflated(data, deflater)
        assert inflate(inflater, [(body, True)], limit) == data
        # and as two frames: the message goes on in a continuation
        again = deflated(data, deflater) if takeover else body
        cut = len(again) // 2
        assert inflate(inflater, [(again[:cut], False), (again[cut:], True)], limit) == data


@pytest.mark.parametrize("extra", [0, 1])
def test_a_message_of_exactly_the_step_ends_in_that_step(extra: int) -> None:
    limit = 65536
    inflater = Inflater(15, no_context_takeover=True)
    inflater.start(deflated(b"i" * (limit + extra), zlib.compressobj(wbits=-15)), True, True)
    assert len(inflater.step(limit)) == limit
    assert inflater.busy is bool(extra)  # one byte more: a second step gives it
    if extra:
        assert inflater.step(limit) == b"i" and not inflater.busy


def test_a_bomb_is_inflated_a_step_at_a_time_from_small_slices() -> None:
    body = deflated(b"\0" * (128 * 1024 * 1024), zlib.compressobj(wbits=-15))
    assert len(body) > IN_SLICE  # several slices of compressed input
    inflater = Inflater(15, no_context_takeover=True)
    inflater.start(body, True, True)
    steps = 0
    while inflater.busy:
        assert len(inflater.step(1024 * 1024)) <= 1024 * 1024
        steps += 1
    assert steps >= 128


def test_not_deflate_raises() -> None:
    inflater = Inflater(15, no_context_takeover=True)
    inflater.start(b"\xff\xff\xff not deflate", True, True)
    with pytest.raises(zlib.error):
        inflater.step(1024)
