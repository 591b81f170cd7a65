"""A dialect's behaviour is a declaration on its spec, read from there: the core outside the
dialects layer names no dialect, and a dialect registered next to the others (here a test-only
NDJSON one) gets its own assembler and drills without a line changed elsewhere."""

from __future__ import annotations

import ast
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest

from sseproxy.core import StreamTap, dialects
from sseproxy.core.dialects import Assembler, DialectSpec
from sseproxy.core.dialects.base import Outcome
from sseproxy.core.dialects.spec import NDJSON_MEDIA_TYPE, Drills
from sseproxy.core.events import Framing, Line
from sseproxy.core.inject import keepalive
from sseproxy.core.verdict import Dialect, State

CORE = Path(__file__).resolve().parents[2] / "sseproxy" / "core"


class Probe(StrEnum):
    NDJSON = "probe-ndjson"


class ProbeAssembler(Assembler):
    dialect = Probe.NDJSON  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[bytes] = []

    def on_line(self, line: Line) -> None:
        self.lines.append(line.data)
        self.terminal = b'"end"' in line.data

    def conclude(self, partial: bool, body_complete: bool) -> Outcome:
        return Outcome(State.COMPLETED if self.terminal else State.INTERRUPTED)


PROBE = DialectSpec(
    dialect=Probe.NDJSON,  # type: ignore[arg-type]
    assembler=ProbeAssembler,
    drills=Drills(
        is_terminal=lambda event, raw: b'"end"' in raw,
        error=lambda _: b'{"probe": "error"}\n',
        end_marker=b'{"end": true}\n',
        keepalive=b"\r\n",  # not Ollama's "\n": whose keep-alive a drill sends is visible
    ),
    sniff=lambda obj: "probe" in obj,
    media_type=NDJSON_MEDIA_TYPE,
    framing=Framing.NDJSON,
)
STREAM = b'{"probe": 1, "text": "hi"}\n{"probe": 2}\n{"end": true}\n'


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """PROBE as one more registry line, after the real dialects."""
    monkeypatch.setattr(dialects, "SPECS", (*dialects.SPECS, PROBE))
    monkeypatch.setitem(dialects.BY_DIALECT, Probe.NDJSON, PROBE)  # type: ignore[arg-type]


@pytest.mark.parametrize("content_type", [None, "application/jsonl", "application/x-ndjson"])
def test_a_second_ndjson_dialect_found_by_sniffing_gets_its_own_assembler(
    registered: None, content_type: str | None
) -> None:
    tap = StreamTap(content_type=content_type, options=None)
    for i in range(len(STREAM)):  # one byte at a time: the decision waits for the first line
        tap.feed(STREAM[i : i + 1])
    verdict = tap.close()
    assert isinstance(tap.assembler, ProbeAssembler)
    assert tap.assembler.lines == STREAM.splitlines()
    assert (verdict.dialect, verdict.state) == (Probe.NDJSON, State.COMPLETED)


def test_an_ndjson_stream_no_dialect_recognises_is_read_by_the_declared_fallback(
    registered: None,
) -> None:
    tap = StreamTap(content_type="application/jsonl")
    tap.feed(b'{"something": "else"}\n')
    assert tap.close().dialect == Dialect.OLLAMA  # Ollama's spec: fallback_for NDJSON


def test_a_drill_on_the_second_ndjson_dialect_sends_its_own_keepalive(registered: None) -> None:
    assert keepalive(Probe.NDJSON, ndjson=True) == b"\r\n"  # type: ignore[arg-type]
    assert keepalive(None, ndjson=True) == b"\n"  # unknown: the NDJSON fallback's


def dialect_names(tree: ast.AST) -> set[str]:
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "Dialect"
    }


def dialects_imports(tree: ast.AST) -> set[str]:
    """What a core module imports from the dialects layer (`.dialects`, `.dialects.x`)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        module = node.module if isinstance(node, ast.ImportFrom) and node.level == 1 else None
        if module and (module == "dialects" or module.startswith("dialects.")):
            found.add(module)
    return found


def test_the_core_outside_the_dialects_names_no_dialect() -> None:
    """Only `Dialect.SSE`, the name of a stream of no known API, may appear; the framing
    readers sit below the dialects, and no module reaches into one dialect's module."""
    trees: dict[str, Any] = {path.stem: ast.parse(path.read_text()) for path in CORE.glob("*.py")}
    del trees["verdict"]  # where the names are defined
    named = {name: dialect_names(tree) - {"SSE"} for name, tree in trees.items()}
    assert {name: found for name, found in named.items() if found} == {}
    imported = {name: dialects_imports(tree) for name, tree in trees.items()}
    allowed = {"dialects", "dialects.base"}
    assert {name: found - allowed for name, found in imported.items() if found - allowed} == {}
    assert imported["readers"] == set()
