"""The record schema is the contract: every record the proxy can build validates against it,
and it holds no field the proxy never writes. The records come from `record.build` and
`record.fallback`, written through the real log path, never from the schema itself."""

from __future__ import annotations

import dataclasses
import fnmatch
import io
import json
import logging
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from opentelemetry.sdk.trace import TracerProvider

from bench.record_cost import CASES, KEY, exchange
from sseproxy.core import Dialect, FinishCategory, State, StreamTap
from sseproxy.core.inject import parse_rules
from sseproxy.core.request import request_facts
from sseproxy.core.resume import ResumeLink, ResumeVerdict
from sseproxy.core.sessions.judges import TurnResult, session_spec
from sseproxy.core.verdict import Fallback
from sseproxy.observe import log
from sseproxy.observe.record_schema import SCHEMA_FILE, SCHEMA_VERSION, record_fields, schema
from sseproxy.observe.redact import REDACTED
from sseproxy.shell import record as records
from sseproxy.shell.ledger import Links
from sseproxy.shell.websocket.session import turn_fields
from tests.record_contract import VALIDATOR

ROOT = Path(__file__).resolve().parents[2]


def written(record: Any, level: int = logging.INFO) -> dict[str, Any]:
    """The record as the log writes it: one JSON line with timestamp, level and event."""
    stream = io.StringIO()
    log.configure("json", "debug", stream, cache=False)
    log.request_finished(record, level)
    [line] = stream.getvalue().splitlines()
    parsed: dict[str, Any] = json.loads(line)
    return parsed


def every_kind() -> Iterator[dict[str, Any]]:
    """Records of every shape: each bench case, with every optional field, and fallbacks."""
    span = TracerProvider().get_tracer("test").start_span("request")
    for name in CASES:
        facts, progress = exchange(name)
        verdict, pacing = records.verdict_of(facts, progress)
        yield written(records.build(facts, progress, verdict, pacing))
        yield written(records.fallback(facts, progress, ValueError("boom")), logging.ERROR)
        # the optional fields: drill rules, a trace, no body expected, a broken delivery
        facts = dataclasses.replace(facts, method="HEAD", inject_rules=parse_rules("cut-after=1"))
        progress.span, progress.http_complete = span, False
        progress.trailers = ((b"X-Usage", b'{"output_tokens": 5}'), (b"x-api-key", b"sk-1"))
        progress.trailers_forwarded = ("x-usage",)
        yield written(records.build(facts, progress, verdict, pacing), logging.WARNING)
    span.end()
    # a WebSocket turn, and a session
    facts, progress = exchange(next(iter(CASES)))
    verdict, _ = records.verdict_of(facts, progress)
    result = TurnResult(1, verdict, audio_bytes=4800, audio_ms=100.0)
    extra = turn_fields("s1", session_spec("/v1/realtime"), result)
    yield written(records.build_rendered(facts, progress, verdict, extra=extra)[0])
    yield linked()
    yield round_trip()
    yield fallback()


def round_trip() -> dict[str, Any]:
    """An MCP 2026-07-28 request answering an `input_required` result: its version and its
    round trip (schema 1.4)."""
    facts, progress = exchange("chat_tool_call")
    body = b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "x"}}'
    asked = request_facts("/mcp", "", body, mcp_version="2026-07-28")
    facts = dataclasses.replace(facts, path="/mcp", asked=asked)
    progress.tap = StreamTap(Dialect.MCP, request=asked)
    progress.tap.feed(
        b'data: {"jsonrpc": "2.0", "id": 2, "result": {"resultType": "complete"}}\n\n'
    )
    verdict, pacing = records.verdict_of(facts, progress)
    links = Links(round_trip={"of": "req-0", "number": 2})
    record, _ = records.build_rendered(facts, progress, verdict, pacing, links)
    return written(record)


def fallback() -> dict[str, Any]:
    """An Anthropic turn a fallback model served: who wrote the text (schema 1.4)."""
    facts, progress = exchange("chat_tool_call")
    verdict, pacing = records.verdict_of(facts, progress)
    verdict = verdict.replace(model="claude-a", fallback=Fallback(1, "claude-b"))
    return written(records.build(facts, progress, verdict, pacing))


def test_a_fallback_names_the_model_that_wrote_the_text() -> None:
    record = fallback()
    assert (record["fallback_hops"], record["text_model"]) == (1, "claude-b")
    assert record["response_model"] == "claude-a"


def test_an_mcp_round_trip_and_version_are_recorded() -> None:
    record = round_trip()
    assert record["mcp_protocol_version"] == "2026-07-28"
    assert record["round_trip"] == {"of": "req-0", "number": 2}


