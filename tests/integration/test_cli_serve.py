"""`sseproxy` as a real process: starts on the default config, logs, stops cleanly."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_up(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_sseproxy/healthz", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("proxy did not start")


def test_serve_starts_answers_and_stops_on_sigterm() -> None:
    port = free_port()
    env = {**os.environ, "SSEPROXY_LISTEN": f"127.0.0.1:{port}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sseproxy"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_up(port, proc)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_sseproxy/healthz") as resp:
            health = json.load(resp)
        assert health["status"] == "ok"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    events = [json.loads(line)["event"] for line in out.splitlines()]
    assert events[0] == "proxy.started"
    assert events[-1] == "proxy.stopped"


def test_bad_config_exits_2_with_every_problem() -> None:
    env = {**os.environ, "SSEPROXY_LISTEN": "nope", "SSEPROXY_IDLE_TIMEOUT": "-3"}
    proc = subprocess.run(
        [sys.executable, "-m", "sseproxy"], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2
    assert "listen" in proc.stderr and "idle_timeout" in proc.stderr
