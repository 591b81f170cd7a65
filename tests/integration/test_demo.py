"""`sseproxy demo`: each bundled case shows the record and what the official SDK concluded,
in plain words; the output can be cut short by the reader without a traceback."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from sseproxy.tools.demo import GLOSSARY, run


def conclusions(text: str) -> dict[str, str]:
    """Case name -> the client's conclusion line printed under it."""
    out: dict[str, str] = {}
    case = ""
    for line in text.splitlines():
        if line.startswith(">>> "):
            case = line[4:].split(":", 1)[0]
        elif line.startswith("    ") and case:
            out[case] = line.strip()
    return out


async def test_the_demo_shows_each_record_beside_the_clients_conclusion() -> None:
    out = io.StringIO()
    assert await run("json", out) == 0
    text = out.getvalue()
    states = {json.loads(line)["state"] for line in text.splitlines() if line.startswith("{")}
    assert states == {"completed", "incomplete", "interrupted", "unconfirmed", "failed"}
    said = conclusions(text)
    assert said["openai-chat/completed"].startswith("openai SDK ")
    assert (
        "returned normally, finish_reason='stop', 31 chars — correct"
        in said["openai-chat/completed"]
    )
    assert (
        "returned normally, finish_reason=None, 18 chars — it did not notice that no finish "
        "reason came" in said["openai-chat/done-after-failure"]
    )
    assert "finish_reason='length', 41 chars" in said["openai-chat/max-tokens"]
    overloaded = said["anthropic-messages/overloaded-after-200"]
    assert overloaded.startswith("anthropic SDK ") and "raised" in overloaded
    assert "overloaded_error" in overloaded and "it noticed" in overloaded
    cut = said["openai-chat/cut-mid-sentence"]
    assert cut.startswith("openai SDK ") and ("raised" in cut or "did not notice the cut" in cut)
    for term, _ in GLOSSARY:
        assert f"\n  {term} " in text
    for term in ("ttft", "finish", "partial event"):
        assert any(t == term for t, _ in GLOSSARY)


async def test_without_the_sdks_the_demo_says_what_they_would_do(monkeypatch: Any) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # `import openai` raises ImportError
    monkeypatch.setitem(sys.modules, "anthropic", None)
    out = io.StringIO()
    assert await run("console", out) == 0
    said = conclusions(out.getvalue())
    assert said["openai-chat/done-after-failure"] == (
        "openai SDK (not installed; what it would do): would return normally, "
        "finish_reason=None, 18 chars — it did not notice that no finish reason came "
        "(sseproxy: unconfirmed)"
    )
    assert said["anthropic-messages/overloaded-after-200"].startswith(
        "anthropic SDK (not installed; what it would do): would raise an API error "
        "(overloaded_error)"
    )


@pytest.mark.parametrize("lines", [1, 3])
def test_a_reader_that_leaves_early_ends_the_demo_quietly(lines: int) -> None:
    """`sseproxy demo | head -N`: nothing on stderr, and the status of a program SIGPIPE
    ended (as every command that prints)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sseproxy", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    got = [proc.stdout.readline() for _ in range(lines)]
    proc.stdout.close()  # as head does after its lines
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert all(got)
    assert err.decode() == ""
    assert proc.returncode == 141
