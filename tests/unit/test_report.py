"""`sseproxy report`'s reading and accumulating: each bound holds at its size and gives way,
as documented, at one more; hostile values neither crash it nor reach the page unescaped.
Expected values are written out or come from the standard library, never from the report."""

from __future__ import annotations

import gzip
import io
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

from sseproxy.cli import main
from sseproxy.tools.report import Bounds, Summary, page, text
from sseproxy.tools.report.bounded import OTHER, Reservoir, Timeline, TopN
from sseproxy.tools.report.lines import TOO_LONG, read_lines
from sseproxy.tools.report.summary import MAX_KEY_CHARS, MAX_WHAT_CHARS, parse_time
from sseproxy.tools.report.tables import report


def line(**fields: Any) -> bytes:
    record = {
        "timestamp": "2026-12-01T10:00:00Z",
        "event": "request.finished",
        "request_id": "r",
        "state": "completed",
        "model": "m",
        "route": "openai",
        "dialect": "openai-chat",
        "anomalies": {},
        "interruption": None,
        "duration_ms": 10.0,
        "ttft_ms": 5.0,
        **fields,
    }
    return json.dumps(record).encode() + b"\n"


def summarise(*lines: bytes, bounds: Bounds | None = None, **window: Any) -> dict[str, Any]:
    return report(Summary(bounds or Bounds(), **window).feed(lines))


# -- lines ---------------------------------------------------------------------------------


def test_a_line_at_the_bound_is_read_and_one_byte_more_is_skipped_whole(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"a" * 10 + b"\n" + b"b" * 11 + b"\n" + b"c\n")
    assert list(read_lines([str(path)], limit=10)) == [b"a" * 10 + b"\n", TOO_LONG, b"c\n"]


def test_a_line_far_beyond_the_bound_is_dropped_in_pieces(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"x" * 1000 + b"\nnext\n")
    assert list(read_lines([str(path)], limit=16)) == [TOO_LONG, b"next\n"]


def test_gzip_rotated_files_and_blank_lines(tmp_path: Path) -> None:
    old = tmp_path / "log.1.gz"
    old.write_bytes(gzip.compress(b"one\n\n"))
    new = tmp_path / "log"
    new.write_bytes(b"  \ntwo")
    assert list(read_lines([str(old), str(new)])) == [b"one\n", b"two"]


# -- counting ------------------------------------------------------------------------------


def test_lines_that_are_not_records_are_counted_never_fatal() -> None:
    data = summarise(
        line(),
        b"not json\n",
        b"[1, 2]\n",
        b'{"event": "proxy.started"}\n',
        b'{"event": "request.finished", "state": 5, "duration_ms": "slow", "anomalies": [1]}\n',
        b"\xff\xfe\n",
    )
    assert data["lines"] == {
        "records": 2,
        "drills": 0,
        "sessions": 0,
        "unparseable": 3,
        "other_events": 1,
        "outside_window": 0,
    }
    assert data["states"] == {"-": 1, "completed": 1}


def test_failure_rate_counts_failed_interrupted_and_http_error() -> None:
    states = ["completed", "failed", "interrupted", "http_error", "unconfirmed", "cancelled"]
    data = summarise(*(line(state=s) for s in states))
    [row] = data["by_model"]
    assert (row["requests"], row["failures"], row["failure_rate"]) == (6, 3, 0.5)


def test_the_proxys_own_refusals_are_counted_apart_from_the_upstreams_errors() -> None:
    """A refusal (answered by the proxy, nothing cut) is `proxy_refused`, no failure; the
    proxy's 502 for an unreachable upstream carries the cut and stays an upstream error, as
    does a record from before `answered_by` (schema 1.2)."""
    cut = {"reason": "upstream_unreachable", "partial_event_bytes": 0}
    data = summarise(
        line(state="http_error", answered_by="proxy", status=404),
        line(state="http_error", answered_by="proxy", status=400),
        line(state="http_error", answered_by="proxy", status=502, interruption=cut),
        line(state="http_error", answered_by="upstream", status=429),
        line(state="http_error", status=500),
        line(state="completed", answered_by="upstream"),
    )
    assert data["states"] == {"http_error": 3, "proxy_refused": 2, "completed": 1}
    [row] = data["by_model"]
    assert (row["requests"], row["failures"]) == (6, 3)
    assert row["states"] == {"completed": 1, "http_error": 3, "proxy_refused": 2}
    assert data["timeline"]["states"][7] == "proxy_refused"
    assert data["timeline"]["buckets"][0]["counts"] == [1, 0, 0, 0, 0, 0, 3, 2, 0]
    shown = text.render(data)
    assert "proxy_refused 2 (33.3%)" in shown
    assert [w["state"] for w in data["worst"][:3]] == ["http_error"] * 3


