"""The project's own promises: CI runs README's test command and the floors command of
docs/development.md; lint and types are clean."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
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


def ci_commands() -> list[str]:
    """.ci/run's lines that run something (no comments, no blanks)."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def development_section(title: str) -> str:
    """A `## title` section of docs/development.md (README's Supported versions moved there)."""
    text = (ROOT / "docs" / "development.md").read_text()
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_ci_runs_exactly_the_readme_test_command_last() -> None:
    assert ci_commands()[-1] == quickstart_commands()[1]


def test_ci_runs_the_readme_floors_command() -> None:
    """docs/development.md's floors command, one step a line in .ci/run (`set -e` stops at any
    of them)."""
    [command] = re.findall(r"```sh\n(.*?)\n```", development_section("Supported versions"), re.S)
    steps = command.split(" && ")
    ci = ci_commands()
    assert steps[0] in ci
    start = ci.index(steps[0])
    assert ci[start : start + len(steps)] == steps


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


# -- Declared dependency floors ------------------------------------------------------------------

FLOORS = ROOT / ".ci" / "floors.txt"
# The extras the floors run installs (`pip install -e '.[test]'` pulls `otel` through
# `sseproxy[otel]`); `bench` is not installed by CI, so its bounds are not pinned there.
FLOOR_EXTRAS = ("test", "otel")
# name, optional extras (a constraints file pins the name alone), floor, optional marker
LOWER_BOUND = re.compile(
    r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[a-z0-9,_-]+\])?>=([0-9][0-9.]*)(?:\s*;.*)?"
)


def declared_floors() -> dict[str, str]:
    """Name -> lower bound of every runtime and tested extra dependency in pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in FLOOR_EXTRAS:
        requirements += project["optional-dependencies"][extra]
    floors: dict[str, str] = {}
    for requirement in requirements:
        if requirement.startswith("sseproxy["):
            continue  # the project's own extra: its members are listed in that extra
        match = LOWER_BOUND.fullmatch(requirement)
        assert match, f"{requirement!r}: every dependency declares its floor as `name>=version`"
        floors[match[1].lower()] = match[2]
    return floors


def pinned_floors() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in FLOORS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert name not in pins, f"{name} is pinned twice"
            pins[name] = version
    return pins


def test_the_floors_file_pins_exactly_the_declared_lower_bounds() -> None:
    """CI installs .ci/floors.txt to run the suite on the declared floors: they cannot drift."""
    expected = declared_floors()
    assert pinned_floors() == expected, "expected .ci/floors.txt:\n" + "\n".join(
        f"{name}=={version}" for name, version in expected.items()
    )


def test_docs_name_every_declared_floor() -> None:
    section = " ".join(development_section("Supported versions").split())
    missing = [f"{n}>={v}" for n, v in declared_floors().items() if f"`{n}>={v}`" not in section]
    assert missing == []
