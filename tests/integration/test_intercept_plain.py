"""The intercept listener's plain-HTTP requests (`GET http://host/path`, as `HTTP_PROXY`
clients send them) and its egress proxy, over real sockets on asyncio's loop and uvloop.

An intercepted host's request goes through the reverse proxy's own server (a record, route
`intercept`, upstream `http://host:port`); any other host's is forwarded (origin-form, proxy
headers dropped) with one `connect.finished` line, mode `forward`. Tunnels, forwarded requests
and the intercepted upstream leg all reach their host through the configured egress proxy
(`ConnectProxy`, which records the CONNECT heads it was sent)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp import web

from sseproxy.config import load
from sseproxy.intercept.ca import Leaves, load_or_create
from sseproxy.intercept.connect import MAX_HEAD_BYTES
from sseproxy.intercept.listener import InterceptListener, ListenerSettings
from sseproxy.shell.app import create_app
from sseproxy.shell.upstream.egress import EgressProxy, ProxySettings
from tests.integration.conftest import SERVER_KWARGS, LogCapture
from tests.integration.egress_proxy import ConnectProxy
from tests.integration.intercept_sockets import (
    TIMEOUT,
    connect_lines,
    exchange,
    start_echo,
    wait_line,
)
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"
COMPLETE = sse(chat_chunk("Hello"), chat_chunk(finish="stop"), "[DONE]")


class Answering(asyncio.Protocol):
    """Stands in for the aiohttp server where no request is intercepted."""


@pytest.fixture(scope="module")
def leaves(tmp_path_factory: pytest.TempPathFactory) -> Leaves:
    return Leaves(load_or_create(tmp_path_factory.mktemp("ca")))


class Origin:
    """A plain HTTP server that keeps each request head it got and answers `hello`."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.heads.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    found = Origin()
    found.server = await asyncio.start_server(found.serve, "127.0.0.1", 0)
    yield found
    found.server.close()


async def listening(
    leaves: Leaves, hosts: set[str], server: Any = Answering, **settings: Any
) -> tuple[InterceptListener, int]:
    settings.setdefault("head_timeout", 0.3)
    proxy = InterceptListener(ListenerSettings(hosts, 5, **settings), leaves, server)
    return proxy, await proxy.start("127.0.0.1", 0)


def plain_head_of(size: int, authority: str) -> bytes:
    start = f"GET http://{authority}/x HTTP/1.1\r\nX-Pad: ".encode()
    return start + b"a" * (size - len(start) - 4) + b"\r\n\r\n"


# -- forwarded: a host that is not intercepted -------------------------------------------------


async def test_a_plain_request_to_another_host_is_forwarded_in_origin_form(
    leaves: Leaves, origin: Origin, logs: LogCapture
) -> None:
    proxy, port = await listening(leaves, {"intercepted.test"})
    try:
        request = (
            f"GET http://127.0.0.1:{origin.port}/v1/models?a=1 HTTP/1.1\r\n"
            "Host: elsewhere.test\r\nProxy-Authorization: Basic dTpw\r\n"
            "Proxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n"
        ).encode()
        answer = await exchange(port, request)
    finally:
        await proxy.stop()
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nhello")
    assert origin.heads == [
        f"GET /v1/models?a=1 HTTP/1.1\r\nHost: 127.0.0.1:{origin.port}\r\nAccept: */*\r\n"
        "Connection: close\r\n\r\n".encode()
    ]
    line = await wait_line(logs)
    assert (line["mode"], line["outcome"], line["host"], line["port"]) == (
        "forward",
        "closed",
        "127.0.0.1",
        origin.port,
    )
    assert line["bytes_up"] == len(origin.heads[0])  # the head as forwarded
    assert line["bytes_down"] == len(answer)
    assert line["egress"] is None


async def test_an_absolute_form_head_at_the_bound_is_forwarded(
    leaves: Leaves, origin: Origin, logs: LogCapture
) -> None:
    proxy, port = await listening(leaves, set())
    head = plain_head_of(MAX_HEAD_BYTES, f"127.0.0.1:{origin.port}")
    assert len(head) == MAX_HEAD_BYTES
    try:
        answer = await exchange(port, head)
    finally:
        await proxy.stop()
    assert answer.endswith(b"hello")
    assert (await wait_line(logs))["outcome"] == "closed"


