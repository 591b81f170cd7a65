"""What the intercept listener's socket-level tests share: raw exchanges with the listener, an
echo server to tunnel to, and the `connect.finished` lines it writes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.integration.conftest import LogCapture

TIMEOUT = 10.0


async def start_echo() -> asyncio.Server:
    """A server on 127.0.0.1 that sends back what it reads until the client closes."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
        writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


def connect_lines(logs: LogCapture) -> list[dict[str, Any]]:
    parsed = (json.loads(line) for line in "".join(logs.stream.history).splitlines())
    return [r for r in parsed if r.get("event") == "connect.finished"]


async def wait_line(logs: LogCapture) -> dict[str, Any]:
    """The one `connect.finished` line, once written."""
    async with asyncio.timeout(TIMEOUT):
        while not connect_lines(logs):
            await asyncio.sleep(0.01)
    [line] = connect_lines(logs)
    return line


async def exchange(port: int, data: bytes) -> bytes:
    """Send `data`, then read until the listener closes."""
    async with asyncio.timeout(TIMEOUT):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(data)
        answer = await reader.read()
        writer.close()
    return answer
