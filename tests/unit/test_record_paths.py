"""The cheaper per-request paths (verdict dict, log line, metrics, redaction) give exactly what
the straightforward implementations they replaced gave. Those implementations are kept here,
verbatim, as the references: the expected values never come from the code under test."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import re
from collections import Counter
from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import orjson
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from yarl import URL

from bench.record_cost import CASES, exchange
from sseproxy.config import Route
from sseproxy.core import (
    Dialect,
    EndReason,
    ErrorInfo,
    FinishCategory,
    Interruption,
    State,
    StreamTap,
    ToolCallSummary,
    Usage,
    Verdict,
)
from sseproxy.observe import log
from sseproxy.observe import metrics as metrics_module
from sseproxy.observe import redact as redact_module
from sseproxy.observe.log import json_ready
from sseproxy.observe.metrics import (
    MAX_TOKENS_PER_SECOND,
    NO_ROUTE_OUTCOMES,
    OUTCOMES,
    TOKEN_KINDS,
    Metrics,
    token_kinds,
)
from sseproxy.observe.redact import SECRET_KEYS, Secrets
from sseproxy.shell import record as records
from sseproxy.shell import state
from tests.corpus import body, manifest

# -- Verdict.to_dict ---------------------------------------------------------------------------


def old_plain(value: Any) -> Any:
    """Verdict.to_dict's `_plain` before the direct construction (reference)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: old_plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.name != "raw"
        }
    if isinstance(value, StrEnum):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): old_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [old_plain(v) for v in value]
    return value


def old_to_dict(verdict: Verdict) -> dict[str, Any]:
    return {f.name: old_plain(getattr(verdict, f.name)) for f in dataclasses.fields(verdict)}


