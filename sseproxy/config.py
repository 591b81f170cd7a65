"""Settings: defaults < TOML file < SSEPROXY_* environment < command-line flags.

`load()` gathers every problem and raises one `ConfigError` listing them all.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .core.inject import InjectionError, parse_rules
from .core.verdict import Dialect

ENV_PREFIX = "SSEPROXY_"
LOG_FORMATS = ("auto", "json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error")


class ConfigError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n  - " + "\n  - ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class Route:
    """Requests whose path matches one of `paths` go to `upstream`.

    A pattern is a literal path where `{name}` matches one path segment (colons allowed, as in
    Gemini's `{model}:{method}`) and a trailing `*` matches any rest. `strip_prefix` is removed
    from the path before it is appended to the upstream URL.
    """

    name: str
    paths: tuple[str, ...]
    upstream: str
    strip_prefix: str = ""
    dialect: Dialect | None = None
    inject: str = ""
    _regexes: tuple[re.Pattern[str], ...] = field(default=(), compare=False, repr=False)

    def matches(self, path: str) -> bool:
        return any(rx.fullmatch(path) for rx in self._regexes)

    def target(self, path: str, query: str) -> str:
        if self.strip_prefix and path.startswith(self.strip_prefix):
            path = path[len(self.strip_prefix) :] or "/"
        url = self.upstream.rstrip("/") + path
        return f"{url}?{query}" if query else url

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "paths": list(self.paths), "upstream": self.upstream}


def compile_pattern(pattern: str) -> re.Pattern[str]:
    prefix = pattern.endswith("*")
    body = pattern[:-1] if prefix else pattern
    parts = re.split(r"(\{[A-Za-z_][A-Za-z0-9_]*\})", body)
    regex = "".join(
        "[^/]+?" if p.startswith("{") and p.endswith("}") else re.escape(p) for p in parts
    )
    return re.compile(regex + (".*" if prefix else ""))


def make_route(
    name: str,
    paths: tuple[str, ...],
    upstream: str,
    strip_prefix: str = "",
    dialect: Dialect | None = None,
    inject: str = "",
) -> Route:
    regexes = tuple(compile_pattern(p) for p in paths)
    return Route(name, paths, upstream, strip_prefix, dialect, inject, regexes)


@dataclass(frozen=True, slots=True)
class Settings:
    listen: str = "127.0.0.1:8790"
    allow_remote: bool = False
    upstream: str | None = None
    log_format: str = "auto"
    log_level: str = "info"
    idle_timeout: float = 600.0
    content_timeout: float | None = None
    content_stall_action: str = "log"
    connect_timeout: float = 30.0
    max_request_body_bytes: int = 32 * 1024 * 1024
    max_event_bytes: int = 16 * 1024 * 1024
    max_concurrent_streams: int = 2000
    shutdown_grace: float = 10.0
    admin_token: str = ""
    dialect: str = "auto"
    capture_dir: str = ""
    capture_max_bytes: int = 8 * 1024 * 1024
    capture_max_total_bytes: int = 512 * 1024 * 1024
    capture_request_bodies: bool = False
    metrics_models: str = ""
    allow_inject: bool = False
    inject: str = ""
    event_loop: str = "auto"
    keep_content: bool = False
    otel_endpoint: str = ""
    otel_service_name: str = "sseproxy"
    routes: tuple[Route, ...] = ()

    @property
    def host(self) -> str:
        return split_listen(self.listen)[0]

    @property
    def port(self) -> int:
        return split_listen(self.listen)[1]

    def route_for(self, path: str) -> Route | None:
        if self.upstream:
            return make_route("upstream", ("/*",), self.upstream, inject=self.inject)
        return next((r for r in self.routes if r.matches(path)), None)


SCALAR_FIELDS = {f.name: f for f in fields(Settings) if f.name != "routes"}


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def default_config_text() -> str:
    return resources.files("sseproxy").joinpath("data/sseproxy.toml").read_text("utf-8")


def load(
    path: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build Settings from the bundled defaults, a TOML file, the environment and flags."""
    problems: list[str] = []
    environ = environ or {}
    path = path or environ.get(ENV_PREFIX + "CONFIG")
    text = default_config_text()
    if path:
        try:
            text = Path(path).read_text("utf-8")
        except OSError as exc:
            raise ConfigError([f"cannot read config file {path}: {exc.strerror}"]) from exc
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"config file {path or 'default'} is not valid TOML: {exc}"]) from exc
    values: dict[str, Any] = {}
    server = doc.get("server", {})
    for key, value in server.items():
        if key in SCALAR_FIELDS:
            values[key] = value
        else:
            problems.append(f"[server] unknown setting {key!r}")
    for key in SCALAR_FIELDS:
        env_value = environ.get(ENV_PREFIX + key.upper())
        if env_value is not None:
            values[key] = env_value
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = value
    settings = Settings(**{k: _coerce(k, v, problems) for k, v in values.items()})
    routes = _routes(doc.get("routes", []), problems)
    settings = replace(settings, routes=routes)
    _validate(settings, problems)
    if problems:
        raise ConfigError(problems)
    return settings


