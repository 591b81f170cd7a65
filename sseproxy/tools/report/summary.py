"""The report's accumulator: one pass over the records, into fixed-size structures.

Every value in a record is treated as untrusted input: a field of the wrong type is read as
absent, strings are cut to `MAX_KEY_CHARS`, and each table has a bound on distinct keys.

A drill (a record whose `injected` lists the faults the proxy injected on purpose) is counted
apart: its cut, error or delay is the drill's, not the upstream's, so it is in none of the
tables of real traffic (states, failure rates, cuts, latency, worst) but in its own.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

import orjson

from sseproxy.tools.report.bounded import OTHER, BoundedTable, Count, Reservoir, Timeline, TopN
from sseproxy.tools.report.lines import TooLong

V = TypeVar("V")
Table: TypeAlias = BoundedTable[str, V]

# The proxy's own refusals (`answered_by: proxy` with no cut: no route, a bad target, a refused
# handshake, too large, overloaded, ...): counted apart from the upstream's errors, never as a
# failure of a model or a route. The proxy's 502/504 for an upstream that failed before its head
# carries the cut and stays an `http_error`.
PROXY_REFUSED = "proxy_refused"
# The states in the order people read them; FAILURES are those in which a client saw an error
# from the upstream, or from the proxy standing in for one that failed.
STATES = (
    "completed",
    "incomplete",
    "unconfirmed",
    "cancelled",
    "failed",
    "interrupted",
    "http_error",
    PROXY_REFUSED,
)
FAILURES = frozenset({"failed", "interrupted", "http_error"})
TIMELINE_STATES = (*STATES, OTHER)
NONE = "-"  # a key that the record left null or absent
MAX_KEY_CHARS = 200
MAX_WHAT_CHARS = 160
# How bad a request is, for the worst list: then by duration (the slowest first).
SEVERITY = {"interrupted": 4, "failed": 3, "http_error": 2, "unconfirmed": 1}


@dataclass(frozen=True, slots=True)
class Bounds:
    """The sizes that bound a report's memory, whatever the log holds."""

    keys: int = 1000  # distinct values per table (models, routes, anomalies, ...)
    reservoir: int = 2048  # latencies kept per model and metric: exact up to this many
    timeline: int = 300  # time buckets
    worst: int = 10


@dataclass(frozen=True, slots=True)
class Worst:
    """One line about one bad request."""

    request_id: str
    timestamp: str
    state: str
    model: str
    route: str
    status: int | None
    duration_ms: float | None
    what: str


class StateCounts:
    """Requests per state in one row of a table."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, state: str) -> None:
        self.counts[state] = self.counts.get(state, 0) + 1

    @property
    def requests(self) -> int:
        return sum(self.counts.values())

    @property
    def failures(self) -> int:
        return sum(n for s, n in self.counts.items() if s in FAILURES)


class RunCounts(StateCounts):
    """One agent run's requests per state (`run_id`), its client, retries and sessions."""

    __slots__ = ("client", "first", "last", "retries", "sessions")

    def __init__(self) -> None:
        super().__init__()
        self.client = NONE  # the client of its first record
        self.retries = 0  # records linked as a retry of an earlier one
        self.sessions = 0  # WebSocket connections (session.finished)
        self.first: datetime.datetime | None = None
        self.last: datetime.datetime | None = None

    def seen(self, client: str, moment: datetime.datetime | None) -> None:
        if self.client == NONE:
            self.client = client
        if moment is not None:
            self.first = moment if self.first is None else min(self.first, moment)
            self.last = moment if self.last is None else max(self.last, moment)


class AnomalyCounts:
    __slots__ = ("occurrences", "requests")

    def __init__(self) -> None:
        self.occurrences = 0
        self.requests = 0


class Latency:
    """TTFT and duration of one model's requests."""

    __slots__ = ("duration", "ttft")

    def __init__(self, size: int) -> None:
        self.ttft = Reservoir(size)
        self.duration = Reservoir(size)


def _text(value: Any) -> str | None:
    return value[:MAX_KEY_CHARS] if isinstance(value, str) else None


def _key(value: Any) -> str:
    text = _text(value)
    return NONE if text is None or text == "" else text


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def parse_time(value: Any) -> datetime.datetime | None:
    """An ISO 8601 timestamp as the log writes it; naive ones are taken as UTC."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def client_of(record: dict[str, Any]) -> tuple[str, str]:
    """The record's client as (name, version), `-` for what it left out."""
    client = record.get("client")
    if not isinstance(client, dict) or not _text(client.get("name")):
        return NONE, NONE  # a version without a name names no client
    return _key(client.get("name")), _key(client.get("version"))


