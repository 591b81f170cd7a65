"""The verdict: how one response body ended, and why. Its fields become the log record."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Dialect(StrEnum):
    OPENAI_CHAT = "openai-chat"
    OPENAI_RESPONSES = "openai-responses"
    ANTHROPIC_MESSAGES = "anthropic-messages"
    GEMINI = "gemini"
    OLLAMA = "ollama"
    VERCEL_UI = "vercel-ui"
    SSE = "sse"
    TEXT = "text"
    BEDROCK_CONVERSE = "bedrock-converse"
    BEDROCK_INVOKE = "bedrock-invoke"
    COHERE_CHAT = "cohere-chat"


class State(StrEnum):
    """PROTOCOLS.md §9.2. The core decides the first five; the proxy adds the last two."""

    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    UNCONFIRMED = "unconfirmed"
    CANCELLED = "cancelled"
    HTTP_ERROR = "http_error"


class FinishCategory(StrEnum):
    STOP = "stop"
    TOOL_USE = "tool_use"
    LENGTH = "length"
    CONTENT_FILTER = "content_filter"
    REFUSAL = "refusal"
    PAUSE = "pause"
    ERROR = "error"
    OTHER = "other"


class EndReason(StrEnum):
    """What ended the bytes, as the caller saw it. Only reported when the stream was cut.

    Whether the HTTP body itself was whole is a separate fact (`http_complete`): the upstream
    closing the connection is a clean end only when the body's own framing had completed.
    """

    END_OF_INPUT = "end_of_input"
    UPSTREAM_CLOSED = "upstream_closed"
    UPSTREAM_RESET = "upstream_reset"
    UPSTREAM_PROTOCOL_ERROR = "upstream_protocol_error"
    IDLE_TIMEOUT = "idle_timeout"
    CONTENT_TIMEOUT = "content_timeout"
    CLIENT_DISCONNECTED = "client_disconnected"
    PROXY_SHUTDOWN = "proxy_shutdown"
    UPSTREAM_UNREACHABLE = "upstream_unreachable"


@dataclass(frozen=True, slots=True)
class Interruption:
    reason: str
    partial_event_bytes: int


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An error reported by the provider, in-band or as a non-2xx body."""

    type: str | None
    code: str | None  # always a string: providers send 429 and "429"; a log field has one type
    message: str | None


@dataclass(frozen=True, slots=True)
class ToolCallSummary:
    id: str | None
    name: str | None
    arguments_bytes: int
    arguments_valid_json: bool


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage normalised across dialects; `raw` is the provider's own object.

    `raw` stays out of the record (`Verdict.to_dict`): its shape differs per provider and per
    model, which breaks log pipelines that map fields to one type.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    raw: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    dialect: Dialect
    state: State
    # The provider's reason that decided the state (choice 0's unless another choice was cut
    # short); every choice's own reason is in `finish_reasons` when there is more than one.
    finish_reason: str | None = None
    finish_category: FinishCategory | None = None
    finish_reasons: tuple[str | None, ...] | None = None
    last_event: str | None = None
    last_event_id: str | None = None
    interruption: Interruption | None = None
    # The upstream body ended by its own HTTP framing (last-chunk, Content-Length reached, or
    # the close of a close-delimited body). False for every cut, whoever made it.
    http_complete: bool = True
    error: ErrorInfo | None = None
    anomalies: Mapping[str, int] = field(default_factory=dict)
    bytes: int = 0
    events: int = 0
    comments: int = 0
    text_chars: int = 0
    reasoning_chars: int = 0
    refusal_chars: int = 0
    tool_calls: tuple[ToolCallSummary, ...] = ()
    server_tool_calls: tuple[str, ...] = ()
    usage: Usage | None = None
    response_id: str | None = None
    model: str | None = None

    def replace(self, **changes: Any) -> Verdict:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready mapping; the log record and `replay` print this.

        Written out field by field (every request pays for it): the same dict as `_plain`
        gives, which takes any value of an unexpected type the slow way.
        """
        i, e, u = self.interruption, self.error, self.usage
        reasons, anomalies = self.finish_reasons, self.anomalies
        return {
            "dialect": _leaf(self.dialect),
            "state": _leaf(self.state),
            "finish_reason": _leaf(self.finish_reason),
            "finish_category": _leaf(self.finish_category),
            "finish_reasons": _plain(reasons) if reasons is not None else None,
            "last_event": _leaf(self.last_event),
            "last_event_id": _leaf(self.last_event_id),
            "interruption": (
                _plain(i)
                if i.__class__ is not Interruption
                else {
                    "reason": _leaf(i.reason),
                    "partial_event_bytes": _leaf(i.partial_event_bytes),
                }
            ),
            "http_complete": _leaf(self.http_complete),
            "error": (
                _plain(e)
                if e.__class__ is not ErrorInfo
                else {"type": _leaf(e.type), "code": _leaf(e.code), "message": _leaf(e.message)}
            ),
            "anomalies": (
                {k if k.__class__ is str else str(k): _leaf(v) for k, v in anomalies.items()}
                if isinstance(anomalies, dict)
                else _plain(anomalies)
            ),
            "bytes": _leaf(self.bytes),
            "events": _leaf(self.events),
            "comments": _leaf(self.comments),
            "text_chars": _leaf(self.text_chars),
            "reasoning_chars": _leaf(self.reasoning_chars),
            "refusal_chars": _leaf(self.refusal_chars),
            "tool_calls": [
                {
                    "id": _leaf(t.id),
                    "name": _leaf(t.name),
                    "arguments_bytes": _leaf(t.arguments_bytes),
                    "arguments_valid_json": _leaf(t.arguments_valid_json),
                }
                if t.__class__ is ToolCallSummary
                else _plain(t)
                for t in self.tool_calls
            ],
            "server_tool_calls": _plain(self.server_tool_calls),
            "usage": _plain(u)
            if u.__class__ is not Usage
            else {
                "input_tokens": _leaf(u.input_tokens),
                "output_tokens": _leaf(u.output_tokens),
                "total_tokens": _leaf(u.total_tokens),
                "reasoning_tokens": _leaf(u.reasoning_tokens),
                "cached_tokens": _leaf(u.cached_tokens),
            },  # `raw` stays out (see Usage)
            "response_id": _leaf(self.response_id),
            "model": _leaf(self.model),
        }


# Values `_plain` returns unchanged; anything else (an enum, a container) goes through it.
_LEAVES = frozenset({str, int, float, bool, type(None)})


def _leaf(value: Any) -> Any:
    return value if value.__class__ in _LEAVES else _plain(value)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.name != "raw"
        }
    if isinstance(value, StrEnum):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def with_transport(verdict: Verdict, status: int | None, end: str) -> Verdict:
    """Add what only the HTTP layer knows: a non-2xx status, or a client that went away
    before the outcome was known (after it, the tap already kept the outcome)."""
    if status is not None and not 200 <= status < 300:
        return verdict.replace(state=State.HTTP_ERROR, interruption=None)
    if end == EndReason.CLIENT_DISCONNECTED and verdict.state is State.INTERRUPTED:
        return verdict.replace(state=State.CANCELLED)
    return verdict