def test_anomalies_count_occurrences_and_requests() -> None:
    data = summarise(
        line(anomalies={"a": 2, "b": 1}), line(anomalies={"a": 1}), line(anomalies={"c": -1})
    )
    assert data["anomalies"] == [
        {"name": "a", "occurrences": 3, "requests": 2},
        {"name": "b", "occurrences": 1, "requests": 1},
    ]


def test_the_model_is_the_one_asked_for_else_the_one_that_answered() -> None:
    data = summarise(line(model="asked"), line(model=None, response_model="served"), line(model=""))
    assert {r["model"] for r in data["by_model"]} == {"asked", "served", "-"}


def test_since_is_inclusive_until_exclusive_and_undated_records_are_outside() -> None:
    lines = [line(timestamp=f"2026-12-01T10:0{m}:00Z") for m in range(4)]
    data = summarise(
        *lines,
        line(timestamp=None),
        since=parse_time("2026-12-01T10:01:00Z"),
        until=parse_time("2026-12-01T10:03:00"),  # no zone: UTC
    )
    assert data["lines"]["records"] == 2
    assert data["lines"]["outside_window"] == 3
    assert data["span"] == {"first": "2026-12-01T10:01:00Z", "last": "2026-12-01T10:02:00Z"}


# -- bounds --------------------------------------------------------------------------------


def test_distinct_keys_stop_at_their_bound_and_the_rest_is_other() -> None:
    bounds = Bounds(keys=3)
    at = summarise(*(line(model=f"m{i}") for i in range(3)), bounds=bounds)
    assert OTHER not in {r["model"] for r in at["by_model"]}
    assert at["bounds"]["overflowed"] == {}
    beyond = summarise(*(line(model=f"m{i}") for i in range(4)), bounds=bounds)
    assert {r["model"] for r in beyond["by_model"]} == {"m0", "m1", "m2", OTHER}
    assert beyond["bounds"]["overflowed"]["models"] == 1
    assert sum(r["requests"] for r in beyond["by_model"]) == 4


def test_states_beyond_the_bound_are_other_in_every_table() -> None:
    states = ("completed", "failed", "interrupted", "made-up")
    data = summarise(*(line(state=s) for s in states), bounds=Bounds(keys=3))
    assert data["states"] == {"completed": 1, "failed": 1, "interrupted": 1, OTHER: 1}
    assert data["by_model"][0]["states"] == data["states"]
    assert data["timeline"]["buckets"][0]["counts"] == [1, 0, 0, 0, 1, 1, 0, 0, 1]


def test_timestamps_at_the_ends_of_the_calendar_still_make_a_report() -> None:
    ends = (line(timestamp="0001-01-01T00:00:00Z"), line(timestamp="9999-12-31T23:59:59Z"))
    data = summarise(*ends, bounds=Bounds(timeline=1))  # one bucket for both
    assert data["span"] == {"first": "0001-01-01T00:00:00Z", "last": "9999-12-31T23:59:59Z"}
    [bucket] = data["timeline"]["buckets"]
    assert (bucket["start"], sum(bucket["counts"])) == ("0001-01-01T00:00:00Z", 2)


def test_keys_are_cut_to_their_length_bound() -> None:
    data = summarise(line(model="x" * (MAX_KEY_CHARS + 1)))
    assert data["by_model"][0]["model"] == "x" * MAX_KEY_CHARS


def test_the_reservoir_is_exact_at_its_size_and_a_sample_beyond() -> None:
    values = [float(v) for v in range(1, 101)]
    exact = Reservoir(100)
    for v in values:
        exact.add(v)
    assert exact.exact
    assert exact.quantile(0.5) == statistics.quantiles(values, n=2, method="inclusive")[0]
    assert exact.quantile(0.95) == pytest.approx(
        statistics.quantiles(values, n=20, method="inclusive")[18]
    )
    sampled = Reservoir(100)
    for v in [*values, 1000.0]:
        sampled.add(v)
    assert not sampled.exact
    assert len(sampled.values) == 100
    assert (sampled.count, sampled.maximum) == (101, 1000.0)


