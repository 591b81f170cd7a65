"""Codex CLI signed in with a ChatGPT account, through `sseproxy run --intercept`: no provider
override, no base URL, only the variables `run` sets. Codex sends its turns to
https://chatgpt.com/backend-api/codex/responses as it does for a real account; the intercept
listener terminates that TLS and the proxy's upstream leg goes, through the egress proxy the
run itself was started with (HTTPS_PROXY of the proxy, not of Codex), to a local TLS stand-in
whose certificate names chatgpt.com (the proxy trusts its CA with --upstream-ca-file). The
login is a crafted auth.json: unsigned tokens whose expiry is far and whose refresh is recent,
so that Codex never asks auth.openai.com for new ones (were it to, the tunnel would fail:
the machine is offline, and the test would see it)."""

from __future__ import annotations

import base64
import datetime
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agents.install import executable
from tests.agents.runner import OFFLINE_ENV, RUN_TIMEOUT, AgentResult, AgentRunner
from tests.product.agent_replies import ANSWER, PROOF_FILE, PROOF_TEXT
from tests.product.fake_provider import FakeProvider
from tests.product.tls_front import Fronts

pytestmark = pytest.mark.agents
ACCOUNT = "acct-sseproxy-test"
CONFIG = """check_for_update_on_startup = false
[analytics]
enabled = false
[feedback]
enabled = false
"""
CHATGPT = "chatgpt.com"
BACKEND_PATH = "/backend-api/codex/responses"


@pytest.fixture(scope="module")
def chatgpt(fake: FakeProvider) -> Iterator[Fronts]:
    fronts = Fronts(int(fake.url.rsplit(":", 1)[1]), names=(CHATGPT,)).start()
    yield fronts
    fronts.stop()


