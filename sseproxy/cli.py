"""Command line: `sseproxy [serve]`, `run`, `replay`, `mock`, `demo` and `report`. Parsing only; the
work is elsewhere. Every flag's help names its default, taken from the code that applies it."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sseproxy import __version__
from sseproxy.cli_io import EXIT_BROKEN_PIPE, quiet_stdout
from sseproxy.config import ENV_PREFIX, MEANT, ConfigError, Settings, flag_name, load, unknown_env
from sseproxy.core import Dialect

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

COMMANDS = ("serve", "run", "replay", "mock", "demo", "report", "ca")
VERSION_FLAGS = ("--version", "-V")
VERSION = f"sseproxy {__version__}"
VERSION_HELP = "print the version and exit (default: off)"
# How close (difflib's ratio, leading dashes left out) a mistyped flag must be to one the
# command has to be suggested: --listne (0.83) is, --foo is not near --log-format.
FLAG_CUTOFF = 0.7
# Named in `sseproxy --help`, which is serve's: what else the command line does.
OTHER_COMMANDS = (
    ("run", "run a command (a coding agent) through a proxy of its own, then sum up its streams"),
    ("replay", "feed a saved response body through the core"),
    ("mock", "serve recorded streams as a fake upstream"),
    ("demo", "see sseproxy work on bundled streams, offline"),
    ("report", "summarise JSON-lines logs of records: states, anomalies, the slowest"),
    ("ca", "intercept mode's CA: its file, fingerprint and the environment clients need"),
)
DEFAULTS = Settings()
SETTING_TYPES = {f.name: f.type for f in dataclasses.fields(Settings)}
DIALECTS = tuple(d.value for d in Dialect)
DEMO_LOG_FORMAT = "console"
# Settings whose flag is given once per value.
REPEATABLE = frozenset({"intercept_hosts"})
# Defaults that an empty value stands for.
DEFAULT_SHOWN = {
    "intercept_hosts": "the bundled routes' https hosts and chatgpt.com",
    "ca_dir": "$XDG_DATA_HOME/sseproxy, else ~/.local/share/sseproxy",
}


@dataclass(frozen=True, slots=True)
class Flag:
    """A `serve` flag for one setting; its type and default come from `Settings`."""

    setting: str
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None


SERVE_FLAGS = (
    Flag("listen", "address to listen on", "HOST:PORT"),
    Flag("allow_remote", "listen on a non-loopback address without a warning"),
    Flag(
        "allowed_hosts",
        "Host names, besides loopback, that the /_sseproxy/ endpoints answer (comma-separated)",
        "HOST[,HOST...]",
    ),
    Flag("upstream", "send every path to this one upstream, ignoring the routes", "URL"),
    Flag(
        "log_format",
        "record format; auto: JSON unless stdout is a terminal",
        None,
        ("auto", "json", "console"),
    ),
    Flag("log_file", "append the records to this file instead of stdout", "FILE"),
    Flag("log_level", "lowest level logged", None, ("debug", "info", "warning", "error")),
    Flag(
        "max_log_queue_bytes",
        "record bytes waiting for a log output that does not keep up; beyond it, dropped",
        "N",
    ),
    Flag("idle_timeout", "seconds without an upstream byte before a stream is cut", "SECONDS"),
    Flag("connect_timeout", "seconds to open the upstream connection (TCP + TLS)", "SECONDS"),
    Flag(
        "upstream_ca_file",
        "trust only the CAs in this PEM file for https upstreams; unset: the system's",
        "FILE",
    ),
    Flag("request_timeout", "seconds for a client to send its request body; then 408", "SECONDS"),
    Flag("dialect", "force one API dialect for every request", None, ("auto", *DIALECTS)),
    Flag("max_request_body_bytes", "larger request bodies get 413", "N"),
    Flag(
        "max_total_request_body_bytes",
        "request body bytes held by all requests in flight; beyond it, 503",
        "N",
    ),
    Flag("max_event_bytes", "a larger SSE event is forwarded but not analysed", "N"),
    Flag("max_ws_message_bytes", "a larger WebSocket message closes its session (1009)", "N"),
    Flag("max_concurrent_streams", "beyond this many requests in flight, 503", "N"),
    Flag(
        "max_client_held_bytes",
        "response bytes held for one client that does not read; beyond it the upstream waits",
        "N",
    ),
    Flag(
        "max_held_bytes",
        "response bytes held for all clients; beyond it the upstreams of clients holding any wait",
        "N",
    ),
    Flag(
        "max_ws_held_bytes",
        "upstream WebSocket messages queued for all session clients; beyond it the upstreams "
        "of sessions queueing any wait",
        "N",
    ),
    Flag("backlog", "listen backlog; 0: the system's somaxconn", "N"),
    Flag("shutdown_grace", "seconds in-flight streams get after SIGTERM/SIGINT", "SECONDS"),
    Flag(
        "content_timeout",
        "seconds without a content delta (after the first byte) while keep-alives still arrive "
        "that count as a content stall; unset: off",
        "SECONDS",
    ),
    Flag(
        "content_stall_action",
        "on a content stall: log it (anomaly content_stall) or cut the stream",
        None,
        ("log", "cut"),
    ),
    Flag(
        "event_loop", "event loop; auto: uvloop when installed", None, ("auto", "asyncio", "uvloop")
    ),
    Flag("allow_inject", "let requests choose drill faults with the x-sseproxy-inject header"),
    Flag("inject", "drill faults applied to every request sent to --upstream", "RULES"),
    Flag("keep_content", "the inspector keeps streams' bytes: events, raw bytes, text"),
    Flag("inspector_streams", "finished streams whose bytes the inspector keeps", "N"),
    Flag("inspector_stream_bytes", "bytes the inspector keeps of one stream", "N"),
    Flag("inspector_total_bytes", "bytes the inspector keeps of all streams together", "N"),
    Flag("inspector_events", "rows of one stream's event list in the inspector", "N"),
    Flag("inspector_chars", "characters of one event's data shown in the inspector", "N"),
    Flag("inspector_sessions", "WebSocket sessions the inspector lists", "N"),
    Flag("inspector_session_messages", "messages of one session the inspector lists", "N"),
    Flag("resume_ledger_streams", "ended streams kept to link resumes and retries; 0: none", "N"),
    Flag("resume_ledger_seconds", "seconds after its end a stream can still be linked", "SECONDS"),
    Flag("resume_ledger_events", "events kept per stream for resume links (its last ones)", "N"),
    Flag("capture_dir", "capture every response body and a JSON sidecar in this folder", "DIR"),
    Flag("capture_max_bytes", "body bytes kept per capture", "N"),
    Flag("capture_max_total_bytes", "bytes kept in the capture folder, oldest deleted first", "N"),
    Flag("capture_request_bodies", "also capture request bodies (they hold prompts)"),
    Flag("metrics_models", "model names allowed as a metrics label (comma-separated)", "NAMES"),
    Flag("otel_endpoint", "export one OpenTelemetry span per request to this OTLP/HTTP URL", "URL"),
    Flag("otel_service_name", "OpenTelemetry service.name", "NAME"),
    Flag(
        "intercept_listen",
        "also run a forward proxy on this address for HTTPS_PROXY / HTTP_PROXY clients",
        "HOST:PORT",
    ),
    Flag(
        "intercept_hosts",
        "a host whose TLS the forward proxy terminates (repeatable)",
        "HOST",
    ),
    Flag("ca_dir", "folder of the interception CA (made there on first use)", "DIR"),
)


def shown(value: Any) -> str:
    """A default as a reader wants to see it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value in (None, "", ()):
        return "none"
    if isinstance(value, int) and value >= 1024 * 1024 and value % (1024 * 1024) == 0:
        return f"{value} = {value // (1024 * 1024)} MiB"
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return str(value)


