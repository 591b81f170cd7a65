"""`TapObserver`: what a tap shows its observer, and what the hook costs. A chunk observer
keeps the fast paths (the proxy's own tap with the inspector watching); an item observer sees
every item with the anomalies counted while taking it, and the fast paths are off for it. The
guard of the fast path turns a bug into `core_error`, never an exception to the feeder."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from sseproxy.core import Dialect, EndReason, ItemKind, StreamTap, TapItem, TapOptions
from sseproxy.core.dialects.openai_chat import OpenAIChatAssembler
from tests.corpus import file

CHAT = file("openai-chat/basic-text-no-usage.sse")  # recorded from api.openai.com
BLOCKS = [b + b"\n\n" for b in CHAT.split(b"\n\n") if b]


@dataclass
class Watcher:
    watching: bool = True
    chunks: list[bytes] = field(default_factory=list)
    items: list[TapItem] = field(default_factory=list)

    def on_chunk(self, chunk: bytes) -> None:
        self.chunks.append(chunk)

    def on_item(self, item: TapItem) -> None:
        self.items.append(item)


def counting_take_block(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    taken = [0]
    original = OpenAIChatAssembler.take_block

    def take_block(self, buf, start, stop):
        taken[0] += 1
        return original(self, buf, start, stop)

    monkeypatch.setattr(OpenAIChatAssembler, "take_block", take_block)
    return taken


def test_a_chunk_observer_sees_every_chunk_and_keeps_the_fast_path(monkeypatch) -> None:
    taken = counting_take_block(monkeypatch)
    tap, watcher = StreamTap(Dialect.OPENAI_CHAT), Watcher(watching=False)
    tap.observe(watcher)
    for block in BLOCKS:
        tap.feed(block)
    assert watcher.chunks == BLOCKS
    assert watcher.items == []
    assert taken[0] >= len(BLOCKS) - 2  # the fast path took the blocks after the first
    verdict = tap.close()
    assert (verdict.state, verdict.events) == ("completed", len(BLOCKS))


def test_observe_none_stops_the_chunks() -> None:
    tap, watcher = StreamTap(Dialect.OPENAI_CHAT), Watcher()
    tap.observe(watcher)
    tap.feed(BLOCKS[0])
    tap.observe(None)
    tap.feed(BLOCKS[1])
    assert watcher.chunks == [BLOCKS[0]]


def test_an_item_observer_sees_every_event_without_the_fast_path(monkeypatch) -> None:
    taken = counting_take_block(monkeypatch)
    tap, watcher = StreamTap(Dialect.OPENAI_CHAT), Watcher()
    tap.observe(watcher, items=True)
    for block in BLOCKS:
        tap.feed(block)
    verdict = tap.close()
    assert taken[0] == 0
    assert [i.kind for i in watcher.items] == [ItemKind.EVENT] * len(BLOCKS)
    assert [i.value.offset for i in watcher.items] == [
        sum(map(len, BLOCKS[:n])) for n in range(len(BLOCKS))
    ]
    plain = StreamTap(Dialect.OPENAI_CHAT)
    plain.feed(CHAT)
    assert verdict == plain.close()  # watching changes nothing in the verdict


def test_an_item_carries_the_anomalies_counted_while_taking_it() -> None:
    bad = b'data: {"choices":[{"index":0,"delta":{"content":"x"\n\n'  # JSON cut short
    tap, watcher = StreamTap(Dialect.OPENAI_CHAT), Watcher()
    tap.observe(watcher, items=True)
    tap.feed(BLOCKS[1] + bad + b": keep-alive\n\n" + BLOCKS[-1])
    tap.close()
    kinds = [(i.kind, i.anomalies) for i in watcher.items]
    assert kinds[0] == (ItemKind.EVENT, ())
    assert kinds[1][0] is ItemKind.EVENT and "json_decode_error" in kinds[1][1]
    assert kinds[2] == (ItemKind.COMMENT, ())


def test_not_watching_items_come_without_anomalies() -> None:
    bad = b'data: {"choices":[{"index":0,"delta":{"content":"x"\n\n'
    tap, watcher = StreamTap(Dialect.OPENAI_CHAT), Watcher(watching=False)
    tap.observe(watcher, items=True)
    tap.feed(bad)
    assert [i.anomalies for i in watcher.items] == [()]


def test_lines_messages_and_bodies_are_items_too() -> None:
    body = b'{"error":{"message":"bad key","type":"invalid_request_error"}}'
    tap, watcher = StreamTap(content_type="application/json"), Watcher()
    tap.observe(watcher, items=True)
    tap.feed(body)
    tap.close()
    [item] = watcher.items
    assert item.kind is ItemKind.BODY and item.value["error"]["message"] == "bad key"
    # Ollama's /api/chat NDJSON (docs.ollama.com/api): one JSON object per line
    lines = b'{"model":"m","message":{"role":"assistant","content":"Hi"},"done":false}\n'
    tap, watcher = StreamTap(content_type="application/x-ndjson"), Watcher()
    tap.observe(watcher, items=True)
    tap.feed(lines)
    tap.close()
    assert [i.kind for i in watcher.items] == [ItemKind.LINE]


def broken(self, *args):  # a stand-in for a bug in the assembler
    raise KeyError("bug")


def test_a_bug_on_the_fast_path_is_core_error_not_an_exception(monkeypatch) -> None:
    monkeypatch.setattr(OpenAIChatAssembler, "take_block", broken)
    tap = StreamTap(Dialect.OPENAI_CHAT)
    tap.feed(BLOCKS[0])  # through the decoder; the tap then settles on the fast path
    assert "core_error" not in tap.anomalies
    for block in BLOCKS[1:]:
        assert tap.feed(block) == 0
    verdict = tap.close(EndReason.END_OF_INPUT)
    assert verdict.anomalies["core_error"] == 1
    assert verdict.state == "unconfirmed"
    assert verdict.bytes == len(CHAT)


def test_strict_lets_the_fast_path_bug_surface(monkeypatch) -> None:
    monkeypatch.setattr(OpenAIChatAssembler, "take_block", broken)
    tap = StreamTap(Dialect.OPENAI_CHAT, options=TapOptions(strict=True))
    tap.feed(BLOCKS[0])
    with pytest.raises(KeyError):
        tap.feed(BLOCKS[1])
