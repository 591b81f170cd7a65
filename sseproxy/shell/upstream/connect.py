"""Opening an upstream connection: TCP (happy eyeballs), TLS with SNI and ALPN http/1.1, and
a CONNECT tunnel through an egress proxy when one applies (over TLS to an `https://` proxy,
the origin's TLS then inside that one). Any failure is UNREACHABLE."""

from __future__ import annotations

import asyncio
import inspect
import ssl
from collections.abc import Callable
from typing import Any, TypeVar

from sseproxy.core import EndReason
from sseproxy.shell.upstream.egress import EgressProxy
from sseproxy.shell.upstream.facts import UpstreamFailed, bounded
from sseproxy.shell.upstream.parser import Head, ResponseParser

HAPPY_EYEBALLS_DELAY = 0.25
# The protocol a connection is opened for: the pool's HTTP/1.1 one, or a WebSocket session's.
P = TypeVar("P", bound=asyncio.Protocol)


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """The system's trust store (and certifi's, when installed), or only `ca_file`."""
    context = ssl.create_default_context(cafile=ca_file)
    if ca_file is None:
        try:
            import certifi
        except ImportError:
            pass
        else:
            context.load_verify_locations(certifi.where())
    context.set_alpn_protocols(["http/1.1"])
    return context


# Per loop class (asyncio's, uvloop's): what its create_connection takes, looked up once.
_OPTIONS: dict[type, dict[str, Any]] = {}


def _connect_options(loop: asyncio.AbstractEventLoop) -> dict[str, Any]:
    options = _OPTIONS.get(type(loop))
    if options is None:
        # uvloop's create_connection has no happy-eyeballs argument (it tries in turn), and
        # before 0.21 its builtin has no signature to read: then nothing optional is passed.
        try:
            names = set(inspect.signature(loop.create_connection).parameters)
        except (ValueError, TypeError):
            names = set()
        options = {}
        if "happy_eyeballs_delay" in names:
            options["happy_eyeballs_delay"] = HAPPY_EYEBALLS_DELAY
        _OPTIONS[type(loop)] = options
    return options


class _Tunnel(asyncio.Protocol):
    """Reads the egress proxy's answer to CONNECT; then the transport is handed on."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.parser = ResponseParser(no_body=True)  # a 2xx to CONNECT has no body
        self.answer: asyncio.Future[Head] = loop.create_future()

    def data_received(self, data: bytes) -> None:
        if self.answer.done():
            return
        rest = self.parser.feed(data)
        head = self.parser.head
        if self.parser.error is not None:
            self._refuse(f"egress proxy: {self.parser.error}")
        elif head is not None and rest:
            self._refuse("egress proxy sent bytes before the tunnel was used")
        elif head is not None:
            self.answer.set_result(head)

    def connection_lost(self, exc: Exception | None) -> None:
        self._refuse("egress proxy closed the connection during CONNECT")

    def _refuse(self, why: str) -> None:
        if not self.answer.done():
            self.answer.set_exception(UpstreamFailed(EndReason.UPSTREAM_UNREACHABLE, why))


async def open_connection(
    factory: Callable[[], P],
    *,
    tls: ssl.SSLContext | None,
    host: str,
    port: int,
    proxy: EgressProxy | None,
    timeout: float,
    proxy_tls: ssl.SSLContext | None = None,
) -> P:
    """A connected protocol for (host, port), within `timeout` seconds all told. `proxy_tls`
    checks an `https://` proxy's certificate (by default `tls`, else the system's trust)."""
    loop = asyncio.get_running_loop()
    options = _connect_options(loop)
    try:
        async with asyncio.timeout(timeout):
            if proxy is None:
                _, conn = await loop.create_connection(
                    factory,
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                    **options,
                )
                return conn
            if proxy.tls and proxy_tls is None:
                proxy_tls = tls if tls is not None else tls_context()
            return await _through(loop, factory, tls, host, port, proxy, options, proxy_tls)
    except UpstreamFailed:
        raise
    except TimeoutError:
        raise UpstreamFailed(
            EndReason.UPSTREAM_UNREACHABLE, f"no connection to {host}:{port} within {timeout} s"
        ) from None
    except OSError as exc:  # DNS, refused, unreachable, TLS (ssl.SSLError is an OSError)
        raise UpstreamFailed(
            EndReason.UPSTREAM_UNREACHABLE, bounded(f"{type(exc).__name__}: {exc}")
        ) from exc


async def _through(
    loop: asyncio.AbstractEventLoop,
    factory: Callable[[], P],
    tls: ssl.SSLContext | None,
    host: str,
    port: int,
    proxy: EgressProxy,
    options: dict[str, Any],
    proxy_tls: ssl.SSLContext | None = None,
) -> P:
    try:
        transport, tunnel = await loop.create_connection(
            lambda: _Tunnel(loop),
            proxy.host,
            proxy.port,
            ssl=proxy_tls if proxy.tls else None,
            server_hostname=proxy.host if proxy.tls else None,
            **options,
        )
    except OSError as exc:  # refused, DNS, the proxy's certificate: say it was the proxy
        raise UpstreamFailed(
            EndReason.UPSTREAM_UNREACHABLE,
            bounded(f"egress proxy {proxy.name}: {type(exc).__name__}: {exc}"),
        ) from exc
    try:
        transport.write(proxy.connect_request(host, port))
        head = await tunnel.answer
        if not 200 <= head.status < 300:
            raise UpstreamFailed(
                EndReason.UPSTREAM_UNREACHABLE,
                f"egress proxy refused CONNECT {host}:{port}: {head.status} {head.reason}",
            )
        conn = factory()
        if tls is None:
            transport.set_protocol(conn)
            conn.connection_made(transport)
        else:
            tls_transport = await loop.start_tls(transport, conn, tls, server_hostname=host)
            if tls_transport is None:  # the transport closed during the handshake
                raise UpstreamFailed(EndReason.UPSTREAM_UNREACHABLE, "tunnel closed during TLS")
            conn.connection_made(tls_transport)
        return conn
    except BaseException:
        transport.abort()
        raise
