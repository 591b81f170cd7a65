"""Plain Chat deltas without a full JSON parse.

In a long answer almost every event is the same small object in which only the text (and
OpenAI's random `obfuscation` padding) changes. Parsing all of it costs more than the rest of
the analysis together. So once the full parser has seen an object that is a plain text delta,
its bytes with those two string values cut out (its *skeleton*) are remembered; a later event
with an identical skeleton is, byte for byte, the same object with another text, and only
that text is decoded. Any difference sends the event to the full parser: the fast path can
only agree with it (the tests run the corpus and generated streams both ways). For that, the
cut keys occur once (the parser keeps the last of repeated keys), the bytes around the cuts
hold no backslash (no key spelled with an escape) and a cut value is a valid JSON string.
"""

from __future__ import annotations

import re
from typing import Any

from .base import loads

_CONTROL = re.compile("[\x00-\x1f]")  # JSON forbids them raw in a string
_CONTENT_KEYS = (b'"content":"', b'"content": "')
_OBFUSCATION_KEYS = (b'"obfuscation":"', b'"obfuscation": "')
_PLAIN_CHOICE_KEYS = {"index", "delta", "logprobs", "finish_reason"}
_PLAIN_TOP_KEYS = {
    "id",
    "object",
    "created",
    "model",
    "system_fingerprint",
    "service_tier",
    "choices",
    "usage",
    "obfuscation",
    "provider",
}


def string_end(data: bytes, start: int) -> int:
    """Index of the quote closing the JSON string that starts at `start`, or -1."""
    end = start
    while True:
        end = data.find(b'"', end)
        if end < 0:
            return -1
        backslashes = 0
        while data[end - 1 - backslashes] == 92:  # a backslash
            backslashes += 1
        if backslashes % 2 == 0:
            return end
        end += 1


def _value_span(data: bytes, keys: tuple[bytes, bytes], start: int = 0) -> tuple[int, int]:
    """(first, end) of the string value of the first of `keys` found from `start`, or -1s."""
    for key in keys:
        at = data.find(key, start)
        if at >= 0:
            first = at + len(key)
            return first, string_end(data, first)
    return -1, -1


class PlainShape:
    """The bytes of a verified plain delta around its text (and around its padding value).

    `text(raw)` returns the text of an event that is the same object with other string
    values there, or None. It compares prefixes and suffixes: no search over the text.
    """

    __slots__ = ("head", "middle", "tail")

    def __init__(self, head: bytes, middle: bytes | None, tail: bytes) -> None:
        self.head = head  # everything up to the opening quote of the text
        self.middle = middle  # from the closing quote of the text to the padding value
        self.tail = tail  # from the closing quote of the last cut value to the end

    @classmethod
    def of(cls, raw: bytes) -> PlainShape | None:
        if raw.count(b'"content"') != 1 or raw.count(b'"obfuscation"') > 1:
            return None  # a repeated key: the parser keeps the last, the cut is the first
        first, end = _value_span(raw, _CONTENT_KEYS)
        if end < 0:
            return None
        pad_first, pad_end = _value_span(raw, _OBFUSCATION_KEYS, end)
        if pad_end < 0:
            shape = cls(raw[:first], None, raw[end:])
        else:
            shape = cls(raw[:first], raw[end:pad_first], raw[pad_end:])
        if b"\\" in shape.head or b"\\" in shape.tail or b"\\" in (shape.middle or b""):
            return None  # an escape could spell a key another way
        return shape

    def text(self, raw: bytes) -> str | None:
        if not raw.startswith(self.head) or not raw.endswith(self.tail):
            return None
        first = len(self.head)
        end = raw.find(b'"', first)
        if end > 0 and raw[end - 1] == 92:
            end = string_end(raw, first)
        if self.middle is None:
            if end != len(raw) - len(self.tail):
                return None
        else:
            pad = end + len(self.middle)
            pad_end = len(raw) - len(self.tail)
            if not raw.startswith(self.middle, end) or string_end(raw, pad) != pad_end:
                return None
            padding = raw[pad:pad_end]
            if not padding.isalnum() and decode_string(padding) is None:
                return None  # not a valid string: the full parser refuses the event
        return decode_string(raw[first:end])


def decode_string(text: bytes) -> str | None:
    """A JSON string body (without quotes) as text; None if invalid."""
    try:
        if b"\\" not in text:
            value = text.decode()
            return value if value.isprintable() or not _CONTROL.search(value) else None
        value = loads(b'"' + text + b'"')
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def is_plain_delta(obj: dict[str, Any]) -> bool:
    """True for a chunk whose only effect on the verdict is text for choice 0."""
    choices = obj.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return False
    choice = choices[0]
    delta = choice.get("delta")
    return (
        choice.get("index", 0) == 0
        and choice.get("finish_reason") is None
        and choice.get("logprobs") is None
        and isinstance(delta, dict)
        and isinstance(delta.get("content"), str)
        and set(delta) <= {"content", "role"}
        and set(choice) <= _PLAIN_CHOICE_KEYS
        and set(obj) <= _PLAIN_TOP_KEYS
        and obj.get("usage") is None
        and isinstance(obj.get("obfuscation", ""), str)
    )
