"""The session relay's contact points with capture: each call is guarded like a sink, so a
capture that fails costs the session its capture, never a message or its ending."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..capture import redact_headers
from ..session_capture import Direction, Kind, SessionCapture
from .sinks import safecall
from .state import Exchange, ProxyState


def start(state: ProxyState, session_id: str, now: float) -> SessionCapture | None:
    """The session's capture, when the proxy captures (`now`: the 101, its times' zero)."""
    store = state.captures
    return store.session(session_id, now) if store is not None else None


def note(
    state: ProxyState,
    capture: SessionCapture | None,
    direction: Direction,
    kind: Kind,
    data: bytes,
    now: float,
    name: str | None = None,
    code: int | None = None,
    reason: str | None = None,
) -> None:
    """One message, as it was relayed (`name`: its `type` or first key, when judged)."""
    if capture is not None:
        call = capture.message
        safecall(state, "capture", lambda: call(direction, kind, data, now, name, code, reason))


def close(
    state: ProxyState,
    capture: SessionCapture | None,
    direction: Direction,
    code: int | None,
    reason: str,
    now: float,
) -> None:
    """A close frame (code None: one without a status)."""
    note(state, capture, direction, Kind.CLOSE, b"", now, None, code, reason)


def turn(state: ProxyState, capture: SessionCapture | None, record: Mapping[str, Any]) -> None:
    if capture is not None:
        safecall(state, "capture", lambda: capture.turn(dict(record)))


def save(
    state: ProxyState,
    x: Exchange,
    capture: SessionCapture | None,
    end: str,
    headers: list[tuple[bytes, bytes]],
    record: Mapping[str, Any],
) -> None:
    """Hand the session's capture to the store's writer thread, with its handshake (both
    sides' headers redacted as HTTP captures redact them) and the `session.finished` record."""
    store = state.captures
    if capture is None or store is None:
        return
    secrets = x.facts.secrets

    def meta() -> dict[str, Any]:
        upstream = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers}
        return {
            "dialect": record["dialect"],
            "path": record["path"],
            "end": end,
            "handshake": {
                "status": 101,
                "request_headers": redact_headers(x.facts.headers, secrets),
                "response_headers": redact_headers(upstream, secrets),
                "subprotocol": record["subprotocol"],
                "extensions": record["extensions"],
            },
            "session": dict(record),
        }

    safecall(state, "capture", lambda: store.save_session(capture, meta(), secrets))


__all__ = ["Direction", "Kind", "close", "note", "save", "start", "turn"]
