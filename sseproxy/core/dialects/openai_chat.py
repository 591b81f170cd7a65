"""OpenAI Chat Completions (and compatibles: Azure, DeepSeek, OpenRouter, Groq, vLLM, ...).

Terminal evidence is per choice: every choice must carry a `finish_reason`, then `[DONE]`.
`[DONE]` alone proves nothing (relays send it after an upstream failure: `unconfirmed`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from sseproxy.core.dialects.azure import filter_anomalies, is_annotation
from sseproxy.core.dialects.base import MAX_CHOICES, Assembler, Outcome, as_int, dig
from sseproxy.core.dialects.fastpath import PAD, TEXT, Shape, is_plain_delta
from sseproxy.core.dialects.spec import DialectSpec, Drills, done_marker, generic_error
from sseproxy.core.events import SSEEvent
from sseproxy.core.jsonvalue import loads
from sseproxy.core.verdict import Dialect, FinishCategory, State, Usage

NATURAL = {"stop": FinishCategory.STOP, "tool_calls": FinishCategory.TOOL_USE}
NATURAL["function_call"] = FinishCategory.TOOL_USE
FIRST_PART = (0, 0)  # choice 0, its only part: where a plain delta's text goes
CUT_SHORT = {"length": FinishCategory.LENGTH, "content_filter": FinishCategory.CONTENT_FILTER}


def _text(body: bytes) -> str:
    """A JSON string's body (valid where the run pattern matched it) as text; ValueError
    for invalid UTF-8."""
    return str(loads(b'"' + body + b'"')) if b"\\" in body else body.decode()


def chat_usage(raw: dict[str, Any]) -> Usage:
    return Usage(
        input_tokens=as_int(raw.get("prompt_tokens")),
        output_tokens=as_int(raw.get("completion_tokens")),
        total_tokens=as_int(raw.get("total_tokens")),
        reasoning_tokens=as_int(dig(raw, "completion_tokens_details", "reasoning_tokens")),
        cached_tokens=as_int(dig(raw, "prompt_tokens_details", "cached_tokens")),
        cache_write_tokens=as_int(dig(raw, "prompt_tokens_details", "cache_write_tokens")),
        raw=raw,
    )


class OpenAIChatAssembler(Assembler):
    dialect = Dialect.OPENAI_CHAT
    fast_path: ClassVar[bool] = True  # see fastpath.py; tests switch it off to compare

    def __init__(self) -> None:
        super().__init__()
        self.finish: dict[int, str | None] = {}  # choice index -> last non-null finish_reason
        self.done = False
        self.plain: Shape | None = None  # shape of a verified plain delta
        # Plain deltas fully parsed: the shape is learnt from the second one, so a stream
        # with one delta (a short answer) never pays for learning it.
        self.plain_parsed = 0

    def take_block(self, buf: bytes, start: int, stop: int) -> bool:
        plain = self.plain
        if plain is None or self.done:
            return False
        text = plain.match_block(buf, start, stop)
        if text is None:
            return False
        self.last_event = "chunk"
        if text:
            self.text.add(FIRST_PART, text)
            self.content_deltas += 1
        return True

    def take_blocks(self, buf: bytes, pos: int, cap: int) -> tuple[int, int]:
        """A bulk read's run of plain delta blocks in a few C calls: the shape's run pattern
        finds the run, `findall` its texts, decoded together; a block no run takes goes
        through `take_block`. Stops where `take_block` would return False."""
        plain = self.plain
        if plain is None or self.done or not plain.has_text:
            return super().take_blocks(buf, pos, cap)
        run, block = plain.run_patterns()
        # The usual bulk read: every whole block in it a usual one. One pass of `split` finds
        # them all, with nothing between them, and their texts (a block's literals are long:
        # `re` compares them a byte at a time, so each pass costs).
        stop = buf.rfind(b"\n\n", pos) + 2
        if 2 <= stop - pos <= cap:
            parts = block.split(buf if pos == 0 and stop == len(buf) else buf[pos:stop])
            if len(parts) > 1 and not any(parts[0::2]):
                texts = parts[1::2]
                if self._add_run(texts):
                    return stop, len(texts)
        taken = 0
        runs = True
        while True:
            found = run.match(buf, pos) if runs else None
            # A run within `cap` holds no block over it; invalid UTF-8 in one: block by block.
            if found is not None and found.end() - pos <= cap:
                texts = block.findall(buf, pos, found.end())
                if self._add_run(texts):
                    taken += len(texts)
                    pos = found.end()
                else:
                    runs = False
            end = buf.find(b"\n\n", pos) + 2
            if not 2 <= end - pos <= cap or not self.take_block(buf, pos, end):
                return pos, taken
            taken += 1
            pos = end

    def _add_run(self, pieces: list[bytes]) -> bool:
        """The texts of a run of plain deltas, counted as `take_block` would count each;
        False (nothing counted) when one is not valid UTF-8."""
        joined = b"".join(pieces)
        try:
            text = _text(joined)
        except ValueError:
            return False
        self.last_event = "chunk"
        deltas = len(pieces) - pieces.count(b"")
        self.content_deltas += deltas
        parts = self.text
        if parts.retained + len(text) <= parts.cap or parts.retained == parts.cap:
            if text:  # all kept, or (the cap is full) all counted as dropped
                parts.add(FIRST_PART, text)
        else:  # the cap falls within the run: as the deltas would be, one by one
            for piece in pieces:
                if piece:
                    parts.add(FIRST_PART, _text(piece))
        return True

    def on_event(self, event: SSEEvent) -> None:
        data = event.data
        if self.done:
            self.anomalies["events_after_terminal"] += 1
            self.last_event = (
                "[DONE]"
                if data == "[DONE]"
                else (event.type if event.type != "message" else "chunk")
            )
            return  # nothing after [DONE] is content
        if data == "[DONE]":
            self.last_event = "[DONE]"
            self.done = True
            self.terminal = True
            if self.error is not None:
                self.anomalies["done_after_error"] += 1
            return
        etype = event.type
        self.last_event = etype if etype != "message" else "chunk"
        if self.plain is not None and etype == "message":
            text = self.plain.match(event.raw)
            if text is not None:
                if text:
                    self.text.add(FIRST_PART, text)
                    self.content_deltas += 1
                return
        obj = self.parse(data)
        if not isinstance(obj, dict):
            if obj is not None:
                self.anomalies["unexpected_payload"] += 1
            return
        if etype == "error" or obj.get("error") or obj.get("object") == "error":
            self.set_error(obj)
        self.on_chunk(obj)
        if self.fast_path and etype == "message" and is_plain_delta(obj):
            self.plain_parsed += 1
            if self.plain_parsed < 2:
                return
            holes = [(b'"content"', TEXT, obj["choices"][0]["delta"]["content"])]
            if "obfuscation" in obj:
                holes.append((b'"obfuscation"', PAD, obj["obfuscation"]))
            self.plain = Shape.learn("message", event.raw, holes)

    def on_chunk(self, obj: dict[str, Any]) -> None:
        if self.response_id is None and isinstance(obj.get("id"), str) and obj["id"]:
            self.response_id = obj["id"]
        if self.model is None and isinstance(obj.get("model"), str) and obj["model"]:
            self.model = obj["model"]
        usage = obj.get("usage") or dig(obj, "x_groq", "usage")
        if isinstance(usage, dict):
            self.usage = chat_usage(usage)
        for filter_anomaly in filter_anomalies(obj):
            self.anomalies[filter_anomaly] += 1
        choices = obj.get("choices")
        if not isinstance(choices, list):
            return
        for position, choice in enumerate(choices):
            if isinstance(choice, dict):
                self.on_choice(choice, position)

    def on_choice(self, choice: dict[str, Any], position: int) -> None:
        raw = choice.get("index")
        index = self.index(raw if isinstance(raw, int) else position, cap=MAX_CHOICES)
        if index is None:
            return
        self.finish.setdefault(index, None)
        delta = choice.get("delta") or choice.get("message")  # `message` in a non-stream body
        if isinstance(delta, dict):
            self.on_delta(index, delta)
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason:
            previous = self.finish[index]
            if previous is not None and not (previous == reason and is_annotation(choice)):
                self.anomalies["repeated_finish_reason"] += 1
            self.finish[index] = reason
            for key, call in self.tool_calls.items():
                if isinstance(key, tuple) and key[0] == index:
                    call.completed = True

    def on_delta(self, index: int, delta: dict[str, Any]) -> None:
        key = (index, 0)
        self.add_text(key, delta.get("content"))
        self.add_refusal(key, delta.get("refusal"))
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            self.add_reasoning(key, reasoning)
        elif isinstance(details := delta.get("reasoning_details"), list):
            for item in details:
                if isinstance(item, dict):
                    self.add_reasoning(key, item.get("text") or item.get("summary"))
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for position, call in enumerate(calls):
                if isinstance(call, dict):
                    self.on_tool_call_delta(index, call, position)
        legacy = delta.get("function_call")
        if isinstance(legacy, dict):
            buffer = self.tool_call((index, "function_call"))
            self.set_call_identity(buffer, None, legacy.get("name"))
            self.add_arguments(buffer, legacy.get("arguments"))

    def on_tool_call_delta(self, index: int, call: dict[str, Any], position: int) -> None:
        call_index = call.get("index")
        if isinstance(call_index, int) and self.index(call_index) is None:
            return
        if not isinstance(call_index, int):
            # Some compatibles omit `index`: a new id starts a call, otherwise continue the last.
            call_index = self._index_without_index(index, call.get("id"), position)
        key = (index, call_index)
        if key not in self.tool_calls and not call.get("type"):
            # openai-node's stream helper keeps a call's type from its first delta and raises
            # (`missing choices[i].tool_calls[j].type`) when it had none.
            self.anomalies["tool_call_type_missing"] += 1
        buffer = self.tool_call(key)
        custom = call.get("custom")
        function = call.get("function") or custom or {}
        if not isinstance(function, dict):
            function = {}
        if call.get("type") == "custom" or (custom and function is custom):
            buffer.free_text = True  # a custom tool's input is text, not JSON
        self.set_call_identity(buffer, call.get("id"), function.get("name"))
        self.add_arguments(buffer, function.get("arguments", function.get("input")))

    def _index_without_index(self, index: int, call_id: Any, position: int) -> int:
        mine: list[int] = [
            k[1]
            for k in self.tool_calls
            if isinstance(k, tuple) and k[0] == index and isinstance(k[1], int)
        ]
        if not mine:
            return position
        last = max(mine)
        known = self.tool_calls[(index, last)].id
        if isinstance(call_id, str) and call_id and known is not None and call_id != known:
            return last + 1
        return last

    def on_body(self, body: Any) -> None:
        super().on_body(body)
        if isinstance(body, dict):
            self.on_chunk(body)
            if body.get("choices") and all(r is not None for r in self.finish.values()):
                self.done = self.terminal = True  # a whole completion is its own terminal

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        reasons = tuple(self.finish[i] for i in sorted(self.finish))
        per_choice = reasons if len(reasons) > 1 else None
        first = reasons[0] if reasons else None
        if self.error is not None or "error" in reasons:
            return Outcome(State.FAILED, first, FinishCategory.ERROR, per_choice)
        all_finished = bool(reasons) and all(r is not None for r in reasons)
        if not all_finished:
            if self.done:
                self.anomalies["done_without_finish_reason"] += 1
                return Outcome(State.UNCONFIRMED, first, None, per_choice)
            return Outcome(State.INTERRUPTED, first, None, per_choice)
        if not self.done and body_complete:
            # Every choice finished and the body ended by its framing: only `[DONE]` is missing.
            self.anomalies["missing_done"] += 1
        return self.classify([r for r in reasons if r is not None], per_choice)

    def classify(self, reasons: list[str], per_choice: tuple[str | None, ...] | None) -> Outcome:
        for reason in reasons:
            if reason in CUT_SHORT:
                return Outcome(State.INCOMPLETE, reason, CUT_SHORT[reason], per_choice)
        unknown = [r for r in reasons if r not in NATURAL]
        if unknown:
            # An unknown reason is never taken as success: report it, do not guess.
            self.anomalies["unknown_finish_reason"] += 1
            return Outcome(State.INCOMPLETE, unknown[0], FinishCategory.OTHER, per_choice)
        category = NATURAL[reasons[0]]
        if any(NATURAL[r] is FinishCategory.TOOL_USE for r in reasons):
            category = FinishCategory.TOOL_USE
        elif self.refusal.chars and not self.text.chars:
            category = FinishCategory.REFUSAL
        return Outcome(State.COMPLETED, reasons[0], category, per_choice)


def _chat_terminal(event: SSEEvent | None, raw: bytes) -> bool:
    # The finish_reason is Chat's real terminal evidence; `[DONE]` alone proves nothing.
    return done_marker(event, raw) or (
        event is not None and '"finish_reason":"' in event.data.replace(" ", "")
    )


SPEC = DialectSpec(
    dialect=Dialect.OPENAI_CHAT,
    assembler=OpenAIChatAssembler,
    drills=Drills(is_terminal=_chat_terminal, error=generic_error),
    path_suffixes=("/chat/completions",),
    sniff=lambda obj: (
        "choices" in obj or obj.get("object") in ("chat.completion.chunk", "chat.completion")
    ),
    otel_provider="openai",
    primary_group=0,
)
