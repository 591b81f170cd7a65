"""One agent run: `sseproxy run --config CONFIG --log-file RECORDS -- AGENT ...` as a user
types it, offline (HOME a scratch folder holding the agent's settings, the agents' telemetry and
update checks off), and what came of it: exit code, output, the records, what the fake got."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.product.fake_provider import FakeProvider, Seen
from tests.product.proxy_process import installed_command, product_config
from tests.record_contract import invalid_records

# Seconds one agent run may take (a start of a few seconds, backoffs of a few more).
RUN_TIMEOUT = 120.0
# Variables the agents read that would reach out or change what they do.
OFFLINE_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # Claude Code: no telemetry, no updates
    "DISABLE_AUTOUPDATER": "1",
    "GEMINI_CLI_NO_RELAUNCH": "true",
    "OPENCODE_DISABLE_AUTOUPDATE": "true",
    "OPENCODE_DISABLE_SHARE": "true",
    "NO_UPDATE_NOTIFIER": "1",
    "NO_COLOR": "1",
    "TERM": "dumb",
    "CI": "1",
}


@dataclass
class AgentResult:
    code: int
    stdout: str
    stderr: str
    records: list[dict[str, Any]]
    seen: list[Seen]  # what the fake got for this run's model
    work: Path  # the scratch folder the agent ran in
    log_file: Path = field(repr=False, default=Path())

    def streams(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("event") == "request.finished"]

    def sessions(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("event") == "session.finished"]

    def states(self) -> list[str]:
        return [str(r["state"]) for r in self.streams()]

    def explain(self) -> str:
        lines = [
            f"exit {self.code}",
            "stdout:",
            self.stdout[-2000:],
            "stderr:",
            self.stderr[-3000:],
        ]
        lines += [
            json.dumps(
                {
                    k: r.get(k)
                    for k in ("event", "path", "model", "state", "interruption", "error", "status")
                }
            )
            for r in self.records
            if r.get("event") in ("request.finished", "session.finished")
        ]
        return "\n".join(lines)


class AgentRunner:
    def __init__(self, fake: FakeProvider, folder: Path) -> None:
        self.fake = fake
        self.folder = folder
        self.home = folder / "home"
        self.work = folder / "work"
        self.home.mkdir()
        self.work.mkdir()

    def __call__(
        self,
        argv: Sequence[str],
        model: str,
        env: Mapping[str, str] | None = None,
        timeout: float = RUN_TIMEOUT,
        run_flags: Sequence[str] = (),
    ) -> AgentResult:
        config = self.folder / "sseproxy.toml"
        config.write_text(product_config(self.fake.url), "utf-8")
        log_file = self.folder / "records.jsonl"
        path = os.pathsep.join([str(Path(argv[0]).parent), os.environ.get("PATH", "")])
        environ = {
            "PATH": path,
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "TMPDIR": str(self.folder),
            **OFFLINE_ENV,
            **(env or {}),
        }
        command = [str(installed_command()), "run", "--config", str(config)]
        command += ["--log-file", str(log_file), *run_flags, "--", *argv]
        try:
            done = subprocess.run(
                command,
                cwd=self.work,
                env=environ,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{argv[0]} did not end within {timeout} s: {exc.stdout!r} {exc.stderr!r}")
        records = [json.loads(line) for line in log_file.read_text("utf-8").splitlines() if line]
        finished = [
            r for r in records if r.get("event") in ("request.finished", "session.finished")
        ]
        invalid = invalid_records(finished)
        assert not invalid, f"records outside the schema: {invalid[:3]}"
        result = AgentResult(
            done.returncode,
            done.stdout,
            done.stderr,
            records,
            self.fake.seen(model),
            self.work,
            log_file,
        )
        if table := os.environ.get("SSEPROXY_AGENTS_TABLE"):  # one line per run, for the docs
            row = {
                "agent": Path(argv[0]).name,
                "model": model,
                "exit": done.returncode,
                "requests": [s.transport for s in result.seen],
                "records": [
                    f"{r.get('transport', 'http')}:{r['method']}:{r['state']}:{r['status']}:"
                    f"stream={r['stream']}:retry={bool(r.get('retry'))}"
                    for r in result.streams()
                    if r.get("model") == model
                ],
                "others": [
                    f"{r['method']} {r['path']} {r['state']} {r.get('model')}"
                    for r in result.streams()
                    if r.get("model") != model
                ],
                "sessions": [str(r["end_reason"]) for r in result.sessions()],
            }
            with open(table, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
        return result
