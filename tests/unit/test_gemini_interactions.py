"""Gemini Interactions streaming (issue 31, point 4): the statuses mapped to the record's, text
from `step.delta` (the completed event carries no outputs), function calls, detection, drills,
and the resume cursor (`event_id` in each event's data).

Events are built with google-genai 3.6's own models (`google.genai.interactions`:
`InteractionCreatedEvent`, `StepStart`, `StepDelta`, `StepStop`, `InteractionStatusUpdate`,
`InteractionCompletedEvent`, `ErrorEvent`) and dumped by alias, as its SSE decoder reads them;
the SSE framing (`event:` named after `event_type`) is the one its own tests serve
(`google/genai/tests/gaos/test_unknown_fields.py`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sseproxy.core import Dialect, EndReason, FinishCategory, State, StreamTap, TapOptions
from sseproxy.core.dialects import detect, spec_for
from sseproxy.core.inject import Injector, Write, parse_rules
from sseproxy.core.verdict import with_transport
from sseproxy.shell.ledger import resumption
from tests.streams import verdict_of

t = pytest.importorskip("google.genai.interactions")

GI = Dialect.GEMINI_INTERACTIONS
ID = "v1_abc"


def frame(model: Any) -> bytes:
    obj = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return f"event: {obj['event_type']}\ndata: {json.dumps(obj)}\n\n".encode()


def created(n: int = 1) -> bytes:
    interaction = {"id": ID, "status": "in_progress", "model": "gemini-3-flash"}
    return frame(t.InteractionCreatedEvent(interaction=interaction, event_id=f"e{n}"))


def text_step(index: int, *pieces: str, n: int = 2) -> bytes:
    out = frame(t.StepStart(index=index, step={"type": "model_output", "content": []}))
    for piece in pieces:
        out += frame(
            t.StepDelta(index=index, delta={"type": "text", "text": piece}, event_id=f"e{n}")
        )
        n += 1
    return out + frame(t.StepStop(index=index))


def status(value: str) -> bytes:
    return frame(t.InteractionStatusUpdate(interaction_id=ID, status=value))


def completed(value: str, n: int = 99) -> bytes:
    interaction = {"id": ID, "status": value, "steps": []}  # no outputs, as the API sends it
    usage = {"total_input_tokens": 5, "total_output_tokens": 7, "total_tokens": 12}
    return frame(
        t.InteractionCompletedEvent(interaction={**interaction, "usage": usage}, event_id=f"e{n}")
    )


def run(end: str) -> bytes:
    return created() + text_step(0, "Hello", ", world") + status(end) + completed(end)


def test_a_completed_interaction_is_completed_with_text_from_the_deltas() -> None:
    v = verdict_of(run("completed"), GI)
    assert (v.state, v.finish_reason, v.finish_category) == (
        State.COMPLETED,
        "completed",
        FinishCategory.STOP,
    )
    assert (v.text_chars, v.response_id, v.model) == (len("Hello, world"), ID, "gemini-3-flash")
    assert v.usage is not None and (v.usage.input_tokens, v.usage.output_tokens) == (5, 7)
    assert v.anomalies == {}


@pytest.mark.parametrize(
    ("end", "state", "category"),
    [
        ("failed", State.FAILED, FinishCategory.ERROR),
        ("cancelled", State.CANCELLED, FinishCategory.OTHER),
        ("incomplete", State.INCOMPLETE, FinishCategory.OTHER),
        ("budget_exceeded", State.INCOMPLETE, FinishCategory.LENGTH),
        ("requires_action", State.INCOMPLETE, FinishCategory.PAUSE),
    ],
)
def test_each_final_status(end: str, state: State, category: FinishCategory) -> None:
    v = verdict_of(run(end), GI)
    assert (v.state, v.finish_reason, v.finish_category) == (state, end, category)


def test_a_function_call_waits_for_its_result_as_a_pause() -> None:
    start = t.StepStart(
        index=1, step={"type": "function_call", "id": "fc1", "name": "get_weather", "arguments": {}}
    )
    data = (
        created()
        + frame(start)
        + frame(t.StepDelta(index=1, delta={"type": "arguments_delta", "arguments": '{"city":'}))
        + frame(t.StepDelta(index=1, delta={"type": "arguments_delta", "arguments": '"Oslo"}'}))
        + frame(t.StepStop(index=1))
        + completed("requires_action")
    )
    v = verdict_of(data, GI)
    assert (v.state, v.finish_category) == (State.INCOMPLETE, FinishCategory.PAUSE)
    assert [(c.id, c.name, c.arguments_valid_json) for c in v.tool_calls] == [
        ("fc1", "get_weather", True)
    ]


def test_an_error_event_is_failed() -> None:
    error = t.ErrorEvent(error={"code": "resource_exhausted", "message": "quota"})
    v = verdict_of(created() + text_step(0, "Hel") + frame(error), GI)
    assert v.state is State.FAILED
    assert v.error is not None and (v.error.code, v.error.message) == (
        "resource_exhausted",
        "quota",
    )


def test_a_stream_closed_before_interaction_completed_is_interrupted() -> None:
    """Main read this as plain SSE: `unconfirmed` whether it completed or not."""
    v = verdict_of(created() + text_step(0, "Hello") + status("in_progress"), GI)
    assert v.state is State.INTERRUPTED and v.anomalies.get("no_terminal_signal") == 1


def test_a_final_status_update_without_interaction_completed() -> None:
    """google-genai ends its stream without an error after a final status: the outcome stands
    on a clean end (named `missing_done`); cut, the stream is `interrupted`."""
    data = created() + text_step(0, "Hello") + status("failed")
    v = verdict_of(data, GI)
    assert (v.state, v.finish_reason, v.anomalies) == (State.FAILED, "failed", {"missing_done": 1})
    cut = verdict_of(data, GI, EndReason.UPSTREAM_RESET, http_complete=False)
    assert cut.state is State.INTERRUPTED


def test_a_cut_after_the_end_keeps_the_outcome_for_a_client_that_left() -> None:
    v = verdict_of(run("completed"), GI, EndReason.CLIENT_DISCONNECTED, http_complete=None)
    assert v.state is State.COMPLETED


def test_detection_by_path_and_by_event() -> None:
    assert detect("POST", "/v1beta/interactions") is GI
    assert detect("GET", f"/v1beta/interactions/{ID}?stream=true&last_event_id=e3") is GI
    v = verdict_of(run("completed"))  # no dialect given: sniffed from the first event
    assert (v.dialect, v.state) == (GI, State.COMPLETED)


def test_each_event_s_data_cursor_is_recorded_for_a_resume() -> None:
    """The tap records the `event_id` of each event's data (the API sends no SSE `id:`), which
    `GET /interactions/{id}?last_event_id=` names, and the ledger reads that GET as a resume."""
    tap = StreamTap(GI, options=TapOptions(ledger_events=8))
    tap.feed(created(1) + text_step(0, "Hello", n=2))
    tap.close(EndReason.UPSTREAM_RESET, http_complete=False)
    assert [e.event_id for e in tap.ledger()] == ["e1", None, "e2", None]
    asked = resumption("GET", f"/v1beta/interactions/{ID}?stream=true&last_event_id=e2", {})
    assert asked is not None and (asked.cursor, asked.response_id) == ("e2", ID)


def drill(rules: str, data: bytes) -> bytes:
    injector = Injector(parse_rules(rules), GI)
    steps = list(injector.feed(data)) + list(injector.finish())
    return b"".join(s.data for s in steps if isinstance(s, Write))


def test_drills() -> None:
    assert verdict_of(drill("drop-terminal", run("completed")), GI).state is State.INTERRUPTED
    assert verdict_of(drill("inject-error=2", run("completed")), GI).state is State.FAILED


def test_a_client_leaving_a_running_interaction_interrupts_it_but_cancels_nothing() -> None:
    """The interaction goes on without its client (it resumes with `last_event_id`)."""
    v = verdict_of(created(), GI, EndReason.CLIENT_DISCONNECTED, http_complete=None)
    cancels = spec_for(GI).disconnect_cancels
    assert with_transport(v, 200, EndReason.CLIENT_DISCONNECTED, cancels).state is State.INTERRUPTED
