"""The request as it goes on the wire: origin-form target, Host, the client's headers."""

from __future__ import annotations

import re
from collections.abc import Sequence

from yarl import URL

# RFC 9110 §5.6.2: a method and a field name are tokens.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# A field value or target never carries CR, LF or NUL (they would split the request).
_BREAKS = re.compile(r"[\r\n\x00]")
# Methods without a defined body: an empty one is said by no Content-Length at all (as
# aiohttp's client did); others say `Content-Length: 0`.
_BODILESS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


def request_bytes(method: str, url: URL, headers: Sequence[tuple[str, str]], body: bytes) -> bytes:
    """The request's bytes. The target is `url`'s path and query exactly as built (never
    re-encoded); headers are the caller's, in order, plus Host and Content-Length, which the
    caller must not pass. Raises ValueError for a field that would break the framing."""
    target = url.raw_path_qs or "/"
    if not _TOKEN.fullmatch(method) or _BREAKS.search(target) or " " in target:
        raise ValueError(f"unsendable request line {method!r} {target[:100]!r}")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {url.host_port_subcomponent}"]
    for name, value in headers:
        if not _TOKEN.fullmatch(name) or _BREAKS.search(value):
            raise ValueError(f"unsendable header field {name[:100]!r}")
        lines.append(f"{name}: {value}")
    if body or method not in _BODILESS:
        lines.append(f"Content-Length: {len(body)}")
    # Header text came from the client's bytes decoded as UTF-8 with surrogateescape (as
    # aiohttp's server decodes them): encoded back the same way, every byte is the client's.
    head = "\r\n".join(lines).encode("utf-8", "surrogateescape") + b"\r\n\r\n"
    return head + body if body else head
