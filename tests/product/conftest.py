"""Fixtures of the product tests: one fake provider for the session, the installed command
started on each event loop it ships with (one process per module and loop), and a factory for
tests that need a process of their own (they signal or kill it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.product.fake_provider import FakeProvider
from tests.product.proxy_process import ProxyProcess, start_proxy

# The event loops: None keeps the default (`event_loop = "auto"`: uvloop), as users run it.
LOOPS = [None, "asyncio"]
LOOP_IDS = ["default-loop", "asyncio-loop"]


@pytest.fixture(scope="session")
def fake() -> Iterator[FakeProvider]:
    provider = FakeProvider()
    provider.start()
    yield provider
    provider.stop()


@pytest.fixture(scope="module", params=LOOPS, ids=LOOP_IDS)
def loop(request: pytest.FixtureRequest) -> str | None:
    """The proxy's event loop: `--event-loop asyncio`, or None for the default."""
    value: str | None = request.param
    return value


@pytest.fixture(scope="module")
def proxy(
    fake: FakeProvider, loop: str | None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyProcess]:
    """The installed command on its defaults in front of the fake, shared by a module's tests
    (each asks for a model of its own, which tells its records apart)."""
    process = start_proxy(tmp_path_factory.mktemp("proxy"), fake.url, loop)
    yield process
    process.stop()


Launch = Callable[..., ProxyProcess]


@pytest.fixture
def launch(fake: FakeProvider, loop: str | None, tmp_path: Path) -> Iterator[Launch]:
    """Start a process of the test's own (extra flags, a paused stdout reader); every one
    started is ended when the test ends, however it ends."""
    started: list[ProxyProcess] = []

    def make(args: Sequence[str] = (), pause_after_start: bool = False) -> ProxyProcess:
        folder = tmp_path / f"proxy-{len(started)}"
        folder.mkdir()
        process = start_proxy(folder, fake.url, loop, args, pause_after_start)
        started.append(process)
        return process

    yield make
    for process in started:
        process.stop()
