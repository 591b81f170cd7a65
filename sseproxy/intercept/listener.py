"""The forward proxy's listener: reads a `CONNECT host:port` head (bounded in size and time),
then either intercepts or tunnels.

Intercepted (the host is in `intercept_hosts`): the client is answered 200, its TLS is
terminated with that destination's leaf (`ca.Leaves`), and the TLS transport is given a fresh
protocol from the aiohttp server's factory (`AppRunner.server`), exactly as if the
connection had been accepted by the reverse proxy's own socket: the same handler, relay,
records, inspector, capture and WebSocket sessions. Admission routes its requests to
`https://host:port` because the transport's TLS context says so (`destination.py`).

Anything else is tunnelled untouched (`tunnel.py`). Every CONNECT that does not end in an
intercepted HTTP exchange writes one `connect.finished` line: a tunnel when it closes, a
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

from sseproxy.intercept.ca import Leaves
from sseproxy.intercept.connect import Connect, HeadReader, HeadRefused
from sseproxy.intercept.destination import Destination
from sseproxy.intercept.tunnel import Tunnel

log = structlog.get_logger("sseproxy")

# Seconds a client has to send its whole CONNECT head once connected.
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


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    hosts: Collection[str]  # intercepted host names, lower case
    connect_timeout: float  # to a tunnelled host
    max_tunnels: int = 2000  # open at once; beyond, 503 (the proxy's max_concurrent_streams)
    head_timeout: float = HEAD_TIMEOUT
    handshake_timeout: float = HANDSHAKE_TIMEOUT


def connect_finished(
    destination: Destination | None,
    mode: str,
    outcome: str,
    started: float,
    **fields: Any,
) -> None:
    """The one line for a CONNECT that is not an intercepted HTTP exchange."""
    with contextlib.suppress(Exception):  # a record must never break a connection
        level = "info" if outcome in ("closed", "intercepted") else "warning"
        getattr(log, level)(
            "connect.finished",
            host=destination.host if destination else None,
            port=destination.port if destination else None,
            mode=mode,
            outcome=outcome,
            duration_ms=round((time.monotonic() - started) * 1000, 3),
            **fields,
        )


class InterceptListener:
    """Serves CONNECT on its own socket; `server_factory` is the aiohttp server's."""

    def __init__(
        self, settings: ListenerSettings, leaves: Leaves, server_factory: ProtocolFactory
    ) -> None:
        self.settings = settings
        self.leaves = leaves
        self.server_factory = server_factory
        self.tasks: set[asyncio.Task[None]] = set()
        self.tunnels: set[Tunnel] = set()
        self.server: asyncio.Server | None = None

    async def start(self, host: str, port: int, backlog: int = 128) -> int:
        """Listen; returns the bound port (`port` 0: any free one)."""
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: ConnectProtocol(self), host, port, backlog=backlog
        )
        return int(self.server.sockets[0].getsockname()[1])

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

    def carry(self, transport: asyncio.Transport, connect: Connect, started: float) -> None:
        task = asyncio.get_running_loop().create_task(self._carry(transport, connect, started))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _carry(self, transport: asyncio.Transport, connect: Connect, started: float) -> None:
        destination = connect.destination
        try:
            if self.intercepts(destination):
                await self._intercept(transport, destination, connect.rest, started)
            else:
                await self._tunnel(transport, destination, connect.rest, started)
        except asyncio.CancelledError:
            transport.abort()
            connect_finished(destination, "setup", "proxy_shutdown", started)
            raise
        except Exception as exc:  # a bug of ours: the connection ends, a line says why
            transport.abort()
            connect_finished(
                destination, "setup", "proxy_error", started, error=f"{type(exc).__name__}: {exc}"
            )

    async def _intercept(
        self, transport: asyncio.Transport, destination: Destination, rest: bytes, started: float
    ) -> None:
        if rest:  # TLS bytes sent before our 200: start_tls cannot be handed them
            answer(transport, 400, "send the TLS handshake after the 200 answer to CONNECT")
            connect_finished(destination, "intercept", "bad_connect", started)
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
                "tls_client_refused_certificate"
                if reason in REFUSED_CERTIFICATE
                else "tls_handshake_timeout"
                if isinstance(exc, TimeoutError)
                else "tls_handshake_failed"
            )
            hint = None
            if outcome == "tls_handshake_failed":
                hint = "the client ended the handshake: does it trust the sseproxy CA?"
            connect_finished(
                destination,
                "intercept",
                outcome,
                started,
                error=f"{type(exc).__name__}: {exc}"[:500],
                **({"hint": hint} if hint else {}),
            )
            return
        if tls is None:  # pragma: no cover (start_tls returns a transport or raises)
            transport.abort()
            return
        protocol = self.server_factory()
        tls.set_protocol(protocol)
        protocol.connection_made(tls)
        holding.hand_over(protocol, tls)

    async def _tunnel(
        self, transport: asyncio.Transport, destination: Destination, rest: bytes, started: float
    ) -> None:
        loop = asyncio.get_running_loop()
        if len(self.tunnels) >= self.settings.max_tunnels:
            answer(transport, 503, f"{self.settings.max_tunnels} tunnels are open already")
            connect_finished(destination, "tunnel", "overloaded", started)
            return

        def done(tunnel: Tunnel) -> None:
            self.tunnels.discard(tunnel)
            connect_finished(
                destination,
                "tunnel",
                "closed",
                started,
                bytes_up=tunnel.client.received,
                bytes_down=tunnel.upstream.received,
                closed_by=tunnel.closed_by,
                error=tunnel.error,
            )

        tunnel = Tunnel(done)
        try:
            async with asyncio.timeout(self.settings.connect_timeout):
                await loop.create_connection(
                    lambda: tunnel.upstream, destination.host, destination.port
                )
        except (OSError, TimeoutError) as exc:
            timed_out = isinstance(exc, TimeoutError)
            status = 504 if timed_out else 502
            answer(transport, status, f"no connection to {destination.authority}")
            connect_finished(
                destination,
                "tunnel",
                "upstream_timeout" if timed_out else "upstream_unreachable",
                started,
                error=f"{type(exc).__name__}: {exc}"[:500],
            )
            return
        self.tunnels.add(tunnel)
        transport.set_protocol(tunnel.client)
        tunnel.client.connection_made(transport)
        transport.write(ESTABLISHED)
        if rest:  # sent before our answer: it is the client's first bytes for the host
            tunnel.client.data_received(rest)
        if transport.is_closing():  # the client left while we connected
            tunnel.client.connection_lost(None)
        else:
            transport.resume_reading()


def answer(transport: asyncio.Transport, status: int, message: str) -> None:
    """The proxy's own short answer to a CONNECT, then the connection closes."""
    body = message.encode() + b"\n"
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(Exception):
        transport.write(head.encode() + body)
        transport.close()


class ConnectProtocol(asyncio.Protocol):
    """A connection to the listener until its CONNECT head is whole."""

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
            answer(self.transport, 408, "the CONNECT head did not arrive in time")
            connect_finished(None, "setup", "head_timeout", self.started)

    def data_received(self, data: bytes) -> None:
        reader, transport = self.reader, self.transport
        if reader is None or transport is None:
            return
        try:
            connect = reader.feed(data)
        except HeadRefused as refused:
            self.reader = None
            self._stop_timer()
            answer(transport, refused.status, refused.reason)
            connect_finished(None, "setup", "bad_connect", self.started, error=refused.reason)
            return
        if connect is None:
            return
        self.reader = None
        self._stop_timer()
        transport.pause_reading()
        self.listener.carry(transport, connect, self.started)

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
