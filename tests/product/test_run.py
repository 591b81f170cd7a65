"""`sseproxy run -- COMMAND` as a user runs it (the installed command): the command reaches
the proxy through the variables it is given, its exit code comes back, its signals are its
own, and the records go to --log-file (or a file named at the end) with a summary on stderr.
And `serve --log-file` / SSEPROXY_LOG_FILE: the records in a file, none on stdout."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.corpus import file as corpus
from tests.product.fake_provider import CHAT_BODY, FakeProvider
from tests.product.proxy_process import installed_command, product_config

pytestmark = pytest.mark.product
TIMEOUT = 60
# A client the command runs: one streamed Chat Completions request to OPENAI_BASE_URL.
CLIENT = """
import os, sys, urllib.request
body = b'{"model": "%s", "stream": true, "messages": []}'
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", body,
                             {"content-type": "application/json", "authorization": "Bearer sk-x"})
try:
    data = urllib.request.urlopen(req).read()
except Exception as exc:
    print("client error", exc); sys.exit(9)
print(data.count(b"data:"), "events"); sys.exit(%d)
"""


def env_without_settings() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SSEPROXY_")}


def sseproxy_run(
    tmp_path: Path, fake: FakeProvider, command: list[str], log_file: Path | None = None
) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "sseproxy.toml"
    config.write_text(product_config(fake.url), "utf-8")
    argv = [str(installed_command()), "run", "--config", str(config)]
    if log_file is not None:
        argv += ["--log-file", str(log_file)]
    return subprocess.run(
        [*argv, "--", *command],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env_without_settings(),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_the_command_reaches_the_proxy_and_its_exit_code_comes_back(
    tmp_path: Path, fake: FakeProvider
) -> None:
    log_file = tmp_path / "run.jsonl"
    log_file.write_text('{"event":"request.finished","state":"failed"}\n')  # an earlier run's
    done = sseproxy_run(tmp_path, fake, [sys.executable, "-c", CLIENT % ("ok-run", 7)], log_file)
    assert done.returncode == 7, done.stderr
    sent = corpus(CHAT_BODY).count(b"data:")  # what the fake sends for `ok`, via the proxy
    assert done.stdout.strip() == f"{sent} events"
    found = records(log_file)
    assert found[0] == {"event": "request.finished", "state": "failed"}  # appended, not replaced
    (mine,) = [r for r in found if r.get("model") == "ok-run"]
    assert (mine["path"], mine["state"], mine["route"]) == (
        "/v1/chat/completions",
        "completed",
        "openai",
    )
    assert found[1]["event"] == "proxy.started"
    assert found[-1]["event"] == "proxy.stopped"
    assert "exited with 7; 1 streams, 0 WebSocket sessions" in done.stderr
    assert "  streams: 1 completed" in done.stderr  # the earlier run's record is not counted
    assert f"records: {log_file}" in done.stderr


def test_a_cut_is_summed_up_with_who_cut_it(tmp_path: Path, fake: FakeProvider) -> None:
    done = sseproxy_run(tmp_path, fake, [sys.executable, "-c", CLIENT % ("cut-run", 0)])
    assert done.returncode == 9, done.stderr  # the client saw the cut (urllib raises)
    assert "cuts: 1 upstream_closed by the upstream" in done.stderr
    named = re.search(r"records: (\S+\.jsonl)", done.stderr)
    assert named, done.stderr  # no --log-file: a file of its own, named at the end
    path = Path(named.group(1))
    try:
        (cut,) = [r for r in records(path) if r.get("model") == "cut-run"]
        assert cut["state"] == "interrupted"
    finally:
        path.unlink()


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], 143),
        (["sseproxy-no-such-command-x"], 127),
        ([os.devnull], 126),
    ],
    ids=["killed-by-sigterm", "not-found", "not-executable"],
)
def test_exit_codes_as_a_shell_gives_them(
    tmp_path: Path, fake: FakeProvider, command: list[str], code: int
) -> None:
    log_file = tmp_path / "run.jsonl"
    done = sseproxy_run(tmp_path, fake, command, log_file)
    assert done.returncode == code, done.stderr
    assert records(log_file)[-1]["event"] == "proxy.stopped"  # the proxy was stopped either way


def test_sigterm_to_run_goes_to_the_command(tmp_path: Path, fake: FakeProvider) -> None:
    config = tmp_path / "sseproxy.toml"
    config.write_text(product_config(fake.url), "utf-8")
    child = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(3)); "
        "print('ready', flush=True); time.sleep(30)"
    )
    proc = subprocess.Popen(
        [
            str(installed_command()),
            "run",
            "--config",
            str(config),
            "--log-file",
            str(tmp_path / "run.jsonl"),
            "--",
            sys.executable,
            "-c",
            child,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_without_settings(),
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(TIMEOUT) == 3
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.communicate()


def test_no_command_is_a_usage_error() -> None:
    done = subprocess.run(
        [str(installed_command()), "run", "--"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env_without_settings(),
    )
    assert done.returncode == 2 and "no command to run" in done.stderr


@pytest.mark.parametrize("how", ["flag", "env"])
def test_serve_writes_its_records_to_the_log_file(
    tmp_path: Path, fake: FakeProvider, how: str
) -> None:
    config = tmp_path / "sseproxy.toml"
    config.write_text(product_config(fake.url), "utf-8")
    log_file = tmp_path / "serve.jsonl"
    env = env_without_settings()
    argv = [str(installed_command()), "--config", str(config), "--listen", "127.0.0.1:0"]
    if how == "flag":
        argv += ["--log-file", str(log_file)]
    else:
        env["SSEPROXY_LOG_FILE"] = str(log_file)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (log_file.exists() and b"proxy.started" in log_file.read_bytes()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0 and out == b""
    assert [r["event"] for r in records(log_file)][-1] == "proxy.stopped"


def test_serve_says_why_it_cannot_open_the_log_file(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "x.jsonl"
    done = subprocess.run(
        [str(installed_command()), "--listen", "127.0.0.1:0", "--log-file", str(missing)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env_without_settings(),
    )
    assert done.returncode == 2
    assert f"cannot open log_file {str(missing)!r}: No such file or directory" in done.stderr
