"""Resume links judged from ledgers alone (core/resume.py), the tap's bounded recorder, and
the shell's bounded ledger of ended streams (shell/ledger.py)."""

from __future__ import annotations

import gc
import json
import tracemalloc
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sseproxy.core import Dialect, EndReason, State, StreamTap, TapOptions
from sseproxy.core.request import RequestFacts, request_facts
from sseproxy.core.resume import (
    ID_DIGEST_BYTES,
    ID_DIGEST_PREFIX,
    MAX_EVENT_COST,
    MAX_KEPT_ID_CHARS,
    MAX_MISSING_LISTED,
    LedgerEvent,
    Original,
    ResumeVerdict,
    by_event_id,
    by_sequence,
    cursor_key,
    digest,
    link_resume,
    shared_prefix_chars,
)
from sseproxy.shell.ledger import (
    MAX_HASHED_BODY_BYTES,
    Ended,
    Ledger,
    LedgerLimits,
    body_key,
    resumption,
)
from tests.corpus import file as corpus
from tests.streams import cut, random_split


def ev(n: int, data: str | None = None, event_id: str | None = None) -> LedgerEvent:
    payload = data if data is not None else json.dumps({"sequence_number": n, "delta": f"d{n}"})
    return LedgerEvent(
        n + 1, event_id if event_id is not None else f"e{n}", n, digest(payload.encode())
    )


ORIGINAL = Original("req-1", tuple(ev(n) for n in range(6)), delivered=4)


def resume(cursor: str, *events: LedgerEvent, key=by_event_id, original=ORIGINAL):
    return link_resume(original, cursor, events, key)


def test_the_next_event_after_the_cursor_is_continuous() -> None:
    link = resume("e3", ev(4), ev(5))
    assert (link.verdict, link.first_event, link.replayed, link.missing) == (
        ResumeVerdict.CONTINUOUS,
        "e4",
        0,
        (),
    )
    assert link.of == "req-1" and link.delivered_after_cursor == 0


def test_events_skipped_after_the_cursor_are_a_gap_naming_them() -> None:
    link = resume("e1", ev(4), ev(5))
    assert link.verdict is ResumeVerdict.GAP
    assert (link.missing, link.missing_count) == (("e2", "e3"), 2)
    # The proxy had written e2 and e3 to the client: the client lost them, not the upstream.
    assert link.delivered_after_cursor == 2


def test_events_the_client_had_sent_again_are_a_duplicate() -> None:
    link = resume("e3", ev(2), ev(3), ev(4))
    assert (link.verdict, link.replayed, link.first_event) == (ResumeVerdict.DUPLICATE, 2, "e2")


def test_the_same_cursor_with_other_data_is_divergent() -> None:
    link = resume("e3", ev(4, data='{"delta": "rewritten"}'), ev(5))
    assert (link.verdict, link.diverged) == (ResumeVerdict.DIVERGENT, ("e4",))


def test_a_cursor_no_ledger_holds_is_unknown_origin() -> None:
    assert resume("e99", ev(4)).verdict is ResumeVerdict.UNKNOWN_ORIGIN
    none = link_resume(None, "e3", (ev(4),))
    assert (none.verdict, none.of) == (ResumeVerdict.UNKNOWN_ORIGIN, None)


def test_an_empty_resume_misses_what_followed_the_cursor() -> None:
    link = resume("e3")
    assert (link.verdict, link.first_event, link.missing) == (ResumeVerdict.GAP, None, ("e4", "e5"))
    assert resume("e5").verdict is ResumeVerdict.CONTINUOUS


def test_a_priming_event_is_not_the_first_event() -> None:
    priming = LedgerEvent(1, "p0", None, digest(b""))
    assert resume("e3", priming, ev(4)).first_event == "e4"


