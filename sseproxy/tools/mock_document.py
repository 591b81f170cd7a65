"""`sseproxy mock` asked for `stream: false`: a recorded stream as its dialect's one JSON
document, built from what the core assembled from it (text, refusal, tool calls, finish
reason, usage, ids), so an app's non-streaming path can be tested on the same recordings.

A recording that failed in-band becomes the dialect's HTTP error; one that was cut is sent cut
(half the document, then the connection ends), as the stream was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from sseproxy.core import Dialect, SSEDecoder, SSEEvent, State, StreamTap, Verdict

# The model named when neither the recording nor the request names one.
MOCK_MODEL = "mock"
# Error types' HTTP statuses, as the providers send them (others: 500).
ERROR_STATUSES = {
    "overloaded_error": 529,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
}


@dataclass(frozen=True, slots=True)
class Assembled:
    """What a recorded stream said, as a document needs it."""

    verdict: Verdict
    text: str
    refusal: str
    tool_calls: tuple[tuple[str, str, str], ...]  # (id, name, arguments)
    model: str


@dataclass(frozen=True, slots=True)
class Document:
    """The response to send: a status, the JSON body, and whether it must be cut."""

    status: int
    body: bytes
    cut: bool = False


def assemble(data: bytes, dialect: Dialect, asked_model: str | None) -> Assembled:
    tap = StreamTap(dialect)
    tap.feed(data)
    verdict = tap.close()
    content = tap.describe()
    calls = tuple(
        (c["id"] or f"call_{i}", c["name"] or "", c["arguments"] or "")
        for i, c in enumerate(content.get("tool_calls", []))
    )
    return Assembled(
        verdict,
        content.get("text", ""),
        content.get("refusal", ""),
        calls,
        verdict.model or asked_model or MOCK_MODEL,
    )


def _usage(a: Assembled) -> tuple[int, int] | None:
    u = a.verdict.usage
    if u is None:
        return None
    return u.input_tokens or 0, u.output_tokens or 0


def _arguments(text: str) -> Any:
    try:
        return orjson.loads(text) if text else {}
    except orjson.JSONDecodeError:
        return {}


def openai_chat(a: Assembled) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": a.text or None}
    message["refusal"] = a.refusal or None
    if a.tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": args}}
            for i, n, args in a.tool_calls
        ]
    doc: dict[str, Any] = {
        "id": a.verdict.response_id or "chatcmpl-mock",
        "object": "chat.completion",
        "created": 0,
        "model": a.model,
        "choices": [{"index": 0, "message": message, "finish_reason": a.verdict.finish_reason}],
    }
    if (usage := _usage(a)) is not None:
        doc["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        }
    return doc


def anthropic_messages(a: Assembled) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": a.text}] if a.text else []
    content += [
        {"type": "tool_use", "id": i, "name": n, "input": _arguments(args)}
        for i, n, args in a.tool_calls
    ]
    usage = _usage(a) or (0, 0)
    return {
        "id": a.verdict.response_id or "msg_mock",
        "type": "message",
        "role": "assistant",
        "model": a.model,
        "content": content,
        "stop_reason": a.verdict.finish_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


# The Responses stream's last event carries the whole response: the document itself.
RESPONSE_ENDS = frozenset({"response.completed", "response.incomplete"})


def final_response(data: bytes) -> dict[str, Any] | None:
    """The `response` of a Responses stream's `response.completed` (or `.incomplete`)."""
    for frame in SSEDecoder().feed(data):
        if not isinstance(frame, SSEEvent) or frame.type not in RESPONSE_ENDS:
            continue
        try:
            event = orjson.loads(frame.data)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict) and isinstance(event.get("response"), dict):
            response: dict[str, Any] = event["response"]
            return response
    return None


def openai_responses(a: Assembled) -> dict[str, Any]:
    """Built when the stream did not end with the response itself (a cut one)."""
    output: list[dict[str, Any]] = []
    if a.text or a.refusal:
        part = (
            {"type": "output_text", "text": a.text, "annotations": []}
            if a.text
            else {"type": "refusal", "refusal": a.refusal}
        )
        output.append(
            {
                "type": "message",
                "id": "msg_mock",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    output += [
        {"type": "function_call", "call_id": i, "name": n, "arguments": args, "status": "completed"}
        for i, n, args in a.tool_calls
    ]
    doc: dict[str, Any] = {
        "id": a.verdict.response_id or "resp_mock",
        "object": "response",
        "created_at": 0,
        "status": "completed" if a.verdict.state is State.COMPLETED else "incomplete",
        "model": a.model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    if (usage := _usage(a)) is not None:
        doc["usage"] = {
            "input_tokens": usage[0],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage[1],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": sum(usage),
        }
    return doc


def ollama(a: Assembled) -> dict[str, Any]:
    usage = _usage(a) or (0, 0)
    return {
        "model": a.model,
        "created_at": "1970-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": a.text},
        "done": True,
        "done_reason": a.verdict.finish_reason or "stop",
        "prompt_eval_count": usage[0],
        "eval_count": usage[1],
    }


BUILDERS: dict[Dialect, Callable[[Assembled], dict[str, Any]]] = {
    Dialect.OPENAI_CHAT: openai_chat,
    Dialect.OPENAI_RESPONSES: openai_responses,
    Dialect.ANTHROPIC_MESSAGES: anthropic_messages,
    Dialect.OLLAMA: ollama,
}


def error_document(dialect: Dialect, etype: str, message: str | None) -> Document:
    status = ERROR_STATUSES.get(etype, 500)
    if dialect is Dialect.ANTHROPIC_MESSAGES:
        body = {"type": "error", "error": {"type": etype, "message": message}}
    else:
        body = {"error": {"type": etype, "message": message, "code": None}}
    return Document(status, orjson.dumps(body))


def document(data: bytes, dialect: Dialect, asked_model: str | None) -> Document | None:
    """The non-streaming response for a recorded stream, or None when the dialect has no
    non-streaming form the mock knows."""
    build = BUILDERS.get(dialect)
    if build is None:
        return None
    a = assemble(data, dialect, asked_model)
    error = a.verdict.error
    if a.verdict.state is State.FAILED and error is not None:
        return error_document(dialect, error.type or error.code or "api_error", error.message)
    whole = final_response(data) if dialect is Dialect.OPENAI_RESPONSES else None
    body = orjson.dumps(whole if whole is not None else build(a))
    if a.verdict.state is State.INTERRUPTED:
        return Document(200, body[: len(body) // 2], cut=True)
    return Document(200, body)
