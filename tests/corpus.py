"""Where the recorded corpus lives: SSEPROXY_CORPUS, else ../shared/corpus beside the checkout."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def corpus_dir() -> Path | None:
    configured = os.environ.get("SSEPROXY_CORPUS")
    candidates = [Path(configured)] if configured else [ROOT.parent / "shared" / "corpus"]
    for path in candidates:
        if (path / "MANIFEST.json").is_file():
            return path
    return None


def manifest() -> list[dict[str, Any]]:
    root = corpus_dir()
    if root is None:
        return []
    entries: list[dict[str, Any]] = json.loads((root / "MANIFEST.json").read_text("utf-8"))
    return entries


def body(entry: dict[str, Any]) -> bytes:
    root = corpus_dir()
    assert root is not None
    return (root / entry["file"]).read_bytes()