def test_numbered_events_name_the_numbers_missing_also_beyond_the_ledger() -> None:
    short = Original("req-1", tuple(ev(n) for n in range(4)), delivered=4)
    link = resume("3", ev(7), key=by_sequence, original=short)
    assert (link.verdict, link.missing, link.missing_count) == (
        ResumeVerdict.GAP,
        ("4", "5", "6"),
        3,
    )
    far = resume("3", ev(3 + MAX_MISSING_LISTED + 2), key=by_sequence, original=short)
    assert far.missing_count == MAX_MISSING_LISTED + 1
    assert len(far.missing) == MAX_MISSING_LISTED  # listed up to the cap, counted beyond


def test_a_reconnect_sooner_than_retry_is_an_anomaly() -> None:
    paced = Original("req-1", ORIGINAL.events, 4, retry_ms=1000)
    soon = link_resume(paced, "e3", (ev(4),), elapsed_ms=999)
    late = link_resume(paced, "e3", (ev(4),), elapsed_ms=1000)
    assert soon.anomalies == {"reconnect_before_retry": 1} and late.anomalies == {}


def test_shared_prefix() -> None:
    assert shared_prefix_chars("The answer is 4", "The answer is 5") == 14
    assert shared_prefix_chars("", "x") == 0


def test_the_recorder_keeps_the_last_cap_events() -> None:
    tap = StreamTap(Dialect.SSE, options=TapOptions(ledger_events=3, strict=True))
    body = b"".join(f"id: {n}\ndata: {n}\n\n".encode() for n in range(4))  # one more than 3
    tap.feed(body)
    tap.close()
    kept = tap.ledger()
    assert [e.event_id for e in kept] == ["1", "2", "3"] and kept[0].ordinal == 2


def test_responses_events_record_their_sequence_numbers() -> None:
    events = [
        {"type": "response.created", "sequence_number": 0, "response": {"id": "r"}},
        {"type": "response.output_text.delta", "sequence_number": 1, "delta": "a"},
        {"type": "response.output_text.delta", "sequence_number": 2, "delta": "b"},
    ]
    body = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
    tap = StreamTap(Dialect.OPENAI_RESPONSES, options=TapOptions(ledger_events=8))
    for i in range(len(body)):
        tap.feed(body[i : i + 1])
    assert [e.sequence for e in tap.ledger()] == [0, 1, 2]


def test_a_dialect_that_cannot_resume_records_nothing() -> None:
    tap = StreamTap(Dialect.OPENAI_CHAT, options=TapOptions(ledger_events=8))
    tap.feed(b'id: 1\ndata: {"choices": []}\n\n' * 3)
    assert tap.close(EndReason.UPSTREAM_CLOSED).events == 3
    assert tap.ledger() == ()  # Chat cannot be resumed: its fast path stays on


def test_resumptions_are_read_from_the_request() -> None:
    responses = resumption("GET", "/v1/responses/resp_1?stream=true&starting_after=5", {})
    assert responses is not None and (responses.cursor, responses.response_id) == ("5", "resp_1")
    sse = resumption("GET", "/mcp", {"Last-Event-ID": "s-3"})
    assert sse is not None and sse.cursor == "s-3" and sse.response_id is None
    assert resumption("POST", "/v1/responses", {}) is None


def ended(request_id: str, state: State = State.INTERRUPTED, **kw: object) -> Ended:
    fields: dict[str, object] = {
        "request_id": request_id,
        "started": 0.0,
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": {},
        "body": b'{"q": 1}',
        "route": "r",
        "session_id": None,
        "state": state,
        "response_id": None,
        "events": (),
        "delivered": 0,
        "retry_ms": None,
        "text": None,
    }
    fields.update(kw)
    return Ended(**fields)  # type: ignore[arg-type]


def test_the_ledger_keeps_at_most_its_stream_count() -> None:
    ledger = Ledger(LedgerLimits(streams=2, seconds=60))
    for n in range(3):  # one more than the cap
        ledger.link(ended(f"q{n}", body=str(n).encode()), now=float(n))
    assert len(ledger) == 2
    assert [k.original.request_id for k in ledger.newest()] == ["q2", "q1"]


