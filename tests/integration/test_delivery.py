"""Delivery and stalls over real loopback sockets: the keepalive-stall drill in `sseproxy mock`,
ClientDelivery around a tiny local relay, and ContentWatch cutting a keep-alive-only stall."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import ClientResponse

from sseproxy.core.inject import parse_rules
from sseproxy.mock import INJECT_HEADER, MockServer, load_recordings
from tests import corpus
from tests.streams import chat_chunk as chat
from tests.streams import sse

CHAT_PATH = "/v1/chat/completions"
CHAT_EVENTS = [sse(chat("one")), sse(chat(" two")), sse(chat(finish="stop")), b"data: [DONE]\n\n"]
KEEP_ALIVE = b": keep-alive\n\n"
PING = b'event: ping\ndata: {"type": "ping"}\n\n'


async def read_exactly(resp: ClientResponse, size: int) -> bytes:
    """Read until `size` bytes arrived (or the body ended), each read bounded in time."""
    got = b""
    while len(got) < size:
        chunk = await asyncio.wait_for(resp.content.readany(), 10)
        if not chunk:
            break
        got += chunk
    return got


# -- the keepalive-stall drill in `sseproxy mock` ---------------------------------------------


async def test_mock_keepalive_stall_sends_keep_alives_only_after_n_events(
    tmp_path: Path, aiohttp_client
) -> None:
    (tmp_path / "chat.sse").write_bytes(b"".join(CHAT_EVENTS))
    mock = MockServer(load_recordings([tmp_path]), speed=0, allow_inject=True)
    client = await aiohttp_client(mock.app())
    resp = await client.post(CHAT_PATH, headers={INJECT_HEADER: "keepalive-stall=2"})
    want = CHAT_EVENTS[0] + CHAT_EVENTS[1] + KEEP_ALIVE + KEEP_ALIVE  # the second after 1 s
    assert await read_exactly(resp, len(want)) == want
    resp.close()


async def test_mock_keepalive_stall_pings_in_the_anthropic_dialect(
    tmp_path: Path, aiohttp_client
) -> None:
    body = corpus.file("anthropic-messages/text-basic-pings.sse")
    (tmp_path / "anthropic.sse").write_bytes(body)
    mock = MockServer(load_recordings([tmp_path]), speed=0, inject=parse_rules("keepalive-stall=3"))
    client = await aiohttp_client(mock.app())
    resp = await client.post("/v1/messages")
    first_three = b"\n\n".join(body.split(b"\n\n")[:3]) + b"\n\n"
    want = first_three + PING
    assert await read_exactly(resp, len(want)) == want
    resp.close()