def model_of(record: dict[str, Any]) -> str:
    """The model asked for, else the one that answered: the report's and the views' key."""
    return _key(record.get("model") or record.get("response_model"))


@dataclass
class Summary:
    """Everything the report shows, accumulated record by record."""

    bounds: Bounds = field(default_factory=Bounds)
    since: datetime.datetime | None = None
    until: datetime.datetime | None = None
    records: int = 0  # real requests: drills are counted apart
    drills: int = 0  # requests with faults the proxy injected on purpose
    sessions: int = 0  # session.finished records: a WebSocket connection each
    session_turns: int = 0
    unparseable: int = 0
    other_events: int = 0
    outside_window: int = 0  # before --since, at or after --until, or no timestamp to tell
    first: datetime.datetime | None = None
    last: datetime.datetime | None = None

    def __post_init__(self) -> None:
        keys, size = self.bounds.keys, self.bounds.reservoir
        self.states: Table[Count] = BoundedTable(keys, Count, OTHER)
        self.versions: Table[Count] = BoundedTable(keys, Count, OTHER)
        self.routes: Table[StateCounts] = BoundedTable(keys, StateCounts, OTHER)
        self.dialects: Table[StateCounts] = BoundedTable(keys, StateCounts, OTHER)
        self.models: Table[StateCounts] = BoundedTable(keys, StateCounts, OTHER)
        self.model_routes: BoundedTable[tuple[str, str], StateCounts] = BoundedTable(
            keys, StateCounts, (OTHER, OTHER)
        )
        self.anomalies: Table[AnomalyCounts] = BoundedTable(keys, AnomalyCounts, OTHER)
        self.cuts: Table[Count] = BoundedTable(keys, Count, OTHER)
        self.latency: Table[Latency] = BoundedTable(keys, lambda: Latency(size), OTHER)
        self.timeline = Timeline(self.bounds.timeline, TIMELINE_STATES)
        self.worst: TopN[Worst] = TopN(self.bounds.worst)
        # sessions by (route, closed_by, close code): how WebSocket connections ended
        self.session_closes: BoundedTable[tuple[str, str, str], Count] = BoundedTable(
            keys, Count, (OTHER, OTHER, OTHER)
        )
        self.session_anomalies: Table[AnomalyCounts] = BoundedTable(keys, AnomalyCounts, OTHER)
        # drills: by state, by the reason of their cut, by the faults injected
        self.drill_states: Table[Count] = BoundedTable(keys, Count, OTHER)
        self.drill_cuts: Table[Count] = BoundedTable(keys, Count, OTHER)
        self.drill_rules: Table[Count] = BoundedTable(keys, Count, OTHER)
        # requests by client (name, version), and by the agent run they say they belong to
        self.clients: BoundedTable[tuple[str, str], StateCounts] = BoundedTable(
            keys, StateCounts, (OTHER, OTHER)
        )
        self.runs: Table[RunCounts] = BoundedTable(keys, RunCounts, OTHER)

    def feed(self, lines: Iterable[bytes | TooLong]) -> Summary:
        for line in lines:
            self.line(line)
        return self

    def line(self, line: bytes | TooLong) -> None:
        if isinstance(line, TooLong):
            self.unparseable += 1
            return
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.unparseable += 1
            return
        if not isinstance(record, dict):
            self.unparseable += 1
        elif record.get("event") == "request.finished":
            self.record(record)
        elif record.get("event") == "session.finished":
            self.session(record)
        else:
            self.other_events += 1

    def _outside(self, moment: datetime.datetime | None) -> bool:
        if (self.since is not None or self.until is not None) and (
            moment is None
            or (self.since is not None and moment < self.since)
            or (self.until is not None and moment >= self.until)
        ):
            self.outside_window += 1
            return True
        return False

    def session(self, record: dict[str, Any]) -> None:
        """A WebSocket connection's end; its turns are counted as requests, one record each."""
        if self._outside(parse_time(record.get("timestamp"))):
            return
        self.sessions += 1
        self.session_turns += _count(record.get("turns")) or 0
        code = _count(record.get("close_code"))
        key = (
            _key(record.get("route")),
            _key(record.get("closed_by")),
            NONE if code is None else str(code),
        )
        self.session_closes.row(key).n += 1
        _add_anomalies(self.session_anomalies, record.get("anomalies"))
        run_id = _text(record.get("run_id"))
        if run_id:
            run = self.runs.row(run_id)
            run.sessions += 1
            run.seen(" ".join(client_of(record)), parse_time(record.get("timestamp")))

    def record(self, record: dict[str, Any]) -> None:
        moment = parse_time(record.get("timestamp"))
        if self._outside(moment):
            return
        if is_drill(record):
            self.drill(record)
            return
        self.records += 1
        state = state_of(record)
        self.states.row(state).n += 1
        if state not in self.states.rows:  # beyond the bound: (other) in every table
            state = OTHER
        route, model = _key(record.get("route")), model_of(record)
        self.versions.row(_key(record.get("schema_version"))).n += 1
        self.routes.row(route).add(state)
        self.dialects.row(_key(record.get("dialect"))).add(state)
        self.models.row(model).add(state)
        self.model_routes.row((model, route)).add(state)
        client = client_of(record)
        self.clients.row(client).add(state)
        run_id = _text(record.get("run_id"))
        if run_id:
            run = self.runs.row(run_id)
            run.add(state)
            run.seen(" ".join(client), moment)
            if isinstance(record.get("retry"), dict):
                run.retries += 1
        _add_anomalies(self.anomalies, record.get("anomalies"))
        interruption = record.get("interruption")
        if isinstance(interruption, dict):
            self.cuts.row(_key(interruption.get("reason"))).n += 1
        ttft, duration = _number(record.get("ttft_ms")), _number(record.get("duration_ms"))
        if ttft is not None or duration is not None:
            latency = self.latency.row(model)
            if ttft is not None:
                latency.ttft.add(ttft)
            if duration is not None:
                latency.duration.add(duration)
        if moment is not None:
            self.first = moment if self.first is None else min(self.first, moment)
            self.last = moment if self.last is None else max(self.last, moment)
            index = STATES.index(state) if state in STATES else len(STATES)
            self.timeline.add(moment.timestamp(), index)
        rank = (float(SEVERITY.get(state, 0)), duration or 0.0)
        self.worst.offer(rank, lambda: worst_of(record, state, model, route, duration))

    def drill(self, record: dict[str, Any]) -> None:
        """A request the proxy injected faults into on purpose: counted apart."""
        self.drills += 1
        self.drill_states.row(state_of(record)).n += 1
        interruption = record.get("interruption")
        if isinstance(interruption, dict):
            self.drill_cuts.row(_key(interruption.get("reason"))).n += 1
        for rule in record["injected"][: self.bounds.keys]:
            self.drill_rules.row(_key(rule)).n += 1


