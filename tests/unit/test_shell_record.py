"""The shell's record is safe for any serialiser, whatever a peer put in it."""

from __future__ import annotations

import orjson

from sseproxy.shell.record import json_safe


def test_json_safe_escapes_lone_surrogates_and_stringifies_huge_integers() -> None:
    value = {"a": "\ud800x", "n": 2**70, "m": -(2**70), "ok": 2**63, "k\udcff": [1.5, None, True]}
    safe = json_safe(value)
    assert safe == {
        "a": "\\ud800x",
        "n": str(2**70),
        "m": str(-(2**70)),
        "ok": 2**63,
        "k\\udcff": [1.5, None, True],
    }
    orjson.dumps(safe)  # would raise on the original


def test_json_safe_keeps_plain_values_unchanged() -> None:
    value = {"s": "wörld ✓", "i": 3, "l": [{"x": 1}]}
    assert json_safe(value) == value
