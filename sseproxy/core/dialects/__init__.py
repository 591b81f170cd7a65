"""The dialect registry: one `DialectSpec` per dialect, declared in its own module.

Adding a dialect is one module (an `Assembler` subclass and its `SPEC`) and one line in
`SPECS`; see docs/DIALECTS.md. Detection and sniffing try the specs in this order.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from sseproxy.core.dialects import (
    a2a,
    ag_ui,
    anthropic_messages,
    bedrock_converse,
    bedrock_invoke,
    cohere,
    gemini,
    gemini_interactions,
    mcp,
    ollama,
    openai_chat,
    openai_responses,
    sse,
    vercel_ui,
)
from sseproxy.core.dialects.base import Assembler, Outcome
from sseproxy.core.dialects.spec import DialectSpec
from sseproxy.core.events import Framing, SSEEvent
from sseproxy.core.eventstream import EventMessage
from sseproxy.core.jsonvalue import loads
from sseproxy.core.request import RequestFacts
from sseproxy.core.verdict import Dialect

__all__ = [
    "SPECS",
    "Assembler",
    "DialectSpec",
    "Outcome",
    "by_request",
    "detect",
    "fallback",
    "new_assembler",
    "sniff",
    "sniff_body",
    "sniff_line",
    "sniff_message",
    "spec_for",
]

SPECS: tuple[DialectSpec, ...] = (
    vercel_ui.SPEC,  # first: its header says so whatever the path (its default is /api/chat)
    a2a.SPEC,  # JSON-RPC like MCP: selected by its method, sniffed by its result's shape
    mcp.SPEC,  # its path, session header and methods are its own (never sniffed)
    openai_chat.SPEC,
    openai_responses.SPEC,
    anthropic_messages.SPEC,
    gemini.SPEC,
    gemini_interactions.SPEC,
    ollama.SPEC,
    bedrock_converse.SPEC,
    bedrock_invoke.SPEC,
    cohere.SPEC,
    ag_ui.SPEC,  # no path of its own: sniffed by its upper-case event types
    sse.SSE_SPEC,
    sse.TEXT_SPEC,
)
BY_DIALECT: dict[Dialect, DialectSpec] = {spec.dialect: spec for spec in SPECS}


def spec_for(dialect: Dialect | None) -> DialectSpec:
    """The spec of `dialect`; an unknown stream is plain SSE."""
    return BY_DIALECT[dialect or Dialect.SSE]


def new_assembler(dialect: Dialect, content_chars: int | None = None) -> Assembler:
    """A fresh assembler; `content_chars` caps the text it keeps (counts are always kept)."""
    assembler = BY_DIALECT[dialect].assembler()
    if content_chars is not None:
        for store in (assembler.text, assembler.reasoning, assembler.refusal):
            store.cap = content_chars
    return assembler


# Response header name -> the first spec (registry order) that names it.
_BY_HEADER: dict[str, tuple[int, Dialect]] = {}
for _order, _spec in enumerate(SPECS):
    for _name in _spec.response_headers:
        _BY_HEADER.setdefault(_name.lower(), (_order, _spec.dialect))


def detect(
    method: str,
    path: str,
    headers: Mapping[str, str] | None = None,
    asked: RequestFacts | None = None,
) -> Dialect | None:
    """Dialect from the response headers, the request (`asked`: its JSON-RPC method) and its
    path; None when they say nothing."""
    found: tuple[int, Dialect] | None = None
    content_type = ""
    for name, value in (headers or {}).items():
        lower = name.lower()
        if lower == "content-type":
            content_type = value
        hit = _BY_HEADER.get(lower)
        if hit is not None and (found is None or hit < found):
            found = hit
    if found is not None:
        return found[1]
    if asked is not None and (chosen := by_request(asked)) is not None:
        return chosen
    return _by_path(path.split("?", 1)[0]) or _by_content_type(content_type.lower())


def by_request(asked: RequestFacts) -> Dialect | None:
    """The dialect the request alone selects (`DialectSpec.selects`), if any."""
    if asked.rpc_method is None and asked.mcp_version is None:
        return None  # the usual request: nothing to ask
    for spec in SPECS:
        if spec.selects is not None and spec.selects(asked):
            return spec.dialect
    return None


@functools.lru_cache(maxsize=256)  # a proxy sees a handful of paths, again and again
def _by_path(path: str) -> Dialect | None:
    for spec in SPECS:
        if spec.matches_path(path):
            return spec.dialect
    return None


@functools.lru_cache(maxsize=64)
def _by_content_type(content_type: str) -> Dialect | None:
    for spec in SPECS:
        if any(part in content_type for part in spec.content_types):
            return spec.dialect
    return None


def sniff(event: SSEEvent) -> Dialect | None:
    """Dialect from one SSE event, or None if the event is not telling (`[DONE]`, an error)."""
    for spec in SPECS:
        if spec.matches_event_type(event.type):
            return spec.dialect
    if event.data == "[DONE]":
        return None
    try:
        obj = loads(event.data)
    except ValueError:
        return None
    return sniff_body(obj)


def sniff_body(obj: Any, framing: Framing | None = None) -> Dialect | None:
    """Dialect from a parsed JSON value; `framing`: only among the specs that use it."""
    if isinstance(obj, list) and obj:
        obj = obj[0]
    if not isinstance(obj, dict):
        return None
    for spec in SPECS:
        if framing is not None and spec.framing is not framing:
            continue
        if spec.sniff is not None and spec.sniff(obj):
            return spec.dialect
    return None


def sniff_line(line: bytes) -> Dialect:
    """The NDJSON dialect of a stream from its first line."""
    try:
        obj = loads(line)
    except ValueError:
        obj = None
    return sniff_body(obj, Framing.NDJSON) or fallback(Framing.NDJSON)


def sniff_message(message: EventMessage) -> Dialect:
    """The dialect of an AWS event stream from its first message."""
    for spec in SPECS:
        if spec.sniff_message is not None and spec.sniff_message(message):
            return spec.dialect
    return fallback(Framing.EVENTSTREAM)


def fallback(framing: Framing) -> Dialect:
    """The dialect a stream of `framing` is read as when nothing said which one it is."""
    for spec in SPECS:
        if framing in spec.fallback_for:
            return spec.dialect
    return Dialect.SSE
