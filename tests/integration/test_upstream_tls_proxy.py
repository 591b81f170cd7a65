"""An https upstream through the whole proxy (client -> sseproxy -> upstream): trusted by
`upstream_ca_file` or refused with a 502 naming why, and reached through an egress proxy's
CONNECT tunnel unless NO_PROXY covers it (an `https://` egress proxy over TLS of its own)."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp import web

from sseproxy.config import load
from sseproxy.shell.app import create_app
from tests.integration.egress_proxy import ConnectProxy
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"
COMPLETE = sse(chat_chunk("Hello"), chat_chunk(finish="stop"), "[DONE]")


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


async def stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for part in COMPLETE.split(b"\n\n")[:-1]:
        await response.write(part + b"\n\n")
    await response.write_eof()
    return response


@pytest.fixture
async def tls_upstream(ca: trustme.CA) -> AsyncIterator[str]:
    """An https upstream on 127.0.0.1 whose certificate only the test CA signs."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    app = web.Application()
    app.router.add_post(PATH, stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    yield f"https://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.fixture
def tls_proxy(aiohttp_server, logs) -> Callable[..., Any]:
    """The proxy for `upstream` with settings overrides and the given environment."""

    async def make(
        upstream: str, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> str:
        settings = load(None, {}, {"upstream": upstream, **overrides})
        server = await aiohttp_server(create_app(settings, environ=environ))
        return str(server.make_url("")).rstrip("/")

    return make


async def fetch(url: str) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url, json={}, auto_decompress=False, timeout=aiohttp.ClientTimeout(10)
        ) as resp,
    ):
        return resp.status, await resp.read()


async def test_an_upstream_signed_by_the_configured_ca_is_relayed_byte_for_byte(
    tls_upstream: str, ca_file: str, tls_proxy, logs
) -> None:
    url = await tls_proxy(tls_upstream, upstream_ca_file=ca_file)
    assert await fetch(url + PATH) == (200, COMPLETE)
    [record] = await logs.wait(1)
    assert (record["status"], record["state"]) == (200, "completed")


async def test_without_the_ca_the_client_gets_a_502_naming_the_certificate(
    tls_upstream: str, tls_proxy, logs
) -> None:
    url = await tls_proxy(tls_upstream)  # the system's store knows no test CA
    status, body = await fetch(url + PATH)
    assert status == 502
    assert json.loads(body)["error"]["type"] == "sseproxy_upstream_unreachable"
    [record] = await logs.wait(1)
    assert (record["status"], record["state"]) == (502, "http_error")
    assert record["interruption"]["reason"] == "upstream_unreachable"
    assert "CERTIFICATE_VERIFY_FAILED" in record["error"]["message"]


async def test_https_goes_through_the_egress_proxy_in_a_connect_tunnel(
    tls_upstream: str, ca_file: str, tls_proxy, logs
) -> None:
    async with ConnectProxy() as egress:
        environ = {"HTTPS_PROXY": f"http://{egress.url}"}
        url = await tls_proxy(tls_upstream, environ, upstream_ca_file=ca_file)
        assert await fetch(url + PATH) == (200, COMPLETE)
    authority = tls_upstream.removeprefix("https://").encode()
    assert egress.heads == [b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)]
    [record] = await logs.wait(1)
    assert (record["status"], record["state"]) == (200, "completed")


async def test_no_proxy_covering_the_upstream_host_goes_direct(
    tls_upstream: str, ca_file: str, tls_proxy, logs
) -> None:
    async with ConnectProxy() as egress:
        environ = {"HTTPS_PROXY": f"http://{egress.url}", "NO_PROXY": "localhost,127.0.0.1"}
        url = await tls_proxy(tls_upstream, environ, upstream_ca_file=ca_file)
        assert await fetch(url + PATH) == (200, COMPLETE)
    assert egress.heads == []
    [record] = await logs.wait(1)
    assert (record["status"], record["state"]) == (200, "completed")


def proxy_tls(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


async def test_an_https_egress_proxy_tunnels_with_its_credentials_and_no_record_holds_them(
    tls_upstream: str, ca: trustme.CA, ca_file: str, tls_proxy, logs
) -> None:
    async with ConnectProxy(tls=proxy_tls(ca)) as egress:
        environ = {"HTTPS_PROXY": f"https://agent:s3cret-pw@{egress.url}"}
        url = await tls_proxy(tls_upstream, environ, upstream_ca_file=ca_file)
        assert await fetch(url + PATH) == (200, COMPLETE)
    authority = tls_upstream.removeprefix("https://").encode()
    basic = base64.b64encode(b"agent:s3cret-pw")
    assert egress.heads == [
        b"CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n"
        % (authority, authority, basic)
    ]
    [record] = await logs.wait(1)
    assert (record["status"], record["state"]) == (200, "completed")
    assert "s3cret-pw" not in json.dumps(record) and basic.decode() not in json.dumps(record)


async def test_an_https_egress_proxy_the_trust_refuses_is_a_502_naming_the_proxy(
    tls_upstream: str, ca: trustme.CA, tls_proxy, logs
) -> None:
    async with ConnectProxy(tls=proxy_tls(ca)) as egress:
        environ = {"HTTPS_PROXY": f"https://agent:s3cret-pw@{egress.url}"}
        url = await tls_proxy(tls_upstream, environ)  # the system's store knows no test CA
        status, body = await fetch(url + PATH)
        named = f"egress proxy https://{egress.url}: SSLCertVerificationError"
    assert status == 502
    assert json.loads(body)["error"]["type"] == "sseproxy_upstream_unreachable"
    assert egress.heads == []
    [record] = await logs.wait(1)
    assert (record["status"], record["state"]) == (502, "http_error")
    assert record["interruption"]["reason"] == "upstream_unreachable"
    message = record["error"]["message"]
    assert message.startswith(named)
    assert "CERTIFICATE_VERIFY_FAILED" in message
    assert "s3cret-pw" not in json.dumps(record) and "s3cret-pw" not in body.decode()
