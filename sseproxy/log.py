"""Logging: configured once at the entry point; one `request.finished` record per request."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any, TextIO
from urllib.parse import unquote_plus

import orjson
import structlog

REDACTED = "[redacted]"
# Header names and body/query keys whose values are credentials. Matching is case-insensitive.
SECRET_KEYS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "key",
        "api_key",
        "apikey",
        "access_token",
        "token",
        "client_secret",
        "password",
    }
)
# Values that look like credentials wherever they appear (a defence in depth for free text).
SECRET_VALUE = re.compile(
    r"(?i)\b(bearer\s+[A-Za-z0-9._~+/=-]{8,}|sk-[A-Za-z0-9_-]{8,}|AIza[0-9A-Za-z_-]{20,})"
)
STATE_LEVELS = {
    "completed": logging.INFO,
    "incomplete": logging.WARNING,
    "unconfirmed": logging.WARNING,
    "cancelled": logging.WARNING,
}


def redact_query(query: str) -> str:
    """The query string as sent, with the values of credential parameters replaced."""
    out = []
    for pair in query.split("&"):
        name, sep, _ = pair.partition("=")
        if sep and unquote_plus(name).lower() in SECRET_KEYS:
            pair = f"{name}={REDACTED}"
        out.append(pair)
    return "&".join(out)


def _redact(value: Any) -> Any:
    if isinstance(value, str):
        return SECRET_VALUE.sub(REDACTED, value)
    if isinstance(value, Mapping):
        return {
            k: REDACTED if str(k).lower() in SECRET_KEYS and v else _redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact(v) for v in value]
    return value


def redact_processor(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: no credential leaves the process, whatever the caller logged."""
    for key in list(event_dict):
        value = event_dict[key]
        if key.lower() in SECRET_KEYS and value:
            event_dict[key] = REDACTED
        else:
            event_dict[key] = _redact(value)
    return event_dict


def _leading_fields(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """timestamp, level and event first: what a person or a pipeline reads first."""
    head = {k: event_dict.pop(k) for k in ("timestamp", "level", "event") if k in event_dict}
    return {**head, **event_dict}


def level_for(state: str) -> int:
    return STATE_LEVELS.get(state, logging.ERROR)


def _orjson_dumps(obj: Any, default: Any = None) -> str:
    return orjson.dumps(obj, default=default or str).decode()


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
COLORS = {"info": "\x1b[32m", "warning": "\x1b[33m", "error": "\x1b[31m"}
RESET, DIM = "\x1b[0m", "\x1b[2m"


def _safe(value: Any) -> str:
    """One line, whatever the value holds: control characters cannot forge another record."""
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
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


def configure(
    log_format: str = "auto",
    level: str = "info",
    stream: TextIO | None = None,
    cache: bool = True,
) -> None:
    """Configure structlog for the process. `auto`: JSON unless stdout is a terminal.

    `cache=False` lets tests reconfigure between cases.
    """
    stream = stream or sys.stdout
    if log_format == "auto":
        log_format = "console" if stream.isatty() else "json"
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_processor,
        _leading_fields,
    ]
    renderer: list[Any]
    if log_format == "json":
        renderer = [
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_orjson_dumps),
        ]
    else:
        renderer = [ConsoleRenderer(colors=stream.isatty())]
    structlog.configure(
        processors=shared + renderer,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=cache,
    )
    # aiohttp's own loggers go through the standard library; keep them quiet and on stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
