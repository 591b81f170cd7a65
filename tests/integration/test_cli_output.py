"""The command line as a shell user meets it: `--help` and a reader that leaves early."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sseproxy.cli import SERVE_FLAGS
from sseproxy.cli_io import EXIT_BROKEN_PIPE
from sseproxy.config import flag_name

SAMPLE = Path(__file__).resolve().parents[2] / "sseproxy/data/samples/openai-chat/completed.sse"


def sseproxy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sseproxy", *args], capture_output=True, text=True, timeout=60
    )


def test_help_shows_how_to_run_the_proxy_and_every_serve_flag() -> None:
    run = sseproxy("--help")
    assert run.returncode == 0
    assert run.stdout.startswith("usage: sseproxy [serve]")
    for flag in SERVE_FLAGS:
        assert flag_name(flag.setting) in run.stdout, flag.setting
    assert "--config" in run.stdout
    for command in ("replay", "mock", "demo"):
        assert f"sseproxy {command}" in run.stdout


def gone_reader(args: list[str]) -> tuple[int, str]:
    """Run `sseproxy ARGS` into a pipe whose reader has left before the first line (as `head`
    has once it has its lines): the exit status and what was said on stderr. (A reader that
    left after a line would race a small output into the pipe's buffer.)"""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sseproxy", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # buffered, as a terminal's pipe is (argparse's own writes swallow an early failure)
        env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},
    )
    assert proc.stdout is not None
    proc.stdout.close()  # long before the interpreter has started
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err.decode()


@pytest.mark.parametrize(
    "args",
    [["replay", str(SAMPLE), "--events"], ["--help"], ["replay", "--help"]],
    ids=["replay-events", "help", "replay-help"],
)
def test_a_reader_that_leaves_early_ends_a_command_quietly(args: list[str]) -> None:
    """`sseproxy ... | head -1`: no traceback, the status SIGPIPE would have given."""
    code, err = gone_reader(args)
    assert err == ""
    assert code == EXIT_BROKEN_PIPE
