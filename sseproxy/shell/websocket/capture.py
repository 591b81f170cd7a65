"""The session relay's contact points with capture: each call is guarded like a sink, so a
capture that fails costs the session its capture, never a message or its ending."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sseproxy.capture.sessions import Direction, Kind, SessionCapture
from sseproxy.capture.store import redact_headers
from sseproxy.observe.redact import Secrets
from sseproxy.shell.sinks import safecall
from sseproxy.shell.state import Exchange, ProxyState


def start(
    state: ProxyState,
    x: Exchange,
    dialect: str,
    subprotocol: str | None,
    headers: list[tuple[bytes, bytes]],
    now: float,
) -> SessionCapture | None:
    """The session's capture, when the proxy captures (`now`: the 101, its times' zero): its
    files begun now with the handshake (`save` completes them at the end)."""
    store = state.captures
    if store is None:
        return None
    secrets = x.facts.secrets
    started: list[SessionCapture] = []

    def begin() -> None:
        head = {
            "dialect": dialect,
            "path": x.facts.path,
            "handshake": _handshake(x, secrets, headers, subprotocol),
        }
        started.append(store.session(x.facts.request_id, now, head, secrets))

    safecall(state, "capture", begin)
    return started[0] if started else None


def _handshake(
    x: Exchange,
    secrets: Secrets,
    headers: list[tuple[bytes, bytes]],
    subprotocol: str | None,
    extensions: Any = None,
) -> dict[str, Any]:
    """Both sides' headers of the upgrade, redacted as HTTP captures redact them."""
    upstream = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers}
    out: dict[str, Any] = {
        "status": 101,
        "request_headers": redact_headers(x.facts.headers, secrets),
        "response_headers": redact_headers(upstream, secrets),
        "subprotocol": subprotocol,
    }
    if extensions is not None:
        out["extensions"] = extensions
    return out


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
        return {
            "dialect": record["dialect"],
            "path": record["path"],
            "end": end,
            "handshake": _handshake(
                x, secrets, headers, record["subprotocol"], record["extensions"]
            ),
            "session": dict(record),
        }

    safecall(state, "capture", lambda: store.save_session(capture, meta(), secrets))


__all__ = ["Direction", "Kind", "close", "note", "save", "start", "turn"]
