"""What the fake provider answers a coding agent, per API: a text answer, a tool call the agent
runs (a shell command writing a proof file), an in-band error after HTTP 200, a 429. Shapes
from the recorded corpus (named at each builder) with only the names and values changed.

A tool call is answered once: a request that carries a tool's result (Responses
`function_call_output`, Anthropic `tool_result`, Chat `"role":"tool"`, Gemini
`functionResponse`) gets the text answer instead, so the agent's loop ends."""

from __future__ import annotations

import json
from typing import Any

from tests.streams import sse

# What the tool call runs; the test finds PROOF_FILE in the agent's scratch folder, holding
# PROOF_TEXT. `echo` and a redirection, which every agent's shell tool accepts.
PROOF_FILE = "proof.txt"
PROOF_TEXT = "made-by-agent"
PROOF_COMMAND = f"echo {PROOF_TEXT} > {PROOF_FILE}"
ANSWER = "All done here."
# The shell tools the agents declare, and the arguments each takes for PROOF_COMMAND.
SHELL_TOOLS: dict[str, dict[str, Any]] = {
    "exec_command": {"cmd": PROOF_COMMAND},  # Codex
    "shell": {"command": ["bash", "-lc", PROOF_COMMAND]},  # older Codex
    "Bash": {"command": PROOF_COMMAND, "description": "write the proof file"},  # Claude Code
    "run_shell_command": {"command": PROOF_COMMAND, "description": "write the proof file"},
    "bash": {"command": PROOF_COMMAND, "description": "write the proof file"},  # opencode
}


def has_tool_result(request: Any) -> bool:
    """Whether a parsed request body carries a tool's result, in any API's shape (a
    structural look: system prompts name these words too)."""
    if not isinstance(request, dict):
        return False
    for item in request.get("input") or []:  # Responses
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            return True
    for message in request.get("messages") or []:  # Chat, Anthropic
        if not isinstance(message, dict):
            continue
        if message.get("role") == "tool":
            return True
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            return True
    for content in request.get("contents") or []:  # Gemini
        parts = content.get("parts") if isinstance(content, dict) else None
        if isinstance(parts, list) and any(
            isinstance(p, dict) and "functionResponse" in p for p in parts
        ):
            return True
    return False


def tool_names(request: Any) -> list[str]:
    """The function names a request body declares, in any API's shape."""
    names: list[str] = []
    if not isinstance(request, dict):
        return names
    for tool in request.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if isinstance(tool.get("name"), str):
            names.append(tool["name"])  # Responses, Anthropic
        fn = tool.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.append(fn["name"])  # Chat
        for decl in tool.get("functionDeclarations") or []:
            if isinstance(decl, dict) and isinstance(decl.get("name"), str):
                names.append(decl["name"])  # Gemini
    return names


def shell_call(request: Any) -> tuple[str, dict[str, Any]] | None:
    """The shell tool this request offers and its arguments for PROOF_COMMAND, if any."""
    offered = tool_names(request)
    return next(((n, SHELL_TOOLS[n]) for n in SHELL_TOOLS if n in offered), None)


# --- OpenAI Responses (openai-responses/text-basic.sse, function-call.sse) -------------------


def _response(model: str, status: str, output: list[Any], usage: Any = None) -> dict[str, Any]:
    return {
        "id": "resp_agent1",
        "object": "response",
        "created_at": 1743082657,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }


RESPONSES_USAGE = {
    "input_tokens": 25,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 4,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 29,
}


def responses_text(model: str, text: str = ANSWER) -> list[dict[str, Any]]:
    """A whole text answer as Responses events (what each SSE `data:` or WS message holds)."""
    message = {"type": "message", "id": "msg_agent1", "status": "in_progress", "role": "assistant"}
    part = {"type": "output_text", "text": "", "annotations": []}
    done_part = {**part, "text": text}
    done_item = {**message, "status": "completed", "content": [done_part]}
    half = len(text) // 2
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response(model, "in_progress", [])},
        {"type": "response.in_progress", "response": _response(model, "in_progress", [])},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**message, "content": []},
        },
        {
            "type": "response.content_part.added",
            "item_id": "msg_agent1",
            "output_index": 0,
            "content_index": 0,
            "part": part,
        },
    ]
    for piece in (text[:half], text[half:]):
        events.append(
            {
                "type": "response.output_text.delta",
                "item_id": "msg_agent1",
                "output_index": 0,
                "content_index": 0,
                "delta": piece,
            }
        )
    events += [
        {
            "type": "response.output_text.done",
            "item_id": "msg_agent1",
            "output_index": 0,
            "content_index": 0,
            "text": text,
        },
        {
            "type": "response.content_part.done",
            "item_id": "msg_agent1",
            "output_index": 0,
            "content_index": 0,
            "part": done_part,
        },
        {"type": "response.output_item.done", "output_index": 0, "item": done_item},
        {
            "type": "response.completed",
            "response": _response(model, "completed", [done_item], RESPONSES_USAGE),
        },
    ]
    return _numbered(events)


