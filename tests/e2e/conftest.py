"""Fixtures of the end-to-end tests: the fake upstream, log capture, and the proxy on its
default routes re-pointed at the fake upstream."""

from dataclasses import replace

import pytest

from sseproxy.config import load, make_route
from sseproxy.shell.app import create_app
from tests.integration.conftest import (  # noqa: F401  (shared fixtures)
    SERVER_KWARGS,
    logs,
    make_proxy,
    proxy_server,
    upstream,
)


@pytest.fixture
async def proxy_url(aiohttp_server, upstream, logs) -> str:  # noqa: F811
    """The proxy on the default config, every route re-pointed at the fake upstream."""
    _, fake_url = upstream
    settings = load()
    routes = tuple(
        make_route(r.name, r.paths, fake_url, r.strip_prefix, r.dialect) for r in settings.routes
    )
    # aiohttp's TestServer runs with handler_cancellation=True, as `sseproxy serve` does.
    server = await aiohttp_server(create_app(replace(settings, routes=routes)), **SERVER_KWARGS)
    return str(server.make_url("")).rstrip("/")
