"""Logging: configured once at the entry point; one `request.finished` record per request."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlencode

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
    if not query:
        return ""
    pairs = parse_qsl(query, keep_blank_values=True)
    return urlencode([(k, REDACTED if k.lower() in SECRET_KEYS else v) for k, v in pairs])


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


def level_for(state: str) -> int:
    return STATE_LEVELS.get(state, logging.ERROR)


def _orjson_dumps(obj: Any, default: Any = None) -> str:
    return orjson.dumps(obj, default=default or str).decode()


def _console_summary(logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
    """Put the facts a human scans for first, for the console renderer."""
    if event_dict.get("event") == "request.finished":
        head = {
            k: event_dict.pop(k)
            for k in ("state", "status", "method", "path", "finish_reason", "duration_ms")
            if k in event_dict
        }
        return {**{"event": event_dict.pop("event")}, **head, **event_dict}
    return event_dict


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
    ]
    renderer: list[Any]
    if log_format == "json":
        renderer = [
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_orjson_dumps),
        ]
    else:
        renderer = [_console_summary, structlog.dev.ConsoleRenderer(colors=stream.isatty())]
    structlog.configure(
        processors=shared + renderer,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=cache,
    )
    # aiohttp's own loggers go through the standard library; keep them quiet and on stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
