"""The egress proxy for the upstream leg, from HTTPS_PROXY / HTTP_PROXY / NO_PROXY.

Read from a mapping the app passes (its environment), never from os.environ here. The lower
case name wins over the upper case one, as curl and requests have it. Both http and https
targets go through a `CONNECT host:port` tunnel: the request then travels exactly as it would
directly (origin-form, our bytes), and the proxy sees nothing but the tunnel. An `https://`
proxy URL puts TLS between the leg and the proxy too (the proxy's certificate checked as an
upstream's is): the CONNECT and its credentials never cross the network in the clear.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field

from yarl import URL


@dataclass(frozen=True, slots=True)
class EgressProxy:
    """An HTTP proxy that tunnels with CONNECT, reached over TLS when `tls`."""

    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)  # Proxy-Authorization value
    tls: bool = False  # an `https://` proxy URL: TLS to the proxy, then CONNECT inside it

    @classmethod
    def parse(cls, value: str) -> EgressProxy:
        """A proxy URL as curl reads it: `http://user:pass@host:port` or `https://...`, the
        scheme optional (http); the port defaults to the scheme's."""
        url = URL(value if "://" in value else f"http://{value}")
        if url.scheme not in ("http", "https") or not url.raw_host:
            raise ValueError(f"unsupported egress proxy {url.with_password(None)!s}")
        authorization = None
        if url.user is not None:
            userinfo = f"{url.user}:{url.password or ''}".encode()
            authorization = "Basic " + base64.b64encode(userinfo).decode("ascii")
        tls = url.scheme == "https"
        return cls(url.raw_host, url.port or (443 if tls else 80), authorization, tls)

    @property
    def name(self) -> str:
        """How records and errors name the proxy: scheme, host and port, never credentials."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def connect_request(self, host: str, port: int) -> bytes:
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
        if self.authorization is not None:
            lines.append(f"Proxy-Authorization: {self.authorization}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def _variable(environ: Mapping[str, str], name: str) -> str:
    return (environ.get(name.lower()) or environ.get(name.upper()) or "").strip()


@dataclass(frozen=True, slots=True)
class ProxySettings:
    https: EgressProxy | None = None
    http: EgressProxy | None = None
    no_proxy: str = ""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ProxySettings:
        """Raises ValueError for a proxy URL the leg cannot use (not http:// or https://)."""
        https, http = _variable(environ, "https_proxy"), _variable(environ, "http_proxy")
        return cls(
            https=EgressProxy.parse(https) if https else None,
            http=EgressProxy.parse(http) if http else None,
            no_proxy=_variable(environ, "no_proxy"),
        )

    def for_target(self, scheme: str, host: str, port: int) -> EgressProxy | None:
        proxy = self.https if scheme == "https" else self.http
        if proxy is None:
            return None
        return None if self.no_proxy and bypassed(self.no_proxy, host, port) else proxy


def bypassed(no_proxy: str, host: str, port: int) -> bool:
    """NO_PROXY as curl and requests read it: comma-separated host names (each also matching
    its subdomains; a leading dot changes nothing), `*` for all, an optional `:port`, and IP
    literals or CIDR ranges (matching addresses only, never names)."""
    host = host.strip("[]").rstrip(".").lower()
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in no_proxy.lower().split(","):
        entry = entry.strip()
        if entry == "*":
            return True
        name, entry_port = _split_port(entry)
        if not name or (entry_port is not None and entry_port != port):
            continue
        if address is not None:
            try:
                if address in ipaddress.ip_network(name, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name = name.lstrip(".").rstrip(".")
        if host == name or host.endswith("." + name):
            return True
    return False


def _split_port(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [v6]:port or [v6]
        name, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        return name, int(port) if port.isdigit() else None
    if entry.count(":") == 1:  # name:port (a bare v6 literal has several colons)
        name, _, port = entry.partition(":")
        return name, int(port) if port.isdigit() else -1
    return entry, None
