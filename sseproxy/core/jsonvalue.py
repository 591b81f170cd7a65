"""JSON parsing for everything the core reads (framing readers and dialects alike), kept below
both so that a reader never has to import the dialects layer."""

from __future__ import annotations

import json
from typing import Any

import orjson


class JSONTooDeep(ValueError):
    """Nested deeper than the parsers go (orjson stops at 1024 levels, `json` at the recursion
    limit): one undecodable value, like a syntax error, never an internal error."""


def loads(data: str | bytes) -> Any:
    """Parse JSON fast; raises ValueError on invalid input (callers record the anomaly).

    The one JSON decode of the core: every value a peer sends goes through here, so a value no
    parser takes (depth, syntax, UTF-8) costs that one event and the analysis goes on.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            return json.loads(data)  # orjson rejects some valid JSON, e.g. integers over 64 bits
        except RecursionError:
            raise JSONTooDeep("JSON nested too deep") from None