def linked() -> dict[str, Any]:
    """An MCP request that names its session, set `retry:`, resumed one stream and retried
    another (a record has one or the other; the schema takes each)."""
    facts, progress = exchange("chat_tool_call")
    headers = {**facts.headers, "mcp-session-id": "sess-1"}
    facts = dataclasses.replace(facts, path="/mcp", headers=headers)
    progress.tap = StreamTap(Dialect.MCP)
    progress.tap.feed(b"retry: 1500\nid: s-1\ndata:\n\n")
    verdict, pacing = records.verdict_of(facts, progress)
    resume = ResumeLink("req-0", "3", ResumeVerdict.GAP, "5", 0, ("4",), 1, 1)
    retry = {"of": "req-0", "regenerated": True, "shared_prefix_chars": 12}
    record, _ = records.build_rendered(facts, progress, verdict, pacing, Links(resume, retry))
    return written(record)


def test_the_mcp_session_is_recorded_and_the_authorization_is_not() -> None:
    record = linked()
    assert (record["mcp_session_id"], record["sse_retry_ms"]) == ("sess-1", 1500)
    assert record["resume"]["verdict"] == "gap" and record["retry"]["of"] == "req-0"
    assert KEY not in json.dumps(record)


def test_trailers_are_recorded_by_name_and_redacted_like_headers() -> None:
    facts, progress = exchange("chat_tool_call")
    progress.trailers = (
        (b"X-Usage", b"5"),
        (b"x-usage", b"6"),
        (b"X-Api-Key", b"sk-secret"),
        (b"x-echo", KEY.encode()),
    )
    progress.trailers_forwarded = ("x-usage",)
    verdict, pacing = records.verdict_of(facts, progress)
    record = written(records.build(facts, progress, verdict, pacing))
    assert record["trailers"] == {
        "x-usage": "5, 6",
        "x-api-key": REDACTED,
        "x-echo": "*" * len(KEY),
    }
    assert record["trailers_forwarded"] == ["x-usage"]
    assert KEY not in json.dumps(record) and "sk-secret" not in json.dumps(record)


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())
    assert schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_every_kind_of_record_validates() -> None:
    kinds = list(every_kind())
    for record in kinds:
        VALIDATOR.validate(record)
    assert {r["schema_version"] for r in kinds} == {SCHEMA_VERSION}


def test_the_schema_holds_exactly_the_fields_the_proxy_writes() -> None:
    seen = set().union(*(set(r) for r in every_kind()))
    assert seen == record_fields()


def test_a_field_missing_from_the_schema_fails_validation() -> None:
    record = next(every_kind())
    record["a_new_field"] = 1
    errors = list(VALIDATOR.iter_errors(record))
    assert errors
    assert "a_new_field" in errors[0].message


@pytest.mark.parametrize(
    ("field", "value"),
    [("status", "200"), ("duration_ms", None), ("stream", 1), ("anomalies", {"x": -1})],
)
def test_a_field_of_the_wrong_type_fails_validation(field: str, value: Any) -> None:
    record = next(every_kind())
    record[field] = value
    assert not VALIDATOR.is_valid(record)


def test_anomaly_names_are_open_and_http_complete_may_be_unknown() -> None:
    record = next(every_kind())
    record["anomalies"] = {"bytes_after_response": 1, "json_too_deep": 2}
    record["http_complete"] = None
    VALIDATOR.validate(record)


def test_a_token_count_beyond_64_bits_is_its_decimal_string() -> None:
    record = next(every_kind())  # the chat case: it has usage
    record["usage"]["output_tokens"] = str(2**70)  # as log.json_safe writes it
    VALIDATOR.validate(record)
    record["usage"]["output_tokens"] = "many"
    assert not VALIDATOR.is_valid(record)


def test_the_enums_are_the_cores() -> None:
    props = schema()["$defs"]["request_finished"]["properties"]
    assert set(props["state"]["enum"]) == {s.value for s in State}
    assert set(props["finish_category"]["enum"]) == {c.value for c in FinishCategory} | {None}


def test_the_version_is_major_minor_and_the_schema_accepts_only_its_major() -> None:
    major, minor = SCHEMA_VERSION.split(".")
    assert major.isdigit() and minor.isdigit()
    record = next(every_kind())
    record["schema_version"] = f"{int(major) + 1}.0"
    assert not VALIDATOR.is_valid(record)


def test_the_package_ships_the_schema() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["sseproxy"]
    assert any(fnmatch.fnmatch(f"data/{SCHEMA_FILE}", p) for p in patterns)
