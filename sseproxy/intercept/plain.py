"""The client's own TCP transport, handed to the reverse proxy's server for a plain-HTTP
request to an intercepted host, answering `ROUTE_EXTRA` with that host's route.

Only what the server writes and controls passes through this wrapper; what the client sends
goes from the inner transport straight to the server's protocol (the listener sets it), and
so do its flow-control calls (`pause_writing`, `resume_writing`) and `connection_lost`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from sseproxy.config import Route
from sseproxy.intercept.destination import ROUTE_EXTRA


class RoutedTransport(asyncio.Transport):
    """`inner`, whose extra info also names `route`."""

    def __init__(self, inner: asyncio.Transport, route: Route) -> None:
        super().__init__()
        self._inner = inner
        self._route = route

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == ROUTE_EXTRA:
            return self._route
        return self._inner.get_extra_info(name, default)

    def is_closing(self) -> bool:
        return self._inner.is_closing()

    def close(self) -> None:
        self._inner.close()

    def abort(self) -> None:
        self._inner.abort()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._inner.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._inner.get_protocol()

    def is_reading(self) -> bool:
        return self._inner.is_reading()

    def pause_reading(self) -> None:
        self._inner.pause_reading()

    def resume_reading(self) -> None:
        self._inner.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._inner.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._inner.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._inner.get_write_buffer_limits()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._inner.write(data)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self._inner.writelines(list_of_data)

    def write_eof(self) -> None:
        self._inner.write_eof()

    def can_write_eof(self) -> bool:
        return self._inner.can_write_eof()
