"""Drills for WebSocket sessions, sans I/O: each upstream message in, what the client gets out.
The shell performs the steps and feeds the turn judge exactly what was sent, so the records
describe what the client received.

Rules (the same header and route setting as for HTTP, `x-sseproxy-inject`):

- `cut-after=N`: after N upstream messages the session ends: without a close frame (the
  client sees 1006), or with `close-code=C` (and the reason "sseproxy drill").
- `drop-terminal`: the turn's end is never sent: Realtime `response.done`, the Responses
  API's `response.completed` / `incomplete` / `failed`, Gemini Live's `turnComplete`.
- `inject-error=N`: after N upstream messages, the dialect's own error: a Realtime `error`
  event, a Responses `error` with status 500, and for Gemini Live (whose errors travel in
  the close frame) a close 1011.
- `stall-after=N`: after N upstream messages nothing more reaches the client; the connection
  stays open.

Other rules work on HTTP bodies and do nothing to a session.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sseproxy.core.inject import Rule
from sseproxy.core.sessions.base import SessionDialect

DRILL_REASON = "sseproxy drill"
SESSION_RULES = frozenset(
    {"cut-after", "close-code", "drop-terminal", "inject-error", "stall-after"}
)
RESPONSES_TERMINALS = ("response.completed", "response.incomplete", "response.failed")


@dataclass(frozen=True, slots=True)
class Send:
    data: bytes
    text: bool = True


@dataclass(frozen=True, slots=True)
class End:
    """End the session: with a close frame of `code`, or without any (`code` None)."""

    code: int | None
    reason: str = DRILL_REASON


Step = Send | End


class SessionDrill:
    def __init__(self, rules: tuple[Rule, ...], dialect: SessionDialect) -> None:
        self.rules = {r.name: r.value for r in rules if r.name in SESSION_RULES}
        self.dialect = dialect
        self.sent = 0
        self.stalled = False

    @property
    def active(self) -> bool:
        return bool(self.rules)

    def message(self, obj: Any, raw: bytes, text: bool) -> list[Step]:
        """The steps for one upstream message (parsed as `obj`, None when not JSON)."""
        if self.stalled or ("drop-terminal" in self.rules and self._terminal(obj)):
            return []
        out: list[Step] = [Send(raw, text)]
        self.sent += 1
        error_after = self.rules.get("inject-error")
        if error_after is not None and self.sent == error_after:
            out.append(self._error())
        cut = self.rules.get("cut-after")
        if cut is not None and self.sent >= cut:
            out.append(End(self.rules.get("close-code")))
        stall = self.rules.get("stall-after")
        if stall is not None and self.sent >= stall:
            self.stalled = True
        return out

    def _terminal(self, obj: Any) -> bool:
        if not isinstance(obj, dict):
            return False
        if self.dialect is SessionDialect.OPENAI_REALTIME:
            return obj.get("type") == "response.done"
        if self.dialect is SessionDialect.OPENAI_RESPONSES:
            return obj.get("type") in RESPONSES_TERMINALS
        if self.dialect is SessionDialect.GEMINI_LIVE:
            content = obj.get("serverContent")
            return isinstance(content, dict) and content.get("turnComplete") is True
        return False

    def _error(self) -> Step:
        error = {"type": "server_error", "code": "sseproxy_injected", "message": DRILL_REASON}
        if self.dialect is SessionDialect.OPENAI_REALTIME:
            return Send(json.dumps({"type": "error", "error": error}).encode())
        if self.dialect is SessionDialect.OPENAI_RESPONSES:
            return Send(json.dumps({"type": "error", "status": 500, "error": error}).encode())
        return End(1011, "Internal error encountered.")  # Gemini Live, and unjudged sessions
