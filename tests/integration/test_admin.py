"""The own endpoints' guard through the app: a DNS-rebinding Host gets 421 on loopback, a
token opens them beyond loopback under any Host, healthz stays open."""

from __future__ import annotations

from sseproxy.config import load
from sseproxy.shell.app import create_app


async def test_rebinding_host_is_refused_on_loopback(make_proxy) -> None:
    client = await make_proxy()
    for path in ("/_sseproxy/", "/_sseproxy/metrics", "/_sseproxy/events", "/_sseproxy/streams/x"):
        resp = await client.get(path, headers={"Host": "rebind.evil.example:8790"})
        assert resp.status == 421, path
        assert (await resp.json())["error"]["type"] == "sseproxy_host_not_allowed"
    assert (
        await client.get("/_sseproxy/metrics", headers={"Host": "localhost:8790"})
    ).status == 200
    healthz = await client.get("/_sseproxy/healthz", headers={"Host": "rebind.evil.example"})
    assert healthz.status == 200


async def test_token_beyond_loopback_under_any_host(aiohttp_client) -> None:
    app = create_app(load(None, {}, {"listen": "0.0.0.0:8790", "admin_token": "s3cret"}))
    client = await aiohttp_client(app)
    scrape = {"Host": "sseproxy:8790", "Authorization": "Bearer s3cret"}
    assert (await client.get("/_sseproxy/metrics", headers=scrape)).status == 200
    wrong = {"Host": "localhost", "Authorization": "Bearer s3cret!"}
    assert (await client.get("/_sseproxy/metrics", headers=wrong)).status == 403
    assert (await client.get("/_sseproxy/healthz", headers={"Host": "sseproxy"})).status == 200
