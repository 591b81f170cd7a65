"""An egress proxy for tests: what the upstream leg and the whole proxy tunnel through."""

from __future__ import annotations

import asyncio
import ssl


class ConnectProxy:
    """A CONNECT-only proxy on 127.0.0.1: records each CONNECT head and tunnels bytes. With
    `tls` it is an `https://` proxy: clients speak TLS to it, and CONNECT inside that."""

    def __init__(self, refuse: bytes | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.heads: list[bytes] = []
        self.refuse = refuse
        self.tls = tls
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> ConnectProxy:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_writer: asyncio.StreamWriter | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            if self.refuse is not None:
                writer.write(self.refuse)
                return
            target = head.split(b" ")[1].decode()
            host, _, port = target.rpartition(":")
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

            async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
                dst.close()

            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            pass  # the test's loop is ending
        finally:
            writer.close()
            if up_writer is not None:  # also when a pump failed or the loop ends mid-tunnel
                up_writer.close()