def responses_tool(model: str, name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    args = json.dumps(arguments)
    item = {
        "type": "function_call",
        "id": "fc_agent1",
        "call_id": "call_agent1",
        "name": name,
        "arguments": "",
        "status": "in_progress",
    }
    done = {**item, "arguments": args, "status": "completed"}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response(model, "in_progress", [])},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_agent1",
            "output_index": 0,
            "delta": args,
        },
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_agent1",
            "output_index": 0,
            "arguments": args,
        },
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {
            "type": "response.completed",
            "response": _response(model, "completed", [done], RESPONSES_USAGE),
        },
    ]
    return _numbered(events)


def responses_failed(model: str) -> list[dict[str, Any]]:
    """openai-responses/failed-insufficient-quota.sse's shape: created, then response.failed."""
    error = {"code": "server_error", "message": "The server had an error processing your request."}
    failed = {**_response(model, "failed", []), "error": error}
    return _numbered(
        [
            {"type": "response.created", "response": _response(model, "in_progress", [])},
            {"type": "response.failed", "response": failed},
        ]
    )


def responses_empty(model: str) -> list[dict[str, Any]]:
    """The answer to a warm-up (`generate: false`): a response with no output."""
    return _numbered(
        [
            {"type": "response.created", "response": _response(model, "in_progress", [])},
            {
                "type": "response.completed",
                "response": _response(model, "completed", [], RESPONSES_USAGE),
            },
        ]
    )


def _numbered(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**e, "sequence_number": n} for n, e in enumerate(events)]


def as_sse(events: list[dict[str, Any]]) -> bytes:
    return sse(*((e["type"], e) for e in events))


# --- Anthropic Messages (anthropic-messages/parallel-tool-use.sse) ---------------------------


def anthropic_tool(model: str, name: str, arguments: dict[str, Any]) -> bytes:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_agent1",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 25, "output_tokens": 1},
        },
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "tool_use", "id": "toolu_agent1", "name": name, "input": {}},
    }
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": json.dumps(arguments)},
    }
    stop = {"type": "content_block_stop", "index": 0}
    message_delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 20},
    }
    return sse(
        ("message_start", start),
        ("content_block_start", block),
        ("content_block_delta", delta),
        ("content_block_stop", stop),
        ("message_delta", message_delta),
        ("message_stop", {"type": "message_stop"}),
    )


def anthropic_text(model: str, text: str = ANSWER) -> bytes:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_agent2",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 25, "output_tokens": 1},
        },
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": text},
    }
    message_delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 5},
    }
    return sse(
        ("message_start", start),
        ("content_block_start", block),
        ("content_block_delta", delta),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", message_delta),
        ("message_stop", {"type": "message_stop"}),
    )


# --- Chat Completions (openai-chat/single-tool-call.sse) -------------------------------------