async def test_an_absolute_form_head_one_byte_over_the_bound_is_refused(
    leaves: Leaves, origin: Origin, logs: LogCapture
) -> None:
    proxy, port = await listening(leaves, set())
    try:
        answer = await exchange(port, plain_head_of(MAX_HEAD_BYTES + 1, f"127.0.0.1:{origin.port}"))
    finally:
        await proxy.stop()
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert origin.heads == []
    assert (await wait_line(logs))["outcome"] == "bad_connect"


async def test_an_absolute_form_head_that_does_not_arrive_in_time_is_answered_408(
    leaves: Leaves, origin: Origin, logs: LogCapture
) -> None:
    proxy, port = await listening(leaves, set())
    try:
        answer = await exchange(port, f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\n".encode())
    finally:
        await proxy.stop()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert origin.heads == []
    assert (await wait_line(logs))["outcome"] == "head_timeout"


async def test_an_origin_form_request_is_told_this_is_a_forward_proxy(
    leaves: Leaves, logs: LogCapture
) -> None:
    proxy, port = await listening(leaves, set())
    try:
        answer = await exchange(port, b"GET /v1/models HTTP/1.1\r\nHost: x.test\r\n\r\n")
    finally:
        await proxy.stop()
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"forward proxy" in answer
    assert (await wait_line(logs))["outcome"] == "bad_connect"


async def test_a_forward_to_a_host_that_cannot_be_reached_is_answered_502(
    leaves: Leaves, logs: LogCapture
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        free = closed.getsockname()[1]
    proxy, port = await listening(leaves, set())
    try:
        answer = await exchange(port, f"GET http://127.0.0.1:{free}/ HTTP/1.1\r\n\r\n".encode())
    finally:
        await proxy.stop()
    assert answer.startswith(b"HTTP/1.1 502 ")
    line = await wait_line(logs)
    assert (line["mode"], line["outcome"], line["port"]) == (
        "forward",
        "upstream_unreachable",
        free,
    )


# -- intercepted: the reverse proxy's own server -----------------------------------------------


async def stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(COMPLETE)
    await response.write_eof()
    return response


@pytest.fixture
async def plain_upstream() -> AsyncIterator[tuple[int, list[str]]]:
    """An http upstream on 127.0.0.1 answering `PATH` with a stream; keeps the Host lines."""
    hosts: list[str] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        hosts.append(request.headers.get("Host", ""))
        return await stream(request)

    app = web.Application()
    app.router.add_post(PATH, handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield runner.addresses[0][1], hosts
    await runner.cleanup()


async def intercepting(
    leaves: Leaves, environ: Mapping[str, str], **overrides: Any
) -> tuple[InterceptListener, int, web.AppRunner]:
    """The reverse proxy's app and, beside it, the listener intercepting 127.0.0.1."""
    settings = load(None, {}, {"intercept_listen": "127.0.0.1:0", **overrides})
    runner = web.AppRunner(
        create_app(settings, environ=environ), handler_cancellation=True, **SERVER_KWARGS
    )
    await runner.setup()
    assert runner.server is not None
    proxy, port = await listening(
        leaves,
        {"127.0.0.1"},
        runner.server,
        proxies=ProxySettings.from_environ(environ),
        head_timeout=5,
    )
    return proxy, port, runner


async def post_through(proxy_port: int, url: str) -> tuple[int, bytes]:
    """aiohttp's client given an HTTP proxy: an http:// URL goes in absolute-form."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url,
            json={"model": "m", "stream": True},
            proxy=f"http://127.0.0.1:{proxy_port}",
            timeout=aiohttp.ClientTimeout(TIMEOUT),
        ) as response,
    ):
        return response.status, await response.read()


async def test_a_plain_request_to_an_intercepted_host_is_recorded_as_the_reverse_proxy_does(
    leaves: Leaves, plain_upstream: tuple[int, list[str]], logs: LogCapture
) -> None:
    up_port, hosts = plain_upstream
    proxy, port, runner = await intercepting(leaves, {})
    try:
        got = await post_through(port, f"http://127.0.0.1:{up_port}{PATH}")
        [record] = await logs.wait(1)
    finally:
        await proxy.stop()
        await runner.cleanup()
    assert got == (200, COMPLETE)
    assert (record["route"], record["upstream"]) == ("intercept", f"http://127.0.0.1:{up_port}")
    assert (record["dialect"], record["state"], record["status"]) == (
        "openai-chat",
        "completed",
        200,
    )
    assert hosts == [f"127.0.0.1:{up_port}"]
    assert connect_lines(logs) == []  # an intercepted exchange writes its record only


async def test_a_request_pipelined_after_a_plain_one_never_reaches_an_upstream(
    leaves: Leaves, plain_upstream: tuple[int, list[str]], logs: LogCapture
) -> None:
    """One request per connection (`Connection: close` is added): a second one sent at once
    behind the first, naming another host, is never carried to the first one's host. The
    server's parser refuses the connection whole (a 400; none of the clients of
    docs/intercept.md pipelines)."""
    up_port, hosts = plain_upstream
    proxy, port, runner = await intercepting(leaves, {})
    body = b'{"model":"m","stream":true}'
    one = (
        f"POST http://127.0.0.1:{up_port}{PATH} HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    two = one.replace(b"http://127.0.0.1", b"http://other.test")
    try:
        answer = await exchange(port, one + two)
    finally:
        await proxy.stop()
        await runner.cleanup()
    assert answer.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request")
    assert hosts == []
    assert logs.records() == []


async def test_a_plain_request_to_an_intercepted_host_goes_through_the_egress_proxy(
    leaves: Leaves, plain_upstream: tuple[int, list[str]], logs: LogCapture
) -> None:
    up_port, _ = plain_upstream
    async with ConnectProxy() as egress:
        proxy, port, runner = await intercepting(leaves, {"HTTP_PROXY": f"http://{egress.url}"})
        try:
            got = await post_through(port, f"http://127.0.0.1:{up_port}{PATH}")
            [record] = await logs.wait(1)
        finally:
            await proxy.stop()
            await runner.cleanup()
    assert got == (200, COMPLETE)
    assert record["route"] == "intercept"
    authority = f"127.0.0.1:{up_port}".encode()
    assert egress.heads == [b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)]


@pytest.fixture(scope="module")
def upstream_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def tls_upstream(upstream_ca: trustme.CA) -> AsyncIterator[int]:
    """An https upstream on 127.0.0.1 whose certificate only the test CA signs."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    upstream_ca.issue_cert("127.0.0.1").configure_cert(context)
    app = web.Application()
    app.router.add_post(PATH, stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    yield runner.addresses[0][1]
    await runner.cleanup()


# Older aiohttp (3.11) warns of TLS in TLS for any https request through a proxy on uvloop
# (its transport lacks asyncio's `_start_tls_compatible`), though this proxy is plain http.
@pytest.mark.filterwarnings("ignore:An HTTPS request is being sent through an HTTPS proxy")
async def test_an_intercepted_https_request_goes_through_the_egress_proxy(
    leaves: Leaves, upstream_ca: trustme.CA, tls_upstream: int, tmp_path: Path, logs: LogCapture
) -> None:
    """CONNECT to the listener, TLS with its leaf, the request decrypted: the upstream leg
    (TLS to the real host, checked with `upstream_ca_file`) is tunnelled through HTTPS_PROXY."""
    ca_file = tmp_path / "upstream-ca.pem"
    upstream_ca.cert_pem.write_to_path(str(ca_file))
    authority = f"127.0.0.1:{tls_upstream}"
    async with ConnectProxy() as egress:
        environ = {"HTTPS_PROXY": f"http://{egress.url}"}
        proxy, port, runner = await intercepting(leaves, environ, upstream_ca_file=str(ca_file))
        client_tls = ssl.create_default_context(cafile=str(leaves.authority.cert_path))
        connector = aiohttp.TCPConnector(ssl=client_tls)
        try:
            async with (
                aiohttp.ClientSession(connector=connector) as session,
                session.post(
                    f"https://{authority}{PATH}",
                    json={"model": "m", "stream": True},
                    proxy=f"http://127.0.0.1:{port}",
                    timeout=aiohttp.ClientTimeout(TIMEOUT),
                ) as response,
            ):
                got = response.status, await response.read()
            [record] = await logs.wait(1)
        finally:
            await proxy.stop()
            await runner.cleanup()
    assert got == (200, COMPLETE)
    assert (record["route"], record["upstream"]) == ("intercept", f"https://{authority}")
    assert record["state"] == "completed"
    wanted = authority.encode()
    assert egress.heads == [b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (wanted, wanted)]


# -- tunnels and forwards through the egress proxy ---------------------------------------------


@pytest.fixture
async def echo() -> AsyncIterator[int]:
    server = await start_echo()
    yield server.sockets[0].getsockname()[1]
    server.close()


def egress_of(proxy: ConnectProxy, no_proxy: str = "") -> ProxySettings:
    host, _, port = proxy.url.rpartition(":")
    egress = EgressProxy(host, int(port))
    return ProxySettings(https=egress, http=egress, no_proxy=no_proxy)


async def test_a_tunnel_goes_through_the_egress_proxy(
    leaves: Leaves, echo: int, logs: LogCapture
) -> None:
    async with ConnectProxy() as egress:
        named = f"http://{egress.url}"
        proxy, port = await listening(leaves, set(), proxies=egress_of(egress))
        try:
            async with asyncio.timeout(TIMEOUT):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n".encode())
                assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
                writer.write(b"ping")
                assert await reader.readexactly(4) == b"ping"
                writer.close()
            line = await wait_line(logs)
        finally:
            await proxy.stop()
    authority = f"127.0.0.1:{echo}".encode()
    assert egress.heads == [b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)]
    assert (line["mode"], line["outcome"], line["bytes_up"], line["bytes_down"]) == (
        "tunnel",
        "closed",
        4,
        4,
    )
    assert line["egress"] == named


async def test_a_forwarded_request_goes_through_the_egress_proxy(
    leaves: Leaves, origin: Origin, logs: LogCapture
) -> None:
    async with ConnectProxy() as egress:
        named = f"http://{egress.url}"
        proxy, port = await listening(leaves, set(), proxies=egress_of(egress))
        try:
            request = f"GET http://127.0.0.1:{origin.port}/a HTTP/1.1\r\n\r\n".encode()
            answer = await exchange(port, request)
            line = await wait_line(logs)
        finally:
            await proxy.stop()
    assert answer.endswith(b"hello")
    authority = f"127.0.0.1:{origin.port}".encode()
    assert egress.heads == [b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)]
    assert origin.heads[0].startswith(b"GET /a HTTP/1.1\r\n")
    assert (line["mode"], line["egress"]) == ("forward", named)


async def test_no_proxy_covering_the_host_tunnels_directly(
    leaves: Leaves, echo: int, logs: LogCapture
) -> None:
    async with ConnectProxy() as egress:
        proxy, port = await listening(leaves, set(), proxies=egress_of(egress, "127.0.0.1"))
        try:
            async with asyncio.timeout(TIMEOUT):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n".encode())
                assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
                writer.close()
            line = await wait_line(logs)
        finally:
            await proxy.stop()
    assert egress.heads == []
    assert line["egress"] is None


async def test_an_egress_proxy_that_refuses_is_a_502_naming_it(
    leaves: Leaves, echo: int, logs: LogCapture
) -> None:
    refusal = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"
    async with ConnectProxy(refuse=refusal) as egress:
        named = f"http://{egress.url}"
        proxy, port = await listening(leaves, set(), proxies=egress_of(egress))
        try:
            answer = await exchange(port, f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n".encode())
            line = await wait_line(logs)
        finally:
            await proxy.stop()
    assert answer.startswith(b"HTTP/1.1 502 ")
    assert (line["outcome"], line["egress"]) == ("upstream_unreachable", named)
    assert "egress proxy refused CONNECT" in line["error"] and "403" in line["error"]


async def test_an_egress_proxy_that_is_the_listener_itself_is_refused_at_start(
    leaves: Leaves,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    itself = ProxySettings(https=EgressProxy("127.0.0.1", free))
    proxy = InterceptListener(ListenerSettings(set(), 5, proxies=itself), leaves, Answering)
    with pytest.raises(ValueError, match="is this listener"):
        await proxy.start("127.0.0.1", free)
    await proxy.stop()
