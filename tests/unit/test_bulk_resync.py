"""Bulk reads end anywhere: after a chunk that ends inside a block, the tap lets the decoder
complete that block and takes the whole blocks after it on the block path again. Any cut of
the same bytes gives the result of the full parse, and the blocks after a cut are really taken
without events."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sseproxy.core import Dialect, StreamTap, TapOptions
from sseproxy.core.dialects.openai_chat import OpenAIChatAssembler
from tests.fast_paths import full_parse
from tests.unit.test_block_paths import CHAT_END, CHAT_VARIANTS, chat, observe

DELTAS = [chat(b"d%d" % i, pad=b"t%d" % (1000 + i)) for i in range(12)]


def cut(body: bytes, offsets: list[int]) -> list[bytes]:
    marks = sorted({0, len(body), *(o % (len(body) + 1) for o in offsets)})
    return [body[a:b] for a, b in pairwise(marks) if b > a]


@given(
    st.lists(st.sampled_from(list(CHAT_VARIANTS)), max_size=4),
    st.lists(st.integers(min_value=0, max_value=1 << 16), max_size=8),
)
def test_any_cut_of_a_bulk_stream_agrees_with_the_full_parse(
    names: list[str], offsets: list[int]
) -> None:
    body = b"".join([chat(), *DELTAS[:6], *(CHAT_VARIANTS[n] for n in names), *DELTAS[6:]])
    chunks = cut(body + CHAT_END, offsets)
    fast = observe(chunks, Dialect.OPENAI_CHAT, cap=256)
    with full_parse(Dialect.OPENAI_CHAT):
        assert observe(chunks, Dialect.OPENAI_CHAT, cap=256) == fast


def test_the_blocks_after_a_cut_inside_a_block_are_taken_without_events(monkeypatch) -> None:
    taken: list[bytes] = []
    original = OpenAIChatAssembler.take_blocks

    def spy(self: OpenAIChatAssembler, buf: bytes, pos: int, cap: int) -> tuple[int, int]:
        end, count = original(self, buf, pos, cap)
        taken.extend(buf[pos:end].split(b"\n\n")[:count])
        return end, count

    monkeypatch.setattr(OpenAIChatAssembler, "take_blocks", spy)
    tap = StreamTap(Dialect.OPENAI_CHAT, options=TapOptions(strict=True))
    tap.feed(chat())  # learns the shape
    first, rest = DELTAS[0], b"".join(DELTAS[1:])
    tap.feed(first[:10])  # a read that ends inside a block
    tap.feed(first[10:] + rest)  # its end, then eleven whole blocks
    assert [block + b"\n\n" for block in taken] == DELTAS[1:]
    tap.feed(CHAT_END)
    verdict: Any = tap.close()
    assert verdict.state == "completed" and tap.events == 1 + len(DELTAS) + 2
    assert tap.primary_text() == "hi" + "".join(f"d{i}" for i in range(12))


# A bulk read of plain deltas whose texts hold JSON's short escapes, as real answers do.
ESCAPED = [
    chat(t) for t in (b"line\\n", b'say \\"hi\\"', b"a\\\\b", b"", b"tab\\t/\\/", b"\xe6\xb5\x81")
]


def test_a_run_of_blocks_with_escapes_is_taken_without_block_by_block_calls(monkeypatch) -> None:
    calls: list[bytes] = []
    original = OpenAIChatAssembler.take_block

    def spy(self: OpenAIChatAssembler, buf: bytes, start: int, stop: int) -> bool:
        calls.append(buf[start:stop])
        return original(self, buf, start, stop)

    monkeypatch.setattr(OpenAIChatAssembler, "take_block", spy)
    tap = StreamTap(Dialect.OPENAI_CHAT, options=TapOptions(strict=True))
    tap.feed(chat() + chat())  # learns the shape from the second
    calls.clear()
    read = b"".join(ESCAPED) + b"".join(DELTAS)
    tap.feed(read)
    assert calls == [read]  # the tap's try of the read as one block; then one run, no block
    tap.feed(CHAT_END)
    verdict: Any = tap.close()
    assert verdict.state == "completed"
    expected = 'hihiline\nsay "hi"a\\btab\t//流' + "".join(f"d{i}" for i in range(12))
    assert tap.primary_text() == expected


@given(st.integers(min_value=0, max_value=40), st.lists(st.booleans(), max_size=20))
def test_a_content_cap_that_falls_within_a_run_keeps_what_the_full_parse_keeps(
    cap: int, joins: list[bool]
) -> None:
    """The texts a run adds are kept, or counted as dropped, as the deltas one by one would be:
    whatever the cap, the kept text and the counts agree with the full parse."""
    chunks = [chat(), chat(), *ESCAPED, *DELTAS, CHAT_END]
    grouped = [chunks[0]]
    for chunk, join in zip(chunks[1:], joins + [True] * len(chunks), strict=False):
        if join:
            grouped[-1] += chunk
        else:
            grouped.append(chunk)

    def run() -> tuple[Any, ...]:
        tap = StreamTap(Dialect.OPENAI_CHAT, options=TapOptions(strict=True, content_chars=cap))
        for chunk in grouped:
            tap.feed(chunk)
        verdict: Any = tap.close()
        text = tap.assembler.text  # type: ignore[union-attr]
        return verdict, tap.primary_text(), text.chars, text.retained, dict(text.dropped)

    fast = run()
    with full_parse(Dialect.OPENAI_CHAT):
        assert run() == fast