def test_the_ledger_forgets_streams_older_than_its_time() -> None:
    ledger = Ledger(LedgerLimits(streams=8, seconds=10))
    ledger.link(ended("q0"), now=0.0)
    assert ledger.link(ended("q1"), now=10.0).retry is not None  # within: a retry
    ledger.link(ended("q2", body=b"other"), now=20.5)  # q0 and q1 ended more than 10 s ago
    assert [k.original.request_id for k in ledger.newest()] == ["q2"]


def test_a_re_sent_request_after_a_cut_is_a_retry_never_a_resume() -> None:
    ledger = Ledger(LedgerLimits(), keep_text=True)
    ledger.link(ended("q0", text="The answer is 4, because"), now=0.0)
    links = ledger.link(ended("q1", state=State.COMPLETED, text="The answer is 5."), now=1.0)
    assert links.resume is None
    assert links.retry == {
        "of": "q0",
        "regenerated": True,
        "shared_prefix_chars": 14,
        "linked_by": "same_body",
    }


def test_a_request_sent_again_after_a_completed_one_is_no_retry() -> None:
    ledger = Ledger(LedgerLimits())
    ledger.link(ended("q0", state=State.COMPLETED), now=0.0)
    assert ledger.link(ended("q1"), now=1.0).retry is None


def test_without_kept_content_the_shared_prefix_is_unknown() -> None:
    ledger = Ledger(LedgerLimits(), keep_text=False)
    ledger.link(ended("q0", text="abc"), now=0.0)
    retry = ledger.link(ended("q1", text="abd"), now=1.0).retry
    assert retry is not None and retry["shared_prefix_chars"] is None


def test_a_ledger_of_no_streams_links_nothing() -> None:
    ledger = Ledger(LedgerLimits(streams=0))
    ledger.link(ended("q0"), now=0.0)
    assert ledger.link(ended("q1"), now=1.0).retry is None and len(ledger) == 0


def test_a_re_sent_request_is_judged_by_the_newest_stream_of_its_body() -> None:
    ledger = Ledger(LedgerLimits())
    ledger.link(ended("q0"), now=0.0)  # cut
    ledger.link(ended("q1", state=State.COMPLETED), now=1.0)  # the same body, then answered
    assert ledger.link(ended("q2"), now=2.0).retry is None  # the newest of that body completed
    retry = ledger.link(ended("q3", body=b"other"), now=3.0).retry
    assert retry is None


def test_a_retry_is_found_after_an_older_stream_of_its_body_left_the_ledger() -> None:
    ledger = Ledger(LedgerLimits(streams=3, seconds=60))
    ledger.link(ended("q0"), now=0.0)
    assert (ledger.link(ended("q1"), now=1.0).retry or {}).get("of") == "q0"
    ledger.link(ended("q2", body=b"b"), now=2.0)
    ledger.link(ended("q3", body=b"c"), now=3.0)  # q0 leaves: the cap is 3
    assert [k.original.request_id for k in ledger.newest()] == ["q3", "q2", "q1"]
    assert (ledger.link(ended("q4"), now=4.0).retry or {}).get("of") == "q1"
    for n in range(5, 8):  # q1, q2, q3 and q4 leave
        ledger.link(ended(f"q{n}", body=str(n).encode()), now=float(n))
    assert ledger.link(ended("q8"), now=8.0).retry is None  # no stream of that body is kept


def test_a_stream_kept_again_under_its_id_answers_for_its_new_body_only() -> None:
    ledger = Ledger(LedgerLimits())
    ledger.link(ended("q0"), now=0.0)
    ledger.link(ended("q1"), now=1.0)
    ledger.link(ended("q1", body=b"other"), now=2.0)  # the same id kept again, another body
    assert (ledger.link(ended("q2"), now=3.0).retry or {}).get("of") == "q0"
    assert (ledger.link(ended("q3", body=b"other"), now=4.0).retry or {}).get("of") == "q1"


