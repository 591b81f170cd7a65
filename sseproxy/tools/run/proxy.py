"""The proxy of `sseproxy run`: the installed command as its own process (`python -m
sseproxy serve`), on a free loopback port, appending JSON records to the run's log file.

Its own process, in its own session: the terminal's Ctrl-C goes to the command, not to the
proxy, which is stopped (SIGTERM, its usual graceful stop) only once the command has ended, so
the records of the command's last streams are written whole."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

# Seconds the proxy gets to write `proxy.started` (a loaded machine imports slowly).
START_TIMEOUT = 60.0
POLL_SECONDS = 0.05
# Seconds beyond the proxy's shutdown grace that it gets to exit after SIGTERM.
EXIT_MARGIN = 10.0
STARTED = b'"proxy.started"'


class ProxyFailed(Exception):
    """The proxy did not start; the message says why (its stderr, or the time it had)."""


@dataclass(frozen=True, slots=True)
class InterceptListener:
    """What `proxy.started` says of the intercept listener, when the proxy runs one."""

    listen: str  # HOST:PORT, the bound port
    ca_file: Path
    hosts: frozenset[str]  # lower case, IPv6 addresses without brackets


@dataclass
class Proxy:
    process: subprocess.Popen[bytes]
    stderr: IO[bytes]
    base: str  # http://127.0.0.1:PORT
    intercept: InterceptListener | None = None

    def stop(self, grace: float) -> int | None:
        """SIGTERM, then SIGKILL after `grace` + EXIT_MARGIN; its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace + EXIT_MARGIN)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def errors(self) -> str:
        """What the proxy said on stderr."""
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace").strip()


def serve_argv(flags: Sequence[str], log_file: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sseproxy",
        "serve",
        *flags,
        "--listen",
        "127.0.0.1:0",
        "--log-file",
        str(log_file),
        "--log-format",
        "json",
    ]


def start(flags: Sequence[str], log_file: Path, offset: int) -> Proxy:
    """Start the proxy and wait for its `proxy.started` record past `offset` in `log_file`."""
    stderr = tempfile.TemporaryFile()  # noqa: SIM115 (the Proxy owns it)
    process = subprocess.Popen(
        serve_argv(flags, log_file),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,
    )
    proxy = Proxy(process, stderr, "")
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        line = _started_line(log_file, offset)
        if line is not None:
            record = json.loads(line)
            proxy.base = f"http://{urlsplit(record['healthz']).netloc}"
            proxy.intercept = intercept_listener(record)
            return proxy
        if process.poll() is not None:
            raise ProxyFailed(proxy.errors() or f"the proxy exited with {process.returncode}")
        if time.monotonic() > deadline:
            proxy.stop(0)
            raise ProxyFailed(f"the proxy did not start within {START_TIMEOUT:g} s")
        time.sleep(POLL_SECONDS)


def intercept_listener(record: dict[str, Any]) -> InterceptListener | None:
    """The intercept listener a `proxy.started` record names, or None."""
    listen, ca_file = record.get("intercept_listen"), record.get("intercept_ca")
    if not isinstance(listen, str) or not isinstance(ca_file, str):
        return None
    hosts = record.get("intercept_hosts") or []
    return InterceptListener(
        listen, Path(ca_file), frozenset(str(h).lower().strip("[]") for h in hosts)
    )


def _started_line(log_file: Path, offset: int) -> bytes | None:
    try:
        with log_file.open("rb") as f:
            f.seek(offset)
            for line in f:
                if STARTED in line and line.endswith(b"\n"):
                    return line
    except FileNotFoundError:
        pass
    return None
