"""`connect.finished` is a record kind of the schema: every outcome's line, as the listener
writes it through the real log, validates and holds exactly the schema's fields; the enums of
the code, the schema and the docs are one list."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from sseproxy.intercept.destination import Destination
from sseproxy.intercept.listener import connect_finished
from sseproxy.intercept.record import ClosedBy, Mode, Outcome, Relayed
from sseproxy.observe import log
from sseproxy.observe.record_schema import SCHEMA_VERSION, connect_fields, schema
from tests.record_contract import VALIDATOR

DOCS = Path(__file__).resolve().parents[2] / "docs"


def written(destination: Destination | None, mode: Mode, outcome: Outcome, **fields: Any) -> Any:
    stream = io.StringIO()
    log.configure("json", "debug", stream, cache=False)
    connect_finished(destination, mode, outcome, time.monotonic(), **fields)
    [line] = stream.getvalue().splitlines()
    return json.loads(line)


@pytest.mark.parametrize("outcome", list(Outcome))
def test_every_outcome_is_a_valid_record_with_the_schemas_fields(outcome: Outcome) -> None:
    line = written(Destination("api.openai.com", 443), Mode.TUNNEL, outcome, error="x")
    assert not list(VALIDATOR.iter_errors(line))
    assert set(line) == connect_fields()
    assert (line["event"], line["schema_version"], line["outcome"]) == (
        "connect.finished",
        SCHEMA_VERSION,
        str(outcome),
    )
    assert line["level"] == ("info" if outcome is Outcome.CLOSED else "warning")


def test_a_relayed_connection_says_what_it_carried_and_who_closed() -> None:
    line = written(
        Destination("::1", 8080),
        Mode.FORWARD,
        Outcome.CLOSED,
        relayed=Relayed(10, 20, ClosedBy.UPSTREAM),
        egress="http://127.0.0.1:3128",
    )
    assert not list(VALIDATOR.iter_errors(line))
    assert {k: line[k] for k in ("host", "port", "mode", "bytes_up", "bytes_down")} == {
        "host": "::1",
        "port": 8080,
        "mode": "forward",
        "bytes_up": 10,
        "bytes_down": 20,
    }
    assert (line["closed_by"], line["egress"], line["error"], line["hint"]) == (
        "upstream",
        "http://127.0.0.1:3128",
        None,
        None,
    )


def test_a_refused_head_has_no_destination_and_nothing_relayed() -> None:
    line = written(None, Mode.SETUP, Outcome.BAD_CONNECT, error="not HTTP/1.x")
    assert not list(VALIDATOR.iter_errors(line))
    assert [line[k] for k in ("host", "port", "bytes_up", "bytes_down", "closed_by")] == [None] * 5


def test_an_error_is_kept_up_to_500_characters() -> None:
    at = written(None, Mode.SETUP, Outcome.PROXY_ERROR, error="e" * 500)
    over = written(None, Mode.SETUP, Outcome.PROXY_ERROR, error="e" * 501)
    assert (len(at["error"]), len(over["error"])) == (500, 500)


def test_the_schemas_enums_are_the_codes() -> None:
    properties = schema()["$defs"]["connect_finished"]["properties"]
    assert set(properties["mode"]["enum"]) == {str(m) for m in Mode}
    assert set(properties["outcome"]["enum"]) == {str(o) for o in Outcome}
    assert set(properties["closed_by"]["enum"]) == {str(c) for c in ClosedBy} | {None}


def first_column(page: Path, heading: str) -> set[str]:
    text = page.read_text("utf-8")
    start = text.index(f"\n{heading}\n")
    end = re.compile(r"\n#{2,4} ").search(text, start + len(heading) + 2)
    rows = [line for line in text[start : end.start() if end else None].splitlines()]
    names: set[str] = set()
    for line in [r for r in rows if r.startswith("|")][2:]:
        names.update(re.findall(r"`([a-z_][a-z0-9_]*)`", line.split("|")[1]))
    assert names, f"no table under {heading}"
    return names


def test_every_outcome_is_documented() -> None:
    assert first_column(DOCS / "intercept.md", "### Outcomes") == {str(o) for o in Outcome}


def test_every_field_is_documented() -> None:
    assert first_column(DOCS / "record.md", "## connect.finished") == connect_fields()
