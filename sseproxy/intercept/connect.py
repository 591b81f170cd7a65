"""The head of a forward-proxy request, read within a size bound: `CONNECT host:port
HTTP/1.1` (RFC 9110 §9.3.6), or a plain-HTTP request in absolute-form (`GET http://host/path
HTTP/1.1`, RFC 9112 §3.2.2: what clients send for http:// URLs given `HTTP_PROXY`).

An absolute-form head is rewritten as a proxy forwards it (RFC 9112 §3.2.1, RFC 9110 §7.6.1):
origin-form target, `Host` from the target (never the client's own Host line), the hop-by-hop
headers dropped (`Connection` and what it names, `Proxy-Connection`, `Keep-Alive`,
`Proxy-Authorization`), and `Connection: close`: one request per connection to the listener,
so that the next request, which may name another host, comes on a connection of its own.

Pure: fed bytes, it answers with the request, a refusal, or a wish for more bytes; it never
raises anything but `HeadRefused`."""

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
# RFC 9110 §5.6.2: a method and a header name are tokens.
TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
CONTROL = re.compile(rb"[\x00-\x1f\x7f]")
# Hop-by-hop: for the listener, never forwarded (RFC 9110 §7.6.1; Proxy-Connection is what
# old clients send in Connection's place). Host is set from the target.
HOP_BY_HOP = frozenset(
    {b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization", b"host"}
)


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


@dataclass(frozen=True, slots=True)
class Forward:
    """A plain-HTTP request in absolute-form: its destination, and its head as forwarded."""

    destination: Destination
    method: str
    head: bytes  # origin-form, Host from the target, hop-by-hop dropped, Connection: close
    rest: bytes  # bytes after the head: the start of the body


Head = Connect | Forward


class HeadReader:
    """Feed it what arrives; `feed` returns the `Connect` or `Forward` once the head is
    whole."""

    def __init__(self, limit: int = MAX_HEAD_BYTES) -> None:
        self.limit = limit
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Head | None:
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
        return parse_request(head, rest)


def _head_end(buffer: bytearray, start: int) -> int:
    """The offset just past the blank line that ends the head, or -1."""
    crlf = buffer.find(b"\r\n\r\n", start)
    lf = buffer.find(b"\n\n", start)
    ends = [i + 4 for i in (crlf,) if i >= 0] + [i + 2 for i in (lf,) if i >= 0]
    return min(ends) if ends else -1


def parse_head(head: bytes) -> Destination:
    """The destination of a whole head. Raises HeadRefused."""
    return parse_request(head, b"").destination


def parse_request(head: bytes, rest: bytes) -> Head:
    """A whole head: a CONNECT, or an absolute-form request to forward. Raises HeadRefused."""
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    parts = line.split(b" ")
    if len(parts) != 3:
        raise HeadRefused(400, "not an HTTP request line")
    method, target, version = parts
    if version not in VERSIONS:
        raise HeadRefused(400, "not HTTP/1.x")
    if not TOKEN.fullmatch(method):
        raise HeadRefused(400, "not an HTTP method")
    try:
        text = target.decode("ascii")
    except UnicodeDecodeError:
        raise HeadRefused(400, "a request target that is not ASCII") from None
    if method == b"CONNECT":
        return Connect(parse_authority(text), rest)
    destination, path = parse_absolute(text)
    return Forward(destination, method.decode(), forwarded_head(head, destination, path), rest)


def parse_absolute(target: str) -> tuple[Destination, str]:
    """`http://host[:port][/path][?query]`: the destination (port 80 by default) and the
    origin-form target."""
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        if target.startswith("/"):
            raise HeadRefused(
                400,
                "this address is a forward proxy: send http:// URLs in absolute-form and https"
                " by CONNECT (the reverse proxy has its own address)",
            )
        if scheme.lower() == "https":
            raise HeadRefused(400, "https through a forward proxy is a CONNECT")
        raise HeadRefused(400, "a forward proxy's request target must be an http:// URL")
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    if "@" in authority:
        raise HeadRefused(400, "user information in the request target")
    if path.startswith("?") or not path:
        path = "/" + path
    if CONTROL.search(path.encode()) or "#" in path:
        raise HeadRefused(400, "a request target with a control character or a fragment")
    if authority.endswith("]") or ":" not in authority:
        authority += ":80"
    return parse_authority(authority), path


def forwarded_head(head: bytes, destination: Destination, path: str) -> bytes:
    """`head` as forwarded to `destination`: see the module's docstring."""
    lines = head.replace(b"\r\n", b"\n").rstrip(b"\n").split(b"\n")
    method, _, version = lines[0].split(b" ")
    fields: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not TOKEN.fullmatch(name):  # obs-fold, a space before the colon...
            raise HeadRefused(400, "a malformed header line")
        fields.append((name, value.strip(b" \t")))
    dropped = set(HOP_BY_HOP)
    for name, value in fields:
        if name.lower() in (b"connection", b"proxy-connection"):
            dropped |= {token.strip().lower() for token in value.split(b",")}
    host = destination.authority
    if destination.port == 80:
        host = host.rpartition(":")[0]
    out = [b"%s %s %s" % (method, path.encode(), version), b"Host: " + host.encode()]
    out += [name + b": " + value for name, value in fields if name.lower() not in dropped]
    out.append(b"Connection: close")
    return b"\r\n".join(out) + b"\r\n\r\n"


def parse_authority(authority: str) -> Destination:
    """`host:port` (RFC 9110: CONNECT's target is always authority-form, port included; an
    absolute-form target's is given its default port first)."""
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