def same(a: Any, b: Any) -> bool:
    """Equal, with the same key order and the same exact types (a StrEnum equals its str)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


text = st.one_of(st.none(), st.text(max_size=12), st.sampled_from(list(EndReason)))
count = st.one_of(st.none(), st.integers(min_value=-5, max_value=10**20))
usages = st.builds(
    Usage,
    input_tokens=count,
    output_tokens=count,
    total_tokens=count,
    reasoning_tokens=count,
    cached_tokens=count,
    raw=st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)),
)
verdicts = st.builds(
    Verdict,
    dialect=st.sampled_from(list(Dialect)),
    state=st.sampled_from(list(State)),
    finish_reason=text,
    finish_category=st.one_of(st.none(), st.sampled_from(list(FinishCategory))),
    finish_reasons=st.one_of(st.none(), st.tuples(text, text)),
    last_event=text,
    last_event_id=text,
    interruption=st.one_of(st.none(), st.builds(Interruption, text, st.integers())),
    http_complete=st.booleans(),
    error=st.one_of(st.none(), st.builds(ErrorInfo, text, text, text)),
    anomalies=st.one_of(
        st.dictionaries(st.text(max_size=8), st.integers(), max_size=4),
        st.dictionaries(st.text(max_size=8), st.integers(), max_size=4).map(Counter),
        st.dictionaries(st.sampled_from(list(EndReason)), st.integers(), max_size=2),
    ),
    bytes=st.integers(min_value=0),
    events=st.integers(min_value=0),
    comments=st.integers(min_value=0),
    text_chars=st.integers(min_value=0),
    reasoning_chars=st.integers(min_value=0),
    refusal_chars=st.integers(min_value=0),
    tool_calls=st.lists(
        st.builds(ToolCallSummary, text, text, st.integers(), st.booleans()), max_size=3
    ).map(tuple),
    server_tool_calls=st.lists(st.text(max_size=6), max_size=2).map(tuple),
    usage=st.one_of(st.none(), usages),
    response_id=text,
    model=text,
)


@given(verdicts)
def test_to_dict_is_the_reference_dict(verdict: Verdict) -> None:
    assert same(verdict.to_dict(), old_to_dict(verdict))


def test_to_dict_matches_the_reference_on_every_corpus_verdict() -> None:
    checked = 0
    for entry in manifest():
        tap = StreamTap(None)
        tap.feed(body(entry))
        for end in (EndReason.END_OF_INPUT, EndReason.UPSTREAM_RESET):
            verdict = tap.close(end, http_complete=end is EndReason.END_OF_INPUT)
            assert same(verdict.to_dict(), old_to_dict(verdict)), entry["file"]
            checked += 1
    assert checked >= 20


def test_to_dict_keeps_usage_raw_out() -> None:
    usage = Usage(input_tokens=3, output_tokens=4, raw={"prompt_tokens": 3, "odd": [1]})
    out = Verdict(Dialect.OPENAI_CHAT, State.COMPLETED, usage=usage).to_dict()
    assert out["usage"] == {
        "input_tokens": 3,
        "output_tokens": 4,
        "total_tokens": None,
        "reasoning_tokens": None,
        "cached_tokens": None,
        "cache_write_tokens": None,
    }
    assert out["dialect"] == "openai-chat" and type(out["dialect"]) is str


# -- Metrics.observe ---------------------------------------------------------------------------


class OldMetrics(Metrics):
    """Metrics.observe through `labels()` on every call, without the bound children
    (reference: the same series and values, looked up the plain way)."""

    def observe(
        self, verdict: Verdict, status: int | None, fields: Mapping[str, Any], chunks: Any = None
    ) -> None:
        dialect = str(verdict.dialect)
        status_class = f"{status // 100}xx" if isinstance(status, int) and status > 0 else "none"
        route = self.route_label(fields.get("route"))
        model = self.model_label(fields.get("model"))
        key = (route, dialect, model)
        outcomes = OUTCOMES if route != "none" else NO_ROUTE_OUTCOMES
        for outcome, category, zero_class in outcomes:
            self.requests.labels(route, dialect, str(outcome), str(category), zero_class, model)
        self.requests.labels(
            route,
            dialect,
            str(verdict.state),
            str(verdict.finish_category or "none"),
            status_class,
            model,
        ).inc()
        for name, count in verdict.anomalies.items():
            if isinstance(count, int) and count > 0:
                self.anomalies.labels(*key, name).inc(count)
        for histogram, field in (
            (self.ttfb, "ttfb_ms"),
            (self.ttft, "ttft_ms"),
            (self.duration, "duration_ms"),
            (self.max_gap, "max_gap_ms"),
            (self.first_chunk, "first_chunk_ms"),
        ):
            histogram.labels(*key)
            value = fields.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                if math.isfinite(value) and value >= 0:
                    histogram.labels(*key).observe(value / 1000)
                else:
                    self.impossible.labels(field).inc()
        self.output_speed.labels(*key)
        speed = fields.get("output_tokens_per_s")
        if isinstance(speed, int | float) and not isinstance(speed, bool):
            if math.isfinite(speed) and 0 <= speed <= MAX_TOKENS_PER_SECOND:
                self.output_speed.labels(*key).observe(speed)
            else:
                self.impossible.labels("output_tokens_per_s").inc()
        for kind in TOKEN_KINDS:
            self.tokens.labels(*key, kind)
        if verdict.bytes >= 0:
            self.upstream_bytes.labels(*key).inc(verdict.bytes)
        else:
            self.upstream_bytes.labels(*key)
            self.impossible.labels("bytes").inc()
        if verdict.usage is not None:
            try:
                # Gemini's APIs report thought tokens beside the output, not inside it.
                kinds = token_kinds(verdict.usage, dialect not in ("gemini", "gemini-interactions"))
            except ValueError:
                self.impossible.labels("tokens").inc()
            else:
                for kind, value in kinds.items():
                    if value:
                        self.tokens.labels(*key, kind).inc(value)


latency = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-10, max_value=10**7),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
)
record_fields = st.fixed_dictionaries(
    {
        "route": st.sampled_from([None, "openai", "anthropic", "unknown", 7]),
        "model": st.sampled_from([None, "gpt-4o-mini", "claude-sonnet-4-5", "other-model"]),
        "ttfb_ms": latency,
        "ttft_ms": latency,
        "duration_ms": latency,
        "max_gap_ms": latency,
        "first_chunk_ms": latency,
        "output_tokens_per_s": latency,
    }
)
observed = st.tuples(
    verdicts.map(
        lambda v: v.replace(
            anomalies={k: n for k, n in v.anomalies.items() if k},  # label values are non-empty
            bytes=v.bytes if v.bytes % 7 else -v.bytes - 1,
        )
    ),
    st.one_of(st.none(), st.integers(min_value=-1, max_value=999)),
    record_fields,
)


@settings(max_examples=40)  # two registries of ~10,000 series per example
@given(st.lists(observed, min_size=1, max_size=6))
def test_observe_gives_the_reference_exposition(requests: list[Any]) -> None:
    def exposition(metrics: Metrics) -> bytes:
        for verdict, status, fields in requests:
            metrics.observe(verdict, status, fields)
        lines = metrics.exposition().split(b"\n")  # a label value may hold a \r
        return b"\n".join(line for line in lines if b"_created" not in line)  # a clock

    models, routes = ("gpt-4o-mini",), ("openai",)  # few series: a fast exposition
    new = exposition(Metrics(models, routes, process=False))
    old = exposition(OldMetrics(models, routes, process=False))
    assert new == old
    assert b"sseproxy_requests_total" in new


def test_observe_counts_through_the_cached_children_every_time() -> None:
    metrics = Metrics(("m",), ("r",), process=False)
    verdict = Verdict(
        Dialect.OPENAI_CHAT,
        State.COMPLETED,
        finish_category=FinishCategory.STOP,
        bytes=10,
        anomalies={"x": 2},
    )
    for _ in range(3):
        metrics.observe(verdict, 200, {"route": "r", "model": "m", "ttfb_ms": 20})
    text = metrics.exposition().decode()
    assert (
        'sseproxy_requests_total{dialect="openai-chat",finish_category="stop",model="m",'
        'route="r",state="completed",status_class="2xx"} 3.0'
    ) in text
    labels = 'dialect="openai-chat",model="m",route="r"'
    assert f'sseproxy_anomalies_total{{anomaly="x",{labels}}} 6.0' in text
    assert f"sseproxy_upstream_bytes_total{{{labels}}} 30.0" in text
    bucket = 'dialect="openai-chat",le="0.025",model="m",route="r"'  # labels sorted
    assert f"sseproxy_ttfb_seconds_bucket{{{bucket}}} 3.0" in text


# -- the request.finished log line -------------------------------------------------------------

KEY = "sk-proj-" + "Zz9Yy8Xx7Ww6Vv5Uu4"
STAMP = re.compile(r'^\{"timestamp":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z",')


def chain_line(record: Mapping[str, Any], level: int) -> str:
    """The line the processor chain writes for a record (the sink's call before)."""
    stream = io.StringIO()
    log.configure("json", "debug", stream, cache=False)
    structlog.get_logger("sseproxy").log(level, "request.finished", **record)
    return stream.getvalue()


def direct_line(record: Mapping[str, Any], level: int) -> str:
    stream = io.StringIO()
    log.configure("json", "debug", stream, cache=False)
    log.request_finished(record, level)
    return stream.getvalue()


def unstamped(line: str) -> str:
    assert STAMP.match(line), line
    return STAMP.sub('{"timestamp":"T",', line)


def built_records() -> list[Mapping[str, Any]]:
    """Records as record.build makes them, some with credentials to redact."""
    route = Route("r", ("/v1/*",), "https://***@up.example", URL("https://up.example"))
    cases = [
        ({}, "/v1/chat/completions", Verdict(Dialect.OPENAI_CHAT, State.COMPLETED)),
        (
            {"authorization": f"Bearer {KEY}"},
            f"/v1/x?key={KEY}&q=1",
            Verdict(
                Dialect.ANTHROPIC_MESSAGES,
                State.HTTP_ERROR,
                error=ErrorInfo("auth", "401", f"bad key {KEY} and sk-ant-{'q' * 20}"),
                anomalies={"json_decode_error": 1},
                interruption=Interruption(EndReason.UPSTREAM_RESET, 3),
            ),
        ),
        (
            {"x-api-key": "short"},
            "/v1/messages",
            Verdict(
                Dialect.GEMINI,
                State.INTERRUPTED,
                last_event="Bearer abcdefghijkl",
                response_id="https://user:pw@host/x",
                tool_calls=(ToolCallSummary("c\ud800", "f\x00", 3, False),),
                usage=Usage(1, 2, 3, raw={"authorization": "x"}),
            ),
        ),
    ]
    out = []
    for headers, target, verdict in cases:
        secrets = Secrets.from_request(headers, target, b"")
        facts = state.RequestFacts(
            "id1", "POST", secrets.redact_target(target), 1.0, 0.0, route=route, secrets=secrets
        )
        progress = state.Progress(state.Timings(0.0), status=200)
        out.append(records.build(facts, progress, verdict))
        out.append(records.fallback(facts, progress, ValueError(f"boom {KEY}")))
    return out


def test_direct_line_is_the_chain_line_for_built_records() -> None:
    for record in built_records():
        for level in (logging.INFO, logging.WARNING, logging.ERROR):
            assert unstamped(direct_line(record, level)) == unstamped(chain_line(record, level))
    assert KEY not in "".join(direct_line(r, logging.INFO) for r in built_records())


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
secret_texts = st.sampled_from(["", KEY, f"Bearer {KEY}", "https://u:p@h", "api_key", "key"])


@given(
    st.dictionaries(
        st.text(max_size=8).filter(lambda k: k not in ("timestamp", "level", "event")),
        json_values | secret_texts,
        max_size=6,
    ),
    st.sampled_from([(), (KEY,), ("another-secret-value",)]),
)
def test_direct_line_is_the_chain_line_for_redacted_records(
    fields: dict[str, Any], values: tuple[str, ...]
) -> None:
    record = MappingProxyType(json_ready(Secrets(values).redact({"state": "completed", **fields})))
    assert unstamped(direct_line(record, logging.INFO)) == unstamped(
        chain_line(record, logging.INFO)
    )


def test_other_cases_take_the_chain() -> None:
    record = built_records()[2]  # the 401 as record.build makes it
    stream = io.StringIO()
    log.configure("json", "error", stream, cache=False)
    log.request_finished(record, logging.WARNING)  # below the level: not written
    assert stream.getvalue() == ""
    log.request_finished(record, logging.ERROR)
    assert json.loads(stream.getvalue())["event"] == "request.finished"
    with structlog.testing.capture_logs() as captured:  # reconfigured: the chain sees it
        log.request_finished(record, logging.ERROR)
    assert captured and captured[0]["event"] == "request.finished"
    stream = io.StringIO()
    log.configure("json", "info", stream, cache=False)
    structlog.contextvars.bind_contextvars(trace=f"Bearer {KEY}")
    try:
        log.request_finished(record, logging.INFO)
    finally:
        structlog.contextvars.clear_contextvars()
    line = json.loads(stream.getvalue())
    assert line["trace"] == "Bearer [redacted]"  # bound values still go through redaction
    stream = io.StringIO()
    log.configure("console", "info", stream, cache=False)
    log.request_finished(record, logging.INFO)
    assert "http_error" in stream.getvalue() and not stream.getvalue().startswith("{")


# -- Secrets.redact's clean-record test --------------------------------------------------------


class OldSecrets(Secrets):
    """Secrets._suspect before it worked on the ASCII bytes (reference, verbatim)."""

    def _suspect(self, value: Any) -> bool:
        if not self._json_safe:
            return True
        try:
            text = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        except (TypeError, orjson.JSONEncodeError):
            return True
        if any(v in text for v in self.values):
            return True
        return old_hinted(text.lower(), OLD_RECORD_HINTS)


OLD_RECORD_HINTS = (
    *("sk-", "gsk_", "r8_", "hf_", "xai-", "aiza", "bearer"),
    *(f'"{key}":' for key in sorted(SECRET_KEYS)),
)


def old_hinted(lowered: str, hints: tuple[str, ...]) -> bool:
    return any(hint in lowered for hint in hints) or ("@" in lowered and "://" in lowered)


words = st.sampled_from(
    [
        KEY,
        "sk-ant-" + "b" * 12,
        "Bearer abcdefgh123",
        "BEARER",
        "gsk_",
        "r8_",
        "https://u:p@host",
        "a@b",
        "://",
        "\u212aey",  # the Kelvin sign: "key" once lowered
        "Token",
        "api_key",
        "é",
        "secret-value-1",
        "key",
        "x",
    ]
)
texts = st.lists(words | st.text(max_size=6), max_size=4).map("".join)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
request_secrets = st.sampled_from([(), (KEY,), ("secret-value-1",), ("secret-value-1", KEY)])


@given(st.dictionaries(texts, values, max_size=6), request_secrets)
def test_redact_is_the_reference_redaction(record: dict[str, Any], found: tuple[str, ...]) -> None:
    new, old = Secrets(found).redact(record), OldSecrets(found).redact(record)
    assert new == old
    # A clean record is passed on uncopied. (The new redaction remembers strings it found
    # clean, so it may pass on uncopied a record the reference copied unchanged.)
    if old is record:
        assert new is record


def test_redact_passes_the_bench_records_on_uncopied() -> None:
    for case in CASES:
        facts, progress = exchange(case)
        verdict, pacing = records.verdict_of(facts, progress)
        fields = dict(records.build(facts, progress, verdict, pacing))
        assert facts.secrets.values  # the request carried a key
        assert facts.secrets.redact(fields) is fields
        assert OldSecrets(facts.secrets.values).redact(fields) is fields


def test_cached_label_children_stop_at_their_bound(monkeypatch: Any) -> None:
    monkeypatch.setattr(metrics_module, "MAX_CACHED_CHILDREN", 3)
    metrics = Metrics((), (), process=False)
    names = [f"anomaly_{i}" for i in range(metrics_module.MAX_CACHED_CHILDREN + 1)]
    for _ in range(2):  # past the bound: counted through labels() as before, never cached
        for name in names:
            verdict = Verdict(Dialect.SSE, State.COMPLETED, anomalies={name: 1})
            metrics.observe(verdict, 200, {})
    assert len(metrics._children) == 3
    text = metrics.exposition().decode()
    rest = 'dialect="sse",model="other",route="none"'
    assert all(f'sseproxy_anomalies_total{{anomaly="{name}",{rest}}} 2.0' in text for name in names)


def test_known_record_keys_stop_at_their_bound(monkeypatch: Any) -> None:
    monkeypatch.setattr(redact_module, "_KNOWN_KEYS", set())
    monkeypatch.setattr(redact_module, "MAX_KNOWN_KEYS", 4)
    secrets = Secrets((KEY,))
    for i in range(redact_module.MAX_KNOWN_KEYS + 1):
        assert secrets.redact({f"k{i}": "v"}) == {f"k{i}": "v"}
    assert len(redact_module._KNOWN_KEYS) == 4
    # known or not, a key holding a credential's value is still redacted
    assert secrets.redact({f"a{KEY}": 1}) == {"a" + "*" * len(KEY): 1}
    assert secrets.redact({"k0": KEY}) == {"k0": "*" * len(KEY)}
    assert secrets.redact({"k0": 1, "k4": "Bearer abcdefghij"}) == {
        "k0": 1,
        "k4": "Bearer [redacted]",
    }


def test_a_known_key_holding_this_requests_credential_is_redacted(monkeypatch: Any) -> None:
    monkeypatch.setattr(redact_module, "_KNOWN_KEYS", set())
    record = {"note_secret-value-1": 1, "state": "completed"}
    assert Secrets(()).redact(record) is record  # learnt: no hint, no credential name
    assert set(record) == redact_module._KNOWN_KEYS
    masked = Secrets(("secret-value-1",)).redact(record)
    assert masked == {"note_" + "*" * 14: 1, "state": "completed"}
