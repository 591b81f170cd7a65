"""Pure helpers of the upstream leg: which request headers travel upstream, the upstream URL
of a request target, and the checks a response head must pass to be forwarded."""

from __future__ import annotations

import re
from collections.abc import Mapping

from multidict import CIMultiDict
from yarl import URL

from sseproxy.config import Route

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
