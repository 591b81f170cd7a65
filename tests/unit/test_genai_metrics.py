"""The OpenTelemetry GenAI conventions' streaming measures: the time to the first chunk of any
kind (beside sseproxy's first content) and the time per output chunk, "from the end of the
previous output chunk to the end of the current one" (semantic-conventions PR #3377 and
#3607; what counts as a chunk: semantic-conventions-genai #306). The proxy emits no OTel
metrics, so both are Prometheus histograms under the OTel names."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from sseproxy.core import Dialect, State, Verdict
from sseproxy.observe.metrics import Metrics
from sseproxy.shell.state import Timings

PER_CHUNK = "gen_ai_client_operation_time_per_output_chunk_seconds"
FIRST_CHUNK = "gen_ai_client_operation_time_to_first_chunk_seconds"


def timed() -> Timings:
    """A role-only chunk at 0.125 s (an event, no content), then content at 0.5, 0.5625 and
    0.8125 s: gaps of 0.0625 and 0.25 s between output chunks (exact in binary)."""
    t = Timings(start=0.0, headers=0.0625)
    t.chunk(0.125, 0.125, 0, events=1)
    t.chunk(0.5, 0.5, 1, events=2)
    t.chunk(0.5625, 0.5625, 1, events=3)
    t.chunk(0.8125, 0.8125, 2, events=5)
    return t


def test_the_first_chunk_is_any_event_and_the_first_content_is_later() -> None:
    fields = timed().fields(1.0)
    assert (fields["first_chunk_ms"], fields["ttft_ms"]) == (125.0, 500.0)


def test_a_keep_alive_comment_is_no_first_chunk() -> None:
    t = Timings(start=0.0)
    t.chunk(0.25, 0.25, 0, events=0)  # a comment: no event yet
    assert t.first_chunk is None
    t.chunk(0.5, 0.5, 0, events=1)
    assert t.fields(1.0)["first_chunk_ms"] == 500.0


def samples(metrics: Metrics) -> dict[tuple[str, str], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for s in family.samples:
            if s.name.startswith("gen_ai_"):
                out[(s.name, s.labels.get("le", ""))] = s.value
    return out


def test_both_histograms_are_exported_under_their_otel_names() -> None:
    metrics = Metrics(routes=["r"], process=False)
    t = timed()
    verdict = Verdict(Dialect.OPENAI_CHAT, State.COMPLETED)
    metrics.observe(verdict, 200, {"route": "r", **t.fields(1.0)}, t.chunk_times)
    got = samples(metrics)
    assert got[(FIRST_CHUNK + "_count", "")] == 1
    assert got[(FIRST_CHUNK + "_sum", "")] == 0.125
    buckets = {
        le: got[(PER_CHUNK + "_bucket", le)] for le in ("0.05", "0.075", "0.2", "0.3", "+Inf")
    }
    assert buckets == {"0.05": 0, "0.075": 1, "0.2": 1, "0.3": 2, "+Inf": 2}
    assert (got[(PER_CHUNK + "_count", "")], got[(PER_CHUNK + "_sum", "")]) == (2, 0.3125)
    # a second stream of the same series adds to it
    metrics.observe(verdict, 200, {"route": "r", **t.fields(1.0)}, t.chunk_times)
    assert samples(metrics)[(PER_CHUNK + "_count", "")] == 4


def test_a_stream_without_two_content_chunks_adds_no_chunk_time() -> None:
    metrics = Metrics(routes=["r"], process=False)
    t = Timings(start=0.0)
    t.chunk(0.5, 0.5, 3, events=3)  # all content in one read
    assert t.chunk_times is None
    metrics.observe(Verdict(Dialect.OPENAI_CHAT, State.COMPLETED), 200, {"route": "r"}, None)
    assert (PER_CHUNK + "_count", "") not in samples(metrics)
