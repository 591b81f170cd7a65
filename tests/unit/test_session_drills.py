"""WebSocket drills (core/sessions/drills.py): what each rule makes of the upstream's messages."""

from __future__ import annotations

import json

import pytest

from sseproxy.core.inject import InjectionError, parse_rules
from sseproxy.core.sessions.base import SessionDialect
from sseproxy.core.sessions.drills import End, Send, SessionDrill


def steps(rules: str, dialect: SessionDialect, *messages: dict) -> list:
    drill = SessionDrill(parse_rules(rules), dialect)
    out = []
    for m in messages:
        raw = json.dumps(m).encode()
        out += drill.message(m, raw, True)
    return out


@pytest.mark.parametrize(
    ("dialect", "terminal"),
    [
        (SessionDialect.OPENAI_REALTIME, {"type": "response.done"}),
        (SessionDialect.OPENAI_RESPONSES, {"type": "response.completed"}),
        (SessionDialect.OPENAI_RESPONSES, {"type": "response.failed"}),
        (SessionDialect.GEMINI_LIVE, {"serverContent": {"turnComplete": True}}),
    ],
)
def test_drop_terminal_drops_only_the_turns_end(dialect: SessionDialect, terminal: dict) -> None:
    other = {"type": "response.output_text.delta", "delta": "x"}
    out = steps("drop-terminal", dialect, other, terminal, other)
    assert out == [Send(json.dumps(other).encode())] * 2


def test_gemini_live_errors_travel_in_the_close_frame() -> None:
    out = steps("inject-error=1", SessionDialect.GEMINI_LIVE, {"setupComplete": {}})
    assert out[-1] == End(1011, "Internal error encountered.")


def test_responses_error_carries_a_status() -> None:
    out = steps("inject-error=1", SessionDialect.OPENAI_RESPONSES, {"type": "response.created"})
    error = json.loads(out[-1].data)
    assert (error["type"], error["status"]) == ("error", 500)


def test_cut_after_counts_messages_sent_and_takes_the_close_code() -> None:
    m = {"type": "x"}
    assert steps("cut-after=2", SessionDialect.OPENAI_REALTIME, m, m)[-1] == End(None)
    assert steps("cut-after=1,close-code=1001", SessionDialect.OPENAI_REALTIME, m)[-1].code == 1001


def test_close_code_needs_its_number() -> None:
    with pytest.raises(InjectionError):
        parse_rules("close-code")


def test_http_only_rules_leave_a_session_alone() -> None:
    assert not SessionDrill(parse_rules("rechunk=1,crlf"), SessionDialect.OPENAI_REALTIME).active