def test_body_key_tells_requests_apart() -> None:
    assert body_key("POST", "/a", b"x") == body_key("POST", "/a", b"x")
    assert body_key("POST", "/a", b"x") != body_key("POST", "/ax", b"")


RESPONSES_BODIES = [
    corpus(name)
    for name in (
        "openai-responses/text-basic.sse",
        "openai-responses/function-call.sse",
        "openai-responses/derived-cut-after-delta.sse",
    )
]


def test_only_a_background_responses_stream_is_recorded() -> None:
    body = RESPONSES_BODIES[0]
    asked = request_facts("/v1/responses", "", b'{"stream": true, "background": true}')
    plain = request_facts("/v1/responses", "", b'{"stream": true}')
    taps = [
        StreamTap(Dialect.OPENAI_RESPONSES, options=TapOptions(ledger_events=64), request=r)
        for r in (asked, plain)
    ]
    for tap in taps:
        for piece in random_split(body, 1, 300):
            tap.feed(piece)
    recorded, skipped = (tap.ledger() for tap in taps)
    assert len(recorded) == body.count(b"\n\n") and skipped == ()


@given(st.sampled_from(RESPONSES_BODIES), st.lists(st.integers(min_value=0), max_size=10))
def test_recording_changes_no_verdict_under_any_chunking(body: bytes, points: list[int]) -> None:
    """The recorder turns the block shortcut off: the verdict stays the one it gives."""

    def verdict(ledger_events: int, chunks: list[bytes]) -> Any:
        tap = StreamTap(
            Dialect.OPENAI_RESPONSES,
            options=TapOptions(ledger_events=ledger_events, strict=True),
            request=RequestFacts(stream=None),
        )
        for chunk in chunks:
            tap.feed(chunk)
        return tap.close(EndReason.UPSTREAM_CLOSED), tap.ledger()

    whole, recorded = verdict(64, [body])
    assert verdict(0, cut(body, points))[0] == whole
    assert verdict(64, cut(body, points)) == (whole, recorded)


def test_a_sequence_number_is_found_first_or_last_never_in_between() -> None:
    big = "x" * 1000
    first = json.dumps({"type": "t", "sequence_number": 7, "response": {"output": big}})
    last = json.dumps({"type": "t", "response": {"output": big}, "sequence_number": 8})
    nested = json.dumps({"type": "t", "a": big, "b": {"sequence_number": 9}, "c": big})
    tap = StreamTap(Dialect.SSE, options=TapOptions(ledger_events=8))
    tap.feed(b"".join(f"data: {d}\n\n".encode() for d in (first, last, nested)))
    assert [e.sequence for e in tap.ledger()] == [7, 8, None]


def test_a_body_beyond_the_hashed_size_is_never_a_retry() -> None:
    ledger = Ledger(LedgerLimits())
    big = b"x" * (MAX_HASHED_BODY_BYTES + 1)  # one byte more than is hashed
    ledger.link(ended("q0", body=big), now=0.0)
    assert ledger.link(ended("q1", body=big), now=1.0).retry is None
    edge = b"x" * MAX_HASHED_BODY_BYTES
    ledger.link(ended("q2", body=edge), now=2.0)
    assert ledger.link(ended("q3", body=edge), now=3.0).retry is not None


def test_the_wait_before_a_resume_is_from_the_original_end_to_the_resume_start() -> None:
    """A resume that starts 1 s after the end and lasts 9 s waited 1 s, not 10."""
    ledger = Ledger(LedgerLimits())
    events = tuple(ev(n) for n in range(3))
    ledger.link(ended("q0", events=events, retry_ms=2000), now=10.0)
    resume = ended("q1", started=11.0, method="GET", headers={"Last-Event-ID": "e2"})
    link = ledger.link(resume, now=20.0).resume
    assert link is not None and link.anomalies == {"reconnect_before_retry": 1}


