"""The WebSocket session registry: one `SessionSpec` per session dialect family, declared in its
own module (`realtime`, `responses`, `gemini_live`) on the shared `base`, like `core/dialects`
has one module per HTTP dialect; `drills` holds their fault injection, `reconnect` what is
watched across sessions. Nothing elsewhere branches on a session dialect's name.

Adding a session dialect is one module (a `TurnJudge` subclass and its `SPEC`) and one line in
`SESSION_SPECS`; recognition tries the specs in this order.
"""

from __future__ import annotations

from sseproxy.core.sessions import gemini_live, realtime, responses
from sseproxy.core.sessions.base import (
    SessionDialect,
    SessionSpec,
    Step,
    TurnJudge,
    TurnResult,
    parse_message,
)

SESSION_SPECS: tuple[SessionSpec, ...] = (gemini_live.SPEC, realtime.SPEC, responses.SPEC)


def session_spec(path: str) -> SessionSpec:
    """The spec for a WebSocket request to `path` (its query excluded)."""
    path = path.partition("?")[0].rstrip("/")
    for spec in SESSION_SPECS:
        if path.endswith(spec.path_suffixes) or any(s in path for s in spec.path_contains):
            return spec
    return SessionSpec(SessionDialect.UNKNOWN, TurnJudge)


__all__ = [
    "SESSION_SPECS",
    "SessionDialect",
    "SessionSpec",
    "Step",
    "TurnJudge",
    "TurnResult",
    "parse_message",
    "session_spec",
]
