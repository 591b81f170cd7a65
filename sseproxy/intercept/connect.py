"""The head of a forward-proxy request, `CONNECT host:port HTTP/1.1` and its header lines
(RFC 9110 §9.3.6), read within a size bound. Pure: fed bytes, it answers with the request, a
refusal, or a wish for more bytes; it never raises anything but `HeadRefused`."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from sseproxy.intercept.destination import Destination

# Bytes of the whole head (request line and header lines). Clients send a few hundred: a
# request line, Host, User-Agent, perhaps Proxy-Authorization.
MAX_HEAD_BYTES = 8192
# A DNS name as clients send it in an authority (letters, digits, `-`, `_`, `.`), at most
# 253 characters; or an IPv6 literal in brackets.
HOST_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9_.])?")
IPV6_LITERAL = re.compile(r"\[([0-9A-Fa-f:.]+)\]")
VERSIONS = (b"HTTP/1.1", b"HTTP/1.0")


class HeadRefused(ValueError):
    """The proxy answers `status` and closes: the head is not a CONNECT it will carry out."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Connect:
    destination: Destination
    rest: bytes  # bytes after the head (a client that did not wait for the 200)


class HeadReader:
    """Feed it what arrives; `feed` returns the `Connect` once the head is whole."""

    def __init__(self, limit: int = MAX_HEAD_BYTES) -> None:
        self.limit = limit
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Connect | None:
        """None: more bytes are needed. Raises HeadRefused."""
        searched_from = max(0, len(self._buffer) - 3)
        self._buffer += data
        end = _head_end(self._buffer, searched_from)
        if end < 0:
            if len(self._buffer) > self.limit:
                raise HeadRefused(431, f"the request head exceeds {self.limit} bytes")
            return None
        if end > self.limit:
            raise HeadRefused(431, f"the request head exceeds {self.limit} bytes")
        head, rest = bytes(self._buffer[:end]), bytes(self._buffer[end:])
        return Connect(parse_head(head), rest)


def _head_end(buffer: bytearray, start: int) -> int:
    """The offset just past the blank line that ends the head, or -1."""
    crlf = buffer.find(b"\r\n\r\n", start)
    lf = buffer.find(b"\n\n", start)
    ends = [i + 4 for i in (crlf,) if i >= 0] + [i + 2 for i in (lf,) if i >= 0]
    return min(ends) if ends else -1


def parse_head(head: bytes) -> Destination:
    """The destination of a whole head. Raises HeadRefused."""
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    parts = line.split(b" ")
    if len(parts) != 3:
        raise HeadRefused(400, "not an HTTP request line")
    method, target, version = parts
    if version not in VERSIONS:
        raise HeadRefused(400, "not HTTP/1.x")
    if method != b"CONNECT":
        raise HeadRefused(405, "this address is a forward proxy: only CONNECT is served")
    try:
        authority = target.decode("ascii")
    except UnicodeDecodeError:
        raise HeadRefused(400, "a CONNECT target that is not ASCII") from None
    return parse_authority(authority)


def parse_authority(authority: str) -> Destination:
    """`host:port` (RFC 9110: CONNECT's target is always authority-form, port included)."""
    host, sep, port_text = authority.rpartition(":")
    if not sep or not port_text.isdigit() or len(port_text) > 5:
        raise HeadRefused(400, "a CONNECT target must be host:port")
    port = int(port_text)
    if not 0 < port <= 65535:
        raise HeadRefused(400, "a CONNECT target's port must be 1 to 65535")
    literal = IPV6_LITERAL.fullmatch(host)
    if literal:
        try:
            address = ipaddress.IPv6Address(literal.group(1))
        except ValueError:
            raise HeadRefused(400, "a malformed IPv6 address in the CONNECT target") from None
        return Destination(str(address), port)
    if not HOST_NAME.fullmatch(host) or ".." in host:
        raise HeadRefused(400, "a CONNECT target whose host is not a host name")
    return Destination(host.lower(), port)
