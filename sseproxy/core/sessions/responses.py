"""The Responses API over a WebSocket (`/v1/responses`): a turn per `response.create`, read by
the HTTP Responses assembler as if its messages were SSE events."""

from __future__ import annotations

from typing import Any, ClassVar

from sseproxy.core.dialects import new_assembler
from sseproxy.core.dialects.base import as_int, error_info
from sseproxy.core.events import SSEEvent
from sseproxy.core.sessions.base import SessionDialect, SessionSpec, Step, TurnJudge, model_name
from sseproxy.core.verdict import Dialect

RESPONSES_TERMINALS = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)
RESPONSES_ERROR_ANOMALIES = {
    "websocket_connection_limit_reached": "connection_limit_reached",
    "previous_response_not_found": "previous_response_not_found",
}


class ResponsesJudge(TurnJudge):
    """A turn per `response.create` (which names the model asked for), read by the Responses
    assembler as if it were SSE (which takes the response's model)."""

    dialect = SessionDialect.OPENAI_RESPONSES
    KEY: ClassVar[str] = "turn"

    def client(self, obj: Any) -> Step:
        step = Step()
        if isinstance(obj, dict) and obj.get("type") == "response.create":
            if self.KEY in self.open:  # one response at a time per connection
                self.anomalies["active_response_conflict"] += 1
            else:
                turn = self._open(self.KEY, step, new_assembler(Dialect.OPENAI_RESPONSES))
                if turn is not None:
                    turn.model = model_name(obj.get("model"))
        return step

    def upstream(self, obj: Any, raw: bytes) -> Step:
        step = Step()
        size = len(raw)
        if not isinstance(obj, dict):
            return step
        etype = obj.get("type")
        if not isinstance(etype, str):
            return step
        if etype == "error":
            self.errors += 1
            info = error_info(obj)
            named = RESPONSES_ERROR_ANOMALIES.get(info.code or "")
            if named:
                self.anomalies[named] += 1
            if self.KEY not in self.open:
                self.anomalies["error_without_response"] += 1
                return step
        turn = self.open.get(self.KEY)
        if turn is None:
            return step
        a = turn.assembler
        before = a.content_deltas
        a.on_event(SSEEvent(etype, raw.decode("utf-8", "replace"), "", 0, raw))
        turn.messages += 1
        turn.bytes += size
        step.deltas += a.content_deltas - before
        if etype in RESPONSES_TERMINALS:
            outcome = a.summarize(False, True).outcome
            turn.outcome = outcome.state
            turn.finish_reason, turn.finish_category = (
                outcome.finish_reason,
                outcome.finish_category,
            )
            status = as_int(obj.get("status"))
            if etype == "error" and status is not None and not 200 <= status < 300:
                turn.status = status
            self._end(self.KEY, step)
        return step


SPEC = SessionSpec(SessionDialect.OPENAI_RESPONSES, ResponsesJudge, path_suffixes=("/responses",))
