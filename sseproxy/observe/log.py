"""Logging: configured once at the entry point; one `request.finished` record per request."""

from __future__ import annotations

import atexit
import contextlib
import datetime
import io
import logging
import math
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, TextIO

import orjson
import structlog

from sseproxy.observe.log_writer import MAX_QUEUED_BYTES, Gap, LineWriter
from sseproxy.observe.redact import NO_SECRETS

STATE_LEVELS = {
    "completed": logging.INFO,
    "incomplete": logging.WARNING,
    "unconfirmed": logging.WARNING,
    "cancelled": logging.WARNING,
}


def redact_query(query: str) -> str:
    """The query string as sent, with the values of credential parameters replaced."""
    return NO_SECRETS.redact_target("?" + query)[1:]


def redact_processor(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: no credential leaves the process, whatever the caller logged.

    Values under a credential's name go; key shapes (redact.KEY_SHAPES) go wherever they are.
    One look at the whole event: a clean one (every request record) is passed on untouched.
    """
    redacted = NO_SECRETS.redact(event_dict)
    if redacted is not event_dict:
        event_dict.clear()
        event_dict.update(redacted)
    return event_dict


def _leading_fields(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """timestamp, level and event first: what a person or a pipeline reads first."""
    head = {k: event_dict.pop(k) for k in ("timestamp", "level", "event") if k in event_dict}
    return {**head, **event_dict}


def level_for(state: str) -> int:
    return STATE_LEVELS.get(state, logging.ERROR)


# What JSON cannot carry is replaced, never refused: the record is always written.
_INT_RANGE = (-(2**63), 2**64 - 1)
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# Nesting kept when a record has to be rebuilt value by value (orjson itself stops at 254).
MAX_DEPTH = 64
_JSON_OPTIONS = orjson.OPT_NON_STR_KEYS


def _surrogate(match: re.Match[str]) -> str:
    # U+DC80..U+DCFF is a byte that was not UTF-8 (surrogateescape, as aiohttp decodes
    # headers): shown as that byte; any other lone surrogate becomes U+FFFD.
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "\ufffd"


def clean_text(text: str) -> str:
    """`text` as valid UTF-8: lone surrogates replaced."""
    return _SURROGATE.sub(_surrogate, text)


def _default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return clean_text(bytes(value).decode("utf-8", "surrogateescape"))
    try:
        return clean_text(str(value))
    except Exception:  # a __str__ that fails still leaves a trace, not a lost record
        return f"<unprintable {type(value).__name__}>"


def json_safe(value: Any, depth: int = 0) -> Any:
    """`value` rebuilt from what JSON carries: clean strings, 64-bit integers (larger ones as
    their decimal string), finite floats."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if _INT_RANGE[0] <= value <= _INT_RANGE[1] else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # as orjson writes NaN and infinities
    if depth >= MAX_DEPTH:
        return "[too deep]"
    if isinstance(value, Mapping):
        return {
            (clean_text(k) if isinstance(k, str) else _default(k)): json_safe(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v, depth + 1) for v in value]
    return _default(value)


def json_ready(record: Any) -> Any:
    """`record` itself when orjson writes it as it is, else rebuilt by `json_safe`: every
    sink that serialises it (inspector, capture) can then do so without a fallback."""
    try:
        orjson.dumps(record, option=_JSON_OPTIONS)
    except TypeError:
        return json_safe(record)
    return record


def json_rendered(record: Any) -> tuple[Any, bytes | None]:
    """`json_ready(record)`, and the JSON that test rendered (`_JSON_OPTIONS`) when `record`
    passed it as it is: the log line reuses it instead of rendering the record again."""
    try:
        return record, orjson.dumps(record, option=_JSON_OPTIONS)
    except TypeError:
        return json_safe(record), None


# What `str.splitlines()` (and JavaScript's line terminators) split on that orjson writes raw:
# U+0085, U+2028, U+2029. The ASCII ones (LF, CR, VT, FF, FS, GS, RS) are below U+0020,
# which JSON escapes already. In UTF-8 each of these byte runs is that character and nothing
# else, so replacing them never touches another character. Each is looked for only after its
# lead byte (one memchr), which most non-ASCII text never holds.
_RAW_BREAKS = (
    (b"\xc2", ((b"\xc2\x85", b"\\u0085"),)),
    (b"\xe2", ((b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))),
)


def one_line(data: bytes) -> bytes:
    """orjson's `data` with the line breaks JSON allows raw in a string escaped, so that any
    consumer's line splitting keeps a record whole. An ASCII line (the usual) is returned as
    it is after one scan."""
    if data.isascii():
        return data
    for lead, breaks in _RAW_BREAKS:
        if lead in data:
            for raw, escaped in breaks:
                if raw in data:
                    data = data.replace(raw, escaped)
    return data


def dumps(obj: Any, **_: Any) -> str:
    """JSON for any record, on one line whoever splits it: never raises. The fast path is
    orjson as is; a record it refuses (a lone surrogate, an integer beyond 64 bits, nesting
    too deep) is rebuilt value by value."""
    try:
        return one_line(orjson.dumps(obj, default=_default, option=_JSON_OPTIONS)).decode()
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        pass
    try:
        safe = orjson.dumps(json_safe(obj), default=_default, option=_JSON_OPTIONS)
        return one_line(safe).decode()
    except Exception as exc:  # last resort: the record's identity, and why the rest is missing
        head = {k: _default(obj[k]) for k in ("timestamp", "level", "event") if k in obj}
        head["log_error"] = _default(repr(exc))
        return orjson.dumps(head).decode()


class _Once:
    """Reports the first failure of one output on stderr, and only that one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reported = False

    def report(self, exc: BaseException) -> None:
        with self._lock:
            if self.reported:
                return
            self.reported = True
        with contextlib.suppress(Exception):  # stderr may be gone too
            # one write, newline included: the writer thread reports this, and print's two
            # writes could take another thread's stderr line between them
            sys.stderr.write(
                f"sseproxy: log output failed ({type(exc).__name__}: {exc}); "
                "records are dropped while it fails\n"
            )
            sys.stderr.flush()


class SafePrintLogger(structlog.PrintLogger):
    """A PrintLogger whose failing output (broken pipe, closed stream) never raises into the
    caller: reported once on stderr, then records are dropped while it keeps failing."""

    def __init__(self, file: TextIO, once: _Once) -> None:
        super().__init__(file)
        self._once = once

    def msg(self, message: str) -> None:
        try:
            super().msg(message)
        except (OSError, ValueError) as exc:  # ValueError: a closed file, or unencodable text
            self._once.report(exc)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class SafePrintLoggerFactory:
    def __init__(self, file: TextIO) -> None:
        self._file = file
        self._once = _Once()

    def __call__(self, *args: Any) -> SafePrintLogger:
        return SafePrintLogger(self._file, self._once)


class QueuedLogger:
    """A structlog logger that hands each line to the output's writer thread: never blocks
    on the output, never raises (`log_writer.LineWriter`)."""

    def __init__(self, writer: LineWriter) -> None:
        self._writer = writer

    def msg(self, message: str) -> None:
        self._writer.write(message)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class QueuedLoggerFactory:
    def __init__(self, writer: LineWriter) -> None:
        self._logger = QueuedLogger(writer)

    def __call__(self, *args: Any) -> QueuedLogger:
        return self._logger


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
COLORS = {"info": "\x1b[32m", "warning": "\x1b[33m", "error": "\x1b[31m"}
RESET, DIM = "\x1b[0m", "\x1b[2m"


def _safe(value: Any) -> str:
    """One line, whatever the value holds: control characters cannot forge another record."""
    text = clean_text(value) if isinstance(value, str) else dumps(value)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _ms(value: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{value / 1000:.2f}s" if value >= 1000 else f"{value:.0f}ms"


class ConsoleRenderer:
    """A one-line summary per request for people; other events as `event key=value ...`."""

    def __init__(self, colors: bool) -> None:
        self.colors = colors

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
        level = str(event_dict.get("level", "info"))
        time = str(event_dict.get("timestamp", ""))[11:19]
        if event_dict.get("event") == "request.finished":
            body = self._request(event_dict)
        else:
            rest = " ".join(
                f"{k}={_safe(v)}"
                for k, v in event_dict.items()
                if k not in ("event", "level", "timestamp") and v is not None
            )
            body = f"{_safe(event_dict.get('event'))} {rest}".rstrip()
        if self.colors:
            return f"{DIM}{time}{RESET} {COLORS.get(level, '')}{body}{RESET}"
        return f"{time} {body}"

    @staticmethod
    def _request(e: MutableMapping[str, Any]) -> str:
        interruption = e.get("interruption") or {}
        anomalies = e.get("anomalies") or {}
        error = e.get("error") or {}
        parts = [
            f"{_safe(e.get('state')):<11}",
            *(["[drill]"] if e.get("injected") else []),  # a drill's cut is not a real one
            _safe(e.get("dialect") or "-"),
            _safe(e.get("model") or e.get("response_model") or "-"),
            str(e.get("status") or "-"),
            f"finish={_safe(e.get('finish_reason') or '-')}",
            f"ttft={_ms(e.get('ttft_ms'))}",
            f"dur={_ms(e.get('duration_ms'))}",
            f"{e.get('bytes', 0)}B",
        ]
        if interruption:
            parts.append(f"cut={_safe(interruption.get('reason'))}")
        if error:
            parts.append(f"error={_safe(error.get('type') or error.get('code'))}")
        if anomalies:
            parts.append("anomalies=" + ",".join(_safe(k) for k in anomalies))
        parts.append(f"{_safe(e.get('method'))} {_safe(e.get('path'))}")
        return " ".join(parts)


# The level names add_log_level writes for the levels `level_for` gives.
LEVEL_NAMES = {logging.INFO: "info", logging.WARNING: "warning", logging.ERROR: "error"}
# Keys the chain itself writes, or reads from the caller's keys: a record holding one of them
# goes through the chain.
_CHAIN_KEYS = ("timestamp", "level", "event", "exc_info")


@dataclass(frozen=True, slots=True)
class _Direct:
    """What `configure` set up for JSON output, for `request_finished`'s direct path."""

    processors: list[Any]
    expected: list[Any]  # a copy: structlog.testing.capture_logs edits the list in place
    logger: SafePrintLogger | QueuedLogger
    min_level: int


_direct: _Direct | None = None


class _Second:
    """The second `utc_stamp` formatted last, and its text."""

    second = -1
    text = ""


def utc_stamp() -> str:
    """Now as `TimeStamper(fmt="iso", utc=True)` writes it (`2026-01-02T03:04:05.678901Z`,
    no fraction at a whole second), from the same clock rounded the same way (down to the
    microsecond). The date and time to the second are formatted once per second: once per
    request, datetime's own path runs cold and costs more than the rest of the line."""
    micros = time.time_ns() // 1000
    second, fraction = divmod(micros, 1_000_000)
    if second != _Second.second:
        moment = datetime.datetime.fromtimestamp(second, datetime.UTC)
        _Second.text, _Second.second = moment.isoformat()[:-6], second  # without "+00:00"
    return f"{_Second.text}.{fraction:06d}Z" if fraction else f"{_Second.text}Z"


def stamp_at(ns: int) -> str:
    """`utc_stamp`'s format for the moment `ns` (time.time_ns()), without its shared cache:
    safe from any thread."""
    second, fraction = divmod(ns // 1000, 1_000_000)
    text = datetime.datetime.fromtimestamp(second, datetime.UTC).isoformat()[:-6]
    return f"{text}.{fraction:06d}Z" if fraction else f"{text}Z"


def request_finished(record: Mapping[str, Any], level: int, rendered: bytes | None = None) -> None:
    """Log a request's record: the line the processor chain writes, as one orjson dump of a
    prebuilt dict. `rendered`, the record's own orjson rendering (`_JSON_OPTIONS`) when the
    caller has it, is spliced in after the leading fields instead of rendered again.

    The record was redacted once with the request's own secrets (`Secrets.redact`, which does
    all `redact_processor` does and more), so the chain would only re-walk it. Any other case
    takes the chain: console output, structlog reconfigured since `configure` (tests, the
    demo's tee), values bound in the context, or a record holding a key the chain writes.
    """
    direct = _direct
    if (
        direct is None
        or level not in LEVEL_NAMES
        or (processors := structlog.get_config()["processors"]) is not direct.processors
        or processors != direct.expected
        or any(key in record for key in _CHAIN_KEYS)
        or structlog.contextvars.get_contextvars()
    ):
        structlog.get_logger("sseproxy").log(level, "request.finished", **record)
        return
    if level < direct.min_level:
        return
    # the chain's clock and format (its TimeStamper's), in its first place
    line = {"timestamp": utc_stamp(), "level": LEVEL_NAMES[level], "event": "request.finished"}
    if rendered is not None and rendered.startswith(b"{") and rendered != b"{}":
        # the bytes `dumps` would write for the whole line: the same dict, rendered in two parts
        head = orjson.dumps(line, option=_JSON_OPTIONS)
        direct.logger.msg(one_line(head[:-1] + b"," + rendered[1:]).decode())
        return
    line.update(record)
    direct.logger.msg(dumps(line))


# How long the end of the process waits for the log output to take the lines still queued:
# with the default 8 s shutdown grace, the exit stays within Docker's 10 s stop timeout. An
# output that takes lines at all takes the usual few in milliseconds.
FLUSH_SECONDS = 1.0


class _Output:
    """The writer thread of the configured output, when it has one."""

    writer: LineWriter | None = None


def _file_descriptor(stream: TextIO) -> int | None:
    """The stream's file descriptor; None for an in-memory stream (a test's StringIO)."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return None


def gap_renderer(log_format: str, colors: bool) -> Callable[[Gap], str]:
    """The `log.records_dropped` line, in the configured format."""
    console = ConsoleRenderer(colors=colors)

    def render(gap: Gap) -> str:
        event: dict[str, Any] = {
            "timestamp": stamp_at(time.time_ns()),
            "level": "warning",
            "event": "log.records_dropped",
            "dropped": gap.dropped,
            "first_dropped_at": stamp_at(gap.first_ns),
            "last_dropped_at": stamp_at(gap.last_ns),
        }
        return dumps(event) if log_format == "json" else console(None, "warning", event)

    return render


def _start_writer(
    stream: TextIO, fd: int, log_format: str, once: _Once, max_queue_bytes: int, colors: bool
) -> LineWriter:
    with contextlib.suppress(Exception):  # what was printed before goes out first
        stream.flush()
    return LineWriter(
        io.FileIO(fd, "wb", closefd=False),
        gap_renderer(log_format, colors),
        max_bytes=max_queue_bytes,
        encoding=getattr(stream, "encoding", None) or "utf-8",
        errors=getattr(stream, "errors", None) or "strict",
        report=once.report,
        fileno=fd,
    )


def finish(timeout: float = FLUSH_SECONDS) -> int:
    """At the end of the process: wait up to `timeout` for the queued lines to be written,
    say on stderr how many were not, and stop the writer. The number not written."""
    writer, _Output.writer = _Output.writer, None
    if writer is None:
        return 0
    left = writer.flush(timeout)
    writer.close()
    if left:
        with contextlib.suppress(Exception):  # stderr may be gone too
            print(
                f"sseproxy: {left} log lines could not be written "
                f"(the output did not take them within {timeout:g} s)",
                file=sys.stderr,
                flush=True,
            )
    return left


# The backstop for a process that ends without calling `finish` (a no-op when it did).
atexit.register(finish)


def configure(
    log_format: str = "auto",
    level: str = "info",
    stream: TextIO | None = None,
    cache: bool = True,
    background: bool | None = None,
    max_queue_bytes: int = MAX_QUEUED_BYTES,
    color: bool = True,
) -> None:
    """Configure structlog for the process. `auto`: JSON unless stdout is a terminal.

    The console format colours its lines only on a terminal, and never with `color=False`
    (the command line's NO_COLOR: this module does not read the environment).

    `background`: lines go through a bounded queue to a thread that owns the output, so that
    an output nobody reads never blocks the event loop (log_writer.py). None: when the stream
    has a file descriptor (stdout, a file, a pipe: what can block); an in-memory stream is
    written at once, which lets tests read a record as soon as it was logged.
    `cache=False` lets tests reconfigure between cases.
    """
    stream = stream or sys.stdout
    colors = color and stream.isatty()
    if log_format == "auto":
        log_format = "console" if stream.isatty() else "json"
    global _direct
    stamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        stamper,
        redact_processor,
        _leading_fields,
    ]
    renderer: list[Any]
    if log_format == "json":
        renderer = [
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=dumps),
        ]
    else:
        renderer = [ConsoleRenderer(colors=colors)]
    processors = shared + renderer
    previous = _Output.writer
    if previous is not None:  # its lines first, and its thread ends (a bounded wait)
        previous.flush(FLUSH_SECONDS)
        previous.close()
    fd = _file_descriptor(stream) if background is not False else None
    if background and fd is None:
        raise ValueError("a background writer needs a stream with a file descriptor")
    factory: SafePrintLoggerFactory | QueuedLoggerFactory
    if fd is not None:
        writer = _start_writer(stream, fd, log_format, _Once(), max_queue_bytes, colors)
        factory, _Output.writer = QueuedLoggerFactory(writer), writer
    else:
        factory, _Output.writer = SafePrintLoggerFactory(stream), None
    min_level = getattr(logging, level.upper())
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(min_level),
        logger_factory=factory,
        cache_logger_on_first_use=cache,
    )
    _direct = (
        _Direct(processors, list(processors), factory(), min_level)
        if log_format == "json"
        else None
    )
    # aiohttp's own loggers go through the standard library; keep them quiet and on stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
