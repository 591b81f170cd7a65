"""The owned upstream leg over real loopback sockets: isolation in the pool, TLS with a test
CA, an egress proxy through CONNECT, NO_PROXY, and how transport ends are reported."""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import trustme
import uvloop
from yarl import URL

from sseproxy.core import EndReason
from sseproxy.shell.upstream import UpstreamEnd, UpstreamFailed, UpstreamPool
from tests.integration.egress_proxy import ConnectProxy

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class Receiver:
    def __init__(self) -> None:
        self.body = bytearray()
        self.ended: asyncio.Future[UpstreamEnd] = asyncio.get_running_loop().create_future()

    def on_body(self, chunk: bytes) -> None:
        self.body += chunk

    def on_end(self, end: UpstreamEnd) -> None:
        assert not self.ended.done(), "on_end twice"
        self.ended.set_result(end)

    async def end(self) -> UpstreamEnd:
        return await asyncio.wait_for(self.ended, 5)


class Server:
    """A loopback server: each connection runs `handler(reader, writer, n)`, n counting
    connections from 1; `requests` holds every request head read by `read_request`."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    def url(self, path: str = "/v1/x", scheme: str = "http", host: str = "127.0.0.1") -> URL:
        return URL(f"{scheme}://{host}:{self.port}{path}")

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        body = await reader.readexactly(length)
        self.requests.append(head + body)
        return head

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self.connections)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            pass  # the test's loop is ending: a handler that waits ends with it, quietly
        finally:
            writer.close()


def answer(text: str) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(text), text.encode())


@pytest.fixture
async def pool() -> AsyncIterator[UpstreamPool]:
    pool = UpstreamPool(connect_timeout=2)
    yield pool
    await pool.close()


async def fetch(
    pool: UpstreamPool, url: URL, method: str = "GET"
) -> tuple[int, bytes, UpstreamEnd]:
    receiver = Receiver()
    response = await pool.request(method, url, [], b"", receiver, head_timeout=5)
    end = await receiver.end()
    return response.status, bytes(receiver.body), end


# -- isolation ---------------------------------------------------------------------------------


async def test_the_request_goes_as_built_with_no_header_added_but_host_and_length(
    pool: UpstreamPool,
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await server.read_request(reader)
            writer.write(answer("ok"))

    async with Server(handler) as server:
        url = URL(f"http://127.0.0.1:{server.port}/v1/a%2Fb/%7Ex?alt=sse&q=%20", encoded=True)
        receiver = Receiver()
        headers = [
            ("Content-Type", "application/json"),
            ("x-api-key", "k"),
            ("X-Dup", "1"),
            ("X-Dup", "2"),
        ]
        await pool.request("POST", url, headers, b'{"a":1}', receiver, head_timeout=5)
        await receiver.end()
        assert server.requests == [
            b"POST /v1/a%2Fb/%7Ex?alt=sse&q=%20 HTTP/1.1\r\n"
            + b"Host: 127.0.0.1:%d\r\n" % server.port
            + b"Content-Type: application/json\r\nx-api-key: k\r\nX-Dup: 1\r\nX-Dup: 2\r\n"
            + b'Content-Length: 7\r\n\r\n{"a":1}'
        ]


async def test_a_completed_response_lets_its_connection_carry_the_next(pool: UpstreamPool) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        for i in range(3):
            await server.read_request(reader)
            writer.write(answer(f"answer {n}.{i}"))

    async with Server(handler) as server:
        bodies = []
        for _ in range(3):
            bodies.append((await fetch(pool, server.url()))[1])
            await asyncio.sleep(pool.quarantine_s * 5)
        assert bodies == [b"answer 1.0", b"answer 1.1", b"answer 1.2"]
        assert (pool.stats.opened, pool.stats.reused) == (1, 2)


@pytest.mark.parametrize("status", [204, 304])
@pytest.mark.parametrize("apart", [False, True])
async def test_body_bytes_after_a_bodiless_status_never_reach_the_next_request(
    pool: UpstreamPool, status: int, apart: bool
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        if n == 1:
            writer.write(b"HTTP/1.1 %d X\r\ncontent-length: 12\r\n\r\n" % status)
            if apart:
                await writer.drain()
                await asyncio.sleep(0.05)
            writer.write(b"stale answer")
            await writer.drain()
            await asyncio.sleep(1)
        else:
            writer.write(answer(f"fresh {n}"))
            await writer.drain()

    async with Server(handler) as server:
        first = await fetch(pool, server.url())
        assert first[0] == status and first[1] == b"" and first[2].complete
        await asyncio.sleep(0.15)
        assert await fetch(pool, server.url()) == (
            200,
            b"fresh 2",
            UpstreamEnd(complete=True, reason=EndReason.UPSTREAM_CLOSED),
        )
        assert pool.stats.poisoned == 1 and pool.stats.bytes_after_response == 12
        assert first[2].bytes_after_end == (0 if apart else 12)


@pytest.mark.parametrize("quarantine_s", [0.0, 0.3])
async def test_a_stray_late_response_on_a_pooled_connection_never_answers_the_next_request(
    quarantine_s: float,
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        writer.write(answer(f"answer {n}"))
        await writer.drain()
        if n == 1:
            await asyncio.sleep(0.05)
            writer.write(answer("stale"))  # a second response nobody asked for
            await writer.drain()
            await asyncio.sleep(1)
        await server.read_request(reader)
        writer.write(answer(f"answer {n} again"))

    pool = UpstreamPool(connect_timeout=2, quarantine_s=quarantine_s)
    try:
        async with Server(handler) as server:
            assert (await fetch(pool, server.url()))[1] == b"answer 1"
            if quarantine_s:  # the next request comes at once: the connection is not free yet
                assert (await fetch(pool, server.url()))[1] == b"answer 2"
            await asyncio.sleep(0.4)
            body = (await fetch(pool, server.url()))[1]
            # connection 1 was poisoned by the stray response, idle or in quarantine
            assert body == (b"answer 2 again" if quarantine_s else b"answer 2")
            assert pool.stats.poisoned == 1 and server.connections == 2
    finally:
        await pool.close()


async def test_idle_connections_expire_and_are_bounded_per_key() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await server.read_request(reader)
            await asyncio.sleep(0.05)
            writer.write(answer("ok"))

    pool = UpstreamPool(connect_timeout=2, keepalive_s=0.2, max_idle_per_key=1)
    try:
        async with Server(handler) as server:
            await asyncio.gather(*(fetch(pool, server.url()) for _ in range(2)))
            assert pool.stats.opened == 2
            await asyncio.sleep(pool.quarantine_s * 5)
            await asyncio.gather(*(fetch(pool, server.url()) for _ in range(2)))
            assert (pool.stats.opened, pool.stats.reused) == (3, 1)  # one kept, one more
            await asyncio.sleep(0.35)
            await fetch(pool, server.url())
            assert (pool.stats.opened, pool.stats.reused) == (4, 1)  # expired
    finally:
        await pool.close()


# -- how transport ends are reported -----------------------------------------------------------


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


@pytest.mark.parametrize(
    "how,expected",
    [
        ("reset", UpstreamEnd(False, EndReason.UPSTREAM_RESET)),
        ("close", UpstreamEnd(False, EndReason.UPSTREAM_CLOSED)),
        ("http10", UpstreamEnd(True, EndReason.UPSTREAM_CLOSED)),
    ],
)
async def test_the_end_of_a_body_is_decided_by_its_framing_and_the_close(
    pool: UpstreamPool, how: str, expected: UpstreamEnd
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        if how == "http10":
            writer.write(b"HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: a\n\n")
        else:
            writer.write(CHUNKED_HEAD + b"9\r\ndata: a\n\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        if how == "reset":
            _reset(writer)

    async with Server(handler) as server:
        status, body, end = await fetch(pool, server.url())
        assert (status, body) == (200, b"data: a\n\n")
        assert (end.complete, end.reason) == (expected.complete, expected.reason)


async def test_no_head_in_time_is_an_idle_timeout_and_the_connection_is_dropped(
    pool: UpstreamPool,
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        await asyncio.sleep(1)

    async with Server(handler) as server:
        with pytest.raises(UpstreamFailed) as failed:
            await pool.request("GET", server.url(), [], b"", Receiver(), head_timeout=0.1)
        assert failed.value.reason is EndReason.IDLE_TIMEOUT
        assert pool.stats.opened == 1 and pool._idle == {}


async def test_closing_the_pool_ends_what_is_under_way_as_a_shutdown() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        if n == 1:
            writer.write(CHUNKED_HEAD + b"9\r\ndata: a\n\n\r\n")
        await asyncio.sleep(1)

    async with Server(handler) as server:
        pool = UpstreamPool(connect_timeout=2)
        streaming = Receiver()
        await pool.request("GET", server.url(), [], b"", streaming, head_timeout=5)
        waiting = asyncio.create_task(
            pool.request("GET", server.url(), [], b"", Receiver(), head_timeout=5)
        )
        while server.connections < 2:
            await asyncio.sleep(0.01)
        await pool.close()
        end = await streaming.end()
        assert (end.complete, end.reason) == (False, EndReason.PROXY_SHUTDOWN)
        with pytest.raises(UpstreamFailed) as failed:
            await waiting
        assert failed.value.reason is EndReason.PROXY_SHUTDOWN
        with pytest.raises(UpstreamFailed):
            await pool.request("GET", server.url(), [], b"", Receiver(), head_timeout=5)


async def test_a_refused_connection_is_unreachable(pool: UpstreamPool) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nobody listens there now
    with pytest.raises(UpstreamFailed) as failed:
        await pool.request(
            "GET", URL(f"http://127.0.0.1:{port}/"), [], b"", Receiver(), head_timeout=1
        )
    assert failed.value.reason is EndReason.UPSTREAM_UNREACHABLE


# -- TLS ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _server_tls(ca: trustme.CA, seen: list[tuple[str | None, str | None]]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    context.set_alpn_protocols(["http/1.1"])

    def sni(sock: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> None:
        seen.append((name, None))

    context.sni_callback = sni  # type: ignore[assignment]
    return context


def _ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


async def tls_handler_for(server_box: list[Server], alpn: list[str | None]) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        alpn.append(writer.get_extra_info("ssl_object").selected_alpn_protocol())
        await server_box[0].read_request(reader)
        writer.write(answer("secret"))
        await writer.drain()

    return handler


async def test_tls_with_sni_alpn_and_a_trusted_ca(ca: trustme.CA, tmp_path: Path) -> None:
    seen: list[tuple[str | None, str | None]] = []
    alpn: list[str | None] = []
    box: list[Server] = []
    async with Server(await tls_handler_for(box, alpn), tls=_server_tls(ca, seen)) as server:
        box.append(server)
        pool = UpstreamPool(connect_timeout=2, ca_file=_ca_file(ca, tmp_path))
        try:
            status, body, end = await fetch(pool, server.url(scheme="https", host="localhost"))
        finally:
            await pool.close()
        assert (status, body, end.complete) == (200, b"secret", True)
        assert seen == [("localhost", None)] and alpn == ["http/1.1"]

        untrusting = UpstreamPool(connect_timeout=2)  # the system store knows no test CA
        try:
            with pytest.raises(UpstreamFailed) as failed:
                await fetch(untrusting, server.url(scheme="https", host="localhost"))
        finally:
            await untrusting.close()
        assert failed.value.reason is EndReason.UPSTREAM_UNREACHABLE
        assert "CERTIFICATE_VERIFY_FAILED" in failed.value.cause


# -- egress proxy ------------------------------------------------------------------------------


async def test_https_through_an_egress_proxy_is_a_connect_tunnel_with_its_credentials(
    ca: trustme.CA, tmp_path: Path
) -> None:
    alpn: list[str | None] = []
    box: list[Server] = []
    async with (
        Server(await tls_handler_for(box, alpn), tls=_server_tls(ca, [])) as server,
        ConnectProxy() as proxy,
    ):
        box.append(server)
        environ = {
            "HTTPS_PROXY": f"http://user:p%40ss@{proxy.url}",
            "HTTP_PROXY": "http://nowhere:1",
        }
        pool = UpstreamPool(connect_timeout=2, environ=environ, ca_file=_ca_file(ca, tmp_path))
        try:
            status, body, end = await fetch(pool, server.url(scheme="https", host="localhost"))
        finally:
            await pool.close()
        assert (status, body, end.complete) == (200, b"secret", True)
        credentials = base64.b64encode(b"user:p@ss")
        assert proxy.heads == [
            b"CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n"
            b"Proxy-Authorization: Basic %s\r\n\r\n" % (server.port, server.port, credentials)
        ]
        assert server.requests[0].startswith(
            b"GET /v1/x HTTP/1.1\r\nHost: localhost:%d\r\n" % server.port
        )


async def test_http_through_an_egress_proxy_is_a_tunnel_too_and_lower_case_wins() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        writer.write(answer("plain"))

    async with Server(handler) as server, ConnectProxy() as proxy:
        environ = {"http_proxy": proxy.url, "HTTP_PROXY": "http://nowhere:1"}
        pool = UpstreamPool(connect_timeout=2, environ=environ)
        try:
            assert (await fetch(pool, server.url()))[1] == b"plain"
        finally:
            await pool.close()
        assert proxy.heads[0].startswith(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n" % server.port)


def _proxy_tls(ca: trustme.CA) -> ssl.SSLContext:
    """An https:// egress proxy's certificate for 127.0.0.1, signed by the test CA."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


