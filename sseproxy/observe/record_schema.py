"""The record's contract: its JSON Schema (shipped in the package) and its version.

`SCHEMA_VERSION` is MAJOR.MINOR. MINOR grows when a field or an enum value is added (a
consumer that ignores unknown fields keeps working); MAJOR grows when a field is removed or
renamed, or changes its type or meaning.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

SCHEMA_VERSION = "1.4"
SCHEMA_FILE = "record.schema.json"


def schema_text() -> str:
    """The schema as shipped (package data, so an installed proxy carries its contract)."""
    return (resources.files("sseproxy") / "data" / SCHEMA_FILE).read_text("utf-8")


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(schema_text())
    return loaded


def record_fields() -> frozenset[str]:
    """Every top-level field a request.finished record may hold."""
    return frozenset(schema()["$defs"]["request_finished"]["properties"])


def session_fields() -> frozenset[str]:
    """Every top-level field a session.finished record may hold."""
    return frozenset(schema()["$defs"]["session_finished"]["properties"])


def connect_fields() -> frozenset[str]:
    """Every top-level field a connect.finished record holds."""
    return frozenset(schema()["$defs"]["connect_finished"]["properties"])
