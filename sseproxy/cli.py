"""Command line: `sseproxy [serve]` and `sseproxy replay`. Parsing only; the work is elsewhere."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import __version__
from .config import ConfigError, load
from .core import Dialect

COMMANDS = ("serve", "replay", "mock", "demo")


def _serve_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the proxy (the default command)")
    p.add_argument("--listen", metavar="HOST:PORT", help="address to listen on (127.0.0.1:8790)")
    p.add_argument("--upstream", metavar="URL", help="send every path to this upstream")
    p.add_argument("--config", metavar="FILE", help="TOML config file")
    p.add_argument("--log-format", choices=("auto", "json", "console"))
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    p.add_argument("--idle-timeout", type=float, metavar="SECONDS")
    p.add_argument("--connect-timeout", type=float, metavar="SECONDS")
    p.add_argument(
        "--content-timeout",
        type=float,
        metavar="SECONDS",
        help="no content delta for this long while keep-alives arrive is a content stall",
    )
    p.add_argument("--content-stall-action", choices=("log", "cut"))
    p.add_argument("--dialect", choices=("auto", *[d.value for d in Dialect]))
    p.add_argument("--max-request-body-bytes", type=int, metavar="N")
    p.add_argument("--max-event-bytes", type=int, metavar="N")
    p.add_argument("--max-concurrent-streams", type=int, metavar="N")
    p.add_argument("--shutdown-grace", type=float, metavar="SECONDS")
    p.add_argument("--event-loop", choices=("auto", "asyncio", "uvloop"))
    p.add_argument(
        "--allow-inject",
        action="store_true",
        default=None,
        help="let requests choose drill faults with the x-sseproxy-inject header",
    )
    p.add_argument("--inject", metavar="RULES", help="drill faults for every request")
    p.add_argument("--otel-endpoint", metavar="URL", help="OTLP/HTTP traces endpoint")
    p.add_argument(
        "--keep-content",
        action="store_true",
        default=None,
        help="show assembled text in the inspector page",
    )
    p.add_argument("--capture", dest="capture_dir", metavar="DIR", help="capture bodies here")
    p.add_argument("--capture-max-bytes", type=int, metavar="N")
    p.add_argument("--capture-max-total-bytes", type=int, metavar="N")
    p.add_argument(
        "--capture-request-bodies",
        action="store_true",
        default=None,
        help="also capture request bodies (they hold prompts)",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        default=None,
        help="listen on a non-loopback address without a warning",
    )


def _replay_parser(sub: Any) -> None:
    p = sub.add_parser("replay", help="feed a saved response body through the core")
    p.add_argument("file", help="a response body, byte for byte, or a capture's .json sidecar")
    p.add_argument("--dialect", default="auto", choices=("auto", *[d.value for d in Dialect]))
    chunking = p.add_mutually_exclusive_group()
    chunking.add_argument("--chunk-size", type=int, metavar="N", help="feed N bytes at a time")
    chunking.add_argument("--random-chunks", type=int, metavar="SEED", help="random chunk sizes")
    p.add_argument("--events", action="store_true", help="print each SSE event as a JSON line")
    p.add_argument("--content", action="store_true", help="print the assembled content")


def _mock_parser(sub: Any) -> None:
    p = sub.add_parser("mock", help="serve recorded streams as a fake upstream")
    p.add_argument("paths", nargs="+", help="capture sidecars (.json), body files, or folders")
    p.add_argument("--listen", default="127.0.0.1:8791", metavar="HOST:PORT")
    timing = p.add_mutually_exclusive_group()
    timing.add_argument("--speed", type=float, default=1.0, help="replay X times faster")
    timing.add_argument("--no-delay", action="store_true", help="send as fast as possible")
    p.add_argument("--dialect", choices=[d.value for d in Dialect], help="for body files")
    p.add_argument("--allow-inject", action="store_true", help="honour x-sseproxy-inject")
    p.add_argument("--inject", default="", metavar="RULES", help="faults for every stream")


def _demo_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="see sseproxy work on bundled streams, offline")
    p.add_argument("--log-format", choices=("console", "json"), default="console")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sseproxy",
        description="A diagnostic reverse proxy for LLM streaming APIs.",
    )
    parser.add_argument("--version", action="version", version=f"sseproxy {__version__}")
    sub = parser.add_subparsers(dest="command")
    _serve_parser(sub)
    _replay_parser(sub)
    _mock_parser(sub)
    _demo_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or (
        args_list[0] not in COMMANDS and args_list[0] not in ("-h", "--help", "--version")
    ):
        args_list.insert(0, "serve")
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command == "replay":
        return _replay(args, parser)
    if args.command == "mock":
        return _mock(args)
    if args.command == "demo":
        from . import demo

        return asyncio.run(demo.run(args.log_format))
    return _serve(args)


def _mock(args: argparse.Namespace) -> int:
    from aiohttp import web

    from .config import split_listen
    from .core.inject import InjectionError, parse_rules
    from .mock import MockServer, load_recordings

    try:
        rules = parse_rules(args.inject)
        recordings = load_recordings(
            [Path(p) for p in args.paths], Dialect(args.dialect) if args.dialect else None
        )
        server = MockServer(
            recordings, 0.0 if args.no_delay else args.speed, args.allow_inject, rules
        )
        host, port = split_listen(args.listen)
    except (InjectionError, OSError, ValueError, KeyError) as exc:
        print(f"sseproxy mock: {exc}", file=sys.stderr)
        return 2
    names = ", ".join(r.name for r in recordings)
    print(
        f"sseproxy mock: serving {len(recordings)} streams on http://{host}:{port} ({names})",
        file=sys.stderr,
    )
    web.run_app(server.app(), host=host, port=port, print=None, access_log=None)
    return 0


def _replay(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .capture import load_capture
    from .replay import EXIT_USAGE, ReplayOptions, replay

    if args.chunk_size is not None and args.chunk_size < 1:
        print("sseproxy replay: --chunk-size must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    capture = None
    try:
        if args.file.endswith(".json"):
            capture, data = load_capture(Path(args.file))
        else:
            data = Path(args.file).read_bytes()
    except OSError as exc:
        print(f"sseproxy replay: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, KeyError) as exc:
        print(f"sseproxy replay: {args.file}: not a capture sidecar ({exc})", file=sys.stderr)
        return EXIT_USAGE
    options = ReplayOptions(
        dialect=None if args.dialect == "auto" else Dialect(args.dialect),
        chunk_size=args.chunk_size,
        random_seed=args.random_chunks,
        events=args.events,
        content=args.content,
    )
    return replay(data, options, capture=capture)


def _serve(args: argparse.Namespace) -> int:
    from .server import run

    overrides = {
        key: getattr(args, key)
        for key in (
            "listen",
            "upstream",
            "log_format",
            "log_level",
            "idle_timeout",
            "connect_timeout",
            "content_timeout",
            "content_stall_action",
            "dialect",
            "max_request_body_bytes",
            "max_event_bytes",
            "max_concurrent_streams",
            "shutdown_grace",
            "event_loop",
            "allow_remote",
            "capture_dir",
            "capture_max_bytes",
            "capture_max_total_bytes",
            "capture_request_bodies",
            "allow_inject",
            "inject",
            "keep_content",
            "otel_endpoint",
        )
    }
    try:
        settings = load(args.config, os.environ, overrides)
    except ConfigError as exc:
        print(f"sseproxy: {exc}", file=sys.stderr)
        return 2
    return run(settings)
