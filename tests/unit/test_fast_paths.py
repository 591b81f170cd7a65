"""The dialects' fast paths agree with the full parse: same verdict, same assembled content.

Each case runs a stream twice, fast path on and off, and also states what the right answer
is, so that a fast path that agrees with a broken full path still fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from sseproxy.core import Dialect, StreamTap, TapOptions, Verdict
from sseproxy.core.dialects.anthropic_messages import AnthropicMessagesAssembler
from sseproxy.core.dialects.openai_chat import OpenAIChatAssembler
from sseproxy.core.dialects.openai_responses import OpenAIResponsesAssembler
from tests.corpus import body, manifest

ASSEMBLERS: dict[Dialect, Any] = {
    Dialect.OPENAI_CHAT: OpenAIChatAssembler,
    Dialect.ANTHROPIC_MESSAGES: AnthropicMessagesAssembler,
    Dialect.OPENAI_RESPONSES: OpenAIResponsesAssembler,
}
CORPUS = {
    dialect: [body(e) for e in manifest() if e["dialect"] == dialect.value]
    for dialect in ASSEMBLERS
}


@contextmanager
def full_parse(dialect: Dialect) -> Iterator[None]:
    cls = ASSEMBLERS[dialect]
    cls.fast_path = False
    try:
        yield
    finally:
        cls.fast_path = True


def analyse(chunks: list[bytes], dialect: Dialect) -> tuple[Verdict, dict[str, Any]]:
    tap = StreamTap(dialect, options=TapOptions(strict=True))
    for chunk in chunks:
        tap.feed(chunk)
    return tap.close(), tap.describe()


def both_ways(chunks: list[bytes], dialect: Dialect) -> tuple[Verdict, dict[str, Any]]:
    """The result with the fast path on, after checking that it is the one without."""
    fast = analyse(chunks, dialect)
    with full_parse(dialect):
        full = analyse(chunks, dialect)
    assert fast == full
    return fast


def sse(*events: dict[str, Any] | str | bytes, event: str | None = None) -> bytes:
    out = b""
    for e in events:
        data = e if isinstance(e, bytes) else (e if isinstance(e, str) else json.dumps(e)).encode()
        out += (b"event: " + event.encode() + b"\n" if event else b"") + b"data: " + data + b"\n\n"
    return out


def cut(data: bytes, points: list[int]) -> list[bytes]:
    bounds = sorted({p % (len(data) + 1) for p in points})
    out, last = [], 0
    for b in bounds:
        out.append(data[last:b])
        last = b
    out.append(data[last:])
    return out


# -- Chat ---------------------------------------------------------------------------------------

CHAT_END = sse('{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}', "[DONE]")


def chat_delta(text: bytes, extra: bytes = b"") -> bytes:
    return sse(
        b'{"id":"c","choices":[{"index":0,"delta":{"content":"'
        + text
        + b'"'
        + extra
        + b'},"finish_reason":null}],"obfuscation":"Ab1"}'
    )


def chat_padded(text: bytes, pad: bytes) -> bytes:
    return sse(
        b'{"id":"c","choices":[{"index":0,"delta":{"content":"'
        + text
        + b'"},"finish_reason":null}],"obfuscation":"'
        + pad
        + b'"}'
    )


def test_chat_raw_control_character_is_refused_both_ways() -> None:
    """JSON forbids a raw tab in a string: the event is a decode error, not text."""
    verdict, content = both_ways(
        [chat_delta(b"a") + chat_delta(b"x\ty") + CHAT_END], Dialect.OPENAI_CHAT
    )
    assert content["text"] == "a"
    assert verdict.anomalies == {"json_decode_error": 1}


def test_chat_repeated_content_key_takes_the_last_both_ways() -> None:
    stream = chat_delta(b"a", b',"content":"b"') + chat_delta(b"x", b',"content":"b"') + CHAT_END
    _, content = both_ways([stream], Dialect.OPENAI_CHAT)
    assert content["text"] == "bb"


@pytest.mark.parametrize("pad", [b"x\x01y", b"\\q"])
def test_chat_invalid_padding_is_refused_both_ways(pad: bytes) -> None:
    stream = chat_padded(b"a", b"ok") + chat_padded(b"b", pad) + CHAT_END
    verdict, content = both_ways([stream], Dialect.OPENAI_CHAT)
    assert content["text"] == "a"
    assert verdict.anomalies == {"json_decode_error": 1}


def test_chat_escaped_key_is_not_a_shape() -> None:
    """`\\u0063ontent` is the key `content`: a second one, the last, is the one that counts."""
    stream = chat_delta(b"a", b',"\\u0063ontent":"b"') + chat_delta(b"x", b',"\\u0063ontent":"b"')
    _, content = both_ways([stream + CHAT_END], Dialect.OPENAI_CHAT)
    assert content["text"] == "bb"
