"""The recorded corpus: `tests/corpus/` in this repository, or `SSEPROXY_CORPUS` if set.

A missing corpus is a failure with a message, never a skip: the corpus ships with the
checkout, so its absence means a broken clone or a wrong `SSEPROXY_CORPUS`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

IN_REPO = Path(__file__).resolve().parent / "corpus"


def corpus_dir() -> Path:
    configured = os.environ.get("SSEPROXY_CORPUS")
    root = Path(configured) if configured else IN_REPO
    if not (root / "MANIFEST.json").is_file():
        where = f"SSEPROXY_CORPUS={configured}" if configured else "tests/corpus/"
        raise FileNotFoundError(f"corpus missing: no MANIFEST.json in {where}")
    return root


def manifest() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads((corpus_dir() / "MANIFEST.json").read_text("utf-8"))
    return entries


def body(entry: dict[str, Any]) -> bytes:
    return (corpus_dir() / entry["file"]).read_bytes()


def file(name: str) -> bytes:
    """One body by its path inside the corpus, e.g. `openai-chat/basic-text-no-usage.sse`."""
    return (corpus_dir() / name).read_bytes()
