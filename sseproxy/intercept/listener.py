"""The forward proxy's listener: reads a `CONNECT host:port` head or a plain-HTTP request in
absolute-form (bounded in size and time), then either intercepts, tunnels or forwards.

Intercepted (the host is in `intercept_hosts`): the client is answered 200, its TLS is
terminated with that destination's leaf (`ca.Leaves`), and the TLS transport is given a fresh
protocol from the aiohttp server's factory (`AppRunner.server`), exactly as if the
connection had been accepted by the reverse proxy's own socket: the same handler, relay,
records, inspector, capture and WebSocket sessions. Admission routes its requests to
`https://host:port` because the transport's TLS context says so (`destination.py`).

A plain-HTTP request (`GET http://host/path`, what `HTTP_PROXY` clients send) to an
intercepted host is given to the same server on the client's own transport, which names the
route `http://host:port` (`plain.py`); to any other host it is forwarded, its head rewritten
to origin-form (`connect.py`), then its bytes relayed as a tunnel's are (mode `forward`).

Anything else is tunnelled untouched (`tunnel.py`). Tunnels and forwarded requests reach
their host through the egress proxy of `HTTPS_PROXY` / `HTTP_PROXY` when one applies (a
CONNECT to it), as the reverse proxy's upstream leg does. Every connection that does not end
in an intercepted HTTP exchange writes one `connect.finished` line: a tunnel when it closes, a
refused head, an unreachable host, a client that refused our certificate (its TLS handshake
failed: `tls_client_refused_certificate`), never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, cast

import structlog

from sseproxy.intercept import record
from sseproxy.intercept.ca import Leaves
from sseproxy.intercept.connect import Forward, Head, HeadReader, HeadRefused
from sseproxy.intercept.destination import Destination
from sseproxy.intercept.plain import RoutedTransport
from sseproxy.intercept.record import ClosedBy, Mode, Outcome, Relayed
from sseproxy.intercept.tunnel import Tunnel
from sseproxy.shell.upstream.connect import open_connection, tls_context
from sseproxy.shell.upstream.egress import EgressProxy, ProxySettings
from sseproxy.shell.upstream.facts import UpstreamFailed

log = structlog.get_logger("sseproxy")

# Seconds a client has to send its whole request head (CONNECT or absolute-form) once connected.
HEAD_TIMEOUT = 10.0
# Seconds for the client's TLS handshake with our leaf.
HANDSHAKE_TIMEOUT = 10.0
# Bytes a client may send after its TLS handshake before the HTTP server takes over (held
# for one loop turn at most; beyond it the connection is closed).
MAX_HELD_BYTES = 1024 * 1024
# Seconds the stop gives CONNECTs being set up and closing tunnels to write their lines.
STOP_WAIT = 0.5
ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"
REASONS = {400: "Bad Request", 405: "Method Not Allowed", 431: "Request Header Fields Too Large"}
REASONS |= {502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}
REASONS |= {408: "Request Timeout"}
# TLS alerts by which a client says it does not trust the certificate it was shown.
REFUSED_CERTIFICATE = frozenset(
    {
        "TLSV1_ALERT_UNKNOWN_CA",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "TLSV1_ALERT_ACCESS_DENIED",
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
        "TLSV1_ALERT_DECRYPT_ERROR",
    }
)

ProtocolFactory = Callable[[], asyncio.Protocol]
NO_EGRESS = ProxySettings()
# Names of this machine an egress proxy that is the listener itself may be given as.
LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::")


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    hosts: Collection[str]  # intercepted host names, lower case
    connect_timeout: float  # to a tunnelled host
    max_tunnels: int = 2000  # open at once; beyond, 503 (the proxy's max_concurrent_streams)
    head_timeout: float = HEAD_TIMEOUT
    handshake_timeout: float = HANDSHAKE_TIMEOUT
    # The egress proxy for tunnels and forwarded requests (HTTPS_PROXY / HTTP_PROXY /
    # NO_PROXY), and the CA file an `https://` egress proxy's certificate is checked with.
    proxies: ProxySettings = NO_EGRESS
    ca_file: str | None = None


def connect_finished(
    destination: Destination | None,
    mode: Mode,
    outcome: Outcome,
    started: float,
    **fields: Any,
) -> None:
    """The `connect.finished` record of a connection that is not an intercepted exchange."""
    with contextlib.suppress(Exception):  # a record must never break a connection
        duration_ms = round((time.monotonic() - started) * 1000, 3)
        line = record.build(destination, mode, outcome, duration_ms, **fields)
        getattr(log, record.level(outcome))(record.EVENT, **line)


class InterceptListener:
    """Serves CONNECT and absolute-form requests on its own socket; `server_factory` is the
    aiohttp server's."""

    def __init__(
        self, settings: ListenerSettings, leaves: Leaves, server_factory: ProtocolFactory
    ) -> None:
        self.settings = settings
        self.leaves = leaves
        self.server_factory = server_factory
        self.tasks: set[asyncio.Task[None]] = set()
        self.tunnels: set[Tunnel] = set()
        self.server: asyncio.Server | None = None
        self._egress_tls: ssl.SSLContext | None = None

    async def start(self, host: str, port: int, backlog: int = 128) -> int:
        """Listen; returns the bound port (`port` 0: any free one). Raises ValueError for an
        egress proxy that is this listener (every tunnel would come back into it)."""
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: ConnectProtocol(self), host, port, backlog=backlog
        )
        bound = int(self.server.sockets[0].getsockname()[1])
        for proxy in (self.settings.proxies.https, self.settings.proxies.http):
            if proxy is not None and proxy.port == bound and proxy.host in (host, *LOOPBACK):
                self.server.close()
                raise ValueError(
                    f"the egress proxy {proxy.name} is this listener: set HTTPS_PROXY for the "
                    "client, not for sseproxy"
                )
        return bound

    def intercepts(self, destination: Destination) -> bool:
        return destination.host in self.settings.hosts

    async def stop(self) -> None:
        """Stop accepting; end CONNECTs still being set up and every tunnel."""
        if self.server is not None:
            self.server.close()
        for task in list(self.tasks):
            task.cancel()
        for tunnel in list(self.tunnels):
            tunnel.close(by="proxy")
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=STOP_WAIT)
        deadline = asyncio.get_running_loop().time() + STOP_WAIT
        while self.tunnels and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)  # their connection_lost writes their lines

    def carry(self, transport: asyncio.Transport, head: Head, started: float) -> None:
        if isinstance(head, Forward) and self.intercepts(head.destination):
            self._serve_plain(transport, head)  # nothing to wait for
            return
        task = asyncio.get_running_loop().create_task(self._carry(transport, head, started))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _carry(self, transport: asyncio.Transport, head: Head, started: float) -> None:
        destination = head.destination
        try:
            if isinstance(head, Forward):
                await self._tunnel(transport, head, started)
            elif self.intercepts(destination):
                await self._intercept(transport, destination, head.rest, started)
            else:
                await self._tunnel(transport, head, started)
        except asyncio.CancelledError:
            transport.abort()
            connect_finished(destination, Mode.SETUP, Outcome.PROXY_SHUTDOWN, started)
            raise
        except Exception as exc:  # a bug of ours: the connection ends, a line says why
            transport.abort()
            error = f"{type(exc).__name__}: {exc}"
            connect_finished(destination, Mode.SETUP, Outcome.PROXY_ERROR, started, error=error)

    async def _intercept(
        self, transport: asyncio.Transport, destination: Destination, rest: bytes, started: float
    ) -> None:
        if rest:  # TLS bytes sent before our 200: start_tls cannot be handed them
            answer(transport, 400, "send the TLS handshake after the 200 answer to CONNECT")
            connect_finished(destination, Mode.INTERCEPT, Outcome.BAD_CONNECT, started)
            return
        context = self.leaves.context(destination)
        transport.write(ESTABLISHED)
        loop = asyncio.get_running_loop()
        holding = Holding()
        try:
            tls = await loop.start_tls(
                transport,
                holding,
                context,
                server_side=True,
                ssl_handshake_timeout=self.settings.handshake_timeout,
            )
        except (OSError, TimeoutError, ConnectionError, ssl.SSLError) as exc:
            transport.abort()
            reason = getattr(exc, "reason", None)
            outcome = (
                Outcome.TLS_CLIENT_REFUSED_CERTIFICATE
                if reason in REFUSED_CERTIFICATE
                else Outcome.TLS_HANDSHAKE_TIMEOUT
                if isinstance(exc, TimeoutError)
                else Outcome.TLS_HANDSHAKE_FAILED
            )
            hint = None
            if outcome is Outcome.TLS_HANDSHAKE_FAILED:
                hint = "the client ended the handshake: does it trust the sseproxy CA?"
            connect_finished(
                destination,
                Mode.INTERCEPT,
                outcome,
                started,
                error=f"{type(exc).__name__}: {exc}",
                hint=hint,
            )
            return
        if tls is None:  # pragma: no cover (start_tls returns a transport or raises)
            transport.abort()
            return
        protocol = self.server_factory()
        tls.set_protocol(protocol)
        protocol.connection_made(tls)
        holding.hand_over(protocol, tls)

    def _serve_plain(self, transport: asyncio.Transport, forward: Forward) -> None:
        """The reverse proxy's server takes the connection, its route `http://host:port`."""
        protocol = self.server_factory()
        transport.set_protocol(protocol)
        protocol.connection_made(RoutedTransport(transport, forward.destination.route("http")))
        protocol.data_received(forward.head + forward.rest)
        if transport.is_closing():  # the server answered at once (a refusal) and closed
            return
        transport.resume_reading()

    def egress(self, scheme: str, destination: Destination) -> EgressProxy | None:
        return self.settings.proxies.for_target(scheme, destination.host, destination.port)

    async def _tunnel(self, transport: asyncio.Transport, head: Head, started: float) -> None:
        """A CONNECT's bytes, or a forwarded request's, relayed both ways untouched."""
        loop = asyncio.get_running_loop()
        destination = head.destination
        forward = isinstance(head, Forward)
        mode = Mode.FORWARD if forward else Mode.TUNNEL
        if len(self.tunnels) >= self.settings.max_tunnels:
            answer(transport, 503, f"{self.settings.max_tunnels} tunnels are open already")
            connect_finished(destination, mode, Outcome.OVERLOADED, started)
            return
        # A CONNECT carries https (or wss); an absolute-form request is http.
        proxy = self.egress("http" if forward else "https", destination)
        via = proxy.name if proxy is not None else None

        def done(tunnel: Tunnel) -> None:
            self.tunnels.discard(tunnel)
            by = ClosedBy(tunnel.closed_by) if tunnel.closed_by else None
            relayed = Relayed(tunnel.client.received, tunnel.upstream.received, by)
            connect_finished(
                destination,
                mode,
                Outcome.CLOSED,
                started,
                relayed=relayed,
                error=tunnel.error,
                egress=via,
            )

        tunnel = Tunnel(done)
        opening = loop.time()
        try:
            await open_connection(
                lambda: tunnel.upstream,
                tls=None,
                host=destination.host,
                port=destination.port,
                proxy=proxy,
                timeout=self.settings.connect_timeout,
                proxy_tls=self._proxy_tls(proxy),
            )
        except UpstreamFailed as exc:
            # open_connection says a timeout in its cause only: the whole time went by.
            timed_out = loop.time() - opening >= self.settings.connect_timeout
            status = 504 if timed_out else 502
            answer(transport, status, f"no connection to {destination.authority}")
            connect_finished(
                destination,
                mode,
                Outcome.UPSTREAM_TIMEOUT if timed_out else Outcome.UPSTREAM_UNREACHABLE,
                started,
                error=exc.cause,
                egress=via,
            )
            return
        self.tunnels.add(tunnel)
        transport.set_protocol(tunnel.client)
        tunnel.client.connection_made(transport)
        if isinstance(head, Forward):  # the rewritten head, then what came with it
            tunnel.client.data_received(head.head + head.rest)
        else:
            transport.write(ESTABLISHED)
            if head.rest:  # sent before our answer: it is the client's first bytes for the host
                tunnel.client.data_received(head.rest)
        if transport.is_closing():  # the client left while we connected
            tunnel.client.connection_lost(None)
        else:
            transport.resume_reading()

    def _proxy_tls(self, proxy: EgressProxy | None) -> ssl.SSLContext | None:
        """What checks an `https://` egress proxy's certificate: the upstream leg's trust."""
        if proxy is None or not proxy.tls:
            return None
        if self._egress_tls is None:
            self._egress_tls = tls_context(self.settings.ca_file)
        return self._egress_tls


