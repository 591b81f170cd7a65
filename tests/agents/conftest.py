"""Fixtures of the agent tests: one fake provider for the session, and `agent_run`, which runs
an installed agent through `sseproxy run` (the installed command, on the bundled config with
its routes' upstreams pointed at the fake) in a scratch folder with a HOME of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.agents.runner import AgentRunner
from tests.product.fake_provider import FakeProvider


@pytest.fixture(scope="session")
def fake() -> Iterator[FakeProvider]:
    provider = FakeProvider()
    provider.start()
    yield provider
    provider.stop()


@pytest.fixture
def agent_run(fake: FakeProvider, tmp_path_factory: pytest.TempPathFactory) -> AgentRunner:
    return AgentRunner(fake, tmp_path_factory.mktemp("agent"))
