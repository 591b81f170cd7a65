"""The proxy's lifecycle as a real process: signals, grace, busy port, listen backlog."""

from __future__ import annotations

import io
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from sseproxy.config import load
from sseproxy.observe import log
from sseproxy.server import DEFAULT_BACKLOG, announce, listen_backlog, system_backlog

FIRST = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n'
LAST = b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
# Every wait in these tests is bounded by this; none measures how long something took.
TIMEOUT = 30.0


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class HeldUpstream:
    """Answers each request with headers and one event, then holds the stream until released."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.release = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(65536)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n" + chunk(FIRST)
                )
                self.release.wait(TIMEOUT * 2)
                conn.sendall(chunk(LAST) + b"0\r\n\r\n")
            except OSError:
                pass  # the proxy cut this stream

    def close(self) -> None:
        self.release.set()
        self.sock.close()


class Stream:
    """A client stream through the proxy, on a raw socket so that a cut is seen as it is."""

    def __init__(self, port: int, name: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.sock.sendall(
            f"POST /v1/chat/completions/{name} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}".encode()
        )
        self.received = b""
        while FIRST not in self.received:  # the stream is in flight once its first event is here
            data = self.sock.recv(65536)
            assert data, self.received
            self.received += data

    def rest(self) -> bytes:
        """Everything until the proxy closes the connection."""
        while data := self.sock.recv(65536):
            self.received += data
        self.sock.close()
        return self.received


def served(port: int) -> bool:
    """Whether a new request gets any HTTP response (refused, reset or closed: it does not)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
            sock.sendall(b"GET /_sseproxy/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            return sock.recv(65536).startswith(b"HTTP/")
    except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError):
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proxy:
    """`python -m sseproxy` with its JSON log lines read as they come."""

    def __init__(self, *args: str, port: int | None = None) -> None:
        self.port = port or free_port()
        env = {**os.environ, "SSEPROXY_LISTEN": f"127.0.0.1:{self.port}"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sseproxy", "--log-format", "json", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self._stderr: str | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, event: str) -> dict[str, Any]:
        while True:
            line = self.lines.get(timeout=TIMEOUT)
            assert line is not None, f"exited before {event}: {self.stderr()}"
            record: dict[str, Any] = json.loads(line)
            self.seen.append(record)
            if record["event"] == event:
                return record

    def finish(self) -> list[dict[str, Any]]:
        """Wait for the exit; every log record the process wrote."""
        self.proc.wait(TIMEOUT)
        while (line := self.lines.get(timeout=TIMEOUT)) is not None:
            self.seen.append(json.loads(line))
        return self.seen

    def stderr(self) -> str:
        """All of stderr (kills the process first if it still runs)."""
        self.kill()
        if self._stderr is None:
            assert self.proc.stderr is not None
            self._stderr = self.proc.stderr.read()
        return self._stderr

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(TIMEOUT)

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stderr()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def upstream() -> Any:
    held = HeldUpstream()
    yield held
    held.close()


def finished(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["path"].rsplit("/", 1)[1]: r for r in records if r["event"] == "request.finished"}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_first_signal_cuts_streams_at_the_grace_and_exits_0(
    upstream: HeldUpstream, signum: signal.Signals
) -> None:
    """The held stream runs for the whole grace, then is cut and recorded as proxy_shutdown."""
    grace = 1.0
    with Proxy("--upstream", upstream.url, "--shutdown-grace", str(grace)) as proxy:
        proxy.wait_for("proxy.started")
        stream = Stream(proxy.port, "slow")
        proxy.proc.send_signal(signum)
        stopping = proxy.wait_for("proxy.stopping")
        body = stream.rest()
        records = proxy.finish()
        stderr = proxy.stderr()
    assert proxy.proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert (stopping["active_streams"], stopping["grace_seconds"]) == (1, grace)
    slow = finished(records)["slow"]
    assert (slow["state"], slow["interruption"]["reason"]) == ("interrupted", "proxy_shutdown")
    # Cut, not ended: the last chunk never came.
    assert FIRST in body and LAST not in body and not body.endswith(b"0\r\n\r\n")
    # The stream started before the signal and the grace counts from the signal.
    assert slow["duration_ms"] >= grace * 1000
    assert [r["event"] for r in records][-1] == "proxy.stopped"


def test_streams_that_end_within_the_grace_end_cleanly_and_the_process_exits(
    upstream: HeldUpstream,
) -> None:
    """With a grace far beyond the test's timeout, only the stream's own end lets it exit."""
    with Proxy("--upstream", upstream.url, "--shutdown-grace", str(TIMEOUT * 4)) as proxy:
        proxy.wait_for("proxy.started")
        stream = Stream(proxy.port, "quick")
        proxy.proc.send_signal(signal.SIGTERM)
        proxy.wait_for("proxy.stopping")
        upstream.release.set()
        body = stream.rest()
        records = proxy.finish()
    assert proxy.proc.returncode == 0
    assert finished(records)["quick"]["state"] == "completed"
    assert body.endswith(chunk(LAST) + b"0\r\n\r\n")


def test_no_new_connections_after_the_first_signal(upstream: HeldUpstream) -> None:
    """Stop accepting at once: during the grace no new request is served."""
    with Proxy("--upstream", upstream.url, "--shutdown-grace", str(TIMEOUT * 4)) as proxy:
        proxy.wait_for("proxy.started")
        stream = Stream(proxy.port, "held")
        assert served(proxy.port)
        proxy.proc.send_signal(signal.SIGTERM)
        proxy.wait_for("proxy.stopping")
        assert not served(proxy.port)
        upstream.release.set()
        stream.rest()
        proxy.finish()
    assert proxy.proc.returncode == 0


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_second_signal_cuts_everything_at_once_writes_every_record_and_exits_0(
    upstream: HeldUpstream, second: signal.Signals
) -> None:
    """Ctrl-C twice: a grace far beyond the test's timeout, yet the process exits, records
    every stream and prints no traceback."""
    with Proxy("--upstream", upstream.url, "--shutdown-grace", str(TIMEOUT * 4)) as proxy:
        proxy.wait_for("proxy.started")
        streams = [Stream(proxy.port, f"s{i}") for i in range(3)]
        proxy.proc.send_signal(signal.SIGINT)
        proxy.wait_for("proxy.stopping")
        proxy.proc.send_signal(second)
        bodies = [s.rest() for s in streams]
        records = proxy.finish()
        stderr = proxy.stderr()
    assert proxy.proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    cut = finished(records)
    assert sorted(cut) == ["s0", "s1", "s2"]
    assert {(r["state"], r["interruption"]["reason"]) for r in cut.values()} == {
        ("interrupted", "proxy_shutdown")
    }
    assert all(LAST not in body for body in bodies)
    stopped = records[-1]
    assert (stopped["event"], stopped["cut_streams"], stopped["second_signal"]) == (
        "proxy.stopped",
        3,
        True,
    )


def test_busy_port_is_one_line_and_exit_1() -> None:
    """No traceback, and no `proxy.started` before the failure."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with Proxy(port=port) as proxy:
            proxy.proc.wait(TIMEOUT)
            records = proxy.finish()
            stderr = proxy.stderr()
    assert proxy.proc.returncode == 1
    assert records == []
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert f"127.0.0.1:{port}" in lines[0] and "in use" in lines[0]


def test_backlog_is_the_systems_somaxconn_unless_configured(tmp_path: Path) -> None:
    """The accept queue absorbs a burst of connects; a `backlog` setting overrides it."""
    somaxconn = tmp_path / "somaxconn"
    somaxconn.write_text("65535\n")
    assert system_backlog(somaxconn) == 65535
    somaxconn.write_text("garbage")
    assert system_backlog(somaxconn) == DEFAULT_BACKLOG
    assert system_backlog(tmp_path / "missing") == DEFAULT_BACKLOG
    assert listen_backlog(load(None, {}, {"backlog": 77})) == 77
    assert listen_backlog(load(None, {}, {})) == system_backlog()


def test_a_burst_of_connects_waits_in_the_accept_queue(upstream: HeldUpstream) -> None:
    """With the proxy stopped (SIGSTOP) nothing is accepted, so every connect the kernel
    completes sits in the listen queue: all of a burst larger than aiohttp's default of 128 do.
    (An overflowing queue drops the SYN: that connect would block, then time out.)"""
    burst = min(300, system_backlog())
    clients: list[socket.socket] = []
    with Proxy("--upstream", upstream.url) as proxy:
        proxy.wait_for("proxy.started")
        proxy.proc.send_signal(signal.SIGSTOP)
        try:
            for _ in range(burst):
                clients.append(socket.create_connection(("127.0.0.1", proxy.port), timeout=10))
        finally:
            proxy.proc.send_signal(signal.SIGCONT)
            for client in clients:
                client.close()
        proxy.proc.send_signal(signal.SIGTERM)
        proxy.finish()
    assert len(clients) == burst
    assert proxy.proc.returncode == 0


@pytest.mark.parametrize("log_format", ["json", "console"])
@pytest.mark.parametrize(
    ("listen", "token", "warned"),
    [
        ("0.0.0.0:8790", "", True),  # the Docker image's default: the inspector answers 403
        ("[::]:8790", "", True),
        ("0.0.0.0:8790", "s3cret-token", False),
        ("127.0.0.1:8790", "", False),  # loopback needs no token
        ("localhost:8790", "", False),
    ],
)
def test_startup_says_when_the_admin_endpoints_need_a_token_that_is_not_set(
    listen: str, token: str, warned: bool, log_format: str
) -> None:
    stream = io.StringIO()
    log.configure(log_format, "info", stream, cache=False)
    settings = load(None, {}, {"listen": listen, "allow_remote": True, "admin_token": token})
    announce(settings, "asyncio", 128, 8790)
    lines = stream.getvalue().splitlines()
    assert "proxy.started" in lines[0]
    warnings = [line for line in lines if "proxy.admin_token_missing" in line]
    assert len(warnings) == (1 if warned else 0), lines
    if warned:
        assert "SSEPROXY_ADMIN_TOKEN" in warnings[0] and "403" in warnings[0]
        if log_format == "json":
            assert json.loads(warnings[0])["level"] == "warning"
    if token:
        assert token not in stream.getvalue()  # the token itself is never logged
