"""`sseproxy report [FILE ...]`: parsing its flags and running it; the work is elsewhere."""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

import orjson

from sseproxy.tools.report import page, text
from sseproxy.tools.report.lines import MAX_LINE_BYTES, read_lines
from sseproxy.tools.report.summary import Bounds, Summary, parse_time
from sseproxy.tools.report.tables import report

EXIT_USAGE = 2
BOUNDS = Bounds()


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="summarise JSON-lines records: states, models, anomalies, worst requests",
        description="Summarise request.finished records (JSON lines) in one pass and bounded "
        f"memory. Percentiles (p50, p95) come from a uniform reservoir of {BOUNDS.reservoir} "
        "values per model and metric: exact while a model has at most that many, a sample "
        f"estimate beyond (max is always exact). At most {BOUNDS.keys} distinct values per table "
        "(models, routes, anomalies, ...); the rest are counted as (other). Unparseable lines "
        f"(and lines over {MAX_LINE_BYTES} bytes) are counted, never fatal.",
    )
    p.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="logs, rotated ones too (gzip is detected); '-' or none: stdin",
    )
    p.add_argument(
        "--since",
        metavar="TIME",
        type=_moment,
        help="only records at or after this ISO 8601 time; no zone: UTC (default: none)",
    )
    p.add_argument(
        "--until",
        metavar="TIME",
        type=_moment,
        help="only records before this ISO 8601 time; no zone: UTC (default: none)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON (default: off)")
    p.add_argument(
        "--html",
        metavar="FILE",
        help="also write the report as a self-contained HTML page (default: none)",
    )


def _moment(value: str) -> datetime.datetime:
    moment = parse_time(value)
    if moment is None:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {value!r}")
    return moment


def run(args: argparse.Namespace) -> int:
    summary = Summary(BOUNDS, since=args.since, until=args.until)
    try:
        summary.feed(read_lines(args.files))
    except OSError as exc:
        print(f"sseproxy report: {exc.filename or 'input'}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.html:
        try:
            with open(args.html, "w", encoding="utf-8") as out:
                out.write(page.render(summary))
        except OSError as exc:
            print(f"sseproxy report: cannot write {args.html!r}: {exc.strerror}", file=sys.stderr)
            return EXIT_USAGE
    data = report(summary)
    if args.json:
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(text.render(data))
    return 0