def _chat(model: str, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-agent1",
        "object": "chat.completion.chunk",
        "created": 1727346182,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def chat_tool(model: str, name: str, arguments: dict[str, Any]) -> bytes:
    call = {
        "index": 0,
        "id": "call_agent1",
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }
    args = {"index": 0, "function": {"arguments": json.dumps(arguments)}}
    return sse(
        _chat(model, {"role": "assistant", "content": None, "tool_calls": [call]}, None),
        _chat(model, {"tool_calls": [args]}, None),
        _chat(model, {}, "tool_calls"),
        "[DONE]",
    )


def chat_text(model: str, text: str = ANSWER) -> bytes:
    return sse(
        _chat(model, {"role": "assistant", "content": ""}, None),
        _chat(model, {"content": text}, None),
        _chat(model, {}, "stop"),
        "[DONE]",
    )


def chat_error(model: str) -> bytes:
    """A chunk, then an error object in the stream (openai-chat/groq-tool-use-failed-error.sse)."""
    error = {
        "error": {
            "message": "The server had an error",
            "type": "server_error",
            "code": "server_error",
        }
    }
    return sse(_chat(model, {"role": "assistant", "content": "Hal"}, None), error)


# --- Gemini (gemini/function-call-single-chunk.sse) ------------------------------------------


def gemini_tool(name: str, arguments: dict[str, Any]) -> bytes:
    chunk = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"functionCall": {"name": name, "args": arguments}}],
                },
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 25, "candidatesTokenCount": 9, "totalTokenCount": 34},
        "modelVersion": "gemini-2.5-flash",
    }
    return sse(chunk)


# --- 429, as each provider answers it -------------------------------------------------------

RATE_LIMITED = {
    "openai": {
        "error": {
            "message": "Rate limit reached",
            "type": "requests",
            "code": "rate_limit_exceeded",
            "param": None,
        }
    },
    "anthropic": {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "Rate limited"},
    },
    "gemini": {
        "error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}
    },
}


def gemini_text(text: str = ANSWER) -> bytes:
    """gemini/text-basic-crlf.sse's shape: two chunks, the last with finishReason and usage."""
    usage = {"promptTokenCount": 25, "candidatesTokenCount": 4, "totalTokenCount": 29}
    half = len(text) // 2
    first = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": text[:half]}]}, "index": 0}
        ],
        "modelVersion": "gemini-2.5-flash",
    }
    last = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": text[half:]}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": usage,
        "modelVersion": "gemini-2.5-flash",
    }
    return sse(first, last)


def anthropic_overloaded() -> bytes:
    """A text delta, then `overloaded_error` in-band after HTTP 200 (the shape of
    anthropic-messages/text-basic-pings.sse with the end replaced by an error event)."""
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [],
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "Hal"},
    }
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    return sse(
        ("message_start", start),
        ("content_block_start", block),
        ("content_block_delta", delta),
        ("error", error),
    )


ANTHROPIC_OVERLOADED = {
    "type": "error",
    "error": {"type": "overloaded_error", "message": "Overloaded"},
}


def anthropic_message(model: str, text: str = ANSWER) -> dict[str, Any]:
    """A whole Messages answer as JSON, for a request without `stream`."""
    return {
        "id": "msg_agent3",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 25, "output_tokens": 5},
    }


def gemini_error() -> bytes:
    """A chunk of text, then an error object in the stream (HTTP 200), as Gemini sends an
    overloaded model mid-answer: `{"error": {"code": 503, ..., "status": "UNAVAILABLE"}}`."""
    first = {
        "candidates": [{"content": {"role": "model", "parts": [{"text": "Hal"}]}, "index": 0}],
        "modelVersion": "gemini-2.5-flash",
    }
    error = {
        "error": {
            "code": 503,
            "message": "The model is overloaded. Please try again later.",
            "status": "UNAVAILABLE",
        }
    }
    return sse(first, error)


Call = tuple[str, dict[str, Any]] | None


def api_of(path: str) -> str | None:
    """The API a request path belongs to, as the agents send them."""
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "anthropic"
    if ":streamGenerateContent" in path:
        return "gemini"
    if path.endswith("/chat/completions"):
        return "chat"
    return None


def responses_events(model: str, kind: str, call: Call) -> list[dict[str, Any]]:
    if kind == "error":
        return responses_failed(model)
    if call is not None:
        return responses_tool(model, *call)
    return responses_text(model)


def http_body(api: str, model: str, kind: str, call: Call) -> bytes:
    """The streamed body for a scenario (`error`, a tool `call`, else the answer)."""
    if api == "responses":
        return as_sse(responses_events(model, kind, call))
    if api == "anthropic":
        if kind == "error":
            return anthropic_overloaded()
        return anthropic_tool(model, *call) if call else anthropic_text(model)
    if api == "chat":
        if kind == "error":
            return chat_error(model)
        return chat_tool(model, *call) if call else chat_text(model)
    if kind == "error":
        return gemini_error()
    return gemini_tool(*call) if call else gemini_text()
