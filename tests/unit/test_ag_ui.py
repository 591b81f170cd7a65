"""AG-UI 1.0 (issue 31, point 4): a run's outcome mapped to the record's, text and tool calls,
`: ping` keep-alives, detection by sniffing, drills.

Every event is written by the `ag-ui-protocol` package's own `EventEncoder` (1.0) from its
models (`ag_ui.core`), as an AG-UI server writes them.
"""

from __future__ import annotations

from typing import Any

import pytest

from sseproxy.core import Dialect, EndReason, FinishCategory, State
from sseproxy.core.inject import Injector, Write, parse_rules
from tests.streams import verdict_of

core = pytest.importorskip("ag_ui.core")
encoder = pytest.importorskip("ag_ui.encoder").EventEncoder()

AG = Dialect.AG_UI
PING = b": ping\n\n"  # what AG-UI servers send every 15 s while the agent works


def enc(*events: Any) -> bytes:
    return "".join(encoder.encode(e) for e in events).encode()


START = enc(core.RunStartedEvent(thread_id="t1", run_id="r1"))


def message(text: str) -> bytes:
    return enc(
        core.TextMessageStartEvent(message_id="m1", role="assistant"),
        *(core.TextMessageContentEvent(message_id="m1", delta=c) for c in text.split(" ")),
        core.TextMessageEndEvent(message_id="m1"),
    )


def finished(outcome: Any = None, **kw: Any) -> bytes:
    return enc(core.RunFinishedEvent(thread_id="t1", run_id="r1", outcome=outcome, **kw))


def test_a_finished_run_is_completed() -> None:
    usage = [core.TokenUsage(provider="openai", model="m", input_tokens=3, output_tokens=4)]
    v = verdict_of(START + message("Hi there") + PING + finished(usage=usage), AG)
    assert (v.state, v.finish_reason, v.finish_category) == (
        State.COMPLETED,
        "success",
        FinishCategory.STOP,
    )
    assert (v.text_chars, v.comments, v.anomalies) == (len("Hithere"), 1, {})
    assert v.usage is not None and (v.usage.input_tokens, v.usage.output_tokens) == (3, 4)


def test_a_run_error_is_failed() -> None:
    """Main read AG-UI as plain SSE: a failed run was `unconfirmed`."""
    error = enc(core.RunErrorEvent(message="model overloaded", code="overloaded"))
    v = verdict_of(START + message("Hi") + error, AG)
    assert v.state is State.FAILED
    assert v.error is not None and (v.error.code, v.error.message) == (
        "overloaded",
        "model overloaded",
    )


def test_an_interrupt_is_a_pause_and_cancelled_is_cancelled() -> None:
    interrupt = core.RunFinishedInterruptOutcome(
        interrupts=[core.Interrupt(id="i1", reason="approval")]
    )
    v = verdict_of(START + finished(interrupt), AG)
    assert (v.state, v.finish_reason, v.finish_category) == (
        State.INCOMPLETE,
        "interrupt",
        FinishCategory.PAUSE,
    )
    v = verdict_of(START + finished(core.RunFinishedCancelledOutcome()), AG)
    assert (v.state, v.finish_reason) == (State.CANCELLED, "cancelled")


def test_tool_calls_and_pending_tools() -> None:
    calls = enc(
        core.ToolCallStartEvent(tool_call_id="c1", tool_call_name="search"),
        core.ToolCallArgsEvent(tool_call_id="c1", delta='{"q":'),
        core.ToolCallArgsEvent(tool_call_id="c1", delta='"x"}'),
        core.ToolCallEndEvent(tool_call_id="c1"),
    )
    outcome = core.RunFinishedSuccessOutcome(pending_tool_call_ids=["c1"])
    v = verdict_of(START + calls + finished(outcome), AG)
    assert (v.state, v.finish_category) == (State.COMPLETED, FinishCategory.TOOL_USE)
    assert [(c.id, c.name, c.arguments_valid_json) for c in v.tool_calls] == [
        ("c1", "search", True)
    ]


def test_a_stream_ending_before_the_run_did_is_interrupted() -> None:
    v = verdict_of(START + message("Hi") + PING, AG)
    assert v.state is State.INTERRUPTED and v.anomalies.get("no_terminal_signal") == 1
    cut = verdict_of(START + message("Hi"), AG, EndReason.UPSTREAM_RESET, http_complete=False)
    assert cut.state is State.INTERRUPTED


def test_two_runs_in_one_stream_end_with_the_second() -> None:
    error = enc(core.RunErrorEvent(message="boom"))
    v = verdict_of(START + finished() + START + message("Hi"), AG)
    assert v.state is State.INTERRUPTED  # the second run never finished
    assert verdict_of(START + finished() + START + error, AG).state is State.FAILED


def test_sniffed_from_the_first_event() -> None:
    v = verdict_of(START + message("Hi") + finished())
    assert (v.dialect, v.state) == (AG, State.COMPLETED)


def test_state_messages_steps_raw_and_custom_are_known() -> None:
    quiet = enc(
        core.StateSnapshotEvent(snapshot={"a": 1}),
        core.StateDeltaEvent(delta=[{"op": "replace", "path": "/a", "value": 2}]),
        core.MessagesSnapshotEvent(messages=[]),
        core.StepStartedEvent(step_name="plan"),
        core.StepFinishedEvent(step_name="plan"),
        core.RawEvent(event={"x": 1}),
        core.CustomEvent(name="n", value=1),
    )
    v = verdict_of(START + quiet + finished(), AG)
    assert (v.state, v.anomalies) == (State.COMPLETED, {})


def drill(rules: str, data: bytes) -> bytes:
    injector = Injector(parse_rules(rules), AG)
    steps = list(injector.feed(data)) + list(injector.finish())
    return b"".join(s.data for s in steps if isinstance(s, Write))


def test_drills() -> None:
    whole = START + message("Hi") + finished()
    assert verdict_of(drill("drop-terminal", whole), AG).state is State.INTERRUPTED
    assert verdict_of(drill("inject-error=2", whole), AG).state is State.FAILED
