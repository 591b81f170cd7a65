"""The coding agents the tests run, pinned, installed once into a cache folder.

npm packages go to `CACHE/npm/<package>@<version>` (`npm install --prefix`), aider and llm each
into a venv of their own (`CACHE/py/<package>@<version>`): they pin conflicting versions of
their dependencies. CACHE is SSEPROXY_AGENTS_CACHE, else `~/.cache/sseproxy-agents`. A machine
without node and npm (or python venvs) skips with the reason; so does a failed install, with
npm's or pip's last lines. To try newer versions: SSEPROXY_AGENT_VERSIONS="codex=0.172.0,
claude=2.2.0" (names as in PINS)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# Seconds an install may take (npm downloads native binaries of tens of MB).
INSTALL_TIMEOUT = 300


@dataclass(frozen=True, slots=True)
class Agent:
    name: str  # the key in PINS and SSEPROXY_AGENT_VERSIONS
    package: str  # on npm or PyPI
    version: str
    command: str  # the executable it installs
    registry: str  # "npm" or "pypi"


PINS = {
    agent.name: agent
    for agent in (
        Agent("codex", "@openai/codex", "0.171.0", "codex", "npm"),
        Agent("claude", "@anthropic-ai/claude-code", "2.1.332", "claude", "npm"),
        Agent("gemini", "@google/gemini-cli", "0.61.0", "gemini", "npm"),
        Agent("opencode", "opencode-ai", "1.18.33", "opencode", "npm"),
        Agent("qwen", "@qwen-code/qwen-code", "0.24.4", "qwen", "npm"),
        Agent("aider", "aider-chat", "0.86.2", "aider", "pypi"),
        Agent("llm", "llm", "0.36", "llm", "pypi"),
    )
}


def cache_dir() -> Path:
    configured = os.environ.get("SSEPROXY_AGENTS_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "sseproxy-agents"


def pinned(name: str) -> Agent:
    """The agent with its version, or the one SSEPROXY_AGENT_VERSIONS asks for."""
    agent = PINS[name]
    for item in os.environ.get("SSEPROXY_AGENT_VERSIONS", "").split(","):
        key, _, version = item.strip().partition("=")
        if key == name and version:
            return Agent(agent.name, agent.package, version, agent.command, agent.registry)
    return agent


# Why an install failed, by agent and by registry (a timeout: the registry is out of reach),
# so that the session's other tests skip at once instead of trying again.
FAILED: dict[str, str] = {}


def _run(argv: list[str], what: str, agent: Agent) -> None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        FAILED[agent.name] = FAILED[agent.registry] = f"{what} took over {INSTALL_TIMEOUT} s"
        pytest.skip(FAILED[agent.name])
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        FAILED[agent.name] = f"{what} failed ({done.returncode}): {tail}"
        pytest.skip(FAILED[agent.name])


def executable(name: str) -> Path:
    """The agent's command, installed into the cache first if it is not there."""
    agent = pinned(name)
    if reason := FAILED.get(agent.name) or FAILED.get(agent.registry):
        pytest.skip(reason)
    if agent.registry == "npm":
        return _npm(agent)
    return _pypi(agent)


def _npm(agent: Agent) -> Path:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip(f"{agent.name}: node and npm are not installed (the agents are npm packages)")
    prefix = cache_dir() / "npm" / f"{agent.package.replace('/', '+')}@{agent.version}"
    command = prefix / "node_modules" / ".bin" / agent.command
    if not command.exists():
        what = f"npm install {agent.package}@{agent.version}"
        _run(
            [
                npm,
                "install",
                "--prefix",
                str(prefix),
                "--no-audit",
                "--no-fund",
                "--fetch-retries=1",
                f"{agent.package}@{agent.version}",
            ],
            what,
            agent,
        )
    if not command.exists():
        pytest.skip(f"{agent.name}: npm installed no {agent.command} command")
    return command


def _pypi(agent: Agent) -> Path:
    venv = cache_dir() / "py" / f"{agent.package}@{agent.version}"
    command = venv / "bin" / agent.command
    if not command.exists():
        _run(
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            f"a venv for {agent.package}",
            agent,
        )
        what = f"pip install {agent.package}=={agent.version}"
        _run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "-q",
                f"{agent.package}=={agent.version}",
            ],
            what,
            agent,
        )
    if not command.exists():
        pytest.skip(f"{agent.name}: pip installed no {agent.command} command")
    return command