def _serve_parser(sub: Any) -> None:
    p: Parser = sub.add_parser(
        "serve",
        prog="sseproxy [serve]",
        help="run the proxy (the default command)",
        description="A diagnostic reverse proxy for LLM streaming APIs. Run the proxy: "
        "`serve` is the default command. Settings: bundled defaults < --config FILE < "
        f"{ENV_PREFIX}* environment < these flags.",
        epilog="Other commands: "
        + "; ".join(f"sseproxy {name} ({text})" for name, text in OTHER_COMMANDS)
        + ". `sseproxy COMMAND --help` describes each.",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file overriding the bundled defaults key by key; its [[routes]], if any, "
        f"replace the default routes (default: none; env {ENV_PREFIX}CONFIG)",
    )
    p.add_argument(*VERSION_FLAGS, action="version", version=VERSION, help=VERSION_HELP)
    _setting_flags(p, SERVE_FLAGS)


def _setting_flags(p: Parser, flags: Sequence[Flag]) -> None:
    for flag in flags:
        default = getattr(DEFAULTS, flag.setting)
        option = flag_name(flag.setting)
        value = DEFAULT_SHOWN.get(flag.setting) or shown(default)
        text = f"{flag.help} (default: {value}; env {ENV_PREFIX}{flag.setting.upper()})"
        if isinstance(default, bool):
            p.add_argument(
                option, dest=flag.setting, action=argparse.BooleanOptionalAction, help=text
            )
        elif flag.setting in REPEATABLE:
            p.add_argument(
                option, dest=flag.setting, action="append", metavar=flag.metavar, help=text
            )
        elif flag.choices:
            p.add_argument(option, dest=flag.setting, choices=flag.choices, help=text)
        else:
            kind = type(default) if isinstance(default, int | float) else str
            if default is None and "float" in str(SETTING_TYPES[flag.setting]):
                kind = float  # an optional duration
            p.add_argument(option, dest=flag.setting, type=kind, metavar=flag.metavar, help=text)


