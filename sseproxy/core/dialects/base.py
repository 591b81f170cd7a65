"""What every dialect assembler shares: content tallies, tool-call buffers, JSON, errors.

An assembler is a small state machine fed complete frames. It never raises on input: an
event that does not fit becomes a counted anomaly. `conclude()` turns what it saw into an
`Outcome`; the tap adds framing facts and builds the `Verdict`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sseproxy.core.events import Line, SSEEvent
from sseproxy.core.jsonvalue import loads
from sseproxy.core.request import RequestFacts
from sseproxy.core.verdict import (
    Dialect,
    ErrorInfo,
    Fallback,
    FinishCategory,
    State,
    ToolCallSummary,
    Usage,
)

# Assembled text is kept only for tests, `replay --content` and the operator's optional content
# view; counting never needs it. 4 Mi code points covers any real answer while bounding memory.
DEFAULT_CONTENT_CHARS = 4 * 1024 * 1024
# Tool arguments must be kept whole to be validated as JSON when the call completes.
DEFAULT_TOOL_ARGUMENT_CHARS = 8 * 1024 * 1024
# An index a peer sends (content block, content part, output item, tool call, path element) is
# accepted in 0..MAX_INDEX-1; beyond is the `index_out_of_range` anomaly and that part is
# ignored. Real responses stay in the tens; the cap keeps a forged index from sizing anything.
MAX_INDEX = 1024
# Choices / candidates per response: OpenAI's `n` is at most 128 (Gemini's candidateCount 8).
# Each one is an entry of the record's finish reasons, so a forged index must not add more.
MAX_CHOICES = 128
# Tool calls kept per response (each is a summary in the record); beyond, calls are counted
# (`too_many_tool_calls`) but not kept. Real responses make a handful of parallel calls.
MAX_TOOL_CALLS = 1024


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the events decided. The tap then applies the transport: an outcome stands only if
    the body ended cleanly, the dialect's end marker arrived, or the client left after it."""

    state: State
    finish_reason: str | None = None
    finish_category: FinishCategory | None = None
    finish_reasons: tuple[str | None, ...] | None = None  # per choice, when more than one


@dataclass(frozen=True, slots=True)
class Assembly:
    """Everything an assembler concluded, as one value: the tap turns it into the verdict
    without reading the assembler's state."""

    dialect: Dialect
    outcome: Outcome
    terminal: bool  # the dialect's explicit end marker arrived
    error: ErrorInfo | None
    last_event: str | None
    text_chars: int
    reasoning_chars: int
    refusal_chars: int
    tool_calls: tuple[ToolCallSummary, ...]
    server_tool_calls: tuple[str, ...]
    usage: Usage | None
    response_id: str | None
    model: str | None
    anomalies: Counter[str]
    fallback: Fallback | None = None


class ContentStore:
    """Counts the code points of one kind of content, per part; keeps the text up to a cap.

    The proxy keeps no text unless asked to (`keep_content`): a long answer would otherwise
    cost memory per stream. Counts per part are always kept, for snapshot cross-checks.
    """

    __slots__ = ("cap", "chars", "dropped", "parts", "retained", "truncated")

    def __init__(self, cap: int = DEFAULT_CONTENT_CHARS) -> None:
        self.cap = cap
        self.chars = 0
        self.retained = 0
        self.truncated = False
        self.parts: dict[Hashable, list[str]] = {}
        self.dropped: dict[Hashable, int] = {}  # code points not kept, per part

    def add(self, key: Hashable, text: str) -> None:
        n = len(text)
        self.chars += n
        retained = self.retained + n
        if retained <= self.cap:
            self.retained = retained
            part = self.parts.get(key)
            if part is None:
                self.parts[key] = [text]
            else:
                part.append(text)
        else:
            self.truncated = True
            self.dropped[key] = self.dropped.get(key, 0) + n

    def text(self, key: Hashable) -> str:
        return "".join(self.parts.get(key, ()))

    def length(self, key: Hashable) -> int:
        """Code points the deltas of `key` said, kept or not."""
        return sum(map(len, self.parts.get(key, ()))) + self.dropped.get(key, 0)

    def matches(self, key: Hashable, snapshot: str) -> bool:
        """Does a snapshot equal what the deltas of `key` said (by length if not kept)?"""
        if self.truncated:
            return len(snapshot) == self.length(key)
        return snapshot == self.text(key)

    def group_text(self, group: Hashable) -> str:
        """Concatenation of every part whose key is `(group, ...)`, in order of appearance."""
        return "".join(
            "".join(v) for k, v in self.parts.items() if isinstance(k, tuple) and k[0] == group
        )

    def all_text(self) -> str:
        return "".join("".join(v) for v in self.parts.values())


