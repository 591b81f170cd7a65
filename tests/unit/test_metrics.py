"""Metrics without a server: the anomaly registry matches what the core counts, series appear
when first used (the few that alerts need at zero before), token kinds do not overlap, nothing
in metrics.py knows a dialect by name, and impossible values are counted instead of raised."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sseproxy.core import Dialect, EndReason, FinishCategory, State, StreamTap, Usage, Verdict
from sseproxy.core import dialects as registry
from sseproxy.core.anomalies import ANOMALIES
from sseproxy.core.dialects.azure import FILTER_ANOMALIES
from sseproxy.core.eventstream import Corruption
from sseproxy.core.pacing import CONTENT_STALL, UPSTREAM_BUFFERED
from sseproxy.core.sessions.realtime import REALTIME_ERROR_ANOMALIES
from sseproxy.core.sessions.responses import RESPONSES_ERROR_ANOMALIES
from sseproxy.observe.metrics import IMPOSSIBLE_FIELDS, OUTCOMES, TOKEN_KINDS, Metrics, token_kinds
from tests import corpus

CORE = Path(__file__).resolve().parents[2] / "sseproxy" / "core"
# `anomalies[<expression>]` whose key is not a literal, with every name it can take.
DYNAMIC_KEYS = {
    "named": (*REALTIME_ERROR_ANOMALIES.values(), *RESPONSES_ERROR_ANOMALIES.values()),
    'ptype.replace("-", "_")': ("tool_input_error", "tool_output_error"),
    "why": (),  # _go_blind(why): its literal arguments are collected below
    "str(decoder.corrupt)": tuple(str(c) for c in Corruption),  # the event stream's faults
    "filter_anomaly": FILTER_ANOMALIES,  # Azure's content-filter annotations
}


def counted_in_core() -> set[str]:
    names: set[str] = set()
    for path in CORE.rglob("*.py"):
        source = path.read_text("utf-8")
        for key in re.findall(r"anomalies\[([^\]]+)\]", source):
            literal = re.fullmatch(r'"([a-z0-9_]+)"', key.strip())
            if literal:
                names.add(literal.group(1))
            else:
                assert key in DYNAMIC_KEYS, f"{path.name}: anomalies[{key}] not known to the test"
                names.update(DYNAMIC_KEYS[key])
        names.update(re.findall(r'_go_blind\("([a-z0-9_]+)"\)', source))
    return names | {CONTENT_STALL, UPSTREAM_BUFFERED}  # pacing's, counted by the record


def samples(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def test_every_anomaly_the_core_counts_is_in_the_registry_and_no_other() -> None:
    found = counted_in_core()
    assert len(found) > 25  # the scan itself works
    assert found - ANOMALIES == set(), "counted in the core, missing in core/anomalies.py"
    assert ANOMALIES - found == set(), "in core/anomalies.py, counted nowhere in the core"


def test_every_anomaly_in_the_corpus_is_known() -> None:
    seen: set[str] = set()
    for entry in corpus.manifest():
        tap = StreamTap(Dialect(entry["dialect"]) if entry.get("dialect") else None)
        tap.feed(corpus.body(entry))
        seen.update(tap.close(EndReason.UPSTREAM_CLOSED).anomalies)
    assert seen  # the corpus has anomalous streams
    assert seen - set(ANOMALIES) == set()


def test_at_startup_only_the_alerts_series_exist_at_zero() -> None:
    """Before any request: the impossible-values counters (an alert fires on their increase)
    at zero, the build info, no request or anomaly series, no `_created` samples."""
    metrics = Metrics(["gpt-x"], ["openai"], process=False)
    got = samples(metrics)
    for field in IMPOSSIBLE_FIELDS:
        assert got[("sseproxy_impossible_values_total", frozenset({("field", field)}))] == 0
    build = [k for k in got if k[0] == "sseproxy_build_info"]
    assert len(build) == 1 and ("version", __import__("sseproxy").__version__) in build[0][1]
    names = {name for name, _ in got}
    assert not {n for n in names if n.startswith(("sseproxy_requests", "sseproxy_anomalies"))}
    assert b"_created" not in metrics.exposition()


def test_the_first_request_of_a_combination_creates_its_outcomes_at_zero() -> None:
    """So that the alerts' failure shares see every failure after the first request of a
    route, dialect and model: the first failure then counts from 0 to 1."""
    metrics = Metrics(["gpt-x"], ["openai"], process=False)
    fields = {"route": "openai", "model": "gpt-x", "ttft_ms": 120.0}
    metrics.observe(verdict(dialect=Dialect.ANTHROPIC_MESSAGES), 200, fields)
    got = samples(metrics)
    combination = {("route", "openai"), ("dialect", "anthropic-messages"), ("model", "gpt-x")}
    for state, category, status_class in OUTCOMES:
        labels = {("state", str(state)), ("finish_category", str(category))}
        key = frozenset({*combination, *labels, ("status_class", status_class)})
        expected = 1 if (state, category) == (State.COMPLETED, FinishCategory.STOP) else 0
        assert got[("sseproxy_requests_total", key)] == expected, key
    for kind in TOKEN_KINDS:
        assert got[("sseproxy_tokens_total", frozenset({*combination, ("kind", kind)}))] == 0
    assert got[("sseproxy_ttft_seconds_count", frozenset(combination))] == 1
    # nothing for combinations that saw no request
    assert not [k for k in got if ("dialect", "gemini") in k[1]]


def test_series_carry_route_dialect_and_model() -> None:
    """Every per-request family can be filtered by the dashboard's variables."""
    metrics = Metrics(["gpt-x"], ["openai"], process=False)
    done = verdict(Usage(input_tokens=3, output_tokens=2)).replace(anomalies={"missing_done": 1})
    fields = {"route": "openai", "model": "gpt-x", "output_tokens_per_s": 9.0}
    fields["resume"] = {"verdict": "gap"}
    metrics.observe(done, 200, {**fields, "ttfb_ms": 1, "duration_ms": 2, "max_gap_ms": 1})
    families = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        families[family.name] = {k for s in family.samples for k in s.labels}
    # not per request: the proxy's own health
    unlabelled = {
        "sseproxy_impossible_values",
        "sseproxy_build_info",
        "sseproxy_active_streams",
        "sseproxy_sink_errors",
        "sseproxy_records_dropped",  # log lines the output never got
        "sseproxy_websocket_sessions",  # per session (its turns are requests)
    }
    for name, labels in families.items():
        if name.startswith("sseproxy_") and name not in unlabelled:
            assert {"route", "dialect", "model"} <= labels, name