def test_the_timeline_widens_instead_of_growing() -> None:
    timeline = Timeline(3, ("completed",))
    for minute in range(3):
        timeline.add(minute * 60.0, 0)
    assert (timeline.width, len(timeline.buckets)) == (60, 3)
    timeline.add(3 * 60.0, 0)  # one bucket more: five-minute buckets
    assert timeline.width == 300
    assert [(timeline.start(slot), counts) for slot, counts in timeline.buckets.items()] == [
        (0.0, [4])
    ]


def test_the_worst_list_keeps_its_size_worst_first() -> None:
    top: TopN[str] = TopN(2)
    for name, rank in (("a", 1), ("b", 3), ("c", 2), ("d", 3)):
        top.offer((rank,), lambda name=name: name)
    assert top.best_first() == ["b", "d"]  # equal ranks: the earlier first


def test_worst_requests_rank_cuts_then_failures_then_the_slowest() -> None:
    data = summarise(
        line(request_id="slow", duration_ms=9000.0),
        line(request_id="fail", state="failed", error={"type": "server_error", "message": "x"}),
        line(
            request_id="cut",
            state="interrupted",
            bytes=809,
            interruption={"reason": "upstream_closed", "partial_event_bytes": 76},
        ),
    )
    assert [w["request_id"] for w in data["worst"]] == ["cut", "fail", "slow"]
    assert data["worst"][0]["what"] == "cut: upstream_closed after 809 B; 76 B of an event lost"
    assert data["worst"][1]["what"] == "server_error: x"


def test_the_line_about_a_request_is_cut_to_its_bound() -> None:
    message = "m" * 500
    data = summarise(line(state="failed", error={"type": "t", "message": message}))
    assert data["worst"][0]["what"] == ("t: " + message)[:MAX_WHAT_CHARS]


# -- rendering -----------------------------------------------------------------------------

HOSTILE = '<script>alert("x")</script>\x1b[2J'


def test_the_page_escapes_every_string_from_the_log() -> None:
    summary = Summary()
    summary.feed(
        [
            line(
                model=HOSTILE,
                route=HOSTILE,
                request_id=HOSTILE,
                anomalies={HOSTILE: 1},
                state="interrupted",
                interruption={"reason": HOSTILE, "partial_event_bytes": 0},
            )
        ]
    )
    html = page.render(summary)
    assert "<script" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "default-src 'none'" in html  # nothing loads from anywhere: it opens offline
    assert "src=" not in html and "href=" not in html


def test_the_terminal_text_holds_no_control_character() -> None:
    summary = Summary()
    summary.feed([line(model=HOSTILE, state="failed")])
    out = text.render(report(summary))
    assert "\x1b" not in out
    assert "\\x1b[2J" in out


