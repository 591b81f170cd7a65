"""The Responses API over a WebSocket (`/v1/responses`; xAI's WebSocket mode is the same
protocol): a turn per response, read by the HTTP Responses assembler as if its messages were
SSE events.

Lanes: a `response.create` may name a `stream_id`; responses on one lane run first in, first
out, several lanes run at once, and each event echoes its lane's `stream_id`. A turn is keyed
by its lane and, once `response.created` says it, by its response id. Only the unnamed lane
keeps the connection's old rule of one response at a time (`active_response_conflict`).

Steering: the client's `response.steer` queues input for a response; the server answers
`response.steer.accepted`, `.pending` or `.failed` (session events, counted in
`steering`). A steered response ends `response.incomplete` with reason `steered` (a pause
handed over, not a failure), and the server's own successor `response.created` follows on
its lane: that successor is a turn no `response.create` asked for, and its record names the
turn it continues. Shapes: openai-python's `types/beta` (`BetaResponseSteerEvent`,
`BetaResponseSteerAcceptedEvent`, `BetaResponseIncompleteEvent`, `ResponseCreate.stream_id`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sseproxy.core.dialects import new_assembler
from sseproxy.core.dialects.base import as_int, dig, error_info
from sseproxy.core.dialects.openai_responses import OpenAIResponsesAssembler
from sseproxy.core.events import SSEEvent
from sseproxy.core.sessions.base import (
    HandOver,
    SessionDialect,
    SessionSpec,
    Step,
    Turn,
    TurnJudge,
    model_name,
)
from sseproxy.core.verdict import Dialect

RESPONSES_TERMINALS = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)
RESPONSES_ERROR_ANOMALIES = {
    "websocket_connection_limit_reached": "connection_limit_reached",
    "previous_response_not_found": "previous_response_not_found",
}
# The server's answers to `response.steer` (and to `response.inject`): the session's, never a
# response's events. Each is counted in `steering` under its last word.
STEER_EVENTS = frozenset(
    {"response.steer.accepted", "response.steer.pending", "response.steer.failed"}
)
INJECT_EVENTS = frozenset({"response.inject.created", "response.inject.failed"})
# `incomplete_details.reason` of a response that steering ended at a safe boundary.
STEERED = "steered"
# Lanes remembered per session (a peer names them): the open turns bound the busy ones; past
# this the oldest idle lane is forgotten. Characters of a lane's name kept.
MAX_LANES = 64
MAX_LANE_CHARS = 200


@dataclass(slots=True)
class Lane:
    """One lane's turns in the order they run (the head is the one the events belong to), and
    what the next server-made response on it continues."""

    keys: deque[int] = field(default_factory=deque)
    handover: HandOver | None = None  # its last turn handed over: the next created succeeds it
    steers: int = 0  # accepted steering input not yet committed by a successor
    model: str | None = None  # the model its last turn asked for (a successor inherits it)


def lane_name(value: Any) -> str | None:
    """A `stream_id` as kept (a peer's string, bounded); None: the unnamed lane."""
    return value[:MAX_LANE_CHARS] if isinstance(value, str) and value else None


class ResponsesJudge(TurnJudge):
    """A turn per `response.create` (which names the model asked for) or per successor the
    server made after steering, read by the Responses assembler as if it were SSE (which
    takes the response's model)."""

    dialect = SessionDialect.OPENAI_RESPONSES

    def __init__(self, content_chars: int | None = None, path: str = "") -> None:
        super().__init__(content_chars, path)
        self.lanes: dict[str | None, Lane] = {}
        self.asked = 0  # turn keys: one per turn, in the order they were asked for

    # -- the client ---------------------------------------------------------------------------

    def client(self, obj: Any) -> Step:
        step = Step()
        if not isinstance(obj, dict):
            return step
        etype = obj.get("type")
        if etype == "response.steer":
            self.steering["sent"] += 1
        if etype != "response.create":
            return step
        name = lane_name(obj.get("stream_id"))
        lane = self.lanes.get(name)
        if name is None and lane is not None and lane.keys:
            # the unnamed lane runs one response at a time (the connection's rule before lanes)
            self.anomalies["active_response_conflict"] += 1
            return step
        turn = self._new_turn(name, step)
        if turn is not None:
            turn.model = model_name(obj.get("model"))
            self.lanes[name].model = turn.model or self.lanes[name].model
        return step

    # -- the upstream -------------------------------------------------------------------------

    def upstream(self, obj: Any, raw: bytes) -> Step:
        step = Step()
        if not isinstance(obj, dict):
            return step
        etype = obj.get("type")
        if not isinstance(etype, str):
            return step
        name = lane_name(obj.get("stream_id"))
        if etype in STEER_EVENTS or etype in INJECT_EVENTS:
            self._steering(etype, name, obj)
            return step
        if etype == "error":
            self.errors += 1
            info = error_info(obj)
            named = RESPONSES_ERROR_ANOMALIES.get(info.code or "")
            if named:
                self.anomalies[named] += 1
        lane = self.lanes.get(name)
        if etype == "response.created" and lane is not None and lane.handover is not None:
            self._successor(name, lane, step)  # the server's own: no response.create asked
        key = self._head(name, etype == "error")
        if key is None:
            if etype == "error":
                self.anomalies["error_without_response"] += 1
            return step
        turn = self.open[key]
        a = turn.assembler
        before = a.content_deltas
        a.on_event(SSEEvent(etype, raw.decode("utf-8", "replace"), "", 0, raw))
        turn.messages += 1
        turn.bytes += len(raw)
        step.deltas += a.content_deltas - before
        if etype in RESPONSES_TERMINALS:
            self._terminal(key, turn, etype, obj, step)
        return step

    def _steering(self, etype: str, name: str | None, obj: dict[str, Any]) -> None:
        """A steering answer: counted; it moves what the lane's next response continues. Its
        `sequence_number` advances the steered turn's when it continues that sequence (whether
        steering shares a response's numbering is not documented: nothing else is assumed)."""
        kind = etype.rpartition(".")[2]
        lane = self.lanes.get(name)
        if etype in STEER_EVENTS:
            self.steering[kind] += 1
            if lane is not None and kind == "accepted":
                lane.steers += 1
            elif lane is not None:  # pending: the client continues it; failed: nothing will
                lane.steers = max(0, lane.steers - 1)
                if kind == "pending" or not lane.steers:
                    lane.handover = None
        key = self._head(name, False)
        seq = obj.get("sequence_number")
        a = self.open[key].assembler if key is not None else None
        if not isinstance(a, OpenAIResponsesAssembler) or not isinstance(seq, int):
            return
        if a.last_sequence is not None and seq == a.last_sequence + 1:
            a.last_sequence = seq

    def _terminal(self, key: int, turn: Turn, etype: str, obj: dict[str, Any], step: Step) -> None:
        a = turn.assembler
        outcome = a.summarize(False, True).outcome
        turn.outcome = outcome.state
        turn.finish_reason, turn.finish_category = outcome.finish_reason, outcome.finish_category
        status = as_int(obj.get("status"))
        if etype == "error" and status is not None and not 200 <= status < 300:
            turn.status = status
        lane = self.lanes.get(turn.lane)
        if lane is not None:
            steered = dig(obj, "response", "incomplete_details", "reason") == STEERED
            if etype == "response.incomplete" and steered:
                lane.handover = HandOver(turn.number, a.response_id)
            elif etype == "response.completed" and lane.steers:
                # "normal completion can also be followed by an automatic successor"
                lane.handover = HandOver(turn.number, a.response_id)
            if key in lane.keys:
                lane.keys.remove(key)
        self._end(key, step)

    # -- lanes and turns ----------------------------------------------------------------------

    def _new_turn(self, name: str | None, step: Step, first: bool = False) -> Turn | None:
        lane = self._lane(name)
        if lane is None:
            return None
        self.asked += 1
        turn = self._open(self.asked, step, new_assembler(Dialect.OPENAI_RESPONSES))
        if turn is None:
            return None
        turn.lane = name
        if first:
            lane.keys.appendleft(self.asked)
        else:
            lane.keys.append(self.asked)
        return turn

    def _successor(self, name: str | None, lane: Lane, step: Step) -> None:
        handover, lane.handover, lane.steers = lane.handover, None, 0
        turn = self._new_turn(name, step, first=True)
        if turn is not None:
            turn.model, turn.continues = lane.model, handover

    def _lane(self, name: str | None) -> Lane | None:
        """The lane named so, made when new; the oldest idle lane is forgotten past the bound
        (None: every lane is busy, which the bound on open turns keeps from happening)."""
        lane = self.lanes.get(name)
        if lane is not None:
            return lane
        if len(self.lanes) >= MAX_LANES:
            idle = [n for n, kept in self.lanes.items() if not kept.keys][:1]
            if not idle:
                return None
            del self.lanes[idle[0]]
        lane = self.lanes[name] = Lane()
        return lane

    def _head(self, name: str | None, error: bool) -> int | None:
        """The open turn an event of lane `name` belongs to: its lane's first. An `error` that
        names no lane goes to the only open turn, when there is exactly one."""
        lane = self.lanes.get(name)
        if lane is not None and lane.keys:
            return lane.keys[0]
        if error and name is None and len(self.open) == 1:
            key = next(iter(self.open))
            return key if isinstance(key, int) else None
        return None


SPEC = SessionSpec(SessionDialect.OPENAI_RESPONSES, ResponsesJudge, path_suffixes=("/responses",))
