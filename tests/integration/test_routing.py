"""Routing through the live proxy: the upstream sees the client's raw path under the route's
own host, a crafted path reaches no other host, and upstream userinfo is never printed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from sseproxy.config import load
from sseproxy.shell.app import create_app
from tests.integration.conftest import LogCapture

ROUTES = """
[[routes]]
name = "sp"
paths = ["/sp/*"]
strip_prefix = "/sp"
upstream = "http://user:hunter2@127.0.0.1:{port}/base"
"""


async def recorder(aiohttp_server: Any) -> tuple[list[str], int]:
    """An upstream that answers 200 and keeps each raw request target it saw."""
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.raw_path)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    server = await aiohttp_server(app)
    return seen, server.port


async def test_crafted_paths_stay_on_the_route_and_arrive_raw(
    aiohttp_server: Any, aiohttp_client: Any, tmp_path: Path, logs: LogCapture
) -> None:
    seen, port = await recorder(aiohttp_server)
    decoy_seen, decoy_port = await recorder(aiohttp_server)
    cfg = tmp_path / "routes.toml"
    cfg.write_text(ROUTES.format(port=port))
    client = await aiohttp_client(create_app(load(cfg)))
    sent = [
        f"/sp/@127.0.0.1:{decoy_port}/steal",
        f"/sp//127.0.0.1:{decoy_port}/steal",
        "/sp/v1/x%3Fkey=SECRET",
        "/sp/v1/a%2Fb/%2541?q=%3F",
    ]
    async with aiohttp.ClientSession() as session:
        for raw in sent:  # encoded=True: the test client must not normalise the target either
            url = URL(f"http://127.0.0.1:{client.port}{raw}", encoded=True)
            async with session.get(url) as resp:
                assert resp.status == 200, await resp.text()
    assert decoy_seen == []
    assert seen == [
        f"/base/@127.0.0.1:{decoy_port}/steal",
        f"/base//127.0.0.1:{decoy_port}/steal",
        "/base/v1/x%3Fkey=SECRET",
        "/base/v1/a%2Fb/%2541?q=%3F",
    ]
    not_found = await client.get("/elsewhere")
    assert not_found.status == 404
    body = await not_found.text()
    assert "hunter2" not in body and "***@127.0.0.1" in body
    assert logs.records() and all("hunter2" not in line for line in logs.lines())
    assert logs.records()[0]["upstream"] == f"http://***@127.0.0.1:{port}/base"
