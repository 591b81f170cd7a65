"""Codex CLI (`codex exec`) through `sseproxy run`, against the fake provider: `run` gives it
a provider of its own with `supports_websockets = true`, so its turns go over the Responses
WebSocket (GET /v1/responses, upgraded); with `supports_websockets=false` added after
them, over HTTP (POST /v1/responses, SSE). Each test asserts what Codex did (exit code,
answer, the requests the fake got and on which transport) and the records."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.install import executable
from tests.agents.runner import AgentResult, AgentRunner
from tests.product.agent_replies import ANSWER, PROOF_FILE, PROOF_TEXT

pytestmark = pytest.mark.agents
KEY = "sk-test-codex-key-0123456789"
# Codex's own config: no analytics, feedback or update checks (offline).
CONFIG = """check_for_update_on_startup = false
[analytics]
enabled = false
[feedback]
enabled = false
"""
HTTP = ("-c", "model_providers.sseproxy.supports_websockets=false")


def codex(agent_run: AgentRunner, model: str, *extra: str, prompt: str = "do it") -> AgentResult:
    home = agent_run.home / ".codex"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(CONFIG, "utf-8")
    argv = [
        str(executable("codex")),
        *extra,
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "-m",
        model,
        prompt,
    ]
    env = {"OPENAI_API_KEY": KEY, "CODEX_HOME": str(home)}
    return agent_run(argv, model, env)


def assert_websocket_only(run: AgentResult) -> None:
    """Every model request went over the WebSocket: no HTTP fallback."""
    assert run.seen, run.explain()
    assert {s.transport for s in run.seen} == {"websocket"}, run.explain()
    assert all(
        s.headers.get("openai-beta", "").startswith("responses_websockets") for s in run.seen
    )
    assert not [r for r in run.streams() if r["method"] == "POST"], run.explain()


def test_answer_over_the_websocket(agent_run: AgentRunner) -> None:
    run = codex(agent_run, "answer-codex-ws")
    assert run.code == 0, run.explain()
    assert ANSWER in run.stdout
    assert_websocket_only(run)
    turns = [r for r in run.streams() if r["model"] == "answer-codex-ws"]
    assert turns and {r["state"] for r in turns} == {"completed"}, run.explain()
    assert {(r["method"], r["path"], r["status"], r["transport"]) for r in turns} == {
        ("GET", "/v1/responses", 101, "websocket")
    }
    (session,) = run.sessions()
    assert session["closed_by"] == "client" and session["states"] == {"completed": len(turns)}
    assert "codex exited with 0" in run.stderr and "WebSocket sessions" in run.stderr
    assert KEY not in run.log_file.read_text()


def test_tool_call_over_the_websocket(agent_run: AgentRunner) -> None:
    run = codex(agent_run, "tool-codex-ws")
    assert run.code == 0, run.explain()
    assert (run.work / PROOF_FILE).read_text().strip() == PROOF_TEXT
    assert ANSWER in run.stdout
    assert_websocket_only(run)
    results = [s for s in run.seen if b"function_call_output" in s.body]
    assert len(results) == 1, run.explain()
    turns = [r for r in run.streams() if r["model"] == "tool-codex-ws"]
    called = [r for r in turns if r["tool_calls"]]
    assert len(called) == 1 and called[0]["tool_calls"][0]["name"] == "exec_command", run.explain()
    assert {r["state"] for r in turns} == {"completed"}


def test_cut_over_the_websocket_is_retried_over_the_websocket(agent_run: AgentRunner) -> None:
    run = codex(agent_run, "cutonce-codex-ws")
    assert run.code == 0, run.explain()
    assert ANSWER in run.stdout
    assert_websocket_only(run)
    turns = [r for r in run.streams() if r["model"] == "cutonce-codex-ws"]
    assert [r["state"] for r in turns].count("interrupted") == 1, run.explain()
    cut = next(r for r in turns if r["state"] == "interrupted")
    assert cut["interruption"]["reason"] in ("upstream_reset", "upstream_closed")
    assert turns[-1]["state"] == "completed"
    ends = sorted(str(s["end_reason"]) for s in run.sessions())
    assert len(ends) == 2 and ends[0] == "client_disconnected" and ends[1].startswith("upstream")
    assert "cuts: " in run.stderr and "by the upstream" in run.stderr


def test_in_band_failure_over_the_websocket_falls_back_to_http(agent_run: AgentRunner) -> None:
    """`response.failed` on every attempt: Codex retries over the WebSocket, then falls back
    to HTTP and retries there, and gives up. Every attempt is one failed record."""
    run = codex(agent_run, "error-codex-ws")
    assert run.code != 0, run.explain()
    assert ANSWER not in run.stdout
    asked = [s for s in run.seen if b'"generate":false' not in s.body.replace(b" ", b"")]
    transports = [s.transport for s in asked]
    first_http = transports.index("http")
    assert first_http >= 2 and set(transports[:first_http]) == {"websocket"}, transports
    assert set(transports[first_http:]) == {"http"}, transports
    failed = [r for r in run.streams() if r["state"] == "failed"]
    assert len(failed) == len(asked), run.explain()
    assert {(r.get("transport", "http"), r["error"]["code"]) for r in failed} == {
        ("websocket", "server_error"),
        ("http", "server_error"),
    }
    assert f"streams: {len(failed)} failed" in run.stderr
    # every attempt after the first is linked to the one before it; the first over HTTP as
    # the WebSocket's fallback
    first_post = next(r for r in failed if r.get("transport", "http") == "http")
    assert first_post["retry"]["linked_by"] == "websocket_fallback", run.explain()
    assert all(r.get("retry") for r in failed[1:]), run.explain()


def test_answer_over_http(agent_run: AgentRunner) -> None:
    run = codex(agent_run, "answer-codex-http", *HTTP)
    assert run.code == 0, run.explain()
    assert ANSWER in run.stdout
    assert {s.transport for s in run.seen} == {"http"}, run.explain()
    turns = [r for r in run.streams() if r["model"] == "answer-codex-http"]
    assert [(r["method"], r["path"], r["state"]) for r in turns] == [
        ("POST", "/v1/responses", "completed")
    ], run.explain()
    assert not run.sessions()


def test_cut_over_http_is_retried(agent_run: AgentRunner) -> None:
    run = codex(agent_run, "cutonce-codex-http", *HTTP)
    assert run.code == 0, run.explain()
    assert ANSWER in run.stdout
    turns = [r for r in run.streams() if r["model"] == "cutonce-codex-http"]
    assert [r["state"] for r in turns] == ["interrupted", "completed"], run.explain()
    assert turns[0]["interruption"]["reason"] == "upstream_closed"
    assert len(run.seen) == 2
    # Codex writes client_metadata from a hash map: the retry is the same request by meaning
    assert turns[1]["retry"]["of"] == turns[0]["request_id"], run.explain()
    assert turns[1]["retry"]["linked_by"] in ("same_body", "same_meaning")


def test_rate_limit_over_http_is_retried(agent_run: AgentRunner) -> None:
    run = codex(agent_run, "ratelimit-codex-http", *HTTP)
    assert run.code == 0, run.explain()
    assert ANSWER in run.stdout
    turns = [r for r in run.streams() if r["model"] == "ratelimit-codex-http"]
    assert [(r["state"], r["status"]) for r in turns] == [
        ("http_error", 429),
        ("completed", 200),
    ], run.explain()
    assert turns[0]["error"]["code"] == "rate_limit_exceeded"


def test_tool_call_over_http(agent_run: AgentRunner, tmp_path: Path) -> None:
    run = codex(agent_run, "tool-codex-http", *HTTP)
    assert run.code == 0, run.explain()
    assert (run.work / PROOF_FILE).read_text().strip() == PROOF_TEXT
    turns = [r for r in run.streams() if r["model"] == "tool-codex-http"]
    assert [r["state"] for r in turns] == ["completed", "completed"], run.explain()
    assert turns[0]["tool_calls"][0]["name"] == "exec_command"
