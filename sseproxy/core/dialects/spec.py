"""A dialect declared in one place: how to recognise it, how it is framed, what ends it, and what
the drills and the tracing call it. The registry in `__init__` is a list of these; nothing
elsewhere branches on a dialect's name.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from sseproxy.core.dialects.base import Assembler
from sseproxy.core.events import Framing, SSEEvent
from sseproxy.core.eventstream import EventMessage
from sseproxy.core.request import RequestFacts
from sseproxy.core.verdict import ClientClose, Dialect

SSE_MEDIA_TYPE = "text/event-stream"
NDJSON_MEDIA_TYPE = "application/x-ndjson"


def sse_event(payload: Mapping[str, Any], event: str | None = None) -> bytes:
    """One SSE event as a server writes it (used for the drills' injected events)."""
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(payload).encode() + b"\n\n"


@dataclass(frozen=True, slots=True)
class Drills:
    """What the fault-injection rules need to know of a dialect.

    `is_terminal(event, raw)`: the event (None for an NDJSON line) is part of the terminal
    signal that `drop-terminal` removes; `error(sequence_number)`: the dialect's own in-band
    error for `inject-error`; `end_marker`: what a relay sends after a failure (`done-after-cut`);
    `keepalive`: what its servers send while no content flows (`keepalive-stall`);
    `sequenced`: its events carry a `sequence_number`, which an injected error continues;
    `is_snapshot(event)`: the event repeats what the deltas before it said, and
    `duplicate-snapshot` sends it twice.
    """

    is_terminal: Callable[[SSEEvent | None, bytes], bool]
    error: Callable[[int], bytes]
    end_marker: bytes = b"data: [DONE]\n\n"
    keepalive: bytes = b": keep-alive\n\n"
    sequenced: bool = False
    is_snapshot: Callable[[SSEEvent], bool] | None = None


@dataclass(frozen=True, slots=True)
class DialectSpec:
    """Everything the rest of sseproxy knows about one API dialect.

    Detection: a response carrying one of `response_headers`; a request for which `selects`
    is true (its JSON-RPC method); a request path (query excluded)
    ending with one of `path_suffixes` or containing one of `path_contains`; a response
    Content-Type containing one of `content_types`. Sniffing, when none of these said anything:
    an SSE `event:` name in `event_types` or starting with `event_prefix`, a parsed JSON
    object (a body, or the first line of an NDJSON stream) for which `sniff` is true, or the
    first message of an AWS event stream for which `sniff_message` is true. Specs are tried in
    registry order. A stream in one of the `fallback_for` framings that none of these
    identified is read as this dialect (NDJSON as Ollama, an event stream as Bedrock Converse).

    `media_type` is what the mock serves it as; `otel_operation` and `otel_provider` are the
    GenAI semantic-convention values (None: not a GenAI operation); `primary_group` is the
    text group that is the visible answer (choice 0 / candidate 0), or None when all text is
    one message. `output_includes_reasoning`: the usage's output count includes its reasoning
    count (OpenAI's `completion_tokens` does); False when they are reported side by side
    (Gemini's `candidatesTokenCount` beside `thoughtsTokenCount`). `disconnect_cancels` and
    `resumable`: see the fields.
    """

    dialect: Dialect
    assembler: type[Assembler]
    drills: Drills
    path_suffixes: tuple[str, ...] = ()
    path_contains: tuple[str, ...] = ()
    response_headers: tuple[str, ...] = ()
    content_types: tuple[str, ...] = ()  # substrings of a response Content-Type that say it
    event_types: frozenset[str] = frozenset()
    event_prefix: str | None = None
    sniff: Callable[[dict[str, Any]], bool] | None = None
    sniff_message: Callable[[EventMessage], bool] | None = None
    # The request alone selects the dialect (a JSON-RPC method: MCP's or A2A's); tried after
    # the response headers and before the path.
    selects: Callable[[RequestFacts], bool] | None = None
    fallback_for: frozenset[Framing] = frozenset()
    media_type: str = SSE_MEDIA_TYPE
    framing: Framing = Framing.SSE  # the framing its streams use (NDJSON for Ollama)
    otel_operation: str | None = "chat"
    otel_provider: str | None = None
    primary_group: Hashable | None = None
    output_includes_reasoning: bool = True
    # The client leaving before the end is a cancellation (MCP says a disconnect is not one).
    disconnect_cancels: bool = True
    # When the rule depends on the request (MCP's protocol version and method): it decides, and
    # `disconnect_cancels` is not read.
    client_close: Callable[[RequestFacts], ClientClose] | None = None
    # Whether a response to this request can be resumed from an event cursor (SSE `id`,
    # `sequence_number`): the tap then records each event's cursor and hash for the shell's
    # resume ledger (and gives up the shortcut `take_block`, which builds no event).
    resumable: Callable[[RequestFacts], bool] = lambda asked: False

    def on_client_close(self, asked: RequestFacts) -> ClientClose:
        """What the client leaving before the outcome means for this request."""
        if self.client_close is not None:
            return self.client_close(asked)
        return ClientClose.CANCELS if self.disconnect_cancels else ClientClose.INTERRUPTS

    def matches_path(self, path: str) -> bool:
        return (bool(self.path_suffixes) and path.endswith(self.path_suffixes)) or any(
            part in path for part in self.path_contains
        )

    def matches_event_type(self, event_type: str) -> bool:
        if event_type in self.event_types:
            return True
        return self.event_prefix is not None and event_type.startswith(self.event_prefix)


def done_marker(event: SSEEvent | None, raw: bytes) -> bool:
    return event is not None and event.data == "[DONE]"


def generic_error(sequence_number: int) -> bytes:
    """The OpenAI-style error object relays send in-band (Chat, and any unknown SSE API)."""
    error = {"message": "The server had an error (injected)", "type": "server_error"}
    return sse_event({"error": {**error, "code": "injected"}})