async def test_an_https_proxy_is_reached_over_tls_and_the_origin_s_tls_runs_inside_it(
    ca: trustme.CA, tmp_path: Path
) -> None:
    alpn: list[str | None] = []
    box: list[Server] = []
    async with (
        Server(await tls_handler_for(box, alpn), tls=_server_tls(ca, [])) as server,
        ConnectProxy(tls=_proxy_tls(ca)) as proxy,
    ):
        box.append(server)
        environ = {"HTTPS_PROXY": f"https://user:p%40ss@{proxy.url}"}
        pool = UpstreamPool(connect_timeout=2, environ=environ, ca_file=_ca_file(ca, tmp_path))
        try:
            status, body, end = await fetch(pool, server.url(scheme="https", host="localhost"))
        finally:
            await pool.close()
        assert (status, body, end.complete) == (200, b"secret", True)
        assert alpn == ["http/1.1"]  # the origin's own handshake, inside the proxy's
        credentials = base64.b64encode(b"user:p@ss")
        assert proxy.heads == [
            b"CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n"
            b"Proxy-Authorization: Basic %s\r\n\r\n" % (server.port, server.port, credentials)
        ]


async def test_an_https_proxy_carries_a_plain_origin_too(ca: trustme.CA, tmp_path: Path) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        writer.write(answer("plain"))

    async with Server(handler) as server, ConnectProxy(tls=_proxy_tls(ca)) as proxy:
        environ = {"HTTP_PROXY": f"https://{proxy.url}"}
        pool = UpstreamPool(connect_timeout=2, environ=environ, ca_file=_ca_file(ca, tmp_path))
        try:
            assert (await fetch(pool, server.url()))[1] == b"plain"
        finally:
            await pool.close()
        assert proxy.heads == [
            b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n"
            % (server.port, server.port)
        ]


