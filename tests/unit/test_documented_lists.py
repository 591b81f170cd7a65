"""The record's documented lists (docs/record.md, moved there from README) are the code's: every
anomaly name the core can count (core/anomalies.py) and the shell's own, every
`interruption.reason`, every top-level record field record.py builds. Each failure names what
is missing where, so that a new name is documented when it is added."""

from __future__ import annotations

import re
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from opentelemetry.trace import SpanContext

from sseproxy.config import Route
from sseproxy.core import EndReason, ErrorInfo, Interruption, State, StreamTap, Usage, Verdict
from sseproxy.core.anomalies import ANOMALIES
from sseproxy.core.dialects import Dialect
from sseproxy.core.inject import parse_rules
from sseproxy.core.pacing import PacingSummary, Unmeasured
from sseproxy.core.request import request_facts
from sseproxy.core.resume import ResumeLink, ResumeVerdict
from sseproxy.core.verdict import Fallback
from sseproxy.shell import record as records
from sseproxy.shell import state
from sseproxy.shell.delivery import ClientDelivery
from sseproxy.shell.ledger import Links
from sseproxy.shell.websocket import session as websocket

RECORD_PAGE = Path(__file__).resolve().parents[2] / "docs" / "record.md"
# The fields of issue 30 (client, run_id) are documented on their own page.
AGENT_RECORDS = RECORD_PAGE.parent / "agents-records.md"
# Fields the log line adds around every record (log.py), not record.py's.
LOG_FIELDS = {"timestamp", "level", "event"}


def section(heading: str, page: Path = RECORD_PAGE) -> str:
    """docs/record.md's (or `page`'s) text under `heading` up to the next heading of any level."""
    text = page.read_text("utf-8")
    start = text.index(f"\n{heading}\n")
    end = re.compile(r"\n#{2,4} ").search(text, start + len(heading) + 2)
    return text[start : end.start() if end else len(text)]


def first_column(heading: str, page: Path = RECORD_PAGE) -> set[str]:
    """Every `name` in the first column of the table in `page`'s section `heading`."""
    names: set[str] = set()
    rows = [line for line in section(heading, page).splitlines() if line.startswith("|")]
    for line in rows[2:]:  # after the header and its separator
        names.update(re.findall(r"`([a-z_][a-z0-9_.]*)`", line.split("|")[1]))
    assert names, f"no table in docs/record.md's {heading!r}"  # the parse itself works
    return names


def compare(code: set[str], readme: set[str], what: str, where: str) -> None:
    missing, unknown = sorted(code - readme), sorted(readme - code)
    assert not missing, f"{what} missing in docs/record.md's {where}: {', '.join(missing)}"
    assert not unknown, f"{what} in docs/record.md's {where} that the code never writes: {unknown}"


class Span:
    """What record.py reads of an OpenTelemetry span."""

    def get_span_context(self) -> SpanContext:
        return SpanContext(trace_id=1, span_id=2, is_remote=False)


def every_field_record() -> set[str]:
    """The top-level fields of records that take every optional branch of record.build, and
    of the fallback record."""
    route = Route("r", ("/v1/*",), "https://up.example", None)  # type: ignore[arg-type]
    verdict = Verdict(
        Dialect.OPENAI_CHAT,
        State.INTERRUPTED,
        interruption=Interruption(EndReason.CLIENT_DISCONNECTED, 0),
        error=ErrorInfo("t", "c", "m"),
        usage=Usage(1, 2, 3),
    )
    pacing = PacingSummary(1.0, 2.0, 3.0, None, Unmeasured.NO_USAGE, False, False)
    fields: set[str] = set()
    for method in ("POST", "HEAD"):
        facts = state.RequestFacts(
            "id", method, "/v1/x", 1.0, 0.0, route=route, inject_rules=parse_rules("cut-after=3")
        )
        progress = state.Progress(state.Timings(0.0), status=200)
        request = make_mocked_request(method, "/v1/x")
        progress.delivery = ClientDelivery(request, web.StreamResponse())
        progress.end = EndReason.CLIENT_DISCONNECTED
        progress.span = Span()  # type: ignore[assignment]
        progress.trailers = ((b"x-usage", b"5"),)
        fields |= set(records.build(facts, progress, verdict, pacing))
        fields |= set(records.fallback(facts, progress, ValueError("x")))
    # the links and an MCP session with SSE `retry:`
    facts = state.RequestFacts("id", "GET", "/mcp", 1.0, 0.0, headers={"mcp-session-id": "s"})
    progress = state.Progress(state.Timings(0.0), status=200)
    progress.tap = StreamTap(Dialect.MCP)
    progress.tap.feed(b"retry: 10\ndata:\n\n")
    link = ResumeLink(None, "3", ResumeVerdict.UNKNOWN_ORIGIN)
    retry = {"of": "x", "regenerated": True, "shared_prefix_chars": None}
    fields |= set(records.build_rendered(facts, progress, verdict, None, Links(link, retry))[0])
    # an MCP 2026-07-28 round trip (its version), and a turn a fallback model served
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}}'
    asked = request_facts("/mcp", "", body, mcp_version="2026-07-28")
    facts = state.RequestFacts("id", "POST", "/mcp", 1.0, 0.0, asked=asked)
    progress = state.Progress(state.Timings(0.0), status=200)
    served = verdict.replace(model="a", fallback=Fallback(1, "b"))
    trip = Links(round_trip={"of": "x", "number": 2})
    fields |= set(records.build_rendered(facts, progress, served, None, trip)[0])
    return fields


def test_every_anomaly_is_documented() -> None:
    compare(
        set(ANOMALIES)
        | {records.RECORD_ERROR, records.BYTES_AFTER_RESPONSE, websocket.RECONNECT_LOOP}
        | {websocket.NOT_JUDGED},
        first_column("## Anomalies"),
        "anomaly names",
        "## Anomalies table (core/anomalies.py, shell/record.py, shell/websocket/session.py)",
    )


def test_every_interruption_reason_is_documented() -> None:
    compare(
        {str(r) for r in EndReason} | {records.PROXY_ERROR},
        first_column("## Interruptions"),
        "interruption.reason values",
        "## Interruptions table (core EndReason, shell/record.py)",
    )


def test_every_record_field_is_documented() -> None:
    built = every_field_record()
    taken = {"injected", "trace_id", "no_body_expected", "events_delivered", "resume", "retry"}
    taken |= {"trailers", "trailers_forwarded"}
    assert taken | {"mcp_session_id", "sse_retry_ms"} <= built  # every branch taken
    documented = first_column("## Fields") | first_column("### Fields", AGENT_RECORDS)
    readme = {name.split(".")[0] for name in documented}
    compare(built | LOG_FIELDS, readme, "record fields", "## Fields table (shell/record.py)")


def test_a_missing_name_is_named_with_its_table() -> None:
    try:
        compare({"a", "b"}, {"a"}, "record fields", "## Fields table")
    except AssertionError as exc:
        assert str(exc).startswith("record fields missing in docs/record.md's ## Fields table: b")
    else:
        raise AssertionError("compare let a missing name through")