# -- what the ledger keeps of an id: bounded whatever the peer sends -------------------------


def test_an_id_is_kept_as_itself_up_to_its_cap_then_as_a_digest() -> None:
    at_cap = "i" * MAX_KEPT_ID_CHARS
    assert cursor_key(at_cap) == at_cap
    one_more, huge = "i" * (MAX_KEPT_ID_CHARS + 1), "i" * (64 * 1024)
    keys = {cursor_key(one_more), cursor_key(huge), cursor_key(huge[:-1] + "j")}
    assert len(keys) == 3  # still told apart, each the same size
    assert {len(k) for k in keys} == {len(ID_DIGEST_PREFIX) + 2 * ID_DIGEST_BYTES}
    assert not any("iiiiiiiiii" in k for k in keys)  # never the id, nor a piece of it
    # A kept id that looks like a digest is not taken for one: keys stay one per id.
    lookalike = ID_DIGEST_PREFIX + "0" * (MAX_KEPT_ID_CHARS - len(ID_DIGEST_PREFIX))
    assert cursor_key(lookalike) == lookalike and lookalike not in keys


HUGE_ID = 64 * 1024


def huge_id_stream(tag: str, n: int) -> bytes:
    """`n` events, each with its own 64 KiB id (distinct in their last characters)."""
    return b"".join(
        f"id: {tag * (HUGE_ID - 8)}{k:08d}\ndata: part {k}\n\n".encode() for k in range(n)
    )


def test_events_with_64_kib_ids_are_recorded_and_resumed_by_their_digest() -> None:
    tap = StreamTap(Dialect.SSE, options=TapOptions(ledger_events=4, strict=True))
    tap.feed(huge_id_stream("a", 4))
    tap.close(EndReason.UPSTREAM_CLOSED)
    kept = tap.ledger()
    assert all(e.event_id is not None and len(e.event_id) <= 40 for e in kept)
    ledger = Ledger(LedgerLimits())
    ledger.link(ended("q0", method="GET", path="/events", events=kept, delivered=2), now=0.0)
    last_id = "a" * (HUGE_ID - 8) + f"{1:08d}"  # the second event's id, as a header sends it
    resumed = ended(
        "q1", method="GET", path="/events", headers={"Last-Event-ID": last_id}, events=kept[2:]
    )
    link = ledger.link(resumed, now=1.0).resume
    assert link is not None and (link.of, link.verdict) == ("q0", ResumeVerdict.CONTINUOUS)
    assert link.cursor == cursor_key(last_id)  # the record names the key, never 64 KiB


def test_a_full_ledger_of_64_kib_ids_stays_within_its_documented_bound() -> None:
    """Two streams of eight events kept, each event with its own 64 KiB id: at its bound, and
    one stream more, the ledger holds at most MAX_EVENT_COST a kept event and a little per
    stream (before, every id whole: 1 MiB here)."""
    streams, events = 2, 8
    per_stream = 2048  # the Kept, its Original, the events tuple, the id set's table, keys
    bound = streams * (events * MAX_EVENT_COST + per_stream)
    ledger = Ledger(LedgerLimits(streams=streams))
    held = []
    gc.collect()
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        for s in range(streams + 1):  # one stream more than the bound
            tap = StreamTap(Dialect.SSE, options=TapOptions(ledger_events=events, strict=True))
            tap.feed(huge_id_stream("abc"[s], events))
            kept = ended(f"q{s}", method="GET", path="/events", body=b"", events=tap.ledger())
            ledger.link(kept, now=float(s))
            del tap, kept  # the tap's own id and buffers go: what is left is the ledger's
            gc.collect()
            held.append(tracemalloc.get_traced_memory()[0] - baseline)
    finally:
        tracemalloc.stop()
    assert len(ledger) == streams
    assert held[streams - 1] <= bound  # at the bound
    assert held[streams] <= bound  # and one stream more: the oldest went
