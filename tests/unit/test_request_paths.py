"""The cheaper per-request paths of the shell give exactly what the straightforward ones give:
the record rendered once for json_ready and the log line. The references are the plain calls
(`json_ready`, the line without a rendering) or hand-written expectations."""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from bench.record_cost import CASES, exchange
from sseproxy import log
from sseproxy.log import json_ready, json_rendered
from sseproxy.redact import Secrets
from sseproxy.shell import record as records
from tests.unit.test_record_paths import (
    built_records,
    request_secrets,
    unstamped,
    values,
)
from tests.unit.test_record_paths import texts as key_texts

# -- one rendering for the redaction's check, json_ready and the log line --------------------


@given(st.dictionaries(key_texts, values | st.integers(), max_size=6))
def test_json_rendered_is_json_ready_and_its_json(record: dict[str, Any]) -> None:
    ready, rendered = json_rendered(record)
    assert ready == json_ready(record)
    if rendered is not None:
        assert ready is record
        assert rendered == orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS)


def test_json_rendered_rebuilds_what_json_cannot_carry() -> None:
    record = {"big": 2**70, "text": "a\ud800b", "n": 1}
    assert json_rendered(record) == ({"big": str(2**70), "text": "a\ufffdb", "n": 1}, None)
    assert json_rendered({"n": 1}) == ({"n": 1}, b'{"n":1}')


def test_the_bench_records_are_rendered_once() -> None:
    for case in CASES:
        facts, progress = exchange(case)
        verdict, pacing = records.verdict_of(facts, progress)
        record, rendered = records.build_rendered(facts, progress, verdict, pacing)
        assert rendered is not None  # the usual record: its check's rendering is kept
        assert isinstance(record, MappingProxyType)
        assert rendered == orjson.dumps(dict(record), option=orjson.OPT_NON_STR_KEYS)


def line(record: Mapping[str, Any], level: int, rendered: bytes | None) -> str:
    stream = io.StringIO()
    log.configure("json", "debug", stream, cache=False)
    log.request_finished(record, level, rendered)
    return stream.getvalue()


def test_a_spliced_line_is_the_line_rendered_whole() -> None:
    for record in built_records():
        rendered = orjson.dumps(dict(record), option=orjson.OPT_NON_STR_KEYS)
        for level in (logging.INFO, logging.WARNING, logging.ERROR):
            assert unstamped(line(record, level, rendered)) == unstamped(line(record, level, None))
    empty: Mapping[str, Any] = MappingProxyType({})
    assert unstamped(line(empty, logging.INFO, b"{}")) == (
        '{"timestamp":"T","level":"info","event":"request.finished"}\n'
    )


@given(st.dictionaries(key_texts, values, max_size=6), request_secrets)
def test_a_built_record_logs_the_same_line_with_or_without_its_rendering(
    fields: dict[str, Any], found: tuple[str, ...]
) -> None:
    fields = {k: v for k, v in fields.items() if k not in ("timestamp", "level", "event")}
    ready, rendered = json_rendered(Secrets(found).redact({"state": "completed", **fields}))
    record = MappingProxyType(ready)
    assert unstamped(line(record, logging.INFO, rendered)) == unstamped(
        line(record, logging.INFO, None)
    )