@dataclass(slots=True)
class ToolCallBuffer:
    """One tool call being streamed. Only `arguments` concatenates; id and name never do.

    `free_text`: the call's input is free text, not JSON (a Responses `custom_tool_call`, a
    Chat `custom` call: apply_patch, grammar-constrained tools), so it is never checked as JSON.
    Arguments are checked only once the call completed: a call cut before its end has no whole
    arguments to judge (the stream's state says it was cut)."""

    id: str | None = None
    name: str | None = None
    fragments: list[str] = field(default_factory=list)
    length: int = 0
    truncated: bool = False
    completed: bool = False
    empty_means_no_arguments: bool = False
    free_text: bool = False

    def append(self, text: str) -> None:
        if self.length + len(text) > DEFAULT_TOOL_ARGUMENT_CHARS:
            self.truncated = True
            return
        self.fragments.append(text)
        self.length += len(text)

    @property
    def arguments(self) -> str:
        return "".join(self.fragments)

    def valid_json(self) -> bool:
        if self.truncated:
            return False
        args = self.arguments
        if not args.strip():
            return self.empty_means_no_arguments and self.completed
        try:
            loads(args)
        except ValueError:
            return False
        return True

    def summary(self) -> ToolCallSummary:
        return ToolCallSummary(
            id=self.id,
            name=self.name,
            arguments_bytes=len(self.arguments.encode("utf-8", "replace")),
            arguments_valid_json=(
                None if self.free_text or not self.completed else self.valid_json()
            ),
        )


def dumps(value: Any) -> str:
    """Serialise arguments that arrived as an object (Gemini, Ollama) the way Python does."""
    return json.dumps(value, ensure_ascii=False)


def error_info(obj: Any) -> ErrorInfo:
    """Normalise the many shapes of provider errors: nested, flat, or a bare string."""
    inner = obj.get("error", obj) if isinstance(obj, dict) else obj
    if isinstance(inner, str):
        return ErrorInfo(type=None, code=None, message=inner)
    if not isinstance(inner, dict):
        return ErrorInfo(type=None, code=None, message=None)
    etype = inner.get("type")
    if not isinstance(etype, str) or etype == "error":
        status = inner.get("status")
        etype = status if isinstance(status, str) else None
    code = inner.get("code")
    code = str(code) if isinstance(code, str | int) and not isinstance(code, bool) else None
    message = inner.get("message")
    if not isinstance(message, str):
        message = None if message is None else str(message)
    return ErrorInfo(type=etype, code=code, message=message)


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def ident(value: Any) -> str | int | None:
    """A JSON value made safe to use as a key: ids and indexes are scalars, or else nothing."""
    if isinstance(value, str | int) and not isinstance(value, bool):
        return value
    return None


