"""Admission: everything the proxy decides before it contacts an upstream. A request is read
and bounded (time, size, bytes in flight), routed, checked for a loop, and only then takes a
stream slot; any refusal is a `Refused` the handler turns into the proxy's own response."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from sseproxy.config import Route, Settings
from sseproxy.core import EndReason
from sseproxy.core.inject import InjectionDisabled, InjectionError, Rule, parse_rules
from sseproxy.core.request import body_members, request_facts
from sseproxy.core.request_body import decode_request_body
from sseproxy.intercept.destination import transport_route
from sseproxy.shell.state import Exchange, ProxyState, RequestFacts

INJECT_HEADER = "x-sseproxy-inject"


class Refused(Exception):
    """The proxy answers this request itself: `status` with a JSON error of `etype`."""

    def __init__(
        self,
        status: int,
        etype: str,
        message: str,
        *,
        end: EndReason = EndReason.END_OF_INPUT,
        close: bool = False,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.etype = etype
        self.message = message
        self.end = end
        self.close = close  # the connection cannot be reused (a body left unread)
        self.headers = headers or {}  # beside the request id (426's Sec-WebSocket-Version)
        self.extra = extra


def via_entry(state: ProxyState) -> str:
    return f"1.1 sseproxy-{state.instance_id}"


async def admit(
    request: web.Request, x: Exchange, state: ProxyState, settings: Settings
) -> RequestFacts:
    """The facts of a request the proxy will forward, or `Refused`."""
    own = f"sseproxy-{state.instance_id}"
    if any(own in value for value in request.headers.getall("Via", [])):
        raise Refused(508, "loop_detected", "this request already passed through this proxy")
    # A connection the intercept listener terminated goes to its CONNECT's host, whatever
    # the request's Host or path says; others by the routes (the guard refused bad targets).
    route = connection_route(request) or settings.route_for(request.raw_path)
    if route is None:
        path = request.raw_path.partition("?")[0]
        raise Refused(
            404,
            "no_route",
            f"no configured route matches {path}",
            routes=[r.describe() for r in settings.routes],
        )
    x.facts = x.facts.routed(route)
    body = await read_body(request, x, state, settings)
    if state.active >= settings.max_concurrent_streams:
        raise Refused(503, "overloaded", "too many concurrent streams")
    state.active += 1
    x.slot = True
    state.metrics.active.inc()
    try:
        rules = injection_rules(request, route, settings)
    except InjectionError as exc:
        status = 403 if isinstance(exc, InjectionDisabled) else 400
        raise Refused(status, "injection", str(exc)) from exc
    # A compressed body is decoded (bounded) for the facts; the upstream gets it as sent.
    plain = decode_request_body(body, request.headers.get("Content-Encoding"))
    facts_body = plain if isinstance(plain, bytes) else b""
    # One look at the body for the core's facts and for its secrets: its top-level members,
    # of which only the few these read are decoded.
    parsed = body_members(facts_body)
    version = request.headers.get("MCP-Protocol-Version")
    asked = request_facts(request.path, request.query_string, facts_body, parsed, version)
    secrets = x.facts.secrets.with_json_body(parsed)
    return x.facts.admitted(body, asked, rules, secrets)


def connection_route(request: web.Request) -> Route | None:
    """The intercept route of the connection `request` arrived on, if it has one."""
    transport = request.transport
    return transport_route(transport) if transport else None


async def read_body(
    request: web.Request, x: Exchange, state: ProxyState, settings: Settings
) -> bytes:
    """The whole body, within `request_timeout`, `max_request_body_bytes` and, across all
    requests in flight, `max_total_request_body_bytes`. Bytes are counted as they arrive."""
    limit, total = settings.max_request_body_bytes, settings.max_total_request_body_bytes
    declared = request.content_length
    if declared is not None and declared > limit:
        raise Refused(413, "request_too_large", f"request body exceeds {limit} bytes", close=True)
    if declared is not None and state.body_bytes + declared > total:
        raise Refused(503, "overloaded", "request bodies in flight exceed the limit", close=True)
    content = request.content
    if content.is_eof():
        # Arrived whole (the usual small POST): taken at once, without a timer to arm and
        # cancel (`read()` of a stream at its end returns what it holds without waiting).
        body = await content.read()
        if body:
            _count(body, 0, x, state, limit, total)
        return body
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(settings.request_timeout):
            while chunk := await content.readany():
                size = _count(chunk, size, x, state, limit, total)
                parts.append(chunk)
    except TimeoutError:
        raise Refused(
            408,
            "request_timeout",
            f"the request was not received within {settings.request_timeout} s",
            close=True,
        ) from None
    return b"".join(parts)


def _count(chunk: bytes, size: int, x: Exchange, state: ProxyState, limit: int, total: int) -> int:
    """Count a chunk of the body against both bounds; returns the body's size so far."""
    size += len(chunk)
    x.body_bytes += len(chunk)
    state.body_bytes += len(chunk)
    if size > limit:
        raise Refused(413, "request_too_large", f"request body exceeds {limit} bytes", close=True)
    if state.body_bytes > total:
        raise Refused(503, "overloaded", "request bodies in flight exceed the limit", close=True)
    return size


def injection_rules(request: web.Request, route: Route, settings: Settings) -> tuple[Rule, ...]:
    """Rules from the route's config, plus the request header when the config allows it."""
    rules = parse_rules(route.inject) if route.inject else ()
    header = request.headers.get(INJECT_HEADER)
    if header is not None:
        if not settings.allow_inject:
            raise InjectionDisabled(
                f"{INJECT_HEADER} is disabled: start the proxy with --allow-inject"
            )
        rules += parse_rules(header)
    return rules
