"""Who may use the proxy's own endpoints under /_sseproxy/ (inspector, metrics, streams).

Listening on loopback, no token is needed, so the Host header is the defence against DNS
rebinding: a page on another site that resolves its own name to 127.0.0.1 sends that name as
Host, and is refused with 421. A page on another site that names the proxy by its loopback
name can still make a browser connect: the inspector feed, whose slots are few, refuses such
requests (Sec-Fetch-Site, Origin), and the inspector's responses cannot be framed.
Listening beyond loopback, the admin token is the defence and any Host may present it (a
Prometheus in docker compose scrapes `sseproxy:8790`). healthz is always open: probes carry
neither.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from typing import Any

import orjson
from aiohttp import web

OWN_PREFIX = "/_sseproxy/"
ALWAYS_OPEN = frozenset({OWN_PREFIX + "healthz"})
# Each inspector feed holds one of a few slots: only the inspector's own page may open one.
FEED = OWN_PREFIX + "events"
# Sec-Fetch-Site values of a request a page on another site did not make.
OWN_SITE = frozenset({"same-origin", "none"})  # the proxy's own page; typed or a bookmark
# On the inspector's responses: no other site may frame them (a framed page is same-origin
# to the proxy, and would hold a feed slot as the real one does).
NO_FRAMING = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'"}
# A Host header is quoted in the refusal only this far.
MAX_QUOTED_HOST = 100


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback address (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104). Not the
    `*.localhost` names RFC 6761 also sends to loopback: any page can name a fresh one."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def host_name(value: str) -> str:
    """The host of a Host header value, without port or IPv6 brackets, lower-cased."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        value = value[1:end] if end > 0 else ""
    elif value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def presented_token(request: web.Request) -> str | None:
    authorization = request.headers.get("Authorization", "")
    if authorization[:7].lower() == "bearer ":
        return authorization[7:].strip()
    return request.query.get("token")  # EventSource cannot send headers


def token_matches(given: str | None, token: str) -> bool:
    """Constant-time comparison: the time taken says nothing about how much of it matched."""
    if not token or given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8"))


def allowed_host(value: str | None, listen_host: str, extra: Iterable[str]) -> bool:
    if value is None:
        return False
    host = host_name(value)
    if not host:
        return False
    return (
        is_loopback(host) or host == host_name(listen_host) or host in {host_name(h) for h in extra}
    )


def cross_site(request: web.Request) -> bool:
    """The request was made by a page on another origin: its browser says so in
    Sec-Fetch-Site, or (a browser without it) in an Origin that is not the proxy's own.
    A client that is no browser sends neither."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site.strip().lower() not in OWN_SITE
    origin = request.headers.get("Origin")
    if origin is None:
        return False
    return origin.strip().lower() != f"{request.scheme}://{request.host}".lower()


def refusal(status: int, etype: str, message: str) -> web.Response:
    body = {"error": {"type": etype, "message": message}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def admin_refusal(request: web.Request, settings: Any) -> web.Response | None:
    """The response refusing this request to an own endpoint, or None to let it through.

    `settings` needs `host` (the listen host), `admin_token`, and optionally `allowed_hosts`
    (extra Host names allowed on loopback; default none)."""
    path = request.path
    if not path.startswith(OWN_PREFIX) or path in ALWAYS_OPEN:
        return None
    if path == FEED and cross_site(request):  # before the token: no page on another site
        return refusal(403, "sseproxy_cross_site", "the inspector feed is for its own page")
    token: str = getattr(settings, "admin_token", "") or ""
    if token_matches(presented_token(request), token):
        return None  # a valid token is accepted under any Host
    listen_host: str = settings.host
    if not is_loopback(host_name(listen_host)):
        return refusal(403, "sseproxy_forbidden", "admin token required")
    extra: Iterable[str] = getattr(settings, "allowed_hosts", ()) or ()
    host = request.headers.get("Host")
    if allowed_host(host, listen_host, extra):
        return None
    quoted = repr((host or "")[:MAX_QUOTED_HOST])
    return refusal(
        421,
        "sseproxy_host_not_allowed",
        f"Host {quoted} is not a loopback name or address, the listen address, or in allowed_hosts",
    )