def _coerce(key: str, value: Any, problems: list[str]) -> Any:
    default = SCALAR_FIELDS[key].default
    try:
        if isinstance(default, bool):
            if isinstance(value, str):
                if value.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(value)
                return value.lower() in ("1", "true", "yes", "on")
            return bool(value)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
        if default is None:
            if value in ("", None):
                return None
            return float(value) if "float" in str(SCALAR_FIELDS[key].type) else str(value)
        if isinstance(value, list):  # a TOML list for a comma-separated setting
            return ",".join(str(v) for v in value)
        return str(value)
    except (TypeError, ValueError):
        problems.append(f"{key}: {value!r} is not a valid {type(default).__name__}")
        return default


def _routes(raw: Any, problems: list[str]) -> tuple[Route, ...]:
    routes: list[Route] = []
    if not isinstance(raw, list):
        problems.append("[[routes]] must be an array of tables")
        return ()
    for i, item in enumerate(raw):
        name = str(item.get("name", f"route{i}"))
        paths = item.get("paths")
        upstream = item.get("upstream")
        if isinstance(paths, str):
            paths = [paths]
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
            problems.append(f"route {name!r}: 'paths' must be a non-empty list of patterns")
            continue
        if not isinstance(upstream, str) or not _is_http_url(upstream):
            problems.append(f"route {name!r}: 'upstream' must be an http(s) URL")
            continue
        dialect = item.get("dialect")
        if dialect is not None and dialect not in {d.value for d in Dialect}:
            problems.append(f"route {name!r}: unknown dialect {dialect!r}")
            dialect = None
        strip = str(item.get("strip_prefix", ""))
        inject = str(item.get("inject", ""))
        try:
            parse_rules(inject)
        except InjectionError as exc:
            problems.append(f"route {name!r}: {exc}")
            inject = ""
        route_dialect = Dialect(dialect) if dialect else None
        routes.append(make_route(name, tuple(paths), upstream, strip, route_dialect, inject))
    return tuple(routes)


def _is_http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _validate(settings: Settings, problems: list[str]) -> None:
    try:
        _, port = split_listen(settings.listen)
        if not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        problems.append(f"listen: {settings.listen!r} is not HOST:PORT")
    if settings.upstream and not _is_http_url(settings.upstream):
        problems.append(f"upstream: {settings.upstream!r} is not an http(s) URL")
    if settings.log_format not in LOG_FORMATS:
        problems.append(f"log_format: {settings.log_format!r} is not one of {LOG_FORMATS}")
    if settings.otel_endpoint:
        if not _is_http_url(settings.otel_endpoint):
            problems.append(f"otel_endpoint: {settings.otel_endpoint!r} is not an http(s) URL")
        elif importlib.util.find_spec("opentelemetry") is None:
            problems.append(
                "otel_endpoint is set but OpenTelemetry is not installed: "
                "pip install 'sseproxy[otel]'"
            )
    if settings.event_loop not in ("auto", "asyncio", "uvloop"):
        problems.append(f"event_loop: {settings.event_loop!r} is not auto, asyncio or uvloop")
    if settings.log_level not in LOG_LEVELS:
        problems.append(f"log_level: {settings.log_level!r} is not one of {LOG_LEVELS}")
    try:
        parse_rules(settings.inject)
    except InjectionError as exc:
        problems.append(f"inject: {exc}")
    if settings.dialect != "auto" and settings.dialect not in {d.value for d in Dialect}:
        problems.append(f"dialect: {settings.dialect!r} is not auto or a known dialect")
    for key in ("idle_timeout", "connect_timeout"):
        if getattr(settings, key) <= 0:
            problems.append(f"{key}: must be positive")
    if settings.content_timeout is not None and settings.content_timeout <= 0:
        problems.append("content_timeout: must be positive (leave it unset to turn it off)")
    if settings.content_stall_action not in ("log", "cut"):
        problems.append(
            f"content_stall_action: {settings.content_stall_action!r} is not log or cut"
        )
    if settings.shutdown_grace < 0:
        problems.append("shutdown_grace: must not be negative")
    for key in (
        "max_request_body_bytes",
        "max_event_bytes",
        "max_concurrent_streams",
        "capture_max_bytes",
        "capture_max_total_bytes",
    ):
        if getattr(settings, key) <= 0:
            problems.append(f"{key}: must be positive")
    if not settings.routes and not settings.upstream:
        problems.append("no routes and no upstream: nothing could be forwarded")
