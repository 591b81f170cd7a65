"""What the request asked for, as far as the verdict cares: the shell reads the request body
once and hands these few facts to the tap, which checks the response against them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

import msgspec
import orjson

from sseproxy.core.mcp_request import (
    LISTEN,
    call_key,
    protocol_version,
    round_trip,
    rpc_method,
    stateless,
)

# The body is parsed for these facts only up to this size; a larger request (long context,
# images) is forwarded all the same, its facts are just unknown.
MAX_PARSED_BODY_BYTES = 4 * 1024 * 1024
# `n` beyond this is not a real request; the check is skipped rather than trusted.
MAX_CHOICES = 128
# Paths whose operation is a stream whatever the body says.
STREAMING_PATH_SUFFIXES = (
    ":streamGenerateContent",
    ":streamRawPredict",
    "/converse-stream",
    "/invoke-with-response-stream",
)
# Ollama streams unless the body says `"stream": false`.
STREAM_BY_DEFAULT_SUFFIXES = ("/api/chat", "/api/generate")


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """`stream`: the request asked for a streamed response (None: cannot tell).
    `stream_framing`: that stream is expected as SSE or NDJSON, not one JSON document (Gemini
    without `alt=sse` streams a JSON array). `choices`: `n`; `include_usage`: Chat's
    `stream_options.include_usage`; `rpc_id` and `background`: see the fields. The `mcp_*`
    facts and `rpc_method` are a JSON-RPC request's (core/mcp_request.py says why)."""

    model: str | None = None
    stream: bool | None = None
    stream_framing: bool = False
    choices: int | None = None
    include_usage: bool = False
    rpc_id: str | int | None = None  # a JSON-RPC request's `id` (MCP): its response ends it
    background: bool = False  # Responses `background: true`: its stream can be resumed
    rpc_method: str | None = None  # a JSON-RPC request's `method`
    mcp_version: str | None = None  # `MCP-Protocol-Version`, or the body's version
    mcp_call: str | None = None  # the call's identity without its id (`mcp_request.call_key`)
    mcp_round_trip: bool = False  # the request answers an `input_required` result

    @property
    def mcp_stateless(self) -> bool:
        """The request follows MCP 2026-07-28's rules (no resume; a disconnect cancels)."""
        return stateless(self.mcp_version)

    @property
    def mcp_listen(self) -> bool:
        """A `subscriptions/listen` stream: meant to stay open until either side closes it."""
        return self.rpc_method == LISTEN


# A JSON object split into its top-level members, each value left undecoded: the nested rest
# (an agent's `input` and `tools`, ~40 KB a turn) is checked for syntax but builds no object.
_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ABSENT = object()


class Members(Mapping[str, Any]):
    """A request body's top-level members, each value decoded when first asked for. Facts and
    secrets read a handful of small members; decoding the whole body (thousands of objects for
    an agent's turn) cost more CPU than the rest of the request's set-up, in parse and in GC."""

    __slots__ = ("_decoded", "_raw")

    def __init__(self, raw: dict[str, msgspec.Raw]) -> None:
        self._raw = raw
        self._decoded: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        """The member's value (`default` when absent, or when its JSON cannot be decoded
        alone: a number beyond a double or a 64-bit integer, as orjson refuses)."""
        value = self._decoded.get(key, _ABSENT)
        if value is _ABSENT:
            raw = self._raw.get(key)
            if raw is None:
                return default
            try:
                value = orjson.loads(memoryview(raw))
            except orjson.JSONDecodeError:
                value = _ABSENT
            self._decoded[key] = value
        return default if value is _ABSENT else value

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _ABSENT)
        if value is _ABSENT:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


def body_members(body: bytes) -> Members | None:
    """A request body's top-level members (best effort: None unless the body is one JSON
    object, within the bound). As `parse_body`, but only the members read get decoded."""
    if body and len(body) <= MAX_PARSED_BODY_BYTES and body.lstrip()[:1] == b"{":
        try:
            return Members(_MEMBERS.decode(body))
        except msgspec.DecodeError:
            return None
    return None


def parse_body(body: bytes) -> Any:
    """A request body's JSON object (best effort: None unless it is one, within the bound)."""
    if body and len(body) <= MAX_PARSED_BODY_BYTES and body.lstrip()[:1] == b"{":
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
    return None


def request_facts(
    path: str, query: str, body: bytes, parsed: Any = ..., mcp_version: str | None = None
) -> RequestFacts:
    """Facts from the decoded request path, its query string and its body (best effort).
    `parsed`: `body_members(body)` (or `parse_body(body)`), when the caller has it already
    (one parse per request); `mcp_version`: the request's `MCP-Protocol-Version` header."""
    obj = body_members(body) if parsed is ... else parsed
    fields: Members | dict[str, Any] = obj if isinstance(obj, Members | dict) else {}
    model = fields.get("model")
    if not isinstance(model, str):
        model = _model_from_path(path)
    stream: bool | None = None
    framing = True
    asked_stream = fields.get("stream")
    if isinstance(asked_stream, bool):
        stream = asked_stream
    elif path.endswith(STREAM_BY_DEFAULT_SUFFIXES):
        stream = True
    if path.endswith(STREAMING_PATH_SUFFIXES):
        stream = True
        if path.endswith(":streamGenerateContent"):
            framing = "sse" in parse_qs(query).get("alt", [])
    n = fields.get("n")
    choices = (
        n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_CHOICES else None
    )
    options = fields.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    rpc = fields.get("jsonrpc") == "2.0"
    rpc_id = fields.get("id") if rpc else None
    if not isinstance(rpc_id, str | int) or isinstance(rpc_id, bool):
        rpc_id = None
    version = protocol_version(mcp_version, fields if rpc else {})
    return RequestFacts(
        model=model,
        stream=stream,
        stream_framing=bool(stream) and framing,
        choices=choices,
        include_usage=bool(stream) and include_usage,
        rpc_id=rpc_id,
        background=fields.get("background") is True,
        rpc_method=rpc_method(fields) if rpc else None,
        mcp_version=version,
        mcp_call=call_key(fields) if rpc and rpc_id is not None else None,
        mcp_round_trip=rpc and round_trip(fields),
    )


def _model_from_path(path: str) -> str | None:
    """Gemini and Bedrock name the model in the path: `/models/{model}:method`, `/model/{id}/`."""
    if "/models/" in path:
        return path.split("/models/", 1)[1].split(":", 1)[0].split("/", 1)[0] or None
    if "/model/" in path:  # a Bedrock id keeps its colon (`...-v1:0`); the SDK encodes it
        return unquote(path.split("/model/", 1)[1].split("/", 1)[0]) or None
    return None