def is_drill(record: dict[str, Any]) -> bool:
    """The record lists faults the proxy injected (`--inject`, `x-sseproxy-inject`)."""
    injected = record.get("injected")
    return isinstance(injected, list) and len(injected) > 0


def state_of(record: dict[str, Any]) -> str:
    """The record's state, with the proxy's own refusals apart from the upstream's errors."""
    state = _key(record.get("state"))
    refused = record.get("answered_by") == "proxy" and record.get("interruption") is None
    return PROXY_REFUSED if refused and state == "http_error" else state


def _add_anomalies(table: Table[AnomalyCounts], anomalies: Any) -> None:
    if isinstance(anomalies, dict):
        for name, count in anomalies.items():
            n = _count(count)
            if n is not None:
                row = table.row(_key(name))
                row.occurrences += n
                row.requests += 1


def worst_of(
    record: dict[str, Any], state: str, model: str, route: str, duration: float | None
) -> Worst:
    status = record.get("status")
    return Worst(
        request_id=_key(record.get("request_id")),
        timestamp=_key(record.get("timestamp")),
        state=state,
        model=model,
        route=route,
        status=status if isinstance(status, int) and not isinstance(status, bool) else None,
        duration_ms=duration,
        what=what_happened(record, state)[:MAX_WHAT_CHARS],
    )


def what_happened(record: dict[str, Any], state: str) -> str:
    """One line a person reads: the cut, the error, or how the stream ended."""
    parts: list[str] = []
    interruption = record.get("interruption")
    if isinstance(interruption, dict):
        reason = _key(interruption.get("reason"))
        parts.append(f"cut: {reason} after {_count(record.get('bytes')) or 0} B")
        partial = _count(interruption.get("partial_event_bytes"))
        if partial:
            parts.append(f"{partial} B of an event lost")
    error = record.get("error")
    if isinstance(error, dict):
        kind = _text(error.get("type")) or _text(error.get("code")) or "error"
        message = _text(error.get("message"))
        parts.append(f"{kind}: {message}" if message else kind)
    finish = _text(record.get("finish_reason"))
    if not parts:
        parts.append(f"finish {finish}" if finish else f"{state}, no finish reason")
    anomalies = record.get("anomalies")
    if isinstance(anomalies, dict) and anomalies:
        names = [n[:40] for n in list(anomalies)[:3] if isinstance(n, str)]
        parts.append("anomalies " + ",".join(names))
    # one line, whatever the log held: no control characters reach a terminal
    return "; ".join(parts).translate(_CONTROL)


_CONTROL = {c: " " for c in (*range(0x20), 0x7F)}
