from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    import uvloop
except ImportError:  # not on Windows nor PyPy: asyncio's loop alone
    uvloop = None  # type: ignore[assignment]

from sseproxy.capture.format import load_capture
from sseproxy.config import load
from sseproxy.observe import log
from sseproxy.shell import accelerator
from sseproxy.shell.app import STATE, create_app
from tests.integration.fake_upstream import FakeUpstream
from tests.integration.raw_upstream import WireUpstream
from tests.record_contract import invalid_records

# The proxy's own server settings that tests serve it with, as `sseproxy serve` does (server.py):
# the request body as the client sent it, never inflated by aiohttp.
SERVER_KWARGS: dict[str, Any] = {"auto_decompress": False}


class _NotifyingStream(io.StringIO):
    def __init__(self, written: asyncio.Event) -> None:
        super().__init__()
        self.written = written
        self.truncations = 0
        self.history: list[str] = []  # all that was written, kept when a test clears the log

    def write(self, s: str) -> int:
        n = super().write(s)
        self.history.append(s)
        self.written.set()
        return n

    def truncate(self, size: int | None = None) -> int:
        self.truncations += 1
        return super().truncate(size)


class LogCapture:
    def __init__(self) -> None:
        self.written = asyncio.Event()
        self.stream = _NotifyingStream(self.written)
        self._parsed: list[dict[str, Any]] = []
        self._offset = 0
        self._truncations = 0

    def lines(self) -> list[str]:
        return self.stream.getvalue().splitlines()

    def records(self) -> list[dict[str, Any]]:
        if self.stream.truncations != self._truncations:  # a test cleared the log
            self._parsed, self._offset = [], 0
            self._truncations = self.stream.truncations
        text = self.stream.getvalue()
        end = text.rfind("\n") + 1  # parse each complete line once
        if end > self._offset:
            for line in text[self._offset : end].splitlines():
                record = json.loads(line)
                if record.get("event") == "request.finished":
                    self._parsed.append(record)
            self._offset = end
        return list(self._parsed)

    def all_records(self) -> list[dict[str, Any]]:
        """Every record written, also those a test cleared from the log."""
        lines = "".join(self.stream.history).splitlines()
        parsed = (json.loads(line) for line in lines)
        kinds = ("request.finished", "session.finished", "connect.finished")
        return [r for r in parsed if r.get("event") in kinds]

    def sessions(self) -> list[dict[str, Any]]:
        """The `session.finished` records (one per WebSocket connection)."""
        parsed = (json.loads(line) for line in "".join(self.stream.history).splitlines())
        return [r for r in parsed if r.get("event") == "session.finished"]

    async def wait_sessions(self, n: int = 1, timeout: float = 10) -> list[dict[str, Any]]:
        async with asyncio.timeout(timeout):
            while len(self.sessions()) < n:
                self.written.clear()
                await self.written.wait()
        return self.sessions()

    async def wait(self, n: int = 1, timeout: float = 10) -> list[dict[str, Any]]:
        """The records, once at least `n` were written (woken by each write, no polling)."""
        async with asyncio.timeout(timeout):
            while len(self.records()) < n:
                self.written.clear()
                await self.written.wait()
        return self.records()


@pytest.fixture(params=["accelerated", "documented"])
def relay_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test twice: with the accelerator as the app's startup detects it (it must find
    it on: the suite's aiohttp is the one it was written for), and forced off, every write
    through `await response.write()`."""
    mode: str = request.param
    monkeypatch.setattr(accelerator.Detection, "enabled", None if mode == "accelerated" else False)
    return mode


@pytest.fixture
def logs() -> Iterator[LogCapture]:
    capture = LogCapture()
    log.configure("json", "debug", capture.stream, cache=False)
    yield capture
    # The contract: every record any integration test made validates against the schema.
    invalid = invalid_records(capture.all_records())
    assert not invalid, f"records outside the schema: {invalid[:3]}"


@pytest.fixture
async def upstream(aiohttp_server) -> tuple[FakeUpstream, str]:
    fake = FakeUpstream()
    server = await aiohttp_server(fake.app(), auto_decompress=False)  # bodies as forwarded
    return fake, str(server.make_url("")).rstrip("/")


@pytest.fixture
async def wire() -> Any:
    """An upstream that plays `wire.steps` byte for byte on every connection."""
    up = WireUpstream()
    await up.start()
    yield up
    await up.stop()


@pytest.fixture
def make_proxy(aiohttp_client, aiohttp_server, upstream, logs) -> Callable[..., Any]:
    _, url = upstream

    async def make(**overrides: Any) -> Any:
        overrides.setdefault("upstream", url)
        settings = load(None, {}, overrides)
        # aiohttp's TestServer runs with handler_cancellation=True, as `sseproxy serve` does.
        # auto_decompress=False: the request body as sent, as `sseproxy serve` reads it.
        return await aiohttp_client(await aiohttp_server(create_app(settings), **SERVER_KWARGS))

    return make


@pytest.fixture
def proxy_server(aiohttp_server, logs) -> Callable[..., Any]:
    """A proxy for `upstream` URL with settings overrides; returns its base URL."""

    async def make(upstream: str, **overrides: Any) -> str:
        settings = load(None, {}, {"upstream": upstream, **overrides})
        server = await aiohttp_server(create_app(settings), **SERVER_KWARGS)
        return str(server.make_url("")).rstrip("/")

    return make


async def raw_exchange(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send `data` on a fresh connection to 127.0.0.1:port; everything until the peer closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(timeout):
            return await reader.read(-1)
    finally:
        writer.close()


async def captured(client: Any, folder: Path) -> tuple[Path, dict[str, Any], bytes]:
    """The one capture in `folder`, once the capture writer has finished (call it after the
    request's record was written: the record comes first, then the capture is queued)."""
    await client.app[STATE].captures.drain()  # the sidecar is written in a worker thread
    [sidecar_path] = folder.glob("*.json")
    sidecar, body = load_capture(sidecar_path)
    return sidecar_path, sidecar, body


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Every async integration test runs on both loops the proxy ships with: asyncio's and
    uvloop's (`event_loop = "auto"` picks uvloop where it is installed, as users run it).
    uvloop differs in what the shell leans on (transports that do not subclass asyncio's,
    the order of connection callbacks), which in-process tests on asyncio alone never saw."""
    factories: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
        "asyncio": asyncio.new_event_loop
    }
    if uvloop is not None:
        factories["uvloop"] = uvloop.new_event_loop
    return factories
