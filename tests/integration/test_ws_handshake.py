"""A client's WebSocket handshake is checked before any upstream is contacted (RFC 6455
§4.2.1): each invalid variant gets the proxy's own 400 (426 for a version other than 13) with
a JSON error and a record, and the upstream never sees a connection."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sseproxy.config import load
from sseproxy.shell.app import create_app
from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED
from tests.integration.conftest import raw_exchange

KEY = b"dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455's sample: base64 of 16 bytes
GOOD = {
    b"Host": b"x",
    b"Upgrade": b"websocket",
    b"Connection": b"Upgrade",
    b"Sec-WebSocket-Key": KEY,
    b"Sec-WebSocket-Version": b"13",
}


class CountingUpstream:
    """Counts the connections it accepts and closes each at once."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
async def counting() -> Any:
    up = CountingUpstream()
    url = await up.start()
    yield up, url
    await up.stop()


def request(
    drop: tuple[bytes, ...] = (),
    set_: dict[bytes, bytes] | None = None,
    line: bytes = b"GET /v1/realtime?model=m HTTP/1.1",
    extra: bytes = b"",
) -> bytes:
    fields = {k: v for k, v in GOOD.items() if k not in drop}
    fields.update(set_ or {})
    head = b"".join(k + b": " + v + b"\r\n" for k, v in fields.items())
    return line + b"\r\n" + head + extra + b"\r\n"


def split(answer: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    return status, headers, json.loads(body) if body else {}


INVALID = {
    "no version": (request(drop=(b"Sec-WebSocket-Version",)), 400),
    "version 8": (request(set_={b"Sec-WebSocket-Version": b"8"}), 426),
    "version 13 and 8": (request(extra=b"Sec-WebSocket-Version: 8\r\n"), 426),
    "no key": (request(drop=(b"Sec-WebSocket-Key",)), 400),
    "key not base64": (request(set_={b"Sec-WebSocket-Key": b"not base64 at all, 24 ch"}), 400),
    "key of 15 bytes": (request(set_={b"Sec-WebSocket-Key": b"dGhlIHNhbXBsZSBub25jZQ"}), 400),
    "key of 17 bytes": (request(set_={b"Sec-WebSocket-Key": b"dGhlIHNhbXBsZSBub25jZSE="}), 400),
    "two keys": (request(extra=b"Sec-WebSocket-Key: " + KEY + b"\r\n"), 400),
    "no Connection: upgrade": (request(set_={b"Connection": b"keep-alive"}), 400),
    "HTTP/1.0": (request(line=b"GET /v1/realtime?model=m HTTP/1.0"), 400),
    "POST": (
        request(line=b"POST /v1/realtime?model=m HTTP/1.1", set_={b"Content-Length": b"0"}),
        400,
    ),
}


@pytest.mark.parametrize("name", list(INVALID))
async def test_an_invalid_handshake_is_refused_before_any_upstream_is_contacted(
    counting, aiohttp_server, logs, name: str
) -> None:
    up, url = counting
    data, expected = INVALID[name]
    server = await aiohttp_server(create_app(load(None, {}, {"upstream": url})))
    answer = await raw_exchange(server.port, data)
    status, headers, body = split(answer)
    assert status == expected, answer
    assert up.connections == 0
    etype = "sseproxy_websocket_version" if expected == 426 else "sseproxy_bad_websocket_handshake"
    assert body["error"]["type"] == etype
    [record] = await logs.wait(1)
    assert (record["status"], record["state"], record["error"]["type"]) == (
        expected,
        "http_error",
        etype,
    )
    assert headers["x-sseproxy-request-id"] == record["request_id"]
    assert record["answered_by"] == "proxy"
    if expected == 426 or name == "no version":  # RFC 6455 §4.2.2: the version it speaks
        assert headers["sec-websocket-version"] == "13"
    if expected == 426:
        assert headers["upgrade"] == "websocket"  # RFC 9110 §15.5.22


@pytest.mark.skipif(not SESSIONS_SUPPORTED, reason="WebSocket sessions need aiohttp 3.14")
async def test_a_valid_handshake_still_reaches_the_upstream(counting, aiohttp_server, logs) -> None:
    """The control: the same request, whole, is taken upstream (which closes at once: 502)."""
    up, url = counting
    server = await aiohttp_server(create_app(load(None, {}, {"upstream": url})))
    whole = request(set_={b"Connection": b"Upgrade, close"})  # to read until the end
    status, _, body = split(await raw_exchange(server.port, whole))
    assert (status, up.connections) == (502, 1)
    assert body["error"]["type"] == "sseproxy_upstream_unreachable"
