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
    MCP = "mcp"
    A2A = "a2a"
    GEMINI_INTERACTIONS = "gemini-interactions"
    AG_UI = "ag-ui"


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


class ClientClose(StrEnum):
    """What the client leaving before the outcome was known means, by the dialect's rules for
    the request: a cancellation (most APIs; MCP from 2026-07-28), a cut the client may resume
    (MCP up to 2025-11-25: a disconnect is no cancellation), or the normal end of a stream
    meant to stay open until either side closes it (MCP `subscriptions/listen`)."""

    CANCELS = "cancels"
    INTERRUPTS = "interrupts"
    ENDS = "ends"


# The finish reason of a stream that the client ended as its protocol allows (`ClientClose.ENDS`).
CLIENT_CLOSED = "client_closed"


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
    # None: not checked (free-text input, or a call that never completed).
    arguments_valid_json: bool | None


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
    # Input tokens written to the prompt cache: Anthropic's `cache_creation_input_tokens`,
    # OpenAI's `input_tokens_details.cache_write_tokens` (beside `cached_tokens`).
    cache_write_tokens: int | None = None
    raw: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Fallback:
    """Another model took over the turn (Anthropic's server-side fallback after a refusal):
    `hops` is the number of `fallback` content blocks, `text_model` the model that wrote the
    answer (the `fallback_message` entry of `usage.iterations`, else the last block's `to`),
    which `response_model` need not name."""

    hops: int
    text_model: str | None


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
    # the close of a close-delimited body). False for a cut by the upstream or the proxy; None
    # when the client left before the framing completed (the proxy stopped reading: unknown).
    http_complete: bool | None = True
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
    fallback: Fallback | None = None

    def replace(self, **changes: Any) -> Verdict:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready mapping; the log record and `replay` print this.

        Written out field by field (every request pays for it) when every value has the type
        it is declared with: the same dict as `_plain` gives, which takes anything else.
        """
        i, e, u, fc = self.interruption, self.error, self.usage, self.finish_category
        leaves = (
            self.finish_reason,
            self.last_event,
            self.last_event_id,
            self.http_complete,
            self.bytes,
            self.events,
            self.comments,
            self.text_chars,
            self.reasoning_chars,
            self.refusal_chars,
            self.response_id,
            self.model,
        )
        if not (
            self.dialect.__class__ is Dialect
            and self.state.__class__ is State
            and (fc is None or fc.__class__ is FinishCategory)
            and _LEAVES.issuperset(map(type, leaves))
        ):
            return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        reasons, anomalies, servers = self.finish_reasons, self.anomalies, self.server_tool_calls
        return {
            "dialect": self.dialect.value,
            "state": self.state.value,
            "finish_reason": self.finish_reason,
            "finish_category": None if fc is None else fc.value,
            "finish_reasons": _plain(reasons) if reasons is not None else None,
            "last_event": self.last_event,
            "last_event_id": self.last_event_id,
            "interruption": (
                None
                if i is None
                else _plain(i)
                if i.__class__ is not Interruption
                else {
                    "reason": _leaf(i.reason),
                    "partial_event_bytes": _leaf(i.partial_event_bytes),
                }
            ),
            "http_complete": self.http_complete,
            "error": (
                None
                if e is None
                else _plain(e)
                if e.__class__ is not ErrorInfo
                else {"type": _leaf(e.type), "code": _leaf(e.code), "message": _leaf(e.message)}
            ),
            "anomalies": (
                {k if k.__class__ is str else str(k): _leaf(v) for k, v in anomalies.items()}
                if isinstance(anomalies, dict)
                else _plain(anomalies)
            ),
            "bytes": self.bytes,
            "events": self.events,
            "comments": self.comments,
            "text_chars": self.text_chars,
            "reasoning_chars": self.reasoning_chars,
            "refusal_chars": self.refusal_chars,
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
            "server_tool_calls": (
                [*servers]
                if servers.__class__ is tuple and _LEAVES.issuperset(map(type, servers))
                else _plain(servers)
            ),
            "usage": _usage(u),
            "response_id": self.response_id,
            "model": self.model,
            "fallback": None if self.fallback is None else _plain(self.fallback),
        }


def _usage(u: Usage | None) -> Any:
    if u.__class__ is not Usage:
        return _plain(u)
    assert u is not None
    counts = (
        u.input_tokens,
        u.output_tokens,
        u.total_tokens,
        u.reasoning_tokens,
        u.cached_tokens,
        u.cache_write_tokens,
    )
    if not _LEAVES.issuperset(map(type, counts)):
        return _plain(u)
    return {  # `raw` stays out (see Usage)
        "input_tokens": counts[0],
        "output_tokens": counts[1],
        "total_tokens": counts[2],
        "reasoning_tokens": counts[3],
        "cached_tokens": counts[4],
        "cache_write_tokens": counts[5],
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


def with_transport(
    verdict: Verdict,
    status: int | None,
    end: str,
    disconnect_cancels: bool | ClientClose = True,
) -> Verdict:
    """Add what only the HTTP layer knows: a non-2xx status, or a client that went away
    before the outcome was known (after it, the tap already kept the outcome), which is a
    cancellation unless the dialect says a disconnect is none (`disconnect_cancels`: a bool,
    or the `ClientClose` rule of the request). The interruption stays: its reason says who
    ended the stream (`client_disconnected`)."""
    if status is not None and not 200 <= status < 300:
        return verdict.replace(state=State.HTTP_ERROR, interruption=None)
    if end != EndReason.CLIENT_DISCONNECTED or verdict.state is not State.INTERRUPTED:
        return verdict
    rule = disconnect_cancels
    if rule is True or rule is ClientClose.CANCELS:
        return verdict.replace(state=State.CANCELLED)
    if rule is ClientClose.ENDS:
        return verdict.replace(
            state=State.COMPLETED,
            finish_reason=CLIENT_CLOSED,
            finish_category=FinishCategory.STOP,
        )
    return verdict
