"""The project's own promises: CI runs README's test command; lint and types are clean."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def quickstart_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, re.S)


def test_readme_quickstart_has_exactly_two_commands() -> None:
    commands = quickstart_commands()
    assert len(commands) == 2
    assert all("\n" not in c for c in commands)
    assert commands[0].endswith("sseproxy")


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert quickstart_commands()[1] in ci


@pytest.mark.parametrize(
    "command",
    [["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]],
    ids=["ruff", "ruff-format", "mypy"],
)
def test_static_checks(command: list[str]) -> None:
    tool = shutil.which(command[0], path=str(Path(sys.executable).parent))
    if tool is None:
        pytest.skip(f"{command[0]} is not installed (it comes with the test extra)")
    result = subprocess.run([tool, *command[1:]], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_tests_need_nothing_beside_the_checkout() -> None:
    """A user's clone has nothing beside it: no test or CI step may reach for the steering repo."""
    beside = "/".join(("..", "shared"))  # spelled so that this file does not match itself
    offenders = [
        str(path.relative_to(ROOT))
        for path in [*(ROOT / "tests").rglob("*.py"), ROOT / ".ci" / "run"]
        if beside in path.read_text()
    ]
    assert offenders == []


def _stub(folder: Path, name: str, body: str) -> None:
    script = folder / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


def test_ci_removes_its_clone_and_keeps_the_exit_status(tmp_path: Path) -> None:
    """The CI script, run from a small repository with a `python3` that fails: the clone it
    made in its temporary folder is gone afterwards, and the failure is its exit status."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "ci"], check=True)
    stubs, scratch = tmp_path / "bin", tmp_path / "scratch"
    stubs.mkdir()
    scratch.mkdir()
    _stub(stubs, "python3", "exit 3")  # the venv step fails
    for present in ("chromium", "promtool"):
        _stub(stubs, present, "exit 0")  # nothing to install
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "TMPDIR": str(scratch), "HOME": str(tmp_path)}
    run = subprocess.run(
        ["bash", str(repo / ".ci" / "run")], env=env, capture_output=True, timeout=60
    )
    assert run.returncode == 3, run.stderr
    assert list(scratch.iterdir()) == []
