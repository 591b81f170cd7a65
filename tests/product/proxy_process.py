"""The installed `sseproxy` command as its own process, on its defaults: the event loop it
picks (uvloop), JSON lines on a stdout that is a pipe, the bundled config with only its
routes' upstream URLs pointed at a local fake. What users run, unlike the in-process tests.

Reusable by any test: `product_config()` writes the config, `ProxyProcess` starts the command,
reads its stdout in a thread (or stops reading, to play a stalled log reader) and ends it."""

from __future__ import annotations

import asyncio
import importlib.resources
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import pytest

from tests.record_contract import invalid_records

# Seconds the command gets to print `proxy.started` (a loaded 2-core machine imports slowly).
START_TIMEOUT = 30.0
# Seconds it gets to exit after SIGTERM: its shutdown grace (8 s by default) and then some.
EXIT_TIMEOUT = 30.0
UVLOOP = importlib.util.find_spec("uvloop") is not None
RECORD_EVENTS = ("request.finished", "session.finished")
# A route's upstream in the bundled config: scheme and host are replaced, the path is kept.
_UPSTREAM = re.compile(r'^upstream = "https?://[^/"]+(?P<path>/[^"]*)?"$', re.MULTILINE)


def installed_command() -> Path:
    """The `sseproxy` console script installed beside this interpreter."""
    path = Path(sys.executable).parent / "sseproxy"
    if not path.is_file():
        pytest.fail(
            f"the installed `sseproxy` command is missing: no {path}. The product tests run the "
            "console script as users do: install the project into this interpreter's "
            "environment (`pip install -e '.[test]'`)."
        )
    return path


def bundled_config() -> str:
    """The config that ships in the package (config/sseproxy.toml's copy)."""
    return (importlib.resources.files("sseproxy") / "data" / "sseproxy.toml").read_text("utf-8")


def product_config(target: str) -> str:
    """The bundled config with every route's upstream re-pointed at `target` (scheme, host and
    port), its path kept, and every other line as shipped."""
    text = bundled_config()
    routes = len(re.findall(r"^\[\[routes\]\]$", text, re.MULTILINE))
    text, replaced = _UPSTREAM.subn(lambda m: f'upstream = "{target}{m["path"] or ""}"', text)
    assert replaced == routes > 0, f"expected one upstream per route: {replaced} of {routes}"
    return text


class ProxyProcess:
    """`sseproxy --config FILE --listen 127.0.0.1:0 ARGS...` with stdout a pipe.

    A thread reads stdout into `raw` line by line; with `pause_after_start` it stops reading
    after the `proxy.started` line until `resume_reading()`, so the proxy's writes to stdout
    fill the pipe as they would behind a paused log shipper."""

    def __init__(
        self,
        config: Path,
        args: Sequence[str] = (),
        pause_after_start: bool = False,
        cwd: Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SSEPROXY_")}
        env.update(environ or {})  # the test's own variables (an egress proxy's)
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        argv = [str(installed_command()), "--config", str(config), "--listen", "127.0.0.1:0"]
        self.proc = subprocess.Popen(
            [*argv, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
            cwd=cwd,
        )
        self.raw: list[bytes] = []
        self.started: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._parsed: list[dict[str, Any]] = []
        self._resume = threading.Event()
        if not pause_after_start:
            self._resume.set()
        self._started = threading.Event()
        self._eof = threading.Event()
        self._reader = threading.Thread(target=self._read, name="proxy-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in iter(self.proc.stdout.readline, b""):
                with self._lock:
                    self.raw.append(line)
                if not self._started.is_set() and b'"proxy.started"' in line:
                    self.started = json.loads(line)
                    self._started.set()
                    self._resume.wait()
        finally:
            self._eof.set()

    def wait_started(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not self._started.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"sseproxy did not start: {self.output_tail()}")

    @property
    def url(self) -> str:
        netloc = urlsplit(self.started["healthz"]).netloc
        return f"http://{netloc}"

    @property
    def event_loop(self) -> str:
        return str(self.started["event_loop"])

    def resume_reading(self) -> None:
        self._resume.set()

    def lines(self) -> list[bytes]:
        with self._lock:
            return list(self.raw)

    def records(self) -> list[dict[str, Any]]:
        """Every JSON line read so far (a line that is not JSON fails the test)."""
        with self._lock:
            new = self.raw[len(self._parsed) :]
        for line in new:
            try:
                self._parsed.append(json.loads(line))
            except ValueError:
                pytest.fail(f"a stdout line that is not JSON: {line[:300]!r}")
        return list(self._parsed)

    async def wait_records(
        self, match: Callable[[dict[str, Any]], bool], n: int = 1, timeout: float = 20.0
    ) -> list[dict[str, Any]]:
        """The request/session records `match` accepts, once there are at least `n` (each
        checked against the record schema)."""
        deadline = time.monotonic() + timeout
        while True:
            found = [r for r in self.records() if r.get("event") in RECORD_EVENTS and match(r)]
            if len(found) >= n:
                invalid = invalid_records(found)
                assert not invalid, f"records outside the schema: {invalid[:3]}"
                return found
            if time.monotonic() > deadline:
                pytest.fail(f"{len(found)} of {n} records after {timeout} s: {self.output_tail()}")
            await asyncio.sleep(0.02)

    async def wait_exit(self, timeout: float = EXIT_TIMEOUT) -> int | None:
        """The exit code, once the process and its stdout have ended (None: still running)."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None or not self._eof.is_set():
            if time.monotonic() > deadline:
                return self.proc.poll()
            await asyncio.sleep(0.02)
        return self.proc.returncode

    def send(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def output_tail(self) -> str:
        self.stderr.seek(0)
        err = self.stderr.read()[-2000:].decode(errors="replace")
        out = b"".join(self.lines()[-5:]).decode(errors="replace")
        return f"exit code {self.proc.poll()}; last stdout lines:\n{out}\nstderr:\n{err}"

    def stop(self) -> None:
        """End the process however it is (SIGTERM, then SIGKILL) and the reader with it."""
        self._resume.set()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.stderr.close()


def start_proxy(
    folder: Path,
    target: str,
    loop: str | None,
    args: Sequence[str] = (),
    pause_after_start: bool = False,
    environ: Mapping[str, str] | None = None,
) -> ProxyProcess:
    """The installed command on its defaults in front of `target`; `loop` None keeps the
    default event loop (auto: uvloop), else `--event-loop LOOP`; `environ` is added to the
    process's environment."""
    config = folder / "sseproxy.toml"
    config.write_text(product_config(target), "utf-8")
    extra = [*args, *(["--event-loop", loop] if loop else [])]
    proxy = ProxyProcess(
        config, extra, pause_after_start=pause_after_start, cwd=folder, environ=environ
    )
    proxy.wait_started()
    expected = loop or ("uvloop" if UVLOOP else "asyncio")  # auto: uvloop where installed
    if proxy.event_loop != expected:
        proxy.stop()
        pytest.fail(f"the proxy runs on {proxy.event_loop}, not {expected}: {proxy.started}")
    return proxy