def test_the_command_writes_json_and_html(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "log"
    log.write_bytes(line() + line(state="failed"))
    html = tmp_path / "report.html"
    assert main(["report", "--json", "--html", str(html), str(log)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["states"] == {"completed": 1, "failed": 1}
    assert "<svg" in html.read_text()


def test_a_missing_file_or_a_bad_time_is_a_usage_error(tmp_path: Path, capsys: Any) -> None:
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--since", "yesterday"])
    assert exit_.value.code == 2


def test_stdin_is_read_when_no_file_is_given(monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(line() + b"junk\n")))
    assert main(["report", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["lines"]["unparseable"] == 1


# -- sessions ------------------------------------------------------------------------------


def session_line(**fields: Any) -> bytes:
    record = {
        "timestamp": "2026-12-01T10:00:00Z",
        "event": "session.finished",
        "session_id": "s",
        "route": "openai",
        "dialect": "openai-realtime",
        "closed_by": "upstream",
        "close_code": 1011,
        "turns": 2,
        "anomalies": {},
        **fields,
    }
    return json.dumps(record).encode() + b"\n"


def test_sessions_are_counted_by_how_they_closed_apart_from_the_requests() -> None:
    data = summarise(
        line(transport="websocket", session_id="s"),
        session_line(),
        session_line(turns=3),
        session_line(closed_by="client", close_code=1000, turns=1, route="gemini"),
        session_line(closed_by="upstream", close_code=None, turns=0, anomalies={"go_away": 1}),
    )
    assert data["lines"] == {
        "records": 1,
        "drills": 0,
        "sessions": 4,
        "unparseable": 0,
        "other_events": 0,
        "outside_window": 0,
    }
    assert data["sessions"]["count"] == 4
    assert data["sessions"]["turns"] == 6
    assert data["sessions"]["by_close"] == [
        {"route": "openai", "closed_by": "upstream", "close_code": "1011", "sessions": 2},
        {"route": "gemini", "closed_by": "client", "close_code": "1000", "sessions": 1},
        {"route": "openai", "closed_by": "upstream", "close_code": "-", "sessions": 1},
    ]
    assert data["sessions"]["anomalies"] == [{"name": "go_away", "occurrences": 1, "sessions": 1}]
    assert data["states"] == {"completed": 1}  # a session is not a request: its turns are


def test_session_values_of_the_wrong_type_are_read_as_absent() -> None:
    data = summarise(
        session_line(close_code="1011", closed_by=7, turns=-2, route=None, anomalies=[1]),
        session_line(close_code=True, turns="many"),
    )
    assert data["sessions"]["count"] == 2
    assert data["sessions"]["turns"] == 0
    assert data["sessions"]["by_close"] == [
        {"route": "-", "closed_by": "-", "close_code": "-", "sessions": 1},
        {"route": "openai", "closed_by": "upstream", "close_code": "-", "sessions": 1},
    ]


def test_sessions_keep_to_the_window_and_the_key_bound() -> None:
    data = summarise(
        *(session_line(route=f"r{i}") for i in range(3)),
        session_line(timestamp="2026-12-02T00:00:00Z"),
        bounds=Bounds(keys=2),
        until=parse_time("2026-12-01T12:00:00Z"),
    )
    assert data["sessions"]["count"] == 3
    assert data["lines"]["outside_window"] == 1
    assert [r["route"] for r in data["sessions"]["by_close"]] == ["(other)", "r0", "r1"]
    assert "session_closes" in data["bounds"]["overflowed"]


def test_the_terminal_and_the_page_show_sessions_only_when_there_are_some() -> None:
    plain = Summary().feed([line()])
    assert "Sessions" not in text.render(report(plain))
    with_sessions = Summary().feed([line(), session_line(close_reason="<b>x</b>", route="<i>")])
    rendered = text.render(report(with_sessions))
    assert "Sessions: 1, 2 turns" in rendered
    assert "upstream" in rendered and "1011" in rendered
    html = page.render(with_sessions)
    assert "<h2>Sessions</h2>" in html
    assert "&lt;i&gt;" in html and "<i>" not in html


# -- drills --------------------------------------------------------------------------------

DRILL_CUT = {"reason": "upstream_closed", "partial_event_bytes": 0}


def test_drills_are_counted_apart_from_real_cuts_and_failures() -> None:
    """A record with `injected` (the proxy's drill faults, as shell/record.py writes them) is a
    drill: its cut is in `drills`, never in `cuts`, the states, the failure rates or the worst
    list; a real cut of the same reason is still a real one."""
    data = summarise(
        line(state="interrupted", interruption=DRILL_CUT, injected=["cut-after=2"]),
        line(state="interrupted", interruption=DRILL_CUT, injected=["cut-after=5"]),
        line(state="failed", injected=["inject-error=2"], request_id="drill-error"),
        line(state="completed", injected=["rechunk=1", "delay=1"]),
        line(state="interrupted", interruption=DRILL_CUT, request_id="real-cut"),
        line(state="completed"),
    )
    assert (data["lines"]["records"], data["lines"]["drills"]) == (2, 4)
    assert data["cuts"] == [{"reason": "upstream_closed", "requests": 1}]
    assert data["states"] == {"completed": 1, "interrupted": 1}
    [row] = data["by_model"]
    assert (row["requests"], row["failures"]) == (2, 1)
    assert [w["request_id"] for w in data["worst"]] == ["real-cut", "r"]
    assert data["drills"] == {
        "requests": 4,
        "states": {"interrupted": 2, "completed": 1, "failed": 1},
        "cuts": [{"reason": "upstream_closed", "requests": 2}],
        "faults": [
            {"fault": "cut-after=2", "requests": 1},
            {"fault": "cut-after=5", "requests": 1},
            {"fault": "delay=1", "requests": 1},
            {"fault": "inject-error=2", "requests": 1},
            {"fault": "rechunk=1", "requests": 1},
        ],
    }
    shown = text.render(data)
    assert "2 requests and 4 drills (counted apart)" in shown
    assert "Drills: 4" in shown


def test_an_empty_or_malformed_injected_is_no_drill() -> None:
    data = summarise(line(injected=[]), line(injected="cut-after=1"), line(injected=None))
    assert (data["lines"]["records"], data["lines"]["drills"]) == (3, 0)


def test_the_page_shows_drills_apart_and_charts_with_axes_and_values() -> None:
    summary = Summary().feed(
        [
            line(state="interrupted", interruption=DRILL_CUT, injected=["cut-after=2"]),
            line(ttft_ms=120.0, timestamp="2026-12-01T10:00:00Z"),
            line(ttft_ms=340.0, timestamp="2026-12-01T10:05:00Z"),
            line(ttft_ms=340.0, timestamp="2026-12-01T10:05:00Z"),
        ]
    )
    html = page.render(summary)
    assert "<h2>Drills</h2>" in html and "cut-after=2" in html
    assert "and 1 drills, counted apart" in html
    # the timeline: a count axis and a time axis, each with a title and values
    assert "requests per " in html and "time (UTC, 2026-12-01)" in html
    assert ">10:00<" in html or ">10:00:00<" in html
    # the TTFT histogram: its axis in milliseconds, each bar's count written above it
    assert "time to first token (log scale)" in html
    assert ">100 ms<" in html and ">1.00 s<" in html
    assert '<text x="' in html and 'class="value">2</text>' in html


def test_a_log_of_drills_only_still_makes_every_rendering() -> None:
    summary = Summary().feed(
        [line(state="interrupted", interruption=DRILL_CUT, injected=["cut-after=1"])]
    )
    data = report(summary)
    assert (data["lines"]["records"], data["lines"]["drills"]) == (0, 1)
    assert "0 requests and 1 drills (counted apart)" in text.render(data)
    assert "<h2>Drills</h2>" in page.render(summary)


# -- clients and agent runs (issue 30) -----------------------------------------------------------

CODEX = {"name": "codex", "version": "0.171.0"}
CLAUDE = {"name": "claude-code", "version": "2.1.3"}


def test_requests_are_counted_per_client_and_per_run() -> None:
    data = summarise(
        line(client=CODEX, run_id="run-a", state="interrupted"),
        line(client=CODEX, run_id="run-a", retry={"of": "r", "linked_by": "same_meaning"}),
        line(client=CODEX, run_id="run-a", transport="websocket", session_id="s1"),
        line(client=CLAUDE, run_id="run-b", state="failed"),
        line(client={"name": "openai-python", "version": "1.99.9"}, run_id=None),
        line(),  # a record from before 1.4: no client, no run
        json.dumps(
            {
                "event": "session.finished",
                "timestamp": "2026-12-01T10:00:01Z",
                "run_id": "run-a",
                "client": CODEX,
                "turns": 1,
            }
        ).encode(),
    )
    assert [
        (r["client"], r["version"], r["requests"], r["failures"]) for r in data["by_client"]
    ] == [
        ("codex", "0.171.0", 3, 1),
        ("-", "-", 1, 0),
        ("claude-code", "2.1.3", 1, 1),
        ("openai-python", "1.99.9", 1, 0),
    ]
    assert [
        (r["run_id"], r["client"], r["requests"], r["failures"], r["retries"], r["sessions"])
        for r in data["by_run"]
    ] == [("run-a", "codex 0.171.0", 3, 1, 1, 1), ("run-b", "claude-code 2.1.3", 1, 1, 0, 0)]
    assert data["by_run"][0]["last"] == "2026-12-01T10:00:01Z"
    out = text.render(data)
    assert "By client" in out and "By run" in out and "run-a" in out
    html = page.render(Summary().feed([line(client=CODEX, run_id="run-a")]))
    assert "<h2>By run</h2>" in html and "run-a" in html


def test_runs_stop_at_the_key_bound_and_the_rest_is_other() -> None:
    bounds = Bounds(keys=2)
    at = summarise(*(line(run_id=f"r{i}") for i in range(2)), bounds=bounds)
    assert {r["run_id"] for r in at["by_run"]} == {"r0", "r1"}
    beyond = summarise(*(line(run_id=f"r{i}") for i in range(3)), bounds=bounds)
    assert {r["run_id"] for r in beyond["by_run"]} == {"r0", "r1", OTHER}
    assert beyond["bounds"]["overflowed"]["runs"] == 1


@pytest.mark.parametrize("client", [None, "codex", 7, [], {"name": 7}, {"version": "1"}])
def test_a_client_of_the_wrong_shape_is_read_as_absent(client: Any) -> None:
    data = summarise(line(client=client, run_id=["x"]))
    assert [(r["client"], r["version"]) for r in data["by_client"]] == [("-", "-")]
    assert data["by_run"] == []
