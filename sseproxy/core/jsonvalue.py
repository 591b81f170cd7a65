"""JSON parsing for everything the core reads (framing readers and dialects alike), kept below
both so that a reader never has to import the dialects layer."""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: str | bytes) -> Any:
    """Parse JSON fast; raises ValueError on invalid input (callers record the anomaly)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)  # orjson rejects some valid JSON, e.g. integers over 64 bits
