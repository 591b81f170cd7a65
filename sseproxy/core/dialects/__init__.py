"""Dialect registry and detection: from the request first, from the first events if need be."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..events import SSEEvent
from ..verdict import Dialect
from .anthropic_messages import AnthropicMessagesAssembler
from .base import Assembler, Outcome, loads
from .bedrock_converse import BedrockConverseAssembler, MessageAssembler, sniff_message
from .bedrock_invoke import BedrockInvokeAssembler
from .cohere import COHERE_EVENTS, CohereChatAssembler
from .gemini import GeminiAssembler
from .ollama import OllamaAssembler
from .openai_chat import OpenAIChatAssembler
from .openai_responses import OpenAIResponsesAssembler
from .sse import PlainSSEAssembler, TextAssembler
from .vercel_ui import VercelUIAssembler

__all__ = [
    "ASSEMBLERS",
    "EVENTSTREAM_DIALECTS",
    "Assembler",
    "MessageAssembler",
    "Outcome",
    "detect",
    "new_assembler",
    "sniff",
    "sniff_body",
    "sniff_message",
]

ASSEMBLERS: dict[Dialect, type[Assembler]] = {
    cls.dialect: cls
    for cls in (
        OpenAIChatAssembler,
        OpenAIResponsesAssembler,
        AnthropicMessagesAssembler,
        GeminiAssembler,
        OllamaAssembler,
        VercelUIAssembler,
        PlainSSEAssembler,
        TextAssembler,
        BedrockConverseAssembler,
        BedrockInvokeAssembler,
        CohereChatAssembler,
    )
}
# Dialects framed as AWS event streams (`application/vnd.amazon.eventstream`), not SSE.
EVENTSTREAM_DIALECTS = {Dialect.BEDROCK_CONVERSE, Dialect.BEDROCK_INVOKE}

ANTHROPIC_EVENTS = {
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
}
VERCEL_PARTS = {
    "start",
    "start-step",
    "text-start",
    "text-delta",
    "reasoning-start",
    "reasoning-delta",
    "tool-input-start",
    "tool-input-available",
    "finish",
    "finish-step",
    "abort",
}


def new_assembler(dialect: Dialect, content_chars: int | None = None) -> Assembler:
    """A fresh assembler; `content_chars` caps the text it keeps (counts are always kept)."""
    assembler = ASSEMBLERS[dialect]()
    if content_chars is not None:
        for store in (assembler.text, assembler.reasoning, assembler.refusal):
            store.cap = content_chars
    return assembler


def detect(method: str, path: str, headers: Mapping[str, str] | None = None) -> Dialect | None:
    """Dialect from the request path and the response headers; None when they say nothing."""
    headers = headers or {}
    lowered = {k.lower(): v for k, v in headers.items()}
    if "x-vercel-ai-ui-message-stream" in lowered:
        return Dialect.VERCEL_UI
    path = path.split("?", 1)[0]
    if path.endswith("/converse-stream") or path.endswith("/converse"):
        return Dialect.BEDROCK_CONVERSE
    if path.endswith("/invoke-with-response-stream"):
        return Dialect.BEDROCK_INVOKE
    if path.endswith("/v2/chat"):
        return Dialect.COHERE_CHAT
    if path.endswith("/chat/completions"):
        return Dialect.OPENAI_CHAT
    if path.endswith("/responses") or "/responses/" in path:
        return Dialect.OPENAI_RESPONSES
    if path.endswith("/messages") or path.endswith((":streamRawPredict", ":rawPredict")):
        return Dialect.ANTHROPIC_MESSAGES
    if path.endswith((":streamGenerateContent", ":generateContent")):
        return Dialect.GEMINI
    if path.endswith(("/api/chat", "/api/generate")):
        return Dialect.OLLAMA
    if "ndjson" in lowered.get("content-type", ""):
        return Dialect.OLLAMA
    return None


def sniff(event: SSEEvent) -> Dialect | None:
    """Dialect from one SSE event, or None if the event is not telling (`[DONE]`, an error)."""
    if event.type in ANTHROPIC_EVENTS:
        return Dialect.ANTHROPIC_MESSAGES
    if event.type.startswith("response."):
        return Dialect.OPENAI_RESPONSES
    if event.data == "[DONE]":
        return None
    try:
        obj = loads(event.data)
    except ValueError:
        return None
    return sniff_body(obj)


def sniff_body(obj: Any) -> Dialect | None:
    if isinstance(obj, list) and obj:
        obj = obj[0]
    if not isinstance(obj, dict):
        return None
    otype = obj.get("type")
    if "choices" in obj or obj.get("object") in ("chat.completion.chunk", "chat.completion"):
        return Dialect.OPENAI_CHAT
    if "candidates" in obj or "promptFeedback" in obj or "usageMetadata" in obj:
        return Dialect.GEMINI
    if isinstance(otype, str):
        if otype.startswith("response.") or obj.get("object") == "response":
            return Dialect.OPENAI_RESPONSES
        if otype in ANTHROPIC_EVENTS or otype == "message":
            return Dialect.ANTHROPIC_MESSAGES
        if otype in VERCEL_PARTS:
            return Dialect.VERCEL_UI
        if otype in COHERE_EVENTS:
            return Dialect.COHERE_CHAT
    if obj.get("object") == "response":
        return Dialect.OPENAI_RESPONSES
    error = obj.get("error")
    if isinstance(error, dict) and isinstance(error.get("status"), str) and "code" in error:
        return Dialect.GEMINI  # google.rpc.Status: {"code": 404, "status": "NOT_FOUND", ...}
    if "done" in obj and ("message" in obj or "response" in obj):
        return Dialect.OLLAMA
    return None
