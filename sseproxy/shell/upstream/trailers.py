"""Which upstream trailer fields travel on to the client, and the bytes that carry them.

RFC 9110 §6.5.1: a field may come after the content only when its definition allows it, and
fields that frame or route the message, authenticate, modify the request, control the
response or describe the content cannot. The proxy forwards only the fields the upstream
announced in its `Trailer` header (so the client's head can announce the same ones, and an
upstream cannot add a field its head never mentioned), minus those names, hop-by-hop ones and
the proxy's own; and only to a client that said `TE: trailers` (§10.1.4). Every trailer the
upstream sent is recorded, forwarded or not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from sseproxy.shell.upstream.headers import HOP_BY_HOP

# Names a trailer section must never carry to the client (RFC 9110 §6.5.1's kinds).
FORBIDDEN = HOP_BY_HOP | frozenset(
    {
        # framing and routing
        "content-length",
        "host",
        # authentication and state
        "authorization",
        "www-authenticate",
        "cookie",
        "set-cookie",
        # request modifiers and response controls
        "age",
        "cache-control",
        "expect",
        "expires",
        "date",
        "location",
        "max-forwards",
        "pragma",
        "range",
        "retry-after",
        "vary",
        "warning",
        # what describes the content
        "content-encoding",
        "content-language",
        "content-location",
        "content-range",
        "content-type",
        # the proxy's own
        "x-sseproxy-request-id",
    }
)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# A byte a field value cannot carry through unchanged: controls (but tab) and DEL.
_UNSAFE_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


def accepts_trailers(te_values: Iterable[str]) -> bool:
    """The request's `TE` fields list `trailers`: its client will not discard them."""
    return any(
        token.split(";", 1)[0].strip().lower() == "trailers"
        for value in te_values
        for token in value.split(",")
    )


def announced(
    trailer_values: Iterable[str], connection_values: Iterable[str] = (), *, limit: int
) -> tuple[str, ...]:
    """The forwardable names a response head's `Trailer` fields announce: lower case, each
    once, in order, at most `limit`; never a forbidden name or one `Connection` lists."""
    named = {t.strip().lower() for value in connection_values for t in value.split(",")}
    names: list[str] = []
    for value in trailer_values:
        for token in value.split(","):
            name = token.strip().lower()
            if (
                _TOKEN.fullmatch(name)
                and name not in FORBIDDEN
                and name not in named
                and name not in names
            ):
                names.append(name)
                if len(names) == limit:
                    return tuple(names)
    return tuple(names)


def section(
    trailers: Sequence[tuple[bytes, bytes]], names: Sequence[str]
) -> tuple[bytes, tuple[str, ...]]:
    """The last chunk and its trailer section, with the fields among `names` as the upstream
    sent them (name case and order kept; a value with a control byte is left out); and the
    names written."""
    allowed = {name.encode("ascii") for name in names}
    lines = [b"0\r\n"]
    written: list[str] = []
    for name, value in trailers:
        lower = name.lower()
        if lower in allowed and not _UNSAFE_VALUE.search(value):
            lines.append(b"%s: %s\r\n" % (name, value))
            if (text := lower.decode("ascii")) not in written:
                written.append(text)
    lines.append(b"\r\n")
    return b"".join(lines), tuple(written)
