"""The request header sets of the coding agents (tests/data/agent_headers/*.json): each file
names where its header names come from; the values are made up. Each says the client and run
the record must name, which headers hold credentials and which identifiers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).parent / "data" / "agent_headers"
AGENTS: dict[str, dict[str, Any]] = {
    path.stem: json.loads(path.read_text()) for path in sorted(FOLDER.glob("*.json"))
}
