"""What an MCP request says about the rules its response follows: the protocol version (from the
`MCP-Protocol-Version` header or the body), the JSON-RPC method, and the identity of the call
that a retry repeats.

The version decides the rules. Up to 2025-11-25 a session may resume a cut stream with
`Last-Event-ID` and a disconnect is no cancellation. From 2026-07-28 (the stateless revision:
`docs/specification/2026-07-28/changelog.mdx` and `basic/transports/streamable-http.mdx` of
modelcontextprotocol/modelcontextprotocol) nothing resumes, closing the response stream *is* the
cancellation of the request, and a client re-issues a lost request under a new id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import orjson

# The first revision without sessions and resumability; versions are dates, compared as such.
STATELESS_VERSION = "2026-07-28"
VERSION_HEADER = "mcp-protocol-version"
# Where a 2026-07-28 request names its version when it has no header (SEP-2575).
META_VERSION = "io.modelcontextprotocol/protocolVersion"
LISTEN = "subscriptions/listen"
# A version is a date; anything else is not one (and is not kept: the peer controls it).
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# A method name longer than this is no MCP method; the record keeps none.
MAX_METHOD_CHARS = 128


def protocol_version(header: str | None, fields: Mapping[str, Any]) -> str | None:
    """The request's protocol version: the header, else `initialize`'s `protocolVersion`, else
    the `_meta` entry of a stateless request. None when none is a `YYYY-MM-DD` date."""
    params = fields.get("params")
    params = params if isinstance(params, dict) else {}
    meta = params.get("_meta")
    candidates = (
        header,
        params.get("protocolVersion") if fields.get("method") == "initialize" else None,
        meta.get(META_VERSION) if isinstance(meta, dict) else None,
    )
    for value in candidates:
        if isinstance(value, str) and _DATE.fullmatch(value.strip()):
            return value.strip()
    return None


def stateless(version: str | None) -> bool:
    """The version follows the 2026-07-28 rules (or a later date's)."""
    return version is not None and version >= STATELESS_VERSION


def rpc_method(fields: Mapping[str, Any]) -> str | None:
    method = fields.get("method")
    if isinstance(method, str) and len(method) <= MAX_METHOD_CHARS:
        return method
    return None


def call_key(fields: Mapping[str, Any]) -> str | None:
    """The identity of a call, without its JSON-RPC id: the method, the params' `name` and its
    `arguments` (objects with sorted keys), digested to 16 bytes. A stateless client re-issues
    a lost request with a new id, so the retry ledger recognises it by this, not by its bytes.
    `inputResponses`, `requestState` and `_meta` stay out: a multi-round-trip request repeats
    the call with them added."""
    method = rpc_method(fields)
    if method is None:
        return None
    params = fields.get("params")
    params = params if isinstance(params, dict) else {}
    identity = [method, params.get("name"), params.get("arguments"), params.get("uri")]
    try:
        canonical = orjson.dumps(identity, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):  # a value orjson cannot write again
        return None
    return hashlib.blake2b(canonical, digest_size=16).hexdigest()


def round_trip(fields: Mapping[str, Any]) -> bool:
    """The request answers an `input_required` result (it carries `inputResponses`)."""
    params = fields.get("params")
    return isinstance(params, dict) and "inputResponses" in params
