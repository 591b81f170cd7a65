"""A small pool of upstream connections with the isolation rules built in.

A connection goes back to the pool only when its response ended by its own framing, was not
aborted, did not say `Connection: close` (nor was HTTP/1.0 without keep-alive, nor ended by the
close), and no byte came after its end. Idle (or in quarantine), any byte poisons it. Idle
connections expire after `keepalive_s`; at most `max_idle_per_key` wait per key.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from yarl import URL

from sseproxy.core import EndReason
from sseproxy.shell.upstream.connect import P, open_connection, tls_context
from sseproxy.shell.upstream.connection import (
    Exchange,
    PoolStats,
    UpstreamConnection,
    UpstreamResponse,
)
from sseproxy.shell.upstream.egress import EgressProxy, ProxySettings
from sseproxy.shell.upstream.facts import LIMITS, BodyReceiver, Limits, UpstreamEnd, UpstreamFailed
from sseproxy.shell.upstream.request import request_bytes

Key = tuple[str, str, int, EgressProxy | None]
_NO_ENVIRON: Mapping[str, str] = MappingProxyType({})
# A released connection waits this long before it can serve again: a stray response already
# on its way lands in that window and poisons it. It costs only requests that follow a
# response within it (`python -m bench.pool_quarantine`: 200 back-to-back requests opened 12-17
# connections instead of 1; with 10 ms between them, none).
QUARANTINE_S = 0.002


class UpstreamPool:
    """Requests to upstreams over owned HTTP/1.1 connections, pooled per (scheme, host, port,
    proxy). `environ` supplies HTTPS_PROXY / HTTP_PROXY / NO_PROXY (the app passes its
    environment); `ca_file` (PEM) replaces the trust store: a corporate or test CA."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        environ: Mapping[str, str] = _NO_ENVIRON,
        ca_file: str | None = None,
        quarantine_s: float = QUARANTINE_S,
        max_idle_per_key: int = 16,
        keepalive_s: float = 15.0,
        limits: Limits = LIMITS,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.quarantine_s = quarantine_s
        self.max_idle_per_key = max_idle_per_key
        self.keepalive_s = keepalive_s
        self.limits = limits
        self.stats = PoolStats()
        self._proxies = ProxySettings.from_environ(environ)
        self._ca_file = ca_file
        # Built on first https use: loading a trust store costs milliseconds.
        self._tls: ssl.SSLContext | None = None
        self._idle: dict[Key, list[UpstreamConnection]] = {}
        self._keys: dict[UpstreamConnection, Key] = {}
        self._timers: dict[UpstreamConnection, asyncio.TimerHandle] = {}
        self._closed = False

    async def request(
        self,
        method: str,
        url: URL,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        receiver: BodyReceiver,
        *,
        head_timeout: float,
    ) -> UpstreamResponse:
        """Send the request; return at its final head. Body pieces that came with the head
        reach `receiver` after this returns (call_soon), unless the response is paused first.
        Raises UpstreamFailed before a head; ValueError for a request that cannot be sent."""
        if self._closed:
            raise UpstreamFailed(EndReason.PROXY_SHUTDOWN, "the upstream pool is closed")
        if url.scheme not in ("http", "https") or not url.raw_host:
            raise ValueError(f"not an http(s) URL: {url.scheme}://{url.raw_host}")
        wire = request_bytes(method, url, headers, body)
        port = url.port or (443 if url.scheme == "https" else 80)
        proxy = self._proxies.for_target(url.scheme, url.raw_host, port)
        key: Key = (url.scheme, url.raw_host, port, proxy)
        conn = self._take(key) or await self._open(key)
        exchange = conn.start(wire, receiver, no_body=method == "HEAD")
        try:
            async with asyncio.timeout(head_timeout):
                head = await exchange.head
        except TimeoutError:
            _abandon(exchange, EndReason.IDLE_TIMEOUT)
            raise UpstreamFailed(
                EndReason.IDLE_TIMEOUT, f"no response head within {head_timeout} s"
            ) from None
        except asyncio.CancelledError:
            _abandon(exchange, EndReason.CLIENT_DISCONNECTED)
            raise
        return UpstreamResponse(exchange, head)

    async def open_socket(self, factory: Callable[[], P], url: URL) -> P:
        """A connection of the caller's own protocol to `url` (a WebSocket session's leg),
        opened as the pool's are: the same egress proxy choice, tunnel and trust store. Never
        pooled. Raises UpstreamFailed (UPSTREAM_UNREACHABLE) when it cannot be opened."""
        if self._closed:
            raise UpstreamFailed(EndReason.PROXY_SHUTDOWN, "the upstream pool is closed")
        secure = url.scheme in ("https", "wss")
        host = url.raw_host or ""
        port = url.port or (443 if secure else 80)
        proxy = self._proxies.for_target("https" if secure else "http", host, port)
        return await open_connection(
            factory,
            tls=self._tls_context() if secure else None,
            host=host,
            port=port,
            proxy=proxy,
            timeout=self.connect_timeout,
            proxy_tls=self._tls_context() if proxy is not None and proxy.tls else None,
        )

    async def close(self) -> None:
        """Close every connection, idle or busy (a response under way ends as PROXY_SHUTDOWN);
        later requests fail."""
        self._closed = True
        for conn in list(self._keys):
            conn.shut_down()
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports report their close

    # -- connections --------------------------------------------------------------------------

    def _take(self, key: Key) -> UpstreamConnection | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be closed by now
            self._cancel_timer(conn)
            if conn.usable:
                self.stats.reused += 1
                return conn
        return None

    async def _open(self, key: Key) -> UpstreamConnection:
        scheme, host, port, proxy = key
        loop = asyncio.get_running_loop()
        conn = await open_connection(
            lambda: UpstreamConnection(loop, self.stats, limits=self.limits),
            tls=self._tls_context() if scheme == "https" else None,
            host=host,
            port=port,
            proxy=proxy,
            timeout=self.connect_timeout,
            # An https:// proxy's certificate is checked against the leg's own trust.
            proxy_tls=self._tls_context() if proxy is not None and proxy.tls else None,
        )
        self.stats.opened += 1
        if self._closed:
            conn.close()
            raise UpstreamFailed(EndReason.PROXY_SHUTDOWN, "the upstream pool is closed")
        self._keys[conn] = key
        conn.on_done = self._done
        conn.on_close = self._forget
        return conn

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = tls_context(self._ca_file)
        return self._tls

    def _done(self, conn: UpstreamConnection, reusable: bool) -> None:
        if not reusable or self._closed:
            conn.close()
        elif self.quarantine_s > 0:
            # A stray response already in flight lands here and poisons it, rather than
            # answering the next request.
            self._timers[conn] = asyncio.get_running_loop().call_later(
                self.quarantine_s, self._park, conn
            )
        else:
            self._park(conn)

    def _park(self, conn: UpstreamConnection) -> None:
        self._timers.pop(conn, None)
        key = self._keys.get(conn)
        if key is None or not conn.usable:
            return
        idle = self._idle.setdefault(key, [])
        idle.append(conn)
        self._timers[conn] = asyncio.get_running_loop().call_later(self.keepalive_s, conn.close)
        while len(idle) > self.max_idle_per_key:
            idle.pop(0).close()  # the oldest; its close forgets it

    def _cancel_timer(self, conn: UpstreamConnection) -> None:
        timer = self._timers.pop(conn, None)
        if timer is not None:
            timer.cancel()

    def _forget(self, conn: UpstreamConnection) -> None:
        self._cancel_timer(conn)
        key = self._keys.pop(conn, None)
        idle = self._idle.get(key) if key is not None else None
        if idle is not None and conn in idle:
            idle.remove(conn)
            if not idle:
                del self._idle[key]  # type: ignore[arg-type]


def _abandon(exchange: Exchange, reason: EndReason) -> None:
    """request() gave up before the head: close the connection; nobody hears of an end."""
    if exchange.ended is not None:
        return
    exchange.ended = UpstreamEnd(complete=False, reason=reason)
    exchange.conn.close()
    exchange.conn.finished(exchange, reusable=False)
