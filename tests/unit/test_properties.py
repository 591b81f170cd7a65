"""Properties of the core: chunking never matters, nothing raises, memory stays bounded."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from sseproxy.core import Dialect, SSEDecoder, StreamTap, TapOptions
from tests.corpus import body, manifest
from tests.streams import cut

CORPUS = [body(e) for e in manifest()]
DIALECTS = [None, *Dialect]


def frames(chunks: list[bytes], cap: int = 1 << 24) -> tuple[list[tuple], int, str]:
    d = SSEDecoder(max_event_bytes=cap)
    out = [tuple(f) for c in chunks for f in d.feed(c)]
    out += [tuple(f) for f in d.finish()]
    return out, d.partial_bytes, d.last_event_id


def verdict(chunks: list[bytes], dialect: Dialect | None):
    tap = StreamTap(dialect, options=TapOptions(strict=True))
    for c in chunks:
        tap.feed(c)
    return tap.close()


sse_bytes = st.lists(
    st.sampled_from(
        [
            b"data: ",
            b"data:",
            b"event: x\n",
            b"id: 7\n",
            b"retry: 10\n",
            b": c\n",
            b"\n",
            b"\r",
            b"\r\n",
            b"\xef\xbb\xbf",
            b"\xe2\x82\xac",
            b"\xe2",
            b"\xff",
            b"[DONE]",
            b'{"a":1}',
            b"x",
        ]
    ),
    max_size=60,
).map(b"".join)


@given(sse_bytes, st.lists(st.integers(min_value=0), max_size=12))
@example(b"data: a\r\ndata: b\r\n\r\n", [8])
@example(b"\xef\xbb\xbfdata: \xe2\x82\xac\n\n", [1, 2, 10])
def test_framing_is_chunking_independent(data: bytes, points: list[int]) -> None:
    assert frames(cut(data, points)) == frames([data])


@given(st.binary(max_size=400), st.lists(st.integers(min_value=0), max_size=8))
def test_arbitrary_bytes_never_raise_and_chunking_does_not_matter(
    data: bytes, points: list[int]
) -> None:
    for dialect in DIALECTS:
        assert verdict(cut(data, points), dialect) == verdict([data], dialect)


@given(
    st.sampled_from(range(len(CORPUS))),
    st.lists(st.integers(min_value=0), min_size=1, max_size=20),
)
def test_corpus_verdicts_are_chunking_independent(index: int, points: list[int]) -> None:
    data = CORPUS[index]
    assert verdict(cut(data, points), None) == verdict([data], None)


@given(
    st.sampled_from(range(len(CORPUS))),
    st.lists(st.tuples(st.integers(min_value=0), st.binary(max_size=8)), min_size=1, max_size=6),
)
def test_mutated_corpus_never_raises(index: int, edits: list[tuple[int, bytes]]) -> None:
    data = bytearray(CORPUS[index])
    for pos, replacement in edits:
        pos %= len(data) + 1
        data[pos : pos + len(replacement)] = replacement
    for dialect in (None, Dialect.OPENAI_CHAT, Dialect.ANTHROPIC_MESSAGES, Dialect.GEMINI):
        verdict([bytes(data)], dialect)


field_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=20
)
event_strategy = st.tuples(
    st.one_of(st.none(), field_text.filter(lambda s: s and not s.startswith(" "))),
    st.lists(field_text, min_size=1, max_size=3),
)


@given(
    st.lists(event_strategy, max_size=8),
    st.sampled_from([b"\n", b"\r", b"\r\n"]),
    st.booleans(),
    st.booleans(),
    st.lists(st.integers(min_value=0), max_size=6),
)
def test_generated_events_round_trip(events, eol, bom, comments, points) -> None:
    out = bytearray(b"\xef\xbb\xbf" if bom else b"")
    for etype, lines in events:
        if comments:
            out += b": keep-alive" + eol
        if etype is not None:
            out += b"event: " + etype.encode() + eol
        for line in lines:
            out += b"data: " + line.encode() + eol
        out += eol
    got, partial, _ = frames(cut(bytes(out), points))
    decoded = [(f[0], f[1]) for f in got if len(f) == 5]  # events, not comments
    assert decoded == [(etype or "message", "\n".join(lines)) for etype, lines in events]
    assert partial == 0


@given(
    st.lists(st.binary(min_size=1, max_size=300), max_size=40),
    st.integers(min_value=16, max_value=512),
)
def test_retained_bytes_are_bounded(chunks: list[bytes], cap: int) -> None:
    d = SSEDecoder(max_event_bytes=cap)
    for c in chunks:
        d.feed(c)
        assert d.retained_bytes <= cap + len(c) + 3


@given(
    st.sampled_from(range(len(CORPUS))),
    st.lists(st.integers(min_value=0), max_size=10),
)
def test_chat_fast_path_agrees_with_full_parse(index: int, points: list[int]) -> None:
    from sseproxy.core.dialects.openai_chat import OpenAIChatAssembler

    data = CORPUS[index]
    fast = verdict(cut(data, points), Dialect.OPENAI_CHAT)
    OpenAIChatAssembler.fast_path = False
    try:
        full = verdict(cut(data, points), Dialect.OPENAI_CHAT)
    finally:
        OpenAIChatAssembler.fast_path = True
    assert fast == full


chat_text = st.text(max_size=12)


@given(st.lists(st.tuples(chat_text, st.booleans(), st.booleans()), min_size=1, max_size=12))
def test_chat_fast_path_on_generated_deltas(deltas: list[tuple[str, bool, bool]]) -> None:
    """Texts with quotes, backslashes and unicode; padding and spacing that vary per event."""
    import json

    from sseproxy.core.dialects.openai_chat import OpenAIChatAssembler

    lines = []
    for i, (text, spaced, padded) in enumerate(deltas):
        chunk = {
            "id": "c",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
        }
        if padded:
            chunk["obfuscation"] = "x" * i
        sep = (", ", ": ") if spaced else (",", ":")
        lines.append(b"data: " + json.dumps(chunk, separators=sep).encode() + b"\n\n")
    lines.append(
        b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    )
    data = b"".join(lines)
    fast_tap = StreamTap(Dialect.OPENAI_CHAT, options=TapOptions(strict=True))
    fast_tap.feed(data)
    fast = fast_tap.close()
    OpenAIChatAssembler.fast_path = False
    try:
        full_tap = StreamTap(Dialect.OPENAI_CHAT, options=TapOptions(strict=True))
        full_tap.feed(data)
        full = full_tap.close()
    finally:
        OpenAIChatAssembler.fast_path = True
    assert fast == full
    assert fast_tap.primary_text() == full_tap.primary_text() == "".join(t for t, _, _ in deltas)
