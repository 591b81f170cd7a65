"""Google Gemini `streamGenerateContent?alt=sse` (AI Studio and Vertex).

There is no end sentinel: a stream is whole only when every candidate's last `finishReason` is
`STOP` and the body ended on an event boundary.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from sseproxy.core.dialects.base import (
    MAX_CHOICES,
    MAX_INDEX,
    Assembler,
    Outcome,
    ToolCallBuffer,
    as_int,
    dig,
    dumps,
)
from sseproxy.core.dialects.spec import DialectSpec, Drills, sse_event
from sseproxy.core.events import SSEEvent
from sseproxy.core.verdict import Dialect, FinishCategory, State, Usage

CATEGORY = {
    "STOP": FinishCategory.STOP,
    "MAX_TOKENS": FinishCategory.LENGTH,
    "SAFETY": FinishCategory.CONTENT_FILTER,
    "RECITATION": FinishCategory.CONTENT_FILTER,
    "BLOCKLIST": FinishCategory.CONTENT_FILTER,
    "PROHIBITED_CONTENT": FinishCategory.CONTENT_FILTER,
    "SPII": FinishCategory.CONTENT_FILTER,
    "IMAGE_SAFETY": FinishCategory.CONTENT_FILTER,
    "IMAGE_PROHIBITED_CONTENT": FinishCategory.CONTENT_FILTER,
    "IMAGE_RECITATION": FinishCategory.CONTENT_FILTER,
    # google-genai 1.x additions (the rest, e.g. MALFORMED_FUNCTION_CALL, are `other`).
    "MODEL_ARMOR": FinishCategory.CONTENT_FILTER,
    "ESCALATION": FinishCategory.CONTENT_FILTER,
    "PUP_LIMITED_DISABLED": FinishCategory.CONTENT_FILTER,
    "CONTINUATION": FinishCategory.PAUSE,  # the token limit of one request: continue it
}
_PATH_TOKEN = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")
# A `partialArgs` path is at most this deep: real arguments nest a few levels, and the
# arguments are serialised recursively when the call ends.
MAX_PATH_DEPTH = 32


def gemini_usage(raw: dict[str, Any]) -> Usage:
    return Usage(
        input_tokens=as_int(raw.get("promptTokenCount")),
        output_tokens=as_int(raw.get("candidatesTokenCount")),
        total_tokens=as_int(raw.get("totalTokenCount")),
        reasoning_tokens=as_int(raw.get("thoughtsTokenCount")),
        cached_tokens=as_int(raw.get("cachedContentTokenCount")),
        raw=raw,
    )


def path_tokens(path: str) -> list[str | int] | None:
    """`$.a.b[0]` as ["a", "b", 0]; None if a list index reaches MAX_INDEX (it would size a
    list) or the path is deeper than MAX_PATH_DEPTH."""
    tokens: list[str | int] = []
    for match in _PATH_TOKEN.finditer(path):
        if len(tokens) == MAX_PATH_DEPTH:
            return None
        name, digits = match.group(1), match.group(2)
        if name is not None:
            tokens.append(name)
        elif len(digits) > len(str(MAX_INDEX)) or int(digits) >= MAX_INDEX:
            return None
        else:
            tokens.append(int(digits))
    return tokens


def _grow(node: list[Any], index: int, budget: list[int]) -> bool:
    """Make `node[index]` exist; the None gap it leaves is charged to `budget[0]`."""
    gap = index - len(node)
    if gap > budget[0]:
        return False
    if gap > 0:
        budget[0] -= gap
    node.extend([None] * (index + 1 - len(node)))
    return True


def set_path(
    root: dict[str, Any], tokens: list[str | int], value: Any, append: bool, budget: list[int]
) -> bool:
    """Set `$.a.b[0]` in a nested structure; string fragments of one path concatenate.

    Indexes are below MAX_INDEX (`path_tokens`) and the gaps they skip are charged to the
    one-element `budget`, so a response's lists grow with its bytes, not with its numbers.
    False if a gap exceeds the budget (that fragment is then ignored)."""
    if not tokens:
        return True
    node: Any = root
    for token, following in itertools.pairwise(tokens):
        empty: Any = [] if isinstance(following, int) else {}
        if isinstance(token, int) and isinstance(node, list):
            if not _grow(node, token, budget):
                return False
            if node[token] is None:
                node[token] = empty
            node = node[token]
        elif isinstance(token, str) and isinstance(node, dict):
            node = node.setdefault(token, empty)
        else:
            return True  # the path does not fit what earlier fragments built: ignored
    last = tokens[-1]
    if isinstance(last, int) and isinstance(node, list):
        if not _grow(node, last, budget):
            return False
        previous = node[last]
        node[last] = previous + value if append and isinstance(previous, str) else value
    elif isinstance(last, str) and isinstance(node, dict):
        previous = node.get(last)
        node[last] = previous + value if append and isinstance(previous, str) else value
    return True


class StreamedCall:
    """A Vertex function call whose arguments arrive as `partialArgs` over several chunks."""

    def __init__(self, buffer: ToolCallBuffer) -> None:
        self.buffer = buffer
        self.args: dict[str, Any] = {}


class GeminiAssembler(Assembler):
    dialect = Dialect.GEMINI

    def __init__(self) -> None:
        super().__init__()
        self.finish: dict[int, str] = {}
        self.candidates: set[int] = set()
        self.block_reason: str | None = None
        self.streamed: dict[int, StreamedCall] = {}
        # List slots `partialArgs` may skip over, for the whole response (see `set_path`).
        self.gap_budget = [MAX_INDEX]

    def on_event(self, event: SSEEvent) -> None:
        self.last_event = event.type if event.type != "message" else "chunk"
        obj = self.parse(event.data)
        if isinstance(obj, dict):
            self.on_chunk(obj)
        elif obj is not None:
            self.anomalies["unexpected_payload"] += 1

    def on_chunk(self, obj: dict[str, Any]) -> None:
        if obj.get("error"):
            self.set_error(obj)
            return
        if isinstance(obj.get("responseId"), str):
            self.response_id = obj["responseId"]
        if isinstance(obj.get("modelVersion"), str):
            self.model = obj["modelVersion"]
        usage = obj.get("usageMetadata")
        if isinstance(usage, dict) and "totalTokenCount" in usage:
            self.usage = gemini_usage(usage)
        feedback = obj.get("promptFeedback")
        if isinstance(feedback, dict) and isinstance(feedback.get("blockReason"), str):
            self.block_reason = feedback["blockReason"]
        candidates = obj.get("candidates")
        if isinstance(candidates, list):
            for position, candidate in enumerate(candidates):
                if isinstance(candidate, dict):
                    self.on_candidate(candidate, position)

    def on_candidate(self, candidate: dict[str, Any], position: int) -> None:
        raw = candidate.get("index")
        index = self.index(raw if isinstance(raw, int) else position, cap=MAX_CHOICES)
        if index is None:
            return
        self.candidates.add(index)
        parts = dig(candidate, "content", "parts")
        if isinstance(parts, list):
            for part in parts:
                if isinstance(part, dict):
                    self.on_part(index, part)
        reason = candidate.get("finishReason")
        if isinstance(reason, str) and reason:
            self.finish[index] = reason

    def on_part(self, index: int, part: dict[str, Any]) -> None:
        text = part.get("text")
        if text is not None:
            if part.get("thought") is True:
                self.add_reasoning((index, 0), text)
            else:
                self.add_text((index, 0), text)
        call = part.get("functionCall")
        if isinstance(call, dict):
            self.on_function_call(index, call)
        elif "executableCode" in part or "codeExecutionResult" in part:
            self.content_deltas += 1
            if "executableCode" in part:
                self.server_tool_calls.append("code_execution")

    def on_function_call(self, index: int, call: dict[str, Any]) -> None:
        streamed = self.streamed.get(index)
        partial = call.get("partialArgs")
        if streamed is not None and (isinstance(partial, list) or not call):
            if isinstance(partial, list):
                for fragment in partial:
                    if isinstance(fragment, dict):
                        self.on_partial_arg(streamed, fragment)
            if not call.get("willContinue"):  # the empty `functionCall: {}` closes it
                self.close_streamed(index)
            return
        if streamed is not None:
            self.close_streamed(index)
        buffer = self.tool_call((index, len(self.tool_calls)))
        self.set_call_identity(buffer, call.get("id"), call.get("name"))
        self.content_deltas += 1
        if call.get("willContinue") and "args" not in call:
            self.streamed[index] = StreamedCall(buffer)
            return
        buffer.append(dumps(call.get("args", {})))
        buffer.completed = True

    def on_partial_arg(self, streamed: StreamedCall, fragment: dict[str, Any]) -> None:
        path = fragment.get("jsonPath")
        if not isinstance(path, str):
            return
        self.content_deltas += 1
        tokens = path_tokens(path)
        if tokens is None:
            self.anomalies["index_out_of_range"] += 1
            return
        for field, append in (
            ("stringValue", True),
            ("numberValue", False),
            ("boolValue", False),
            ("nullValue", False),
        ):
            if field in fragment:
                value = None if field == "nullValue" else fragment[field]
                if not set_path(streamed.args, tokens, value, append, self.gap_budget):
                    self.anomalies["index_out_of_range"] += 1
                return

    def close_streamed(self, index: int) -> None:
        streamed = self.streamed.pop(index)
        streamed.buffer.append(dumps(streamed.args))
        streamed.buffer.completed = True

    def on_body(self, body: Any) -> None:
        chunks = body if isinstance(body, list) else [body]
        for chunk in chunks:
            if isinstance(chunk, dict):
                self.on_chunk(chunk)

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        for index in list(self.streamed):
            self.close_streamed(index)  # arguments so far, validated as they stand
        reasons = tuple(self.finish.get(i) for i in sorted(self.candidates))
        per_choice = reasons if len(reasons) > 1 else None
        first = reasons[0] if reasons else None
        if self.error is not None:
            return Outcome(State.FAILED, first, FinishCategory.ERROR, per_choice)
        if not self.candidates and self.block_reason is not None:
            return Outcome(State.INCOMPLETE, self.block_reason, FinishCategory.CONTENT_FILTER)
        # No end marker: a `finishReason` proves the candidate ended only if the body also
        # ended by its framing on an event boundary (the tap cuts the rest to `interrupted`).
        if partial or not reasons or any(r is None for r in reasons):
            return Outcome(State.INTERRUPTED, first, None, per_choice)
        for reason in reasons:
            if reason != "STOP":
                category = CATEGORY.get(str(reason), FinishCategory.OTHER)
                return Outcome(State.INCOMPLETE, reason, category, per_choice)
        category = FinishCategory.TOOL_USE if self.tool_calls else FinishCategory.STOP
        return Outcome(State.COMPLETED, first, category, per_choice)


def _is_gemini(obj: dict[str, Any]) -> bool:
    if "candidates" in obj or "promptFeedback" in obj or "usageMetadata" in obj:
        return True
    error = obj.get("error")  # google.rpc.Status: {"code": 404, "status": "NOT_FOUND", ...}
    return isinstance(error, dict) and isinstance(error.get("status"), str) and "code" in error


UNAVAILABLE = {
    "error": {"code": 503, "message": "The model is overloaded (injected)", "status": "UNAVAILABLE"}
}

SPEC = DialectSpec(
    dialect=Dialect.GEMINI,
    assembler=GeminiAssembler,
    # No end marker: the chunks with a finishReason are all the terminal evidence there is.
    drills=Drills(
        is_terminal=lambda event, raw: event is not None and '"finishReason"' in event.data,
        error=lambda _: sse_event(UNAVAILABLE),
    ),
    path_suffixes=(":streamGenerateContent", ":generateContent"),
    sniff=_is_gemini,
    otel_operation="generate_content",
    otel_provider="gcp.gemini",
    primary_group=0,
    output_includes_reasoning=False,  # candidatesTokenCount excludes thoughtsTokenCount
)
