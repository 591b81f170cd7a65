"""The record schema as the tests apply it: one compiled validator for every record a test
captures (the integration suite's `logs` fixture checks each record it saw)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jsonschema

from sseproxy.observe.record_schema import schema

VALIDATOR = jsonschema.Draft202012Validator(
    schema(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
)


def invalid_records(records: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    """(request_id, the first schema error) of each record that does not validate."""
    out = []
    for record in records:
        error = jsonschema.exceptions.best_match(VALIDATOR.iter_errors(record))
        if error is not None:
            out.append((str(record.get("request_id")), f"{error.json_path}: {error.message}"))
    return out