def answer(transport: asyncio.Transport, status: int, message: str) -> None:
    """The proxy's own short answer to a request head, then the connection closes."""
    body = message.encode() + b"\n"
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(Exception):
        transport.write(head.encode() + body)
        transport.close()


class ConnectProtocol(asyncio.Protocol):
    """A connection to the listener until its request head is whole."""

    def __init__(self, listener: InterceptListener) -> None:
        self.listener = listener
        self.reader: HeadReader | None = HeadReader()
        self.transport: asyncio.Transport | None = None
        self.started = time.monotonic()
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport instances, though they are one
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(self.listener.settings.head_timeout, self.timed_out)

    def timed_out(self) -> None:
        if self.reader is not None and self.transport is not None:
            self.reader = None
            answer(self.transport, 408, "the request head did not arrive in time")
            connect_finished(None, Mode.SETUP, Outcome.HEAD_TIMEOUT, self.started)

    def data_received(self, data: bytes) -> None:
        reader, transport = self.reader, self.transport
        if reader is None or transport is None:
            return
        try:
            head = reader.feed(data)
        except HeadRefused as refused:
            self.reader = None
            self._stop_timer()
            answer(transport, refused.status, refused.reason)
            error = refused.reason
            connect_finished(None, Mode.SETUP, Outcome.BAD_CONNECT, self.started, error=error)
            return
        if head is None:
            return
        self.reader = None
        self._stop_timer()
        transport.pause_reading()
        self.listener.carry(transport, head, self.started)

    def eof_received(self) -> bool:
        return False  # close; a CONNECT being carried out sees the transport closing

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class Holding(asyncio.Protocol):
    """The TLS transport's protocol while `start_tls` hands it over: what arrives meanwhile
    (a client's request can come with its last handshake message) is held, then replayed to
    the server's protocol in order."""

    def __init__(self) -> None:
        self.held: list[bytes] = []
        self.size = 0
        self.eof = False
        self.lost = False
        self.exc: Exception | None = None

    def data_received(self, data: bytes) -> None:
        self.held.append(data)
        self.size += len(data)

    def eof_received(self) -> bool:
        self.eof = True
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost, self.exc = True, exc

    def hand_over(self, protocol: asyncio.Protocol, transport: asyncio.Transport) -> None:
        if self.size > MAX_HELD_BYTES:
            transport.abort()
            return
        for data in self.held:
            protocol.data_received(data)
        self.held.clear()
        if self.eof and not protocol.eof_received():
            transport.close()
        if self.lost:
            protocol.connection_lost(self.exc)
