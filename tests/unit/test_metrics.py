"""Metrics without a server: the anomaly vocabulary matches the core, bounded series exist at
zero, token kinds do not overlap, and impossible values are counted instead of raised."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sseproxy.core import Dialect, EndReason, FinishCategory, State, StreamTap, Usage, Verdict
from sseproxy.core.dialects.azure import FILTER_ANOMALIES
from sseproxy.core.eventstream import Corruption
from sseproxy.metrics import ANOMALIES, TOKEN_KINDS, Metrics, token_kinds
from tests import corpus

CORE = Path(__file__).resolve().parents[2] / "sseproxy" / "core"
# `anomalies[<expression>]` whose key is not a literal, with every name it can take.
DYNAMIC_KEYS = {
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
    return names


def samples(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def test_every_anomaly_the_core_counts_is_known() -> None:
    found = counted_in_core()
    assert len(found) > 25  # the scan itself works
    assert found - set(ANOMALIES) == set()


def test_every_anomaly_in_the_corpus_is_known() -> None:
    seen: set[str] = set()
    for entry in corpus.manifest():
        tap = StreamTap(Dialect(entry["dialect"]) if entry.get("dialect") else None)
        tap.feed(corpus.body(entry))
        seen.update(tap.close(EndReason.UPSTREAM_CLOSED).anomalies)
    assert seen  # the corpus has anomalous streams
    assert seen - set(ANOMALIES) == set()


def test_bounded_series_exist_at_zero_from_startup() -> None:
    got = samples(Metrics(["gpt-x"], ["openai"], process=False))
    rare = {
        ("route", "openai"),
        ("dialect", "anthropic-messages"),
        ("state", "http_error"),
        ("finish_category", "none"),
        ("status_class", "5xx"),
        ("model", "gpt-x"),
    }
    assert got[("sseproxy_requests_total", frozenset(rare))] == 0
    for state in State:
        assert any(
            name == "sseproxy_requests_total" and ("state", str(state)) in labels
            for name, labels in got
        ), state
    for name in ANOMALIES:
        assert got[("sseproxy_anomalies_total", frozenset({("anomaly", name)}))] == 0
    for kind in TOKEN_KINDS:
        key = frozenset({("dialect", "gemini"), ("kind", kind)})
        assert got[("sseproxy_tokens_total", key)] == 0
    build = [k for k in got if k[0] == "sseproxy_build_info"]
    assert len(build) == 1 and ("version", __import__("sseproxy").__version__) in build[0][1]


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
    assert token_kinds(str(dialect), usage) == kinds
    metrics = Metrics(process=False)
    metrics.observe(verdict(usage, dialect), 200, {})
    got = samples(metrics)
    for kind in TOKEN_KINDS:
        key = ("sseproxy_tokens_total", frozenset({("dialect", str(dialect)), ("kind", kind)}))
        assert got[key] == kinds.get(kind, 0)


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
    labels = frozenset({("dialect", "openai-chat"), ("model", "gpt-x")})
    assert got[("sseproxy_output_tokens_per_second_count", labels)] == 1
    assert got[("sseproxy_output_tokens_per_second_sum", labels)] == 42.5
    other = frozenset({("dialect", "gemini"), ("model", "other")})
    assert got[("sseproxy_output_tokens_per_second_count", other)] == 0  # exists at zero


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
