"""On an aiohttp without exact text frames (before 3.14) the proxy refuses WebSocket sessions
with its own answer and a record, rather than relaying messages it would re-encode."""

from __future__ import annotations

import asyncio
import json

import pytest

from sseproxy.config import load
from sseproxy.shell.app import create_app
from sseproxy.shell.websocket import session as websocket
from sseproxy.shell.websocket.session import _exact_text_frames

UPGRADE = (
    b"GET /v1/realtime HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def test_the_check_reads_the_running_aiohttp() -> None:
    import aiohttp

    major, minor = (int(part) for part in aiohttp.__version__.split(".")[:2])
    assert _exact_text_frames() is ((major, minor) >= (3, 14))


async def test_an_upgrade_without_exact_text_frames_gets_a_501_and_a_record(
    aiohttp_server, logs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(websocket, "SESSIONS_SUPPORTED", False)
    settings = load(None, {}, {"upstream": "http://127.0.0.1:9"})
    server = await aiohttp_server(create_app(settings))
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(UPGRADE)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    body = await asyncio.wait_for(reader.readexactly(length), 5)
    writer.close()
    assert head.startswith(b"HTTP/1.1 501")
    assert json.loads(body)["error"]["type"] == "sseproxy_websocket_unsupported"
    [record] = await logs.wait(1)
    assert (record["status"], record["state"]) == (501, "http_error")
    assert record["error"]["type"] == "sseproxy_websocket_unsupported"