def test_process_collectors_are_on_the_registry() -> None:
    names = {name for name, _ in samples(Metrics())}
    assert {"process_cpu_seconds_total", "python_info", "python_gc_objects_collected_total"} <= (
        names
    )


def verdict(usage: Usage | None = None, dialect: Dialect = Dialect.OPENAI_CHAT) -> Verdict:
    return Verdict(
        dialect,
        State.COMPLETED,
        finish_reason="stop",
        finish_category=FinishCategory.STOP,
        usage=usage,
        bytes=10,
    )


@pytest.mark.parametrize(
    ("dialect", "usage", "kinds"),
    [
        # OpenAI: prompt_tokens includes cached_tokens, completion_tokens includes reasoning.
        (
            Dialect.OPENAI_CHAT,
            Usage(input_tokens=100, output_tokens=50, cached_tokens=30, reasoning_tokens=20),
            {
                "input_uncached": 70,
                "input_cached": 30,
                "output_reasoning": 20,
                "output_visible": 30,
            },
        ),
        # Gemini: candidatesTokenCount excludes thoughtsTokenCount.
        (
            Dialect.GEMINI,
            Usage(input_tokens=7, output_tokens=1, reasoning_tokens=13),
            {"input_uncached": 7, "output_reasoning": 13, "output_visible": 1},
        ),
        (Dialect.OLLAMA, Usage(input_tokens=None, output_tokens=4), {"output_visible": 4}),
    ],
)
def test_token_kinds_do_not_overlap(dialect: Dialect, usage: Usage, kinds: dict[str, int]) -> None:
    assert token_kinds(usage, registry.spec_for(dialect).output_includes_reasoning) == kinds
    metrics = Metrics(process=False)
    metrics.observe(verdict(usage, dialect), 200, {})
    got = samples(metrics)
    for kind in TOKEN_KINDS:
        labels = {("route", "none"), ("dialect", str(dialect)), ("model", "other")}
        key = ("sseproxy_tokens_total", frozenset({*labels, ("kind", kind)}))
        assert got[key] == kinds.get(kind, 0)


@pytest.mark.parametrize("includes", [True, False])
def test_a_new_dialect_gets_its_metrics_from_its_spec(monkeypatch, includes: bool) -> None:
    """A dialect metrics.py has never heard of: registered only as a DialectSpec, its series
    appear with its name, and its spec alone says how its reasoning tokens count."""
    spec = dataclasses.replace(
        registry.spec_for(Dialect.OPENAI_CHAT),
        dialect="acme-chat",  # type: ignore[arg-type]
        output_includes_reasoning=includes,
    )
    monkeypatch.setitem(registry.BY_DIALECT, "acme-chat", spec)
    metrics = Metrics(process=False)
    usage = Usage(input_tokens=5, output_tokens=2, reasoning_tokens=7)
    metrics.observe(verdict(usage).replace(dialect="acme-chat"), 200, {"ttft_ms": 30.0})
    got = samples(metrics)
    labels = {("route", "none"), ("dialect", "acme-chat"), ("model", "other")}
    tokens = {
        kind: got[("sseproxy_tokens_total", frozenset({*labels, ("kind", kind)}))]
        for kind in TOKEN_KINDS
    }
    assert got[("sseproxy_ttft_seconds_count", frozenset(labels))] == 1
    if includes:  # 7 reasoning tokens cannot be part of 2 output tokens
        assert set(tokens.values()) == {0}
        assert got[("sseproxy_impossible_values_total", frozenset({("field", "tokens")}))] == 1
    else:
        assert tokens == {
            "input_uncached": 5,
            "input_cached": 0,
            "output_reasoning": 7,
            "output_visible": 2,
        }


