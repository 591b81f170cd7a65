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


def test_proxy_started_never_prints_upstream_userinfo() -> None:
    port = free_port()
    env = {**os.environ, "SSEPROXY_LISTEN": f"127.0.0.1:{port}", "SSEPROXY_LOG_FORMAT": "json"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sseproxy", "--upstream", "http://user:hunter2@127.0.0.1:9"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        started = json.loads(proc.stdout.readline())  # the first line
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert started["event"] == "proxy.started"
    assert started["upstream"] == "http://***@127.0.0.1:9"


def test_bad_config_exits_2_with_every_problem() -> None:
    env = {**os.environ, "SSEPROXY_LISTEN": "nope", "SSEPROXY_IDLE_TIMEOUT": "-3"}
    proc = subprocess.run(
        [sys.executable, "-m", "sseproxy"], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "sseproxy: config: listen: 'nope' (SSEPROXY_LISTEN) is not HOST:PORT",
        "sseproxy: config: idle_timeout: -3.0 (SSEPROXY_IDLE_TIMEOUT) must be positive",
    ]


FAKE_UPSTREAM = r"""
import asyncio, sys
from aiohttp import web

async def handle(request):
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    chunk = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n'
    await response.write(chunk)
    if request.path.endswith("slow"):
        await asyncio.sleep(60)
    await asyncio.sleep(0.5)
    await response.write(b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
    await response.write_eof()
    return response

app = web.Application()
app.router.add_route("*", "/{tail:.*}", handle)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, shutdown_timeout=0.1)
"""


def test_graceful_shutdown_finishes_quick_streams_and_cuts_slow_ones(tmp_path) -> None:
    """SIGTERM: stop accepting, let streams run for the grace period, cut the rest, exit 0."""
    import threading

    up_port, port = free_port(), free_port()
    script = tmp_path / "up.py"
    script.write_text(FAKE_UPSTREAM)
    upstream = subprocess.Popen([sys.executable, str(script), str(up_port)])
    env = {**os.environ, "SSEPROXY_LISTEN": f"127.0.0.1:{port}"}
    proxy = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sseproxy",
            "--upstream",
            f"http://127.0.0.1:{up_port}",
            "--shutdown-grace",
            "2",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    bodies: dict[str, bytes | Exception] = {}

    def wait_for_streams(port: int, n: int) -> None:
        """Until the proxy itself reports `n` streams in flight (its healthz counts them)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_sseproxy/healthz") as resp:
                if json.loads(resp.read())["active_streams"] >= n:
                    return
            time.sleep(0.02)
        raise AssertionError(f"fewer than {n} streams in flight")

    def fetch(name: str) -> None:
        try:
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/chat/completions/{name}", data=b"{}", method="POST"
            )
            with urllib.request.urlopen(req, timeout=30) as resp:
                bodies[name] = resp.read()
        except Exception as exc:  # the cut stream ends with an error on the client side
            bodies[name] = exc

    try:
        wait_until_up(port, proxy)
        for _ in range(50):  # the upstream process may still be starting
            try:
                socket.create_connection(("127.0.0.1", up_port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        threads = [threading.Thread(target=fetch, args=(n,)) for n in ("quick", "slow")]
        for t in threads:
            t.start()
        wait_for_streams(port, 2)  # both streams are in flight
        proxy.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(30)
        out, err = proxy.communicate(timeout=30)
    finally:
        upstream.kill()
        upstream.wait(10)
        if proxy.poll() is None:
            proxy.kill()
    assert proxy.returncode == 0, err
    records = {
        r["path"].rsplit("/", 1)[1]: r
        for r in map(json.loads, out.splitlines())
        if r["event"] == "request.finished"
    }
    assert records["quick"]["state"] == "completed"
    assert (records["slow"]["state"], records["slow"]["interruption"]["reason"]) == (
        "interrupted",
        "proxy_shutdown",
    )
    assert isinstance(bodies["quick"], bytes) and bodies["quick"].endswith(b"data: [DONE]\n\n")
    events = [json.loads(line)["event"] for line in out.splitlines()]
    assert events.index("proxy.stopping") < events.index("proxy.stopped")


def test_proxy_started_gives_the_urls_of_the_inspector_metrics_and_healthz() -> None:
    port = free_port()
    env = {**os.environ, "SSEPROXY_LISTEN": f"127.0.0.1:{port}", "SSEPROXY_LOG_FORMAT": "json"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sseproxy"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        started = json.loads(proc.stdout.readline())
        base = f"http://127.0.0.1:{port}/_sseproxy/"
        assert started["listen"] == f"127.0.0.1:{port}"
        assert (started["inspector"], started["metrics"], started["healthz"]) == (
            base,
            base + "metrics",
            base + "healthz",
        )
        with urllib.request.urlopen(started["inspector"], timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("text/html")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
