"""Who sent a request, and the agent run it belongs to, read from its headers.

A coding agent says its name and version in its User-Agent (`claude-cli/2.1.3 (external, cli)`,
`GeminiCLI/0.61.0 (linux; x64)`, `QwenCode/0.15.0 (linux; x64)`, `opencode/1.18.0`), and some in
their own headers (Codex: `originator: codex_exec`, `version: 0.171.0`). An SDK under an agent
says its own (`OpenAI/Python 1.99.9`: aider through litellm, llm). Some agents also name the run
the user started, on every request of it: Codex's `session-id` (older Codex `session_id`),
Claude Code's `x-claude-code-session-id`, opencode's `x-session-affinity`. These are
identifiers, not credentials (`redact.names_credential`): the record keeps them.

Bounded: a name or version is cut at MAX_NAME_CHARS; a run id longer than MAX_RUN_ID_CHARS, or
holding a control character or a space, is not taken (it would not group anything anyway).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_NAME_CHARS = 64
MAX_RUN_ID_CHARS = 128
# Headers naming the agent run, in the order they are looked at (lower case).
RUN_HEADERS = (
    "session-id",  # Codex
    "session_id",  # Codex before 0.50
    "x-claude-code-session-id",  # Claude Code
    "x-session-affinity",  # opencode, to a provider of yours
    "x-opencode-session",  # opencode, to its own
)
# User-Agent products that are agents, by the name the record gives them (lower case).
AGENT_PRODUCTS = {
    "claude-cli": "claude-code",
    "geminicli": "gemini-cli",
    "qwencode": "qwen-code",
    "qwen-code": "qwen-code",
    "opencode": "opencode",
    "aider": "aider",
    "llm": "llm",
}
# Codex's `originator` values (`codex_cli_rs`, `codex_exec`, `codex_vscode`, ...) start so.
CODEX_ORIGINATOR = "codex"
# The SDKs' own form: `OpenAI/Python 1.99.9`, `Anthropic/JS 0.60.0` (the product is two words).
_SDK_AGENT = re.compile(
    r"(?P<name>[A-Za-z]+/(?:Python|JS|Go|Java|Ruby))\s+v?(?P<version>[^\s;()]+)"
)
# Any other: the first `product/version` token.
_PRODUCT = re.compile(r"(?P<name>[^\s/;()]+)(?:/(?P<version>[^\s;()]+))?")
_RUN_ID = re.compile(r"[\x21-\x7e]+")


@dataclass(frozen=True, slots=True)
class Client:
    """The program that sent a request, as it names itself."""

    name: str
    version: str | None = None

    def fields(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}


def _cut(text: str | None) -> str | None:
    return None if not text else text[:MAX_NAME_CHARS]


def client_of(headers: Mapping[str, str]) -> Client | None:
    """(`headers` by lower-case name.) The client a request's headers name: Codex by its
    `originator` and `version`, any other by its User-Agent's first product (an agent's known
    product by the agent's name)."""
    originator = (headers.get("originator") or "").strip()
    if originator.lower().startswith(CODEX_ORIGINATOR):
        return Client("codex", _cut((headers.get("version") or "").strip()))
    agent = (headers.get("user-agent") or "").strip()
    if not agent:
        return None
    sdk = _SDK_AGENT.match(agent)
    if sdk is not None:
        return Client(sdk["name"].lower().replace("/", "-")[:MAX_NAME_CHARS], _cut(sdk["version"]))
    product = _PRODUCT.match(agent)
    if product is None:
        return Client(agent[:MAX_NAME_CHARS])
    name = product["name"]
    lowered = name.lower()
    if lowered.startswith(CODEX_ORIGINATOR + "_"):  # codex_cli_rs/0.171.0, without `originator`
        return Client("codex", _cut(product["version"]))
    return Client(AGENT_PRODUCTS.get(lowered, name)[:MAX_NAME_CHARS], _cut(product["version"]))


def run_of(headers: Mapping[str, str]) -> str | None:
    """(`headers` by lower-case name.) The agent run a request belongs to, where its client
    names one (RUN_HEADERS)."""
    for name in RUN_HEADERS:
        value = headers.get(name)
        if value is None:
            continue
        value = value.strip()
        if 0 < len(value) <= MAX_RUN_ID_CHARS and _RUN_ID.fullmatch(value):
            return value
    return None


def lowered(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers by lower-case name (the first of a repeated one), for the lookups above."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        out.setdefault(name.lower(), value)
    return out


def client_fields(headers: Mapping[str, str]) -> dict[str, Any]:
    """The record's `client` and `run_id`."""
    by_name = lowered(headers)
    client = client_of(by_name)
    return {"client": client.fields() if client is not None else None, "run_id": run_of(by_name)}