# `run` listens on a free loopback port of its own and writes JSON records to a file.
RUN_FIXED = ("listen", "allow_remote", "allowed_hosts", "log_format")
RUN_FLAGS = tuple(flag for flag in SERVE_FLAGS if flag.setting not in RUN_FIXED)
RUN_USAGE = "sseproxy run [FLAGS] -- COMMAND [ARGS ...]"
# `run --intercept`'s intercept listener when none is set: a free loopback port.
RUN_INTERCEPT_LISTEN = "127.0.0.1:0"


def _run_parser(sub: Any) -> None:
    p: Parser = sub.add_parser(
        "run",
        usage=RUN_USAGE,
        help=dict(OTHER_COMMANDS)["run"],
        description="Start the proxy on a free loopback port, run COMMAND with the variables "
        "its clients read pointed at it (OPENAI_BASE_URL, OPENAI_API_BASE, ANTHROPIC_BASE_URL, "
        "GOOGLE_GEMINI_BASE_URL; for `codex`, a provider given as -c overrides), exit with "
        "COMMAND's exit code, and print on stderr what its streams and sessions did. The "
        "proxy runs on the bundled defaults (or --config) with these flags; its records go "
        "to --log-file, or to a file named at the end. With --intercept, COMMAND gets "
        "HTTPS_PROXY and the CA variables instead (docs/intercept.md).",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help=f"TOML file overriding the bundled defaults (default: none; env {ENV_PREFIX}CONFIG)",
    )
    p.add_argument(
        "--intercept",
        action="store_true",
        help="give COMMAND the intercept listener as its HTTPS proxy and the CA to trust (the "
        "variables of `sseproxy ca`), no base URL: its clients go to their usual hosts, the "
        f"intercepted ones recorded; the listener on {RUN_INTERCEPT_LISTEN} unless "
        "--intercept-listen is set (default: off)",
    )
    _setting_flags(p, RUN_FLAGS)
    p.add_argument("argv", nargs="*", metavar="COMMAND", help="the command and its arguments")


def _replay_parser(sub: Any) -> None:
    p: Parser = sub.add_parser("replay", help=dict(OTHER_COMMANDS)["replay"])
    p.add_argument("file", help="a response body, byte for byte, or a capture's .json sidecar")
    p.add_argument(
        "--dialect",
        default="auto",
        choices=("auto", *DIALECTS),
        help="the body's API dialect (default: auto, detected; a sidecar's recorded one)",
    )
    chunking = p.add_mutually_exclusive_group()
    size = chunking.add_argument(
        "--chunk-size",
        type=int,
        metavar="N",
        help="feed N bytes at a time (default: a sidecar's recorded chunking, else all at once)",
    )
    seed = chunking.add_argument(
        "--random-chunks",
        type=int,
        metavar="SEED",
        help="feed random chunk sizes drawn with this seed (default: off)",
    )
    p.known(size)
    p.known(seed)
    p.add_argument(
        "--events", action="store_true", help="print each SSE event as a JSON line (default: off)"
    )
    p.add_argument(
        "--content", action="store_true", help="print the assembled content (default: off)"
    )


