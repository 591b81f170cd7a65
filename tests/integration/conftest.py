from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest

from sseproxy import log
from sseproxy.config import load
from sseproxy.proxy import create_app
from tests.integration.fake_upstream import FakeUpstream


class LogCapture:
    def __init__(self) -> None:
        self.stream = io.StringIO()

    def lines(self) -> list[str]:
        return self.stream.getvalue().splitlines()

    def records(self) -> list[dict[str, Any]]:
        out = [json.loads(line) for line in self.lines()]
        return [r for r in out if r.get("event") == "request.finished"]


@pytest.fixture
def logs() -> LogCapture:
    capture = LogCapture()
    log.configure("json", "debug", capture.stream, cache=False)
    return capture


@pytest.fixture
async def upstream(aiohttp_server) -> tuple[FakeUpstream, str]:
    fake = FakeUpstream()
    server = await aiohttp_server(fake.app())
    return fake, str(server.make_url("")).rstrip("/")


@pytest.fixture
def make_proxy(aiohttp_client, upstream, logs) -> Callable[..., Any]:
    _, url = upstream

    async def make(**overrides: Any) -> Any:
        overrides.setdefault("upstream", url)
        settings = load(None, {}, overrides)
        # aiohttp's TestServer runs with handler_cancellation=True, as `sseproxy serve` does.
        return await aiohttp_client(create_app(settings))

    return make
