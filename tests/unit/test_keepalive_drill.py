"""The keepalive-stall drill, byte by byte: N events, then the dialect's keep-alive only."""

from __future__ import annotations

import pytest

from sseproxy.core import Dialect, StreamTap
from sseproxy.core.inject import (
    KEEPALIVE_INTERVAL_MS,
    InjectionError,
    Injector,
    KeepAlive,
    Write,
    parse_rules,
)
from tests import corpus
from tests.streams import chat_chunk as chat
from tests.streams import ndjson, sse

CHAT_EVENTS = [
    sse(chat("one")),
    sse(chat(" two")),
    sse(chat(" three")),
    sse(chat(finish="stop")),
    b"data: [DONE]\n\n",
]
CHAT = b"".join(CHAT_EVENTS)
ANTHROPIC = corpus.file("anthropic-messages/text-basic-pings.sse")
PING = b'event: ping\ndata: {"type": "ping"}\n\n'


def run(
    rules: str, data: bytes, dialect: Dialect | None, chunk: int = 5, ndjson: bool = False
) -> list[object]:
    injector = Injector(parse_rules(rules), dialect, ndjson=ndjson)
    steps: list[object] = []
    for i in range(0, len(data), chunk):
        steps += injector.feed(data[i : i + chunk])
    steps += injector.finish()
    return steps


def written(steps: list[object]) -> bytes:
    return b"".join(s.data for s in steps if isinstance(s, Write))


def test_after_n_events_only_sse_keep_alive_comments_follow() -> None:
    steps = run("keepalive-stall=2", CHAT, Dialect.OPENAI_CHAT)
    assert written(steps) == CHAT_EVENTS[0] + CHAT_EVENTS[1]
    assert steps[-1] == KeepAlive(b": keep-alive\n\n", 1000)
    assert KEEPALIVE_INTERVAL_MS == 1000
    assert sum(isinstance(s, KeepAlive) for s in steps) == 1


def test_anthropic_gets_its_own_ping_event_even_when_sniffed() -> None:
    for dialect in (Dialect.ANTHROPIC_MESSAGES, None):
        steps = run("keepalive-stall=3", ANTHROPIC, dialect)
        events = ANTHROPIC.split(b"\n\n")
        assert written(steps) == b"\n\n".join(events[:3]) + b"\n\n"
        assert steps[-1] == KeepAlive(PING, 1000)


def test_ndjson_gets_blank_lines() -> None:
    body = ndjson({"message": {"content": "a"}}, {"message": {"content": "b"}}, {"done": True})
    steps = run("keepalive-stall=1", body, Dialect.OLLAMA, ndjson=True)
    assert written(steps) == body.split(b"\n")[0] + b"\n"
    assert steps[-1] == KeepAlive(b"\n", 1000)


def test_zero_events_means_keep_alives_from_the_start() -> None:
    steps = run("keepalive-stall=0", CHAT, Dialect.OPENAI_CHAT)
    assert steps == [KeepAlive(b": keep-alive\n\n", 1000)]


def test_crlf_applies_to_the_keep_alives_too() -> None:
    steps = run("crlf,keepalive-stall=1", CHAT, Dialect.OPENAI_CHAT)
    assert written(steps) == CHAT_EVENTS[0].replace(b"\n", b"\r\n")
    assert steps[-1] == KeepAlive(b": keep-alive\r\n\r\n", 1000)


def test_rechunk_cuts_the_events_but_each_keep_alive_is_one_write() -> None:
    steps = run("rechunk=3,keepalive-stall=1", CHAT, Dialect.OPENAI_CHAT)
    writes = [s for s in steps if isinstance(s, Write)]
    assert all(len(w.data) <= 3 for w in writes)
    assert written(steps) == CHAT_EVENTS[0]
    assert steps[-1] == KeepAlive(b": keep-alive\n\n", 1000)


def test_a_stream_shorter_than_n_ends_as_it_was() -> None:
    steps = run("keepalive-stall=9", CHAT, Dialect.OPENAI_CHAT)
    assert written(steps) == CHAT
    assert not any(isinstance(s, KeepAlive) for s in steps)


def test_nothing_follows_the_keep_alive_step() -> None:
    injector = Injector(parse_rules("keepalive-stall=1"), Dialect.OPENAI_CHAT)
    assert injector.feed(CHAT)[-1] == KeepAlive(b": keep-alive\n\n", 1000)
    assert injector.done
    assert injector.feed(CHAT) == []
    assert injector.finish() == []


def test_the_rule_needs_a_number() -> None:
    with pytest.raises(InjectionError):
        parse_rules("keepalive-stall")
    with pytest.raises(InjectionError):
        parse_rules("keepalive-stall=-1")
    assert str(parse_rules("keepalive-stall=4")[0]) == "keepalive-stall=4"


@pytest.mark.parametrize(
    ("dialect", "data", "events"),
    [(Dialect.OPENAI_CHAT, CHAT, 2), (Dialect.ANTHROPIC_MESSAGES, ANTHROPIC, 3)],
)
def test_what_the_tap_makes_of_the_stall(dialect: Dialect, data: bytes, events: int) -> None:
    steps = run(f"keepalive-stall={events}", data, dialect)
    keep = steps[-1]
    assert isinstance(keep, KeepAlive)
    tap = StreamTap(dialect)
    deltas = tap.feed(written(steps))
    for _ in range(5):
        assert tap.feed(keep.data) == 0  # liveness, never content
    verdict = tap.close()
    assert verdict.state == "interrupted"
    assert tap.assembler is not None
    assert tap.assembler.content_deltas == deltas
    if dialect is Dialect.OPENAI_CHAT:
        assert (verdict.comments, verdict.events) == (5, 2)
    else:
        assert (verdict.comments, verdict.events) == (0, 3 + 5)
