"""The upstream side: pooled connections that cannot carry one response to another request,
and the checks a response head must pass to be forwarded. (The URL is `Route.target`'s.)
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler
from multidict import CIMultiDict, istr
from yarl import URL

from ..config import Route
from .errors import UpstreamFramingError

# RFC 9110 §7.6.1: connection-specific fields a proxy must not forward. `Expect` too: the
# proxy has read the whole body before it connects, so nobody will answer a `100 Continue`.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


class IsolatedHandler(ResponseHandler):
    """aiohttp's protocol, with two rules that keep each response with its own request.

    - A byte that arrives while no response is expected (the connection idle in the pool, or
      after the current response's framing ended) poisons the connection: it is closed, never
      reused. Otherwise a late, complete second response would answer the next request.
    - A framing error in the middle of a body is delivered to the body's reader at once
      (aiohttp only closes the transport, and the reader would wait for the idle timeout).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.expecting = True  # a new connection is made for a request
        self.head_checked: tuple[object, str | None] = ((), None)  # (raw headers, refusal)

    def data_received(self, data: bytes) -> None:
        if data and not self.expecting:
            self.force_close()
            if self.transport is not None:
                self.transport.close()
            return
        super().data_received(data)

    def resume_reading(self, resume_parser: bool = True) -> None:
        # aiohttp calls this after every read of a body, paused or not. Unpaused, it would
        # only hand its parser an empty buffer (through data_received: nothing is held back
        # unless pause_reading ran) and resume a transport that is reading: that round trip
        # cost as much as our whole accounting of a chunk. Unknown state: always resume.
        if getattr(self, "_reading_paused", True) or getattr(self, "_buffer_paused", True):
            super().resume_reading(resume_parser)

    def feed_data(self, data: Any, *args: Any) -> None:
        message, payload = data
        if not 100 <= message.code < 200 or message.code == 101:  # a final response
            payload.on_eof(self._response_ended)
        why = head_refusal(message.code, message.reason, message.raw_headers)
        self.head_checked = (message.raw_headers, why)  # `refusal()` reads it back
        if why is not None:
            self.force_close()  # the proxy refuses this response: never reuse its connection
        super().feed_data(data, *args)

    def _response_ended(self) -> None:
        self.expecting = False

    def set_exception(self, exc: BaseException, exc_cause: Any = None) -> None:
        payload = self._payload
        if exc_cause is None:
            super().set_exception(exc)
        else:
            super().set_exception(exc, exc_cause)
        if payload is not None and not payload.is_eof() and payload.exception() is None:
            error = UpstreamFramingError(f"upstream framing error: {exc}")
            error.__cause__ = exc
            payload.set_exception(error)


class IsolatedConnector(aiohttp.TCPConnector):
    """A TCPConnector whose connections are `IsolatedHandler`s, re-armed when reused."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # aiohttp builds protocols from this factory (private, but the one seam it has).
        self._factory = functools.partial(IsolatedHandler, loop=self._loop)  # type: ignore[assignment]

    async def _get(self, key: Any, traces: Any) -> Any:
        connection = await super()._get(key, traces)
        if connection is not None and isinstance(connection.protocol, IsolatedHandler):
            connection.protocol.expecting = True
        return connection


# Headers aiohttp would add to a request that did not carry them: the proxy forwards only
# what the client sent.
AUTO_HEADERS_SKIPPED = ("User-Agent", "Accept-Encoding", "Accept")
_SKIPPED = frozenset(istr(name) for name in AUTO_HEADERS_SKIPPED)
# ...which are all the headers aiohttp adds by itself (checked, for another aiohttp version).
_SKIPS_ALL = all(name in _SKIPPED for name in aiohttp.ClientRequest.DEFAULT_HEADERS)
_SKIPPED_PAIRS = tuple((name, None) for name in sorted(_SKIPPED))


class ForwardingRequest(aiohttp.ClientRequest):
    """aiohttp's request; the session's skipped auto headers are every header aiohttp would
    add, so none is added, without copying the headers to find out (aiohttp does, per request)."""

    def update_auto_headers(self, skip_auto_headers: Iterable[str] | None) -> None:
        if _SKIPS_ALL and skip_auto_headers == _SKIPPED:
            self._skip_auto_headers = CIMultiDict(_SKIPPED_PAIRS)
            return
        super().update_auto_headers(skip_auto_headers)


def new_session(connect_timeout: float) -> aiohttp.ClientSession:
    # No sock_read: aiohttp would cancel and re-arm a timer on every chunk received. The idle
    # timeout is an IdleWatch per request instead, re-armed once per idle period.
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=None, connect=connect_timeout),
        connector=IsolatedConnector(limit=0),  # our own limit is max_concurrent_streams
        auto_decompress=False,  # the client gets the upstream's bytes, compressed or not
        skip_auto_headers=AUTO_HEADERS_SKIPPED,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        request_class=ForwardingRequest,
    )


# Upstream URLs of recent request targets, per route: a target is checked and built once.
MAX_CACHED_TARGETS = 256
MAX_CACHED_TARGET_CHARS = 1024
# Keyed by the route's identity (hashing a Route hashes all its fields); each entry holds its
# route, so no other route can take that identity while the entry lives.
_TARGETS: dict[tuple[int, str], tuple[Route, URL]] = {}


def upstream_url(route: Route, raw_path: str) -> URL:
    """`route.target(raw_path)`, remembered for short targets (bounded; the oldest goes first).
    Raises ValueError as `Route.target` does; a refused target is never remembered."""
    key = (id(route), raw_path)
    entry = _TARGETS.get(key)
    if entry is not None and entry[0] is route:
        return entry[1]
    url = route.target(raw_path)
    if len(raw_path) <= MAX_CACHED_TARGET_CHARS:
        if len(_TARGETS) >= MAX_CACHED_TARGETS:
            del _TARGETS[next(iter(_TARGETS))]
        _TARGETS[key] = (route, url)
    return url


# What a request's own headers lose on the way upstream besides hop-by-hop ones: the proxy
# sets Host and Content-Length, has answered any `Expect`, and consumes its drill header.
REQUEST_DROP = frozenset({"host", "content-length", "expect", "x-sseproxy-inject"})
# HOP_BY_HOP and a `drop` set, joined once per `drop` (bounded: callers pass constants).
_SKIP_SETS: dict[frozenset[str], frozenset[str]] = {}


def forwardable(headers: Mapping[str, str], drop: frozenset[str] = frozenset()) -> CIMultiDict[str]:
    """Copy headers minus hop-by-hop ones, including those named in `Connection`."""
    skip = _SKIP_SETS.get(drop)
    if skip is None:
        skip = HOP_BY_HOP | drop
        if len(_SKIP_SETS) < 16:
            _SKIP_SETS[drop] = skip
    connection = headers.getall("Connection", ()) if hasattr(headers, "getall") else ()
    if connection:
        named = {token.strip().lower() for value in connection for token in value.split(",")}
        skip = skip | named
    return CIMultiDict(
        [(name, value) for name, value in headers.items() if name.lower() not in skip]
    )


# A byte a header value or reason phrase cannot carry through aiohttp unchanged: controls
# (but tab), DEL, and 0x80-0xFF.
_UNFORWARDABLE = re.compile(rb"[^\t\x20-\x7e]")


def _unforwardable(value: bytes) -> bool:
    return _UNFORWARDABLE.search(value) is not None


def refusal(upstream: aiohttp.ClientResponse) -> str | None:
    """Why this response head cannot be forwarded faithfully, or None when it can (as the
    connection's protocol found when the head arrived, if it still holds the connection)."""
    # The protocol that read the head (aiohttp keeps it after the connection's release).
    handler = getattr(upstream, "_protocol", None)
    if isinstance(handler, IsolatedHandler):
        head, why = handler.head_checked
        if head is upstream.raw_headers:
            return why
    return head_refusal(upstream.status, upstream.reason or "", upstream.raw_headers)


def head_refusal(
    status: int, reason: str, raw_headers: tuple[tuple[bytes, bytes], ...]
) -> str | None:
    """The proxy forwards a head as the bytes it was or not at all: aiohttp's server would
    drop bytes 0x80-0xFF and fail on control characters, silently altering the response."""
    if not 100 <= status <= 599:
        return f"invalid status code {status}"
    if status < 200:  # aiohttp hands on only 101; the proxy does not tunnel upgrades
        return f"status {status} cannot be forwarded (no protocol upgrades)"
    if _unforwardable(reason.encode("utf-8", "surrogateescape")):
        return "the reason phrase carries a control or non-ASCII byte"
    codings: list[str] = []
    for name, value in raw_headers:
        if _unforwardable(value):
            header = name.decode("ascii", "replace")[:100]
            return f"header {header} carries a control or non-ASCII byte"
        if name.lower() == b"transfer-encoding":
            codings += [t.strip().lower() for t in value.decode("ascii").split(",") if t.strip()]
    if codings and codings != ["chunked"]:
        return f"unsupported transfer coding {', '.join(codings)[:100]}"
    return None