def _mock_parser(sub: Any) -> None:
    from sseproxy.tools.mock import DEFAULT_LISTEN, DEFAULT_SPEED, samples_dir

    p: Parser = sub.add_parser("mock", help=dict(OTHER_COMMANDS)["mock"])
    p.add_argument(
        "paths",
        nargs="*",
        help="capture sidecars (.json), body files, or folders of them, searched recursively "
        f"(default: the bundled samples in {samples_dir()})",
    )
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to listen on (default: {DEFAULT_LISTEN})",
    )
    timing = p.add_mutually_exclusive_group()
    speed = timing.add_argument(
        "--speed",
        type=float,
        default=DEFAULT_SPEED,
        help=f"replay the recorded timing X times faster (default: {DEFAULT_SPEED:g})",
    )
    no_delay = timing.add_argument(
        "--no-delay", action="store_true", help="send as fast as possible (default: off)"
    )
    p.known(speed)
    p.known(no_delay)
    p.add_argument(
        "--dialect",
        choices=DIALECTS,
        help="dialect of raw body files (default: detected from each file)",
    )
    p.add_argument(
        "--allow-inject",
        action="store_true",
        help="honour the x-sseproxy-inject request header (default: off)",
    )
    p.add_argument(
        "--inject",
        default="",
        metavar="RULES",
        help="drill faults applied to every stream (default: none)",
    )


def _demo_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help=dict(OTHER_COMMANDS)["demo"])
    p.add_argument(
        "--log-format",
        choices=("console", "json"),
        default=DEMO_LOG_FORMAT,
        help=f"how the records are printed (default: {DEMO_LOG_FORMAT})",
    )


def _ca_parser(sub: Any) -> None:
    p: Parser = sub.add_parser("ca", help=dict(OTHER_COMMANDS)["ca"])
    p.add_argument(
        "--config",
        metavar="FILE",
        help=f"read ca_dir and intercept_listen from this file (default: none; env "
        f"{ENV_PREFIX}CONFIG)",
    )
    p.add_argument(
        "--ca-dir",
        dest="ca_dir",
        metavar="DIR",
        help=f"folder of the CA, made on first use (default: {DEFAULT_SHOWN['ca_dir']}; env "
        f"{ENV_PREFIX}CA_DIR)",
    )
    p.add_argument(
        "--intercept-listen",
        dest="intercept_listen",
        metavar="HOST:PORT",
        help=f"the address the variables point clients at (default: the setting, else "
        f"suggested; env {ENV_PREFIX}INTERCEPT_LISTEN)",
    )
    p.add_argument(
        "--env",
        action="store_true",
        help='print only the export lines, for eval "$(sseproxy ca --env)" (default: off)',
    )


class Parser(argparse.ArgumentParser):
    """argparse's parser, but `--help` lets a broken pipe through to `main` (argparse's own
    printing swallows it once the text outgrows stdout's buffer, and exits 0); and it keeps
    the option strings it accepts (`options`) and its commands' parsers (`commands`), so
    that a mistyped one can be answered with the closest."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.options: list[str] = []
        self.commands: dict[str, Parser] = {}
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        return self.known(super().add_argument(*args, **kwargs))

    def known(self, action: argparse.Action) -> argparse.Action:
        """Count an argument added to a group (a group's `add_argument` is not this one's)."""
        self.options.extend(action.option_strings)
        return action

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        (file or sys.stdout).write(self.format_help())


class Commands:
    """The subparsers action as the `_*_parser` functions see it: each command's parser is
    also kept in the top-level parser's `commands`."""

    def __init__(self, parser: Parser) -> None:
        self._sub = parser.add_subparsers(dest="command", parser_class=Parser)
        self._parser = parser

    def add_parser(self, name: str, **kwargs: Any) -> Parser:
        command: Parser = self._sub.add_parser(name, **kwargs)
        self._parser.commands[name] = command
        return command


def build_parser() -> Parser:
    parser = Parser(
        prog="sseproxy",
        description="A diagnostic reverse proxy for LLM streaming APIs.",
    )
    parser.add_argument(*VERSION_FLAGS, action="version", version=VERSION, help=VERSION_HELP)
    sub = Commands(parser)
    _serve_parser(sub)
    _run_parser(sub)
    _replay_parser(sub)
    _mock_parser(sub)
    _demo_parser(sub)
    _ca_parser(sub)
    from sseproxy.tools.report.command import add_parser as report_parser

    report_parser(sub)
    return parser


