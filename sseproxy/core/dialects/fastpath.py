"""Plain Chat deltas without a full JSON parse.

In a long answer almost every event is the same small object in which only the text (and
OpenAI's random `obfuscation` padding) changes. Parsing all of it costs more than the rest of
the analysis together. So once the full parser has seen an object that is a plain text delta,
its bytes around those two string values (its `Shape`) are remembered; a later event with the
same bytes there is the same object with another text, and only that text is decoded. With
the `data: ` line and the blank line around it, the shape also recognises a chunk that is
exactly that event's block, so the tap needs no framing for it. Any difference sends the
event to the full parser: the fast path can only agree with it (the tests run the corpus and
generated streams both ways). For that, the cut keys occur once (the parser keeps the last of
repeated keys), the bytes around the cuts hold no backslash (no key spelled with an escape)
and a cut value is a valid JSON string.

Anthropic and Responses deltas are small enough that orjson parses them faster than a shape
is matched in Python; their fast paths only skip the framing (see their `take_block`).
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Any

from sseproxy.core.jsonvalue import loads

_CONTROL = re.compile("[\x00-\x1f]")  # JSON forbids them raw in a string
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


# -- the shape of a delta: literal bytes around its string holes -----------------------------

TEXT = 0  # the delta's text: decoded and returned
PAD = 1  # a string nothing reads (OpenAI's `obfuscation`): only checked to be a valid string
# What a hole's pattern takes: the usual strings, needing no check beyond UTF-8 (text) or none
# (OpenAI's padding is letters and digits).
_HOLE_RE = {TEXT: rb'([^"\\\x00-\x1f]*)', PAD: rb"[A-Za-z0-9]*"}
# A run of blocks (a bulk read) is matched and its texts found in two C calls; there a text
# also takes JSON's short escapes (a newline in an answer is `\n`), decoded once for the run.
# Not `\u`: a surrogate pair split between two deltas must not join where one by one they fail.
_RUN_HOLE_RE = {TEXT: rb'([^"\\\x00-\x1f]*(?:\\["\\/bfnrt][^"\\\x00-\x1f]*)*)', PAD: _HOLE_RE[PAD]}
# Shapes are learnt from events up to this size; real deltas are a few hundred bytes.
SHAPE_MAX_BYTES = 4096


class Shape:
    """A delta event that was parsed and verified, as literal bytes around string holes.

    A later event that matches it byte for byte outside the holes, with a valid JSON string
    in each, is the same object with other strings there: only its text is decoded. The
    checks are C-level compares and searches; nothing else is parsed.

    `match` takes an event's data; `match_block` a piece of a chunk that must be exactly the
    SSE block `data: ` + data + blank line (`event: NAME` first for a named event), which
    proves it is one event: the literals hold no line end and the holes no control character.
    """

    __slots__ = (
        "block_head",
        "block_re",
        "block_tail",
        "data_re",
        "has_text",
        "head",
        "holes",
        "last",
        "run_res",
        "tail",
    )

    def __init__(
        self,
        prefix: bytes,
        head: bytes,
        holes: tuple[tuple[int, bytes], ...],
        last: int,
        tail: bytes,
    ) -> None:
        self.head = head  # the data up to the first hole
        self.block_head = prefix + head
        self.holes = holes  # (kind, the literal after it) for every hole but the last
        self.last = last  # the kind of the last hole
        self.tail = tail  # from the closing quote of the last hole to the end
        self.block_tail = tail + b"\n\n"
        kinds = [kind for kind, _ in holes] + [last]
        self.has_text = TEXT in kinds
        assert kinds.count(TEXT) <= 1, "one text per delta: the pattern's group is its text"
        # Compiled when first needed: a stream matches either events or blocks.
        self.data_re: re.Pattern[bytes] | None = None
        self.block_re: re.Pattern[bytes] | None = None
        self.run_res: tuple[re.Pattern[bytes], re.Pattern[bytes]] | None = None

    def _pattern(self, block: bool) -> re.Pattern[bytes]:
        """The usual event in one C call: the literals around holes that hold no quote, no
        backslash and no control byte (`_scan` takes the rest, escapes and all)."""
        holes = b"".join(
            _HOLE_RE[kind] + re.escape(literal) for kind, literal in (*self.holes, (self.last, b""))
        )
        if block:
            pattern = self.block_re = re.compile(
                re.escape(self.block_head) + holes + re.escape(self.block_tail)
            )
        else:
            pattern = self.data_re = re.compile(re.escape(self.head) + holes + re.escape(self.tail))
        return pattern

    @classmethod
    def learn(cls, name: str, data: bytes, holes: list[tuple[bytes, int, str]]) -> Shape | None:
        """The shape of `data`, the bytes of a parsed and verified delta of type `name`, with
        a hole at the string value of each (key, kind, the value the parser read there).

        Each hole's key must occur once in `data` (so its value is the one the parser read:
        the parser keeps the last of repeated keys) and the literals hold no backslash (no key
        spelled with an escape), no line end, and only valid UTF-8.
        """
        if len(data) > SHAPE_MAX_BYTES or not holes:
            return None
        spans: list[tuple[int, int, int]] = []
        for key, kind, expected in holes:
            if data.count(key) != 1:
                return None
            at = _skip_space(data, data.index(key) + len(key))
            if data[at : at + 1] != b":":
                return None
            first = _skip_space(data, at + 1)
            if data[first : first + 1] != b'"':
                return None
            end = string_end(data, first + 1)
            if end < 0 or decode_string(data[first + 1 : end]) != expected:
                return None
            spans.append((first + 1, end, kind))
        spans.sort()
        literals = [data[: spans[0][0]]]
        literals += [data[end:first] for (_, end, _), (first, _, _) in pairwise(spans)]
        literals.append(data[spans[-1][1] :])
        for literal in literals:
            if b"\\" in literal or b"\n" in literal or b"\r" in literal:
                return None
        try:
            data.decode()
        except UnicodeDecodeError:
            return None
        prefix = b"data: " if name == "message" else b"event: " + name.encode() + b"\ndata: "
        kinds = [kind for _, _, kind in spans]
        holes_after = tuple(zip(kinds[:-1], literals[1:-1], strict=True))
        shape = cls(prefix, literals[0], holes_after, kinds[-1], literals[-1])
        return shape if shape.match(data) is not None else None

    def block_pattern(self) -> re.Pattern[bytes]:
        """The usual block of this shape (group 1: its text, if it has one) in one C call;
        what it refuses may still be one (`match_block` scans escapes)."""
        return self.block_re or self._pattern(True)

    def run_patterns(self) -> tuple[re.Pattern[bytes], re.Pattern[bytes]]:
        """(one or more usual blocks in a row, one usual block with its text as group 1), the
        text's short escapes included (`_RUN_HOLE_RE`): for `findall` over a run."""
        if self.run_res is None:
            holes = b"".join(
                _RUN_HOLE_RE[kind] + re.escape(literal)
                for kind, literal in (*self.holes, (self.last, b""))
            )
            one = re.escape(self.block_head) + holes + re.escape(self.block_tail)
            self.run_res = (re.compile(b"(?:" + one + b")+"), re.compile(one))
        return self.run_res

    def match(self, data: bytes) -> str | None:
        """The text of an event's data of this shape, else None."""
        return self.match_block(data, 0, len(data), False)

    def match_block(self, buf: bytes, start: int, stop: int, block: bool = True) -> str | None:
        """The text of `buf[start:stop]` if it is exactly this shape's SSE block (with
        `block`; else its data), else None. This runs per event."""
        pattern = self.block_re if block else self.data_re
        found = (pattern or self._pattern(block)).fullmatch(buf, start, stop)
        if found is None:
            head, tail = (self.block_head, self.block_tail) if block else (self.head, self.tail)
            if buf.find(b"\n", start + len(head), stop - len(tail)) >= 0:
                return None  # several blocks in one, or a raw line end in a string: refused
            return self._scan(buf, start, stop, block)
        if not self.has_text:
            return ""
        try:
            return found.group(1).decode()
        except UnicodeDecodeError:
            return None

    def _scan(self, buf: bytes, start: int, stop: int, block: bool) -> str | None:
        """`match_block` for what its pattern leaves: strings with escapes (or quotes,
        backslashes, control bytes where they must be refused), and no match at all."""
        if block:
            head, tail = self.block_head, self.block_tail
        else:
            head, tail = self.head, self.tail
        if not buf.startswith(head, start) or not buf.endswith(tail, start, stop):
            return None
        pos = start + len(head)
        text = ""
        for kind, literal in self.holes:
            end = buf.find(b'"', pos)
            if end < 0:
                return None
            if buf[end - 1] == 92:  # an escaped quote, or an escaped backslash
                end = string_end(buf, pos)
            if end < 0 or not buf.startswith(literal, end):
                return None
            body = buf[pos:end]
            if kind == PAD:
                if not body.isalnum() and decode_string(body) is None:
                    return None
            elif b"\\" in body:
                value = decode_string(body)
                if value is None:
                    return None
                text = value
            else:
                try:
                    text = body.decode()
                except UnicodeDecodeError:
                    return None
                if not text.isprintable() and _CONTROL.search(text):
                    return None  # JSON forbids them raw in a string
            pos = end + len(literal)
        end = stop - len(tail)  # the last hole ends where the tail starts
        if end < pos:
            return None
        body = buf[pos:end]
        if self.last == PAD:
            if body.isalnum():
                return text
        elif b'"' not in body and b"\\" not in body:
            try:
                value = body.decode()
            except UnicodeDecodeError:
                return None
            return value if value.isprintable() or not _CONTROL.search(value) else None
        if b'"' in body and string_end(buf, pos) != end:
            return None  # the string closes before: the tail only looks alike
        value = decode_string(body)
        if value is None:
            return None
        return value if self.last == TEXT else text


def _skip_space(data: bytes, at: int) -> int:
    while data[at : at + 1] in (b" ", b"\t"):
        at += 1
    return at