def jwt(claims: dict[str, Any]) -> str:
    """An unsigned JWT (Codex reads its claims and never checks a signature: the backend does)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.c2ln"


def chatgpt_login(home: Path) -> str:
    """auth.json as `codex login` writes it for a ChatGPT account; the access token."""
    now = datetime.datetime.now(datetime.UTC)
    exp = int((now + datetime.timedelta(days=30)).timestamp())
    auth = {
        "chatgpt_account_id": ACCOUNT,
        "chatgpt_plan_type": "plus",
        "chatgpt_user_id": "user-sseproxy-test",
    }
    id_token = jwt({"email": "test@example.com", "exp": exp, "https://api.openai.com/auth": auth})
    access = jwt({"exp": exp, "https://api.openai.com/auth": auth, "sub": "test"})
    (home / "auth.json").write_text(
        json.dumps(
            {
                "auth_mode": "chatgpt",
                "OPENAI_API_KEY": None,
                "tokens": {
                    "id_token": id_token,
                    "access_token": access,
                    "refresh_token": "rt-sseproxy-test",
                    "account_id": ACCOUNT,
                },
                "last_refresh": now.isoformat().replace("+00:00", "Z"),
            }
        ),
        "utf-8",
    )
    return access


def codex_argv(model: str) -> list[str]:
    return [
        str(executable("codex")),
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "-m",
        model,
        "do it",
    ]


def codex_home(folder: Path) -> tuple[Path, str]:
    home = folder / ".codex"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(CONFIG, "utf-8")
    return home, chatgpt_login(home)


def upstream_ca(folder: Path, chatgpt: Fronts) -> Path:
    path = folder / "upstream-ca.pem"
    chatgpt.ca.cert_pem.write_to_path(str(path))
    return path


def through_sseproxy(
    agent_run: AgentRunner, chatgpt: Fronts, model: str
) -> tuple[AgentResult, str]:
    """`sseproxy run --intercept -- codex exec ...`: Codex given nothing but what `run` sets."""
    home, access = codex_home(agent_run.home)
    env = {
        "CODEX_HOME": str(home),
        # the proxy's own egress: its upstream leg reaches "chatgpt.com" on loopback
        "HTTPS_PROXY": f"http://127.0.0.1:{chatgpt.egress_port}",
    }
    flags = ["--intercept", "--upstream-ca-file", str(upstream_ca(agent_run.folder, chatgpt))]
    flags += ["--ca-dir", str(agent_run.folder / "ca")]
    return agent_run(codex_argv(model), model, env, run_flags=flags), access


def direct(folder: Path, chatgpt: Fronts, model: str) -> subprocess.CompletedProcess[str]:
    """The same Codex without sseproxy: to the same stand-in through the egress proxy, trusting
    its CA itself. What `run --intercept` must not change: exit code and output."""
    home, work = folder / "direct-home", folder / "direct-work"
    work.mkdir(parents=True)
    codex_dir, _ = codex_home(home)
    argv = codex_argv(model)
    ca = str(upstream_ca(folder, chatgpt))
    env = {
        "PATH": os.pathsep.join([str(Path(argv[0]).parent), os.environ.get("PATH", "")]),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": str(folder),
        **OFFLINE_ENV,
        "CODEX_HOME": str(codex_dir),
        "HTTPS_PROXY": f"http://127.0.0.1:{chatgpt.egress_port}",
        "CODEX_CA_CERTIFICATE": ca,
        "SSL_CERT_FILE": ca,
    }
    return subprocess.run(
        argv,
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )


def turns_of(run: AgentResult, model: str) -> list[dict[str, Any]]:
    return [r for r in run.streams() if r.get("model") == model]


def assert_intercepted_over_the_websocket(run: AgentResult, model: str, access: str) -> None:
    """Every turn: one record on the intercept route to chatgpt.com's Codex backend, over its
    WebSocket; the fake got the ChatGPT login's headers; nothing was tunnelled (no token
    refresh at auth.openai.com, nothing else off the machine)."""
    turns = turns_of(run, model)
    assert turns, run.explain()
    assert {
        (r["route"], r["upstream"], r["path"], r["dialect"], r.get("transport"), r["state"])
        for r in turns
    } == {
        (
            "intercept",
            "https://chatgpt.com:443",
            BACKEND_PATH,
            "openai-responses",
            "websocket",
            "completed",
        )
    }, run.explain()
    (session,) = [s for s in run.sessions() if s["path"] == BACKEND_PATH]
    assert session["route"] == "intercept" and session["closed_by"] == "client"
    assert session["states"] == {"completed": len(turns)}, run.explain()
    assert run.seen and {s.path for s in run.seen} == {BACKEND_PATH}
    assert {s.headers["authorization"] for s in run.seen} == {f"Bearer {access}"}
    assert {s.headers["chatgpt-account-id"] for s in run.seen} == {ACCOUNT}
    assert not [r for r in run.records if r.get("event") == "connect.finished"], run.explain()
    assert access not in run.log_file.read_text()  # the bearer token is never recorded


def test_a_chatgpt_login_session_is_recorded_per_turn(
    agent_run: AgentRunner, chatgpt: Fronts
) -> None:
    model = "answer-codex-chatgpt"
    run, access = through_sseproxy(agent_run, chatgpt, model)
    assert run.code == 0, run.explain()
    assert run.stdout.strip() == ANSWER
    assert_intercepted_over_the_websocket(run, model, access)
    assert "intercepting " in run.stderr and "chatgpt.com" in run.stderr
    assert "codex exited with 0" in run.stderr
    plain = direct(agent_run.folder, chatgpt, "answer-codex-direct")
    assert (plain.returncode, plain.stdout) == (run.code, run.stdout), plain.stderr


def test_a_chatgpt_login_tool_call_is_recorded_per_turn(
    agent_run: AgentRunner, chatgpt: Fronts
) -> None:
    model = "tool-codex-chatgpt"
    run, access = through_sseproxy(agent_run, chatgpt, model)
    assert run.code == 0, run.explain()
    assert (run.work / PROOF_FILE).read_text().strip() == PROOF_TEXT
    assert run.stdout.strip() == ANSWER
    assert_intercepted_over_the_websocket(run, model, access)
    called = [r for r in turns_of(run, model) if r["tool_calls"]]
    assert len(called) == 1 and called[0]["tool_calls"][0]["name"] == "exec_command"
    assert len([s for s in run.seen if b"function_call_output" in s.body]) == 1
    plain = direct(agent_run.folder, chatgpt, "tool-codex-direct")
    assert (plain.returncode, plain.stdout) == (run.code, run.stdout), plain.stderr
