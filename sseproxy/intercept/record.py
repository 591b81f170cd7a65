"""The `connect.finished` record: one for each connection to the intercept listener that does
not end in an intercepted HTTP exchange (those write `request.finished` and
`session.finished`). A record kind of the schema (`$defs/connect_finished`) like the other
two: every field always written, `null` where it does not apply, so that a table can hold it.
Built here, pure; the listener writes it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sseproxy.intercept.destination import Destination
from sseproxy.observe.record_schema import SCHEMA_VERSION

EVENT = "connect.finished"


class Mode(StrEnum):
    """What the listener was doing with the connection."""

    TUNNEL = "tunnel"  # a CONNECT to a host that is not intercepted: bytes both ways
    FORWARD = "forward"  # a plain-HTTP request to a host that is not intercepted
    INTERCEPT = "intercept"  # a CONNECT to an intercepted host, before its HTTP exchange
    SETUP = "setup"  # before the head said which (a refused head, or one that never came)


class Outcome(StrEnum):
    CLOSED = "closed"
    TLS_CLIENT_REFUSED_CERTIFICATE = "tls_client_refused_certificate"
    TLS_HANDSHAKE_FAILED = "tls_handshake_failed"
    TLS_HANDSHAKE_TIMEOUT = "tls_handshake_timeout"
    UPSTREAM_UNREACHABLE = "upstream_unreachable"
    UPSTREAM_TIMEOUT = "upstream_timeout"
    OVERLOADED = "overloaded"
    BAD_CONNECT = "bad_connect"
    HEAD_TIMEOUT = "head_timeout"
    PROXY_SHUTDOWN = "proxy_shutdown"
    PROXY_ERROR = "proxy_error"


class ClosedBy(StrEnum):
    CLIENT = "client"
    UPSTREAM = "upstream"
    PROXY = "proxy"


@dataclass(frozen=True, slots=True)
class Relayed:
    """What a tunnel or a forwarded request carried: bytes from the client (after its head
    for a tunnel; the forwarded head included for a forward) and from the host."""

    bytes_up: int
    bytes_down: int
    closed_by: ClosedBy | None


def build(
    destination: Destination | None,
    mode: Mode,
    outcome: Outcome,
    duration_ms: float,
    *,
    relayed: Relayed | None = None,
    error: str | None = None,
    hint: str | None = None,
    egress: str | None = None,
) -> dict[str, Any]:
    """The record's fields (the log line adds `timestamp`, `level` and `event`)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "host": destination.host if destination else None,
        "port": destination.port if destination else None,
        "mode": str(mode),
        "outcome": str(outcome),
        "duration_ms": duration_ms,
        "bytes_up": relayed.bytes_up if relayed else None,
        "bytes_down": relayed.bytes_down if relayed else None,
        "closed_by": str(relayed.closed_by) if relayed and relayed.closed_by else None,
        "egress": egress,
        "error": error[:500] if error else None,
        "hint": hint,
    }


def level(outcome: Outcome) -> str:
    """A tunnel that closed is routine; every other outcome is something to look at."""
    return "info" if outcome is Outcome.CLOSED else "warning"
