"""Pacing: generation speed, upstream buffering and content stalls from passed-in timings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sseproxy.core import Dialect, StreamTap
from sseproxy.core.inject import RawEvents
from sseproxy.core.pacing import Pacing, Unmeasured
from tests import corpus
from tests.streams import chat_chunk, sse


def paced(wait: float, batches: list[tuple[float, int]], start: float = 100.0) -> Pacing:
    """A stream whose first byte comes at once and first content after `wait` seconds;
    `batches` are (gap before this batch, deltas in it) after the first content."""
    pacing = Pacing(start)
    pacing.first_byte(start + 0.05)
    now = start + wait
    for gap, count in batches:
        now += gap
        pacing.content(now, count)
    return pacing


def buffered(pacing: Pacing, end: float) -> bool:
    return pacing.conclude(end, None).upstream_buffered


# -- buffering: the case that must be flagged -------------------------------------------------


def test_twenty_content_events_in_one_write_after_a_long_wait_are_flagged() -> None:
    body = sse(*(chat_chunk(f"w{i} ") for i in range(20)), chat_chunk(finish="stop"), "[DONE]")
    tap = StreamTap(Dialect.OPENAI_CHAT)
    pacing = Pacing(0.0)
    pacing.first_byte(1.5)
    pacing.content(1.5, tap.feed(body))  # the whole body in one write, 1.5 s after the request
    summary = pacing.conclude(1.501, 20)
    assert pacing.deltas == 20
    assert summary.upstream_buffered
    assert summary.anomalies == ("upstream_buffered",)
    assert summary.time_to_first_content_ms == 1500.0
    assert summary.content_burst_ms == 0.0
    assert summary.output_tokens_per_s is None
    assert summary.output_tokens_per_s_unmeasured is Unmeasured.SINGLE_WRITE


@given(
    wait=st.floats(1.0, 600.0),
    deltas=st.integers(4, 500),
    per_delta=st.floats(0.0, 0.0002),  # link speed: 0.2 ms per delta or faster
    batch=st.integers(1, 50),
)
def test_a_buffer_released_at_link_speed_is_flagged(
    wait: float, deltas: int, per_delta: float, batch: int
) -> None:
    pacing = Pacing(0.0)
    pacing.first_byte(wait)
    now, left = wait, deltas
    while left:
        count = min(batch, left)
        pacing.content(now, count)
        left -= count
        now += per_delta * count
    assert buffered(pacing, now)


# -- buffering: the cases that must never be flagged -------------------------------------------

gaps = st.floats(0.010, 0.100)  # normally paced: deltas 10-100 ms apart


@given(
    wait=st.floats(0.0, 120.0),
    first=st.integers(1, 2),
    batches=st.lists(st.tuples(gaps, st.integers(1, 2)), max_size=300),
)
def test_normally_paced_streams_are_never_flagged(
    wait: float, first: int, batches: list[tuple[float, int]]
) -> None:
    # Up to two deltas per read: a busy proxy may read two paced events at once.
    pacing = paced(wait, [(0.0, first), *batches])
    assert not buffered(pacing, 100.0 + wait + 60.0)


@given(wait=st.floats(5.0, 600.0), batches=st.lists(st.tuples(gaps, st.just(1)), min_size=3))
def test_a_reasoning_models_late_first_content_that_then_flows_is_never_flagged(
    wait: float, batches: list[tuple[float, int]]
) -> None:
    pacing = paced(wait, [(0.0, 1), *batches])
    summary = pacing.conclude(100.0 + wait + 100.0, None)
    assert summary.time_to_first_content_ms is not None
    assert summary.time_to_first_content_ms >= 5000.0
    assert not summary.upstream_buffered


@given(
    wait=st.floats(0.0, 600.0),
    batches=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 3)), min_size=1, max_size=3),
)
def test_short_answers_of_one_to_three_deltas_are_never_flagged(
    wait: float, batches: list[tuple[float, int]]
) -> None:
    pacing = paced(wait, batches)
    if pacing.deltas > 3:
        pacing = paced(wait, [(0.0, 3)])
    assert not buffered(pacing, 100.0 + wait + 10.0)


@pytest.mark.parametrize("deltas", [1, 2, 3])
def test_one_to_three_deltas_in_one_write_after_a_long_wait_are_not_flagged(deltas: int) -> None:
    assert not buffered(paced(30.0, [(0.0, deltas)]), 131.0)


def test_four_deltas_in_one_write_after_a_long_wait_are_flagged() -> None:
    assert buffered(paced(30.0, [(0.0, 4)]), 131.0)


def test_a_very_fast_model_streaming_for_seconds_after_a_wait_is_not_flagged() -> None:
    # 2,000 tokens/s, one token per delta, 3 s of answer after a 2 s queue.
    assert not buffered(paced(2.0, [(0.0, 1)] + [(0.0005, 1)] * 6000), 106.0)


def test_an_instant_burst_without_a_long_wait_is_not_flagged() -> None:
    # A fast model that answers within the second: indistinguishable from buffering, not a
    # problem a user reports.
    assert not buffered(paced(0.9, [(0.0, 50)]), 101.0)


def test_no_content_is_not_flagged() -> None:
    pacing = Pacing(0.0)
    pacing.first_byte(2.0)
    summary = pacing.conclude(5.0, 10)
    assert not summary.upstream_buffered
    assert summary.time_to_first_content_ms is None
    assert summary.content_burst_ms is None
    assert summary.output_tokens_per_s_unmeasured is Unmeasured.NO_CONTENT


# -- generation speed -------------------------------------------------------------------------


def test_output_tokens_per_s_is_tokens_over_the_content_span() -> None:
    pacing = paced(0.5, [(0.0, 1), (0.25, 2), (0.25, 1)])  # content from 100.5 to 101.0
    summary = pacing.conclude(102.0, 40)
    assert summary.output_tokens_per_s == 80.0
    assert summary.output_tokens_per_s_unmeasured is None
    assert summary.content_burst_ms == 500.0
    assert summary.time_to_first_content_ms == 500.0
    assert summary.fields() == {
        "content_burst_ms": 500.0,
        "output_tokens_per_s": 80.0,
        "output_tokens_per_s_unmeasured": None,
    }


@pytest.mark.parametrize(
    ("batches", "tokens", "why"),
    [
        ([(0.0, 1), (0.1, 1)], None, Unmeasured.NO_USAGE),
        ([(0.0, 1)], 5, Unmeasured.SINGLE_DELTA),
        ([(0.0, 7)], 9, Unmeasured.SINGLE_WRITE),
        ([], 9, Unmeasured.NO_CONTENT),
    ],
)
def test_output_tokens_per_s_says_why_it_is_missing_and_never_estimates(
    batches: list[tuple[float, int]], tokens: int | None, why: Unmeasured
) -> None:
    summary = paced(1.0, batches).conclude(103.0, tokens)
    assert summary.output_tokens_per_s is None
    assert summary.output_tokens_per_s_unmeasured is why
    assert summary.fields()["output_tokens_per_s_unmeasured"] == str(why)


def tap_timed(name: str, interval: float) -> tuple[Pacing, int | None]:
    """Feed a corpus stream one event per write, event i arriving at i * `interval` s."""
    raw = RawEvents(ndjson=False)
    events = raw.feed(corpus.file(name))
    tap = StreamTap()
    pacing = Pacing(0.0)
    pacing.first_byte(0.0)
    for i, event in enumerate(events):
        pacing.content(i * interval, tap.feed(event))
    usage = tap.close().usage
    return pacing, None if usage is None else usage.output_tokens


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # Content in events 2 and 4 (0.2 s apart); message_delta reports 15 output tokens.
        ("anthropic-messages/text-basic-pings.sse", 15 / 0.2),
        # "Foo" in event 1, "!" in event 2 (the role chunk's "" is no content); 2 tokens.
        ("openai-chat/logprobs-short-text.sse", 2 / 0.1),
        # Seven output_text.delta events, 4 to 10; response.completed says 9 output tokens.
        ("openai-responses/text-basic.sse", 9 / 0.6),
    ],
)
def test_output_tokens_per_s_matches_a_hand_computation_on_corpus_streams(
    name: str, expected: float
) -> None:
    pacing, tokens = tap_timed(name, 0.1)
    assert pacing.conclude(10.0, tokens).output_tokens_per_s == pytest.approx(expected)


def test_a_corpus_stream_fed_at_a_normal_pace_is_not_buffered() -> None:
    pacing, tokens = tap_timed("openai-chat/deepseek-reasoning-content.sse", 0.02)
    summary = pacing.conclude(10.0, tokens)
    assert pacing.deltas > 100
    assert not summary.upstream_buffered
    assert summary.output_tokens_per_s is not None


# -- content stalls -------------------------------------------------------------------------


def test_a_gap_between_content_deltas_longer_than_the_timeout_is_a_stall() -> None:
    pacing = paced(0.1, [(0.0, 1), (0.05, 1), (3.0, 1), (0.05, 1)])
    assert pacing.conclude(104.0, None, content_timeout=2.0).content_stall
    assert pacing.conclude(104.0, None, content_timeout=2.0).anomalies == ("content_stall",)
    assert not pacing.conclude(104.0, None, content_timeout=3.5).content_stall
    assert not pacing.conclude(104.0, None).content_stall  # no timeout configured


def test_a_long_wait_from_first_byte_to_first_content_is_a_stall() -> None:
    pacing = Pacing(0.0)
    pacing.first_byte(0.1)
    pacing.content(5.1, 1)
    pacing.content(5.2, 1)
    summary = pacing.conclude(6.0, None, content_timeout=4.0)
    assert summary.content_stall
    assert summary.max_content_gap_ms == 5000.0


def test_keep_alives_after_the_last_content_make_a_trailing_stall() -> None:
    pacing = paced(0.1, [(0.0, 1), (0.05, 1)])  # last content at 100.15
    # keep-alives until 110.0, then the content watch cut at 110.15
    summary = pacing.conclude(110.15, None, last_byte=110.0, content_timeout=10.0)
    assert summary.content_stall
    assert summary.max_content_gap_ms == 10000.0


def test_an_end_right_after_the_last_content_is_no_stall() -> None:
    pacing = paced(0.1, [(0.0, 1), (0.05, 1)])
    summary = pacing.conclude(200.0, None, last_byte=pacing.last_content, content_timeout=10.0)
    assert not summary.content_stall


def test_keep_alives_without_any_content_are_a_stall() -> None:
    pacing = Pacing(0.0)
    pacing.first_byte(0.2)
    summary = pacing.conclude(30.2, None, last_byte=30.0, content_timeout=30.0)
    assert summary.content_stall
    assert summary.time_to_first_content_ms is None


def test_nothing_at_all_is_no_stall() -> None:
    assert not Pacing(0.0).conclude(100.0, None, content_timeout=1.0).content_stall


def test_a_chunk_without_content_changes_nothing() -> None:
    pacing = Pacing(0.0)
    pacing.content(1.0, 0)
    assert pacing.first_content is None
    assert pacing.deltas == 0


def test_ttft_is_when_the_first_content_arrived_as_the_pacing_reads_it() -> None:
    """One time to first content: the record's `ttft_ms` is read where the pacing reads it,
    at the chunk's arrival from upstream, not once a slow client took it."""
    from sseproxy.shell.state import Timings

    timings, pacing = Timings(start=100.0), Pacing(100.0)
    pacing.first_byte(100.2)
    for arrived, delivered in ((100.5, 103.0), (101.0, 103.5)):  # the client reads late
        timings.chunk(arrived, delivered, 1)
        pacing.content(arrived, 1)
    assert timings.fields(104.0)["ttft_ms"] == 500.0
    assert pacing.conclude(104.0, None).time_to_first_content_ms == 500.0