def dig(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


class Assembler:
    """Base class of the dialect assemblers (`on_event` / `on_line` / `on_body` / `conclude`)."""

    dialect: ClassVar[Dialect]

    def __init__(self) -> None:
        self.anomalies: Counter[str] = Counter()
        self.text = ContentStore()
        self.reasoning = ContentStore()
        self.refusal = ContentStore()
        self.tool_calls: dict[Hashable, ToolCallBuffer] = {}
        self.server_tool_calls: list[str] = []
        self.usage: Usage | None = None
        self.response_id: str | None = None
        self.model: str | None = None
        self.error: ErrorInfo | None = None
        self.last_event: str | None = None
        self.content_deltas = 0
        self.terminal = False

    def expect(self, request: RequestFacts) -> None:
        """What the request asked for, when the dialect's end depends on it (MCP's id)."""

    # -- input: the tap calls exactly one of these kinds ------------------------------------

    def on_event(self, event: SSEEvent) -> None:
        self.last_event = event.type if event.type != "message" else "chunk"
        self.anomalies["unexpected_framing"] += 1

    def take_block(self, buf: bytes, start: int, stop: int) -> bool:
        """Take `buf[start:stop]`, which starts at a block boundary and is within
        `max_event_bytes`, if it is exactly the block of one of this dialect's usual deltas
        (its blank line included), as `on_event` would take its event; else False, changing
        nothing (the decoder then takes it). The tap's shortcut for nearly every chunk."""
        return False

    def take_blocks(self, buf: bytes, pos: int, cap: int) -> tuple[int, int]:
        """`take_block` on each block of `buf` from `pos` (a block boundary) on, while they
        are taken: (where the first block not taken starts, how many were taken). A dialect
        may take a run of blocks at once, as these calls would one by one."""
        taken = 0
        end = buf.find(b"\n\n", pos) + 2
        while 2 <= end - pos <= cap and self.take_block(buf, pos, end):
            taken += 1
            pos = end
            end = buf.find(b"\n\n", pos) + 2
        return pos, taken

    def on_line(self, line: Line) -> None:
        self.last_event = "chunk"
        self.anomalies["unexpected_framing"] += 1

    def on_text(self, text: str) -> None:
        """Decoded text of a body that is neither SSE nor JSON (`text/plain` streams)."""
        self.last_event = None
        self.anomalies["unexpected_framing"] += 1

    def on_body(self, body: Any) -> None:
        """A whole JSON body (a non-streamed response, or an error body)."""
        if isinstance(body, dict) and (body.get("error") or body.get("type") == "error"):
            self.error = error_info(body)

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        """The outcome the events decided, once the bytes ended.

        `partial`: an unterminated block was discarded. `body_complete`: the HTTP body ended by
        its own framing. When it did not, return the outcome the events had already decided
        (the tap keeps it for a client that left after it; a cut body is `interrupted`, the
        outcome kept as its finish reason) and count no anomaly that assumes a whole body.
        """
        if self.error is not None:
            return Outcome(State.FAILED, None, FinishCategory.ERROR)
        # No dialect semantics: nothing can confirm the stream was whole.
        if body_complete:
            self.anomalies["no_terminal_signal"] += 1
        return Outcome(State.INTERRUPTED if partial else State.UNCONFIRMED)

    def in_band_error(self, obj: dict[str, Any]) -> bool:
        """An event that is only an error object (`{"error": {...}}`, as relays such as
        LiteLLM send on a failed stream, often on a non-2xx status) fills `error`."""
        error = obj.get("error")
        if isinstance(error, dict | str) and error and not isinstance(obj.get("type"), str):
            self.set_error(obj)
            return True
        return False

    def summarize(self, partial: bool, body_complete: bool) -> Assembly:
        """Conclude (see `conclude`) and hand over the result as one immutable value."""
        outcome = self.conclude(partial, body_complete)
        tool_calls = tuple(call.summary() for call in self.tool_calls.values())
        anomalies = Counter(self.anomalies)
        invalid = sum(1 for call in tool_calls if call.arguments_valid_json is False)
        if invalid:
            anomalies["invalid_tool_arguments"] += invalid
        return Assembly(
            dialect=self.dialect,
            outcome=outcome,
            terminal=self.terminal,
            error=self.error,
            last_event=self.last_event,
            text_chars=self.text.chars,
            reasoning_chars=self.reasoning.chars,
            refusal_chars=self.refusal.chars,
            tool_calls=tool_calls,
            server_tool_calls=tuple(self.server_tool_calls),
            usage=self.usage,
            response_id=self.response_id,
            model=self.model,
            anomalies=anomalies,
            fallback=self.fallback(),
        )

    def fallback(self) -> Fallback | None:
        """Another model took over the turn (only Anthropic says so today)."""
        return None

    # -- helpers for the dialects -----------------------------------------------------------

    def parse(self, data: str | bytes) -> Any:
        try:
            return loads(data)
        except ValueError:
            self.anomalies["json_decode_error"] += 1
            return None

    def add_text(self, key: Hashable, text: Any) -> None:
        if isinstance(text, str) and text:
            self.text.add(key, text)
            self.content_deltas += 1

    def add_reasoning(self, key: Hashable, text: Any) -> None:
        if isinstance(text, str) and text:
            self.reasoning.add(key, text)
            self.content_deltas += 1

    def add_refusal(self, key: Hashable, text: Any) -> None:
        if isinstance(text, str) and text:
            self.refusal.add(key, text)
            self.content_deltas += 1

    def tool_call(self, key: Hashable) -> ToolCallBuffer:
        call = self.tool_calls.get(key)
        if call is None:
            call = ToolCallBuffer()
            if len(self.tool_calls) < MAX_TOOL_CALLS:
                self.tool_calls[key] = call
            else:
                self.anomalies["too_many_tool_calls"] += 1  # a detached buffer: not kept
        return call

    def index(self, value: Any, default: int | None = None, cap: int = MAX_INDEX) -> int | None:
        """A peer's index if it is an integer in 0..cap-1; `default` if absent; else None and
        the `index_out_of_range` anomaly (the caller ignores that part)."""
        if value is None:
            return default
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < cap:
            return value
        self.anomalies["index_out_of_range"] += 1
        return None

    def set_call_identity(
        self, call: ToolCallBuffer, call_id: Any, name: Any, snapshot: bool = False
    ) -> None:
        """First non-empty id and name win; a conflict is counted, and so is a repeat in a
        delta (where repeating is a known relay bug) but not in a snapshot (where it is the
        point)."""
        if isinstance(call_id, str) and call_id:
            if call.id is None:
                if any(c.id == call_id for c in self.tool_calls.values() if c is not call):
                    self.anomalies["duplicate_tool_call_id"] += 1
                call.id = call_id
            elif call.id != call_id:
                self.anomalies["conflicting_tool_call_id"] += 1
            elif not snapshot:
                self.anomalies["repeated_tool_call_fields"] += 1
        if isinstance(name, str) and name:
            if call.name is None:
                call.name = name
            elif call.name != name:
                self.anomalies["conflicting_tool_call_name"] += 1
            elif not snapshot:
                self.anomalies["repeated_tool_call_fields"] += 1

    def add_arguments(self, call: ToolCallBuffer, text: Any) -> None:
        if isinstance(text, str) and text:
            if call.completed:
                self.anomalies["delta_after_done"] += 1
            call.append(text)
            self.content_deltas += 1

    def set_error(self, obj: Any) -> None:
        if self.error is None:
            self.error = error_info(obj)
        else:
            self.anomalies["repeated_error"] += 1
