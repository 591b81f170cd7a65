"""Transport exceptions become an `EndReason` in one table, applied around each read and write.

As httpcore's `map_exceptions`: the reason is decided where the failure happens, and the
original exception stays chained for whoever wants the detail.
"""

from __future__ import annotations

import errno
import ssl
from collections.abc import Callable
from types import TracebackType
from typing import Literal

import aiohttp

from ..core import EndReason

# An exception message can quote a whole malformed response; the error body stays readable.
MAX_CAUSE_CHARS = 300


class Ended(Exception):
    """The transfer ended for `reason`; raised from inside a mapped read or write."""

    def __init__(self, reason: EndReason, cause: str = "") -> None:
        super().__init__(f"{reason}: {cause}" if cause else str(reason))
        self.reason = reason
        self.cause = cause


class IdleTimeout(TimeoutError):
    """Set on the upstream body by the idle watch: no upstream byte for `idle_timeout`."""


class ContentTimeout(TimeoutError):
    """Set on the upstream body by the content watch: bytes still came, content did not."""


class UpstreamFramingError(aiohttp.ClientPayloadError):
    """The upstream body broke its own HTTP framing (a chunk longer than its size line, ...)."""


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_CAUSE_CHARS else text[:MAX_CAUSE_CHARS] + "..."


def _was_reset(exc: BaseException) -> bool:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionResetError | BrokenPipeError) or (
            isinstance(cause, OSError) and cause.errno == errno.ECONNRESET
        ):
            return True
        cause = cause.__cause__ or cause.__context__
    # aiohttp names the connection error of a truncated body only in the message text.
    return isinstance(exc, aiohttp.ClientPayloadError) and "ConnectionResetError" in str(exc)


def _always(exc: BaseException) -> bool:
    return True


Rule = tuple[type[BaseException] | tuple[type[BaseException], ...], Callable[[BaseException], bool]]

# First match wins. Before the response headers a connect failure is `upstream_unreachable`;
# a reset after the connection was accepted is `upstream_reset`, whenever it happens.
UPSTREAM: tuple[tuple[Rule, EndReason], ...] = (
    ((IdleTimeout, _always), EndReason.IDLE_TIMEOUT),
    ((ContentTimeout, _always), EndReason.CONTENT_TIMEOUT),
    ((UpstreamFramingError, _always), EndReason.UPSTREAM_PROTOCOL_ERROR),
    # aiohttp's parser refused the response head (bad status line, header, first chunk).
    ((aiohttp.ClientResponseError, _always), EndReason.UPSTREAM_PROTOCOL_ERROR),
    (
        (
            (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError, ssl.SSLError),
            _always,
        ),
        EndReason.UPSTREAM_UNREACHABLE,
    ),
    ((Exception, _was_reset), EndReason.UPSTREAM_RESET),
    ((TimeoutError, _always), EndReason.IDLE_TIMEOUT),
    ((aiohttp.ClientError, _always), EndReason.UPSTREAM_CLOSED),
    ((OSError, _always), EndReason.UPSTREAM_CLOSED),
)
# Writing to the client fails only because the client went away.
CLIENT: tuple[tuple[Rule, EndReason], ...] = (
    ((OSError, _always), EndReason.CLIENT_DISCONNECTED),  # ConnectionResetError and kin
    ((aiohttp.ClientConnectionResetError, _always), EndReason.CLIENT_DISCONNECTED),
)


class map_exceptions:
    """`with UPSTREAM_READ:` re-raises a transport exception as `Ended(reason)`, chained.

    A class rather than a generator-based context manager: it wraps every chunk's read and
    write, so it must cost next to nothing.
    """

    __slots__ = ("table",)

    def __init__(self, table: tuple[tuple[Rule, EndReason], ...]) -> None:
        self.table = table

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if exc is None or isinstance(exc, Ended) or not isinstance(exc, Exception):
            return False  # CancelledError is the handler's: a client left or we shut down
        reason = self.reason_for(exc)
        if reason is None:
            return False
        raise Ended(reason, describe(exc)) from exc

    def reason_for(self, exc: BaseException) -> EndReason | None:
        for (types, test), reason in self.table:
            if isinstance(exc, types) and test(exc):
                return reason
        return None


UPSTREAM_IO = map_exceptions(UPSTREAM)
CLIENT_IO = map_exceptions(CLIENT)