def test_metrics_names_no_dialect() -> None:
    source = (CORE.parent / "observe" / "metrics.py").read_text("utf-8")
    assert "Dialect." not in source
    named = [str(d) for d in Dialect if f'"{d}"' in source]
    assert named == []


@pytest.mark.parametrize(
    "usage",
    [
        Usage(input_tokens=-1, output_tokens=3),
        Usage(input_tokens=10**12, output_tokens=3),
        Usage(input_tokens=5, cached_tokens=6),
        Usage(output_tokens=2, reasoning_tokens=3),
    ],
)
def test_impossible_token_counts_are_counted_not_raised(usage: Usage) -> None:
    metrics = Metrics(process=False)
    metrics.observe(verdict(usage), 200, {"route": "unknown", "ttft_ms": -5.0})
    got = samples(metrics)
    assert got[("sseproxy_impossible_values_total", frozenset({("field", "tokens")}))] == 1
    assert got[("sseproxy_impossible_values_total", frozenset({("field", "ttft_ms")}))] == 1
    assert all(v == 0 for (name, _), v in got.items() if name == "sseproxy_tokens_total")
    requests = {k: v for k, v in got.items() if k[0] == "sseproxy_requests_total" and v}
    assert [dict(k[1])["route"] for k in requests] == ["none"]  # an unknown route stays bounded


def test_openmetrics_when_asked() -> None:
    metrics = Metrics(process=False)
    body, content_type = metrics.render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    body, content_type = metrics.render(None)
    assert content_type.startswith("text/plain") and b"# EOF" not in body


def test_output_speed_histogram_by_dialect_and_model() -> None:
    metrics = Metrics(["gpt-x"], process=False)
    metrics.observe(verdict(), 200, {"model": "gpt-x", "output_tokens_per_s": 42.5})
    metrics.observe(verdict(), 200, {"model": "gpt-x"})  # no usage: no figure, nothing counted
    got = samples(metrics)
    labels = frozenset({("route", "none"), ("dialect", "openai-chat"), ("model", "gpt-x")})
    assert got[("sseproxy_output_tokens_per_second_count", labels)] == 1
    assert got[("sseproxy_output_tokens_per_second_sum", labels)] == 42.5


@pytest.mark.parametrize("speed", [-1.0, float("nan"), float("inf"), 1e9])
def test_impossible_output_speed_is_counted(speed: float) -> None:
    metrics = Metrics(process=False)
    metrics.observe(verdict(), 200, {"output_tokens_per_s": speed})
    got = samples(metrics)
    field = frozenset({("field", "output_tokens_per_s")})
    assert got[("sseproxy_impossible_values_total", field)] == 1
    assert all(
        v == 0 for (name, _), v in got.items() if name == "sseproxy_output_tokens_per_second_count"
    )


def test_links_are_counted_by_kind_and_verdict_from_the_record() -> None:
    metrics = Metrics(["gpt-x"], ["openai"], process=False)
    base = {"route": "openai", "model": "gpt-x"}
    metrics.observe(verdict(None), 200, {**base, "resume": {"verdict": "duplicate"}})
    metrics.observe(verdict(None), 200, {**base, "resume": {"verdict": "not-a-verdict"}})
    metrics.observe(verdict(None), 200, {**base, "retry": {"of": "x", "regenerated": True}})
    got = {
        (dict(labels)["kind"], dict(labels)["verdict"]): value
        for (name, labels), value in samples(metrics).items()
        if name == "sseproxy_stream_links_total"
    }
    assert got == {("resume", "duplicate"): 1, ("retry", "regenerated"): 1}


def test_websocket_sessions_are_counted_by_who_closed_and_a_bounded_close_code() -> None:
    metrics = Metrics([], ["openai"], process=False)
    for code, by in ((1000, "client"), (1011, "upstream"), (4321, "upstream"), (None, "upstream")):
        metrics.session_finished({"route": "openai", "close_code": code, "closed_by": by})
    metrics.session_finished({"route": "forged", "close_code": 99999, "closed_by": "someone"})
    got = {
        tuple(sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(metrics.exposition().decode())
        if f.name == "sseproxy_websocket_sessions"
        for s in f.samples
    }
    key = lambda route, by, code: (("close_code", code), ("closed_by", by), ("route", route))  # noqa: E731
    assert got == {
        key("openai", "client", "1000"): 1.0,
        key("openai", "upstream", "1011"): 1.0,
        key("openai", "upstream", "other"): 1.0,
        key("openai", "upstream", "none"): 1.0,
        key("none", "none", "other"): 1.0,
    }