def command_hint(word: str) -> str:
    """What an unknown command is answered with: the closest command, or the list."""
    close = difflib.get_close_matches(word, COMMANDS, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (commands: {', '.join(COMMANDS)})"


def flag_hint(extras: Sequence[str], options: Sequence[str]) -> str:
    """Suggestions for the flags among arguments argparse did not recognise: the closest
    long option of the command (`--port`/`--host`: `--listen`, which they are part of)."""
    longs = {option.lstrip("-"): option for option in options if option.startswith("--")}
    hints: list[tuple[str, str]] = []
    for word in extras:
        name = word.partition("=")[0].lstrip("-")
        if not word.startswith("-") or not name:
            continue
        meant = flag_name(MEANT[name]) if name in MEANT else ""
        if meant in options:
            hints.append((word, meant))
        elif close := difflib.get_close_matches(name, longs, n=1, cutoff=FLAG_CUTOFF):
            hints.append((word, longs[close[0]]))
    if len(hints) == 1:
        return f" (did you mean {hints[0][1]}?)"
    if hints:
        return " (did you mean " + ", ".join(f"{m} for {w}" for w, m in hints) + "?)"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Whichever prints, a reader that goes away (`| head`) ends it quietly
    with EXIT_BROKEN_PIPE, as SIGPIPE would end a C program: no traceback. The environment
    is read here, once: NO_COLOR (any non-empty value, no-color.org) turns colours off."""
    try:
        try:
            return _command(argv, color=not os.environ.get("NO_COLOR"))
        finally:  # also on SystemExit (--help): flushed here, not at exit, where it is loud
            sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
        return EXIT_BROKEN_PIPE


def _command(argv: Sequence[str] | None, color: bool) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    first = args_list[0] if args_list else None
    if first is not None and not first.startswith("-") and first not in COMMANDS:
        # serve takes no positional argument: a first word is a command, or a mistyped one.
        parser.error(f"unknown command {first!r}{command_hint(first)}")
    if first not in (*COMMANDS, *VERSION_FLAGS):
        args_list.insert(0, "serve")  # so `sseproxy --help` is serve's help, flags and all
    command: list[str] = []
    if first == "run" and "--" in args_list:  # everything after it is the command's
        split = args_list.index("--")
        args_list, command = args_list[:split], args_list[split + 1 :]
    args, extras = parser.parse_known_args(args_list)
    if extras:  # argparse's own message, and the flag that was meant
        hint = flag_hint(extras, parser.commands[args.command].options)
        parser.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
    if args.command == "run":
        return _run(args, [*args.argv, *command], parser.commands["run"])
    if args.command == "replay":
        return _replay(args, parser)
    if args.command == "mock":
        return _mock(args)
    if args.command == "report":
        from sseproxy.tools.report.command import run as report

        return report(args)
    if args.command == "ca":
        return _ca(args)
    if args.command == "demo":
        from sseproxy.tools import demo

        return demo.main(args.log_format, color=color)
    return _serve(args, color)


def _mock(args: argparse.Namespace) -> int:
    from aiohttp import web

    from sseproxy.config import split_listen
    from sseproxy.core.inject import InjectionError, parse_rules
    from sseproxy.tools.mock import MockServer, load_recordings, load_sessions, samples_dir

    try:
        rules = parse_rules(args.inject)
        paths = [Path(p) for p in args.paths] or [samples_dir()]
        recordings = load_recordings(paths, Dialect(args.dialect) if args.dialect else None)
        sessions = load_sessions(paths)
        speed = 0.0 if args.no_delay else args.speed
        server = MockServer(recordings, speed, args.allow_inject, rules, sessions=sessions)
        host, port = split_listen(args.listen)
    except (InjectionError, OSError, ValueError, KeyError) as exc:
        print(f"sseproxy mock: {exc}", file=sys.stderr)
        return 2
    names = ", ".join([r.name for r in recordings] + [s.name for s in sessions])
    served = f"{len(recordings)} streams" + (f" and {len(sessions)} sessions" if sessions else "")

    def started(_: str) -> None:  # aiohttp calls this once the socket listens
        print(
            f"sseproxy mock: serving {served} on http://{host}:{port} ({names})",
            file=sys.stderr,
            flush=True,
        )

    web.run_app(server.app(), host=host, port=port, print=started, access_log=None)
    return 0


def _replay(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from sseproxy.capture.format import load_capture
    from sseproxy.capture.sessions import is_session_capture
    from sseproxy.tools.replay import EXIT_USAGE, ReplayOptions, replay

    if args.chunk_size is not None and args.chunk_size < 1:
        print(
            f"sseproxy replay: --chunk-size must be at least 1, not {args.chunk_size}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    capture = None
    try:
        if args.file.endswith(".json") and is_session_capture(Path(args.file)):
            return _replay_session(args)
        if args.file.endswith(".json"):
            capture, data = load_capture(Path(args.file))
        else:
            data = Path(args.file).read_bytes()
    except OSError as exc:
        print(f"sseproxy replay: cannot read {args.file!r}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, KeyError) as exc:
        print(f"sseproxy replay: {args.file!r}: not a capture sidecar ({exc})", file=sys.stderr)
        return EXIT_USAGE
    options = ReplayOptions(
        dialect=None if args.dialect == "auto" else Dialect(args.dialect),
        chunk_size=args.chunk_size,
        random_seed=args.random_chunks,
        events=args.events,
        content=args.content,
    )
    return replay(data, options, capture=capture)


def _replay_session(args: argparse.Namespace) -> int:
    """A WebSocket session capture: its messages through the session judge."""
    from sseproxy.capture.sessions import load_session
    from sseproxy.tools.replay import EXIT_USAGE
    from sseproxy.tools.session_replay import replay_session

    unused = [
        flag
        for flag, given in (
            ("--dialect", args.dialect != "auto"),
            ("--chunk-size", args.chunk_size is not None),
            ("--random-chunks", args.random_chunks is not None),
            ("--events", args.events),
            ("--content", args.content),
        )
        if given
    ]
    if unused:
        print(
            f"sseproxy replay: {', '.join(unused)} do not apply to a WebSocket session capture",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        file = load_session(Path(args.file))
    except OSError as exc:
        print(f"sseproxy replay: cannot read {args.file!r}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, KeyError) as exc:
        print(f"sseproxy replay: {args.file!r}: not a session capture ({exc})", file=sys.stderr)
        return EXIT_USAGE
    return replay_session(file)


def _ca(args: argparse.Namespace) -> int:
    from sseproxy.intercept import advice, ca

    overrides = {"ca_dir": args.ca_dir, "intercept_listen": args.intercept_listen}
    try:
        settings = load(args.config, os.environ, overrides)
        directory = ca.ca_directory(settings.ca_dir, os.environ)
        created = not (directory / ca.CA_CERT).exists()
        authority = ca.load_or_create(directory)
        bundle = advice.write_bundle(authority.cert_path, advice.system_trust_file())
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"sseproxy: config: {problem}", file=sys.stderr)
        return 2
    except (ca.CAError, OSError) as exc:
        print(f"sseproxy ca: {exc}", file=sys.stderr)
        return 1
    listen, hosts = settings.intercept_listen, settings.intercepted_hosts
    text = advice.render(authority, created, bundle, listen, args.env, hosts)
    sys.stdout.write(text)
    return 0


def _run(args: argparse.Namespace, command: list[str], parser: Parser) -> int:
    from sseproxy.tools.run.command import RunOptions, flags_for, run

    if not command:
        parser.error(f"no command to run: {RUN_USAGE}")
    given = [(flag.setting, getattr(args, flag.setting)) for flag in RUN_FLAGS]
    settings = _settings(args.config, dict(given))
    if settings is None:
        return 2
    flags = flags_for([g for g in given if g[0] != "log_file"], args.config)
    if args.intercept and not settings.intercept_listen:
        flags += flags_for([("intercept_listen", RUN_INTERCEPT_LISTEN)], None)
    options = RunOptions(
        command=command,
        serve_flags=flags,
        log_file=Path(settings.log_file) if settings.log_file else None,
        shutdown_grace=settings.shutdown_grace,
        intercept=args.intercept,
    )
    return run(options)


def _settings(config: str | None, overrides: dict[str, Any]) -> Settings | None:
    """The settings, or None once every problem has been printed."""
    for warning in unknown_env(os.environ):
        print(f"sseproxy: config: warning: {warning}", file=sys.stderr)
    try:
        return load(config, os.environ, overrides)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"sseproxy: config: {problem}", file=sys.stderr)
        return None


def _serve(args: argparse.Namespace, color: bool) -> int:
    from sseproxy.server import run

    overrides = {flag.setting: getattr(args, flag.setting) for flag in SERVE_FLAGS}
    settings = _settings(args.config, overrides)
    if settings is None:
        return 2
    return run(settings, color=color)
