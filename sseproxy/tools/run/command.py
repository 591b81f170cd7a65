"""`sseproxy run [PROXY FLAGS] -- COMMAND ...`: start the proxy, run the command pointed at it,
pass its exit code through, print what its streams and sessions did."""

from __future__ import annotations

import datetime
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from sseproxy.tools.run import environment, proxy
from sseproxy.tools.run.proxy import ProxyFailed
from sseproxy.tools.run.summary import summarise

PREFIX = "sseproxy run:"
# Exit codes of the run itself, as shells and `env` use them.
EXIT_PROXY_FAILED = 125
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127
# Signals sent to `run` that are passed on to the command. Not SIGINT: a terminal's Ctrl-C
# reaches the command by itself (it is in the terminal's foreground group), and a second
# one would make many agents quit at once.
FORWARDED = (signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True, slots=True)
class RunOptions:
    command: list[str]
    serve_flags: list[str]  # passed to `sseproxy serve`, already validated
    log_file: Path | None  # None: a file of its own, named at the end
    shutdown_grace: float
    intercept: bool = False  # the command gets the intercept listener as its HTTPS proxy


def default_log_file() -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    fd, name = tempfile.mkstemp(prefix=f"sseproxy-run-{stamp}-", suffix=".jsonl")
    os.close(fd)
    return Path(name)


def say(text: str) -> None:
    print(f"{PREFIX} {text}", file=sys.stderr, flush=True)


def run(options: RunOptions, environ: Mapping[str, str] | None = None) -> int:
    log_file = options.log_file or default_log_file()
    try:
        offset = log_file.stat().st_size  # an existing file is appended to: read past it
    except FileNotFoundError:
        offset = 0
    try:
        started = proxy.start(options.serve_flags, log_file, offset)
    except ProxyFailed as exc:
        say(f"the proxy did not start: {exc}")
        return EXIT_PROXY_FAILED
    interception = None
    if options.intercept:
        try:
            interception = _interception(started)
        except (ProxyFailed, OSError) as exc:
            say(f"intercept mode cannot be set up: {exc}")
            started.stop(options.shutdown_grace)
            started.stderr.close()
            return EXIT_PROXY_FAILED
    launch = environment.launch(options.command, started.base, environ or os.environ, interception)
    say(
        f"proxy on {started.base} (inspector: {started.base}/_sseproxy/); set "
        + ", ".join(launch.set)
    )
    if interception is not None:
        hosts = ", ".join(sorted(interception.hosts))
        say(f"intercepting {hosts} on {interception.listen}; other hosts are tunnelled")
    try:
        code = _run_command(launch)
    finally:
        proxy_code = started.stop(options.shutdown_grace)
    if proxy_code not in (0, None):
        say(f"the proxy exited with {proxy_code}: {started.errors()}")
    started.stderr.close()
    summary = summarise(log_file, offset)
    name = shlex.join(options.command[:1])
    say(f"{name} exited with {code}; " + "\n".join(summary.lines()))
    say(f"records: {log_file} (sseproxy report {shlex.quote(str(log_file))})")
    return code


def _interception(started: proxy.Proxy) -> environment.Interception:
    """The intercept listener the proxy started, with the CA bundle written next to its CA."""
    from sseproxy.intercept import advice

    listener = started.intercept
    if listener is None:
        raise ProxyFailed("the proxy started no intercept listener")
    bundle = advice.write_bundle(listener.ca_file, advice.system_trust_file())
    return environment.Interception(listener.listen, listener.ca_file, bundle, listener.hosts)


def _run_command(launch: environment.Launch) -> int:
    """Start the command, wait for it with SIGINT left to it and SIGTERM/SIGHUP passed on;
    its exit code, 128 + the signal that ended it, or 126/127 as a shell says."""
    try:
        child = subprocess.Popen(launch.argv, env=launch.env)
    except FileNotFoundError:
        say(f"{launch.argv[0]}: command not found")
        return EXIT_NOT_FOUND
    except PermissionError:
        say(f"{launch.argv[0]}: not executable")
        return EXIT_NOT_EXECUTABLE

    def forward(signum: int, _: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    def leave(signum: int, _: FrameType | None) -> None:
        pass  # the command got it from the terminal; `run` ends when it does

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, leave)
    try:
        returncode = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 - returncode if returncode < 0 else returncode


def flags_for(settings: Sequence[tuple[str, object]], config: str | None) -> list[str]:
    """`serve` arguments for the settings given on `run`'s command line."""
    from sseproxy.config import flag_name

    flags = ["--config", config] if config else []
    for setting, value in settings:
        if value is None:
            continue
        option = flag_name(setting)
        if isinstance(value, bool):
            flags.append(option if value else "--no-" + option.removeprefix("--"))
        elif isinstance(value, list | tuple):  # a repeatable flag: once per value
            flags += [f"{option}={item}" for item in value]
        else:
            flags.append(f"{option}={value}")
    return flags
