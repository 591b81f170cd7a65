"""Local stand-ins for the hosts behind intercept mode, in a thread of their own: a TLS
"provider" (a trustme certificate for `localhost`, and for any other names asked for, in front
of the fake provider, as a real provider is TLS in front of its API), a raw TCP echo server (a
host that is tunnelled), and an egress proxy that answers every CONNECT with a tunnel to the
TLS front: the proxy's upstream leg, given it as HTTPS_PROXY, reaches "chatgpt.com" there."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Awaitable, Callable

import trustme

from tests.integration.egress_proxy import ConnectProxy

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


class Fronts:
    """Start with `start()`, stop with `stop()`. `ca` signs the TLS front's certificate."""

    def __init__(
        self, backend_port: int, ca: trustme.CA | None = None, names: tuple[str, ...] = ()
    ) -> None:
        self.backend_port = backend_port
        self.ca = ca or trustme.CA()
        self.names = ("localhost", "127.0.0.1", *names)
        self.tls_port = 0
        self.echo_port = 0
        self.egress_port = 0
        self.echoed = 0
        self.connects: list[str] = []  # the targets the egress proxy was asked for
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        # Every connection's writer until `stop` closes it: a relay left waiting on a peer that
        # closed without EOF is a cycle the collector may take mid-test (task, reader, writer,
        # transport), and the writer's ResourceWarning then fails whatever test runs then.
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fronts", daemon=True)

    def start(self) -> Fronts:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        future.result(10)
        return self

    async def _start(self) -> None:
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert(*self.names).configure_cert(server_tls)
        tls = await asyncio.start_server(self._terminate, "127.0.0.1", 0, ssl=server_tls)
        echo = await asyncio.start_server(self._echo, "127.0.0.1", 0)
        egress = await asyncio.start_server(self._egress, "127.0.0.1", 0)
        self._servers = [tls, echo, egress]
        self.tls_port = tls.sockets[0].getsockname()[1]
        self.echo_port = echo.sockets[0].getsockname()[1]
        self.egress_port = egress.sockets[0].getsockname()[1]

    async def _terminate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.backend_port)
        except OSError:
            writer.close()
            return
        self._writers.add(up_writer)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        writer.close()
        up_writer.close()

    async def _egress(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """`CONNECT host:port`, whatever the host: 200, then the TLS front's bytes."""
        self._writers.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method, target, _ = head.split(b"\r\n", 1)[0].decode("ascii").split(" ", 2)
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.tls_port)
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        self._writers.add(up_writer)
        self.connects.append(f"{method} {target}")
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        writer.close()
        up_writer.close()

    async def _echo(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                self.echoed += len(data)
                writer.write(data)
                await writer.drain()
        writer.close()

    def stop(self) -> None:
        async def close() -> None:
            for server in self._servers:
                server.close()
            for writer in self._writers:
                writer.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


class Egress:
    """An egress proxy (`ConnectProxy`: CONNECT only, each head recorded) in a thread of its
    own, for the proxy process to be given as its HTTPS_PROXY / HTTP_PROXY."""

    def __init__(self) -> None:
        self.proxy = ConnectProxy()
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="egress", daemon=True)

    @property
    def heads(self) -> list[bytes]:
        return list(self.proxy.heads)

    def start(self) -> Egress:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.proxy.__aenter__(), self._loop).result(10)
        self.url = f"http://{self.proxy.url}"
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self.proxy.__aexit__(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