async def test_an_https_proxy_whose_certificate_the_trust_refuses_is_named_unreachable(
    ca: trustme.CA,
) -> None:
    async with ConnectProxy(tls=_proxy_tls(ca)) as proxy:
        environ = {"HTTPS_PROXY": f"https://user:hunter2@{proxy.url}"}
        pool = UpstreamPool(connect_timeout=2, environ=environ)  # the system's store: no test CA
        try:
            with pytest.raises(UpstreamFailed) as failed:
                await fetch(pool, URL("https://localhost:9/"))
        finally:
            await pool.close()
        assert failed.value.reason is EndReason.UPSTREAM_UNREACHABLE
        cause = failed.value.cause
        assert cause.startswith(f"egress proxy https://{proxy.url}: SSLCertVerificationError")
        assert "CERTIFICATE_VERIFY_FAILED" in cause and "hunter2" not in cause
        assert proxy.heads == []  # nothing was said to a proxy that could not be trusted


async def test_a_refused_connect_is_unreachable() -> None:
    async with ConnectProxy(refuse=b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n") as proxy:
        pool = UpstreamPool(connect_timeout=2, environ={"HTTP_PROXY": proxy.url})
        try:
            with pytest.raises(UpstreamFailed) as failed:
                await fetch(pool, URL("http://127.0.0.1:9/"))
        finally:
            await pool.close()
        assert failed.value.reason is EndReason.UPSTREAM_UNREACHABLE
        assert "407" in failed.value.cause


async def test_the_connect_timeout_covers_a_proxy_that_never_answers_connect() -> None:
    gave_up = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the pool gives up and closes
        writer.close()
        await writer.wait_closed()
        gave_up.set()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = UpstreamPool(connect_timeout=0.2, environ={"HTTP_PROXY": f"127.0.0.1:{port}"})
    try:
        started = asyncio.get_running_loop().time()
        with pytest.raises(UpstreamFailed) as failed:
            await fetch(pool, URL("http://127.0.0.1:9/"))
        assert asyncio.get_running_loop().time() - started < 1
        assert failed.value.reason is EndReason.UPSTREAM_UNREACHABLE
        assert "within 0.2 s" in failed.value.cause
        await asyncio.wait_for(gave_up.wait(), 5)
    finally:
        await pool.close()
        server.close()


async def test_connections_are_made_with_happy_eyeballs(
    pool: UpstreamPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    seen: list[dict[str, object]] = []
    create = loop.create_connection

    async def recording(*args: object, **kwargs: object) -> object:
        seen.append(kwargs)
        return await create(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "create_connection", recording)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        writer.write(answer("ok"))

    async with Server(handler) as server:
        await fetch(pool, server.url())
    # uvloop's create_connection takes no happy-eyeballs argument (it tries addresses in turn)
    expected = 0.25 if isinstance(loop, asyncio.BaseEventLoop) else None
    assert [kwargs.get("happy_eyeballs_delay") for kwargs in seen] == [expected]


async def test_no_proxy_goes_direct() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        writer.write(answer("direct"))

    async with Server(handler) as server, ConnectProxy() as proxy:
        environ = {"HTTP_PROXY": proxy.url, "NO_PROXY": "example.com, 127.0.0.0/8"}
        pool = UpstreamPool(connect_timeout=2, environ=environ)
        try:
            assert (await fetch(pool, server.url()))[1] == b"direct"
        finally:
            await pool.close()
        assert proxy.heads == []


# -- the same on uvloop, the proxy's default loop (its connect and TLS paths are its own) -------


async def _with_pool(test: Callable[[UpstreamPool], Awaitable[None]]) -> None:
    pool = UpstreamPool(connect_timeout=2)
    try:
        await test(pool)
    finally:
        await pool.close()


def test_the_leg_on_uvloop(ca: trustme.CA, tmp_path: Path) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)
        runner.run(test_tls_with_sni_alpn_and_a_trusted_ca(ca, tmp_path))
        runner.run(
            test_https_through_an_egress_proxy_is_a_connect_tunnel_with_its_credentials(
                ca, tmp_path
            )
        )
        runner.run(
            test_an_https_proxy_is_reached_over_tls_and_the_origin_s_tls_runs_inside_it(
                ca, tmp_path
            )
        )
        runner.run(
            test_a_stray_late_response_on_a_pooled_connection_never_answers_the_next_request(0.0)
        )
        for how, expected in [
            ("reset", UpstreamEnd(False, EndReason.UPSTREAM_RESET)),
            ("close", UpstreamEnd(False, EndReason.UPSTREAM_CLOSED)),
            ("http10", UpstreamEnd(True, EndReason.UPSTREAM_CLOSED)),
        ]:
            runner.run(
                _with_pool(
                    lambda pool, how=how, expected=expected: (
                        test_the_end_of_a_body_is_decided_by_its_framing_and_the_close(
                            pool, how, expected
                        )
                    )
                )
            )
        runner.run(_with_pool(test_a_refused_connection_is_unreachable))
