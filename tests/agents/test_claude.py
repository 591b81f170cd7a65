"""Claude Code (`claude -p`) through `sseproxy run` (ANTHROPIC_BASE_URL), against the fake
provider: an answer, a Bash tool call it runs, a cut, an in-band `overloaded_error`, a 429.
Claude Code recovers from a broken stream by asking the same turn again without `stream`:
the records show that second request as what it is, a non-streamed answer."""

from __future__ import annotations

import pytest

from tests.agents.install import executable
from tests.agents.runner import AgentResult, AgentRunner
from tests.product.agent_replies import ANSWER, PROOF_FILE, PROOF_TEXT

pytestmark = pytest.mark.agents
KEY = "sk-ant-test-claude-key-0123456789"


def claude(agent_run: AgentRunner, model: str, *extra: str) -> AgentResult:
    argv = [str(executable("claude")), "-p", "do it", "--model", model, *extra]
    env = {"ANTHROPIC_API_KEY": KEY, "CLAUDE_CODE_MAX_RETRIES": "2"}
    return agent_run(argv, model, env)


def turns(run: AgentResult, model: str) -> list[dict[str, object]]:
    return [r for r in run.streams() if r["model"] == model]


def test_answer(agent_run: AgentRunner) -> None:
    run = claude(agent_run, "answer-claude")
    assert run.code == 0, run.explain()
    assert ANSWER in run.stdout
    mine = turns(run, "answer-claude")
    assert [(r["path"], r["state"], r["dialect"]) for r in mine] == [
        ("/v1/messages?beta=true", "completed", "anthropic-messages")
    ], run.explain()
    assert len(run.seen) == 1 and run.seen[0].headers.get("x-api-key") == KEY
    assert KEY not in run.log_file.read_text()
    assert "claude exited with 0" in run.stderr


def test_tool_call(agent_run: AgentRunner) -> None:
    run = claude(agent_run, "tool-claude", "--allowedTools", "Bash")
    assert run.code == 0, run.explain()
    assert (run.work / PROOF_FILE).read_text().strip() == PROOF_TEXT
    assert ANSWER in run.stdout
    mine = turns(run, "tool-claude")
    assert [r["state"] for r in mine] == ["completed", "completed"], run.explain()
    assert [c["name"] for c in mine[0]["tool_calls"]] == ["Bash"]  # type: ignore[index]
    assert mine[0]["finish_reason"] == "tool_use"
    assert sum(b"tool_result" in s.body for s in run.seen) == 1


def test_cut_is_retried(agent_run: AgentRunner) -> None:
    run = claude(agent_run, "cutonce-claude")
    assert run.code == 0, run.explain()
    assert ANSWER in run.stdout
    mine = turns(run, "cutonce-claude")
    assert [r["state"] for r in mine] == ["interrupted", "completed"], run.explain()
    assert mine[0]["interruption"]["reason"] == "upstream_closed"  # type: ignore[index]
    assert len(run.seen) == 2
    assert "cuts: 1 upstream_closed by the upstream" in run.stderr
    assert mine[1]["retry"]["of"] == mine[0]["request_id"], run.explain()  # type: ignore[index]


def test_in_band_overloaded_error(agent_run: AgentRunner) -> None:
    """`overloaded_error` after HTTP 200: Claude Code asks again without `stream`, gets 529,
    and gives up with a non-zero exit. The streamed attempt is `failed`, the retry an
    http_error."""
    run = claude(agent_run, "error-claude")
    assert run.code != 0, run.explain()
    assert ANSWER not in run.stdout
    mine = turns(run, "error-claude")
    assert mine and mine[0]["state"] == "failed", run.explain()
    assert mine[0]["error"]["type"] == "overloaded_error"  # type: ignore[index]
    streamed = [s for s in run.seen if b'"stream":true' in s.body.replace(b" ", b"")]
    assert len(streamed) == sum(r["stream"] is True for r in mine)
    assert len(mine) == len(run.seen)
    # the same turn asked again without `stream`: linked to the streamed attempt
    again = next(r for r in mine[1:] if r["stream"] is not True)
    assert again["retry"]["linked_by"] == "without_stream", run.explain()  # type: ignore[index]


def test_rate_limit_is_retried(agent_run: AgentRunner) -> None:
    run = claude(agent_run, "ratelimit-claude")
    assert run.code == 0, run.explain()
    assert ANSWER in run.stdout
    mine = turns(run, "ratelimit-claude")
    assert [(r["state"], r["status"]) for r in mine] == [("http_error", 429), ("completed", 200)], (
        run.explain()
    )
    assert mine[0]["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert mine[1]["retry"]["of"] == mine[0]["request_id"], run.explain()  # type: ignore[index]
