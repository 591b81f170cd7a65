"""Settings: defaults < TOML file < SSEPROXY_* environment < command-line flags.

The bundled file (`data/sseproxy.toml`) holds the defaults; a `--config` file overrides it key
by key, and replaces the routes only when it defines `[[routes]]`. `load()` gathers every
problem and raises one `ConfigError` listing them all, each naming the key and quoting the value.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from yarl import URL

from sseproxy.core.inject import InjectionError, parse_rules
from sseproxy.core.verdict import Dialect
from sseproxy.observe.log_writer import MAX_QUEUED_BYTES
from sseproxy.target import parse_target

ENV_PREFIX = "SSEPROXY_"
LOG_FORMATS = ("auto", "json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error")
EVENT_LOOPS = ("auto", "asyncio", "uvloop")
TOP_LEVEL_KEYS = ("server", "routes")
ROUTE_KEYS = ("name", "paths", "upstream", "strip_prefix", "dialect", "inject")
# The inspector's retention bounds that must be positive (inspector_streams may be 0: none).
INSPECTOR_BOUNDS = (
    "inspector_stream_bytes",
    "inspector_total_bytes",
    "inspector_events",
    "inspector_chars",
    "inspector_sessions",
    "inspector_session_messages",
)
FLAG_NAMES = {
    "capture_dir": "capture",
    "intercept_hosts": "intercept-host",
}  # settings whose flag is not their name
# Names people reach for that are not settings but part of one: `Settings.host` and `.port`
# are read from `listen`, which is what a `port` key or SSEPROXY_PORT meant.
MEANT = {"host": "listen", "port": "listen"}
# How close (difflib's ratio, on the part after SSEPROXY_) an unknown variable must be to a
# real one to be called a typo: SSEPROXY_LISTNE is (0.83), a user's own SSEPROXY_HOME or
# SSEPROXY_SRC (0.38, 0.36) is not and stays silent.
ENV_TYPO_CUTOFF = 0.8
PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")


class ConfigError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n  - " + "\n  - ".join(problems))
        self.problems = problems


def mask_userinfo(url: str) -> str:
    """`https://user:pass@host/x` -> `https://***@host/x`: URLs are printed, secrets are not."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()


@dataclass(frozen=True, slots=True)
class Route:
    """Requests whose path matches one of `paths` go to `url`.

    A pattern is a literal path where `{name}` matches one path segment (colons allowed, as in
    Gemini's `{model}:{method}`) and a trailing `/*` matches any rest. `strip_prefix` is removed
    from the path, on a segment boundary, before it is appended to the upstream's path.
    `upstream` is the URL as printed (userinfo masked); `url` is the real one.
    """

    name: str
    paths: tuple[str, ...]
    upstream: str
    url: URL
    strip_prefix: str = ""
    dialect: Dialect | None = None
    inject: str = ""
    _regexes: tuple[re.Pattern[str], ...] = field(default=(), compare=False, repr=False)

    def matches(self, match_path: str) -> bool:
        """`match_path`: a target's `Target.match_path`, the form of the path it forwards."""
        return any(rx.fullmatch(match_path) for rx in self._regexes)

    def target(self, raw_path: str) -> URL:
        """The upstream URL for a client's raw request target (`request.raw_path`).

        Scheme, host and port come only from the route; the client's path (less the
        `strip_prefix` segments) and query are appended as the bytes it sent, never decoded,
        so `%2F` or `%3F` cannot change what the upstream sees and no path can name another
        host. Raises ValueError (`BadTarget` for a target `parse_target` refuses) otherwise.
        """
        target = parse_target(raw_path)
        base = self.url
        url = URL.build(
            scheme=base.scheme,
            authority=base.raw_authority,
            path=base.raw_path.rstrip("/") + target.strip(self.strip_prefix),
            query_string=target.query,
            encoded=True,
        )
        # Belt and braces: the URL as built, and as its text would be parsed again.
        origin = (base.scheme, base.host, base.port)
        for candidate in (url, URL(str(url))):
            if (candidate.scheme, candidate.host, candidate.port) != origin:
                raise ValueError(f"{raw_path!r} would leave route {self.name!r}'s upstream")
        return url

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
    url = URL(upstream)
    return Route(name, paths, mask_userinfo(upstream), url, strip_prefix, dialect, inject, regexes)


@functools.lru_cache(maxsize=8)
def _upstream_route(upstream: str, inject: str) -> Route:
    return make_route("upstream", ("/*",), upstream, inject=inject)


@dataclass(frozen=True, slots=True)
class Settings:
    listen: str = "127.0.0.1:8790"
    allow_remote: bool = False
    allowed_hosts: tuple[str, ...] = ()
    upstream: str | None = None
    log_format: str = "auto"
    log_file: str = ""  # empty: stdout
    log_level: str = "info"
    max_log_queue_bytes: int = MAX_QUEUED_BYTES
    idle_timeout: float = 600.0
    content_timeout: float | None = None
    content_stall_action: str = "log"
    connect_timeout: float = 30.0
    upstream_ca_file: str = ""  # empty: the system's trust store
    max_request_body_bytes: int = 32 * 1024 * 1024
    max_total_request_body_bytes: int = 256 * 1024 * 1024
    request_timeout: float = 60.0
    max_event_bytes: int = 16 * 1024 * 1024
    max_ws_message_bytes: int = 128 * 1024 * 1024
    max_concurrent_streams: int = 2000
    max_client_held_bytes: int = 256 * 1024
    max_held_bytes: int = 64 * 1024 * 1024
    max_ws_held_bytes: int = 64 * 1024 * 1024
    backlog: int = 0  # 0: the system's somaxconn, read by the server at startup
    shutdown_grace: float = 8.0  # Docker's default stop timeout is 10 s
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
    # The resume ledger (shell/ledger.py): streams kept after they end, for how long, and how
    # many events of each (0 streams: no ledger, no resume or retry links).
    resume_ledger_streams: int = 256
    resume_ledger_seconds: float = 600.0
    resume_ledger_events: int = 256
    inspector_streams: int = 50
    inspector_stream_bytes: int = 1024 * 1024
    inspector_total_bytes: int = 64 * 1024 * 1024
    inspector_events: int = 5000
    inspector_chars: int = 8192
    inspector_sessions: int = 50
    inspector_session_messages: int = 2000
    otel_endpoint: str = ""
    otel_service_name: str = "sseproxy"
    # Intercept mode (docs/intercept.md): a forward proxy's address (empty: off), the hosts
    # whose TLS it terminates (empty: INTERCEPT_DEFAULTS), where its CA lives (empty: the
    # user's data directory).
    intercept_listen: str = ""
    intercept_hosts: tuple[str, ...] = ()
    ca_dir: str = ""
    routes: tuple[Route, ...] = ()

    @property
    def host(self) -> str:
        return split_listen(self.listen)[0]

    @property
    def port(self) -> int:
        return split_listen(self.listen)[1]

    @property
    def public_upstream(self) -> str | None:
        """`upstream` as it may be printed: userinfo masked."""
        return mask_userinfo(self.upstream) if self.upstream else None

    @property
    def intercepted_hosts(self) -> frozenset[str]:
        """The hosts intercept mode terminates: `intercept_hosts`, or by default the https
        providers of the bundled routes and the agents' own backends."""
        return frozenset(self.intercept_hosts) if self.intercept_hosts else intercept_defaults()

    def route_for(self, raw_path: str) -> Route | None:
        """The route of a raw request target; raises BadTarget for one it refuses."""
        match_path = parse_target(raw_path).match_path
        if self.upstream:
            return _upstream_route(self.upstream, self.inject)
        return next((r for r in self.routes if r.matches(match_path)), None)


SCALAR_FIELDS = {f.name: f for f in fields(Settings) if f.name != "routes"}


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


# Hosts agents reach whatever their base URL says (Codex signed in with ChatGPT).
AGENT_BACKENDS = ("chatgpt.com",)


@functools.cache
def intercept_defaults() -> frozenset[str]:
    """The https hosts of the bundled routes (commented-out ones are not routes), and the
    agents' backends."""
    routes = _parse(default_config_text(), "the bundled defaults").get("routes", [])
    hosts = {URL(r["upstream"]).host for r in routes if r["upstream"].startswith("https://")}
    return frozenset({h.lower() for h in hosts if h} | set(AGENT_BACKENDS))


def default_config_text() -> str:
    return resources.files("sseproxy").joinpath("data/sseproxy.toml").read_text("utf-8")


def load(
    path: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build Settings from the bundled defaults, a TOML file, the environment and flags.

    `overrides` are flag values by setting name (None: not given).
    """
    problems: list[str] = []
    environ = environ or {}
    path = path or environ.get(ENV_PREFIX + "CONFIG")
    docs = [("the bundled defaults", _parse(default_config_text(), "the bundled defaults"))]
    if path:
        try:
            text = Path(path).read_text("utf-8")
        except OSError as exc:
            raise ConfigError([f"cannot read config file {str(path)!r}: {exc.strerror}"]) from exc
        except UnicodeDecodeError as exc:
            raise ConfigError([f"config file {str(path)!r} is not UTF-8: {exc}"]) from exc
        docs.append((f"{path}", _parse(text, repr(str(path)))))
    values, origins = _layers(docs, environ, overrides or {}, problems)
    coerced = {k: _coerce(k, v, origins[k], problems) for k, v in values.items()}
    # A file's routes replace the defaults' only when it defines [[routes]] itself.
    label, routes_doc = next((d for d in reversed(docs) if "routes" in d[1]), docs[0])
    route_problems: list[str] = []
    routes = _routes(routes_doc.get("routes", []), label, route_problems)
    problems += route_problems
    settings = replace(Settings(**coerced), routes=routes)
    _validate(settings, origins, problems, route_problems)
    if problems:
        raise ConfigError(problems)
    return settings


def _layers(
    docs: list[tuple[str, dict[str, Any]]],
    environ: Mapping[str, str],
    overrides: Mapping[str, Any],
    problems: list[str],
) -> tuple[dict[str, Any], dict[str, str]]:
    """Each setting's raw value from the last layer that sets it, and where it came from."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for label, doc in docs:
        for key in doc:
            if key not in TOP_LEVEL_KEYS:
                hint = _hint(key, TOP_LEVEL_KEYS)
                problems.append(f"{label}: unknown top-level key {key!r}{hint}")
        server = doc.get("server", {})
        if not isinstance(server, dict):
            problems.append(f"{label}: [server] must be a table")
            continue
        for key, value in server.items():
            if key in SCALAR_FIELDS:
                values[key], origins[key] = value, f"[server] in {label}"
            else:
                hint = _hint(key, SCALAR_FIELDS)
                problems.append(f"{label}: unknown setting {key!r} in [server]{hint}")
    for key in SCALAR_FIELDS:
        env_value = environ.get(ENV_PREFIX + key.upper())
        if env_value is not None:
            values[key], origins[key] = env_value, ENV_PREFIX + key.upper()
    for key, value in overrides.items():
        if key not in SCALAR_FIELDS:
            problems.append(f"unknown setting {key!r} in the overrides{_hint(key, SCALAR_FIELDS)}")
        elif value is not None:
            values[key], origins[key] = value, flag_name(key)
    return values, origins


# SSEPROXY_* variables that are not settings: the config file, and the test suite's knobs.
OTHER_ENV_NAMES = ("CONFIG", "CORPUS", "FUZZ_SEED", "FUZZ_CASES")


def unknown_env(environ: Mapping[str, str]) -> list[str]:
    """One warning per SSEPROXY_* variable (in any case) that sseproxy does not read and whose
    name is close to one it does (ENV_TYPO_CUTOFF), naming that one. Others stay silent: the
    environment is shared with everything else the shell runs, and a user's own
    SSEPROXY_SRC is no typo. A warning, not an error as a config-file typo is."""
    names = [name.upper() for name in (*SCALAR_FIELDS, *OTHER_ENV_NAMES)]
    warnings = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or name in (ENV_PREFIX + n for n in names):
            continue
        rest = upper.removeprefix(ENV_PREFIX)
        meant = MEANT.get(rest.lower())
        close = [meant.upper()] if meant else []
        close = close or difflib.get_close_matches(rest, names, n=1, cutoff=ENV_TYPO_CUTOFF)
        if close:
            hint = f"did you mean {ENV_PREFIX}{close[0]}?"
            warnings.append(f"{name} is not a setting ({hint}): ignored")
    return warnings


def flag_name(setting: str) -> str:
    """The `serve` flag that sets `setting`."""
    return "--" + FLAG_NAMES.get(setting, setting.replace("_", "-"))


def _parse(text: str, label: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"config file {label} is not valid TOML: {exc}"]) from exc


def _hint(key: str, known: Any) -> str:
    meant = MEANT.get(key) if "listen" in known else None
    close = [meant] if meant else difflib.get_close_matches(key.replace("-", "_"), list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


BOOL_WORDS = {"1": True, "true": True, "yes": True, "on": True}
BOOL_WORDS |= {"0": False, "false": False, "no": False, "off": False}


def _coerce(key: str, value: Any, origin: str, problems: list[str]) -> Any:
    """One value to its setting's type. TOML values must have the type already; strings from
    the environment are parsed."""
    default = SCALAR_FIELDS[key].default
    text = isinstance(value, str) and origin.startswith(ENV_PREFIX)
    kind = "a boolean"
    try:
        if isinstance(default, bool):
            if text and value.strip().lower() in BOOL_WORDS:
                return BOOL_WORDS[value.strip().lower()]
            if isinstance(value, bool):
                return value
        elif isinstance(default, int):
            kind = "an integer"
            if text:
                return int(value.strip())
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        elif isinstance(default, float):
            kind = "a number"
            if text or (isinstance(value, int | float) and not isinstance(value, bool)):
                number = float(value)
                if math.isfinite(number):
                    return number
                kind = "a finite number"
        elif isinstance(default, tuple):
            kind = "a list of host names"
            items = value.split(",") if isinstance(value, str) else value
            if isinstance(items, list) and all(isinstance(i, str) for i in items):
                return tuple(i.strip().lower() for i in items if i.strip())
        elif default is None and "float" in str(SCALAR_FIELDS[key].type):
            kind = "a number of seconds"  # an optional duration, e.g. content_timeout
            if value in ("", None):
                return None
            if text or (isinstance(value, int | float) and not isinstance(value, bool)):
                number = float(value)
                if math.isfinite(number):
                    return number
                kind = "a finite number of seconds"
        else:  # a string, or None for `upstream`
            kind = "a string"
            if isinstance(value, str):
                return value if value or default is not None else None
            if isinstance(value, list) and all(isinstance(i, str) for i in value):
                return ",".join(value)  # a TOML list for a comma-separated setting
    except (TypeError, ValueError):
        pass
    problems.append(f"{key}: {value!r} ({origin}) is not {kind}")
    return default


def _routes(raw: Any, label: str, problems: list[str]) -> tuple[Route, ...]:
    if not isinstance(raw, list):
        problems.append(f"{label}: [[routes]] must be an array of tables")
        return ()
    routes: list[Route] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            problems.append(f"{label}: routes[{i}] must be a table")
            continue
        route = _route(item, f"route {str(item.get('name', f'#{i + 1}'))!r} in {label}", problems)
        if route is not None:
            if any(r.name == route.name for r in routes):
                problems.append(f"{label}: two routes are named {route.name!r}")
            routes.append(route)
    return tuple(routes)


def _route(item: dict[str, Any], where: str, problems: list[str]) -> Route | None:
    before = len(problems)
    for key in item:
        if key not in ROUTE_KEYS:
            problems.append(f"{where}: unknown key {key!r}{_hint(key, ROUTE_KEYS)}")
    name = item.get("name")
    paths = item.get("paths")
    upstream = item.get("upstream")
    strip = item.get("strip_prefix", "")
    dialect = item.get("dialect")
    inject = item.get("inject", "")
    if not isinstance(name, str) or not name:
        problems.append(f"{where}: 'name' must be a non-empty string, not {name!r}")
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        problems.append(f"{where}: 'paths' must be a non-empty list of patterns, not {paths!r}")
        paths = []
    for pattern in paths:
        problem = _pattern_problem(pattern)
        if problem:
            problems.append(f"{where}: path pattern {pattern!r} {problem}")
    if not isinstance(upstream, str) or (problem := _upstream_problem(upstream)):
        shown = mask_userinfo(upstream) if isinstance(upstream, str) else upstream
        why = problem if isinstance(upstream, str) else "is not an http(s) URL"
        problems.append(f"{where}: upstream {shown!r} {why}")
    if not isinstance(strip, str) or (problem := _strip_problem(strip)):
        why = problem if isinstance(strip, str) else "must be a string"
        problems.append(f"{where}: strip_prefix {strip!r} {why}")
    if dialect is not None and dialect not in {d.value for d in Dialect}:
        problems.append(f"{where}: unknown dialect {dialect!r}")
    if not isinstance(inject, str):
        problems.append(f"{where}: inject {inject!r} must be a string of rules")
    else:
        try:
            parse_rules(inject)
        except InjectionError as exc:
            problems.append(f"{where}: inject {inject!r}: {exc}")
    if len(problems) > before:
        return None
    assert isinstance(name, str) and isinstance(upstream, str) and isinstance(strip, str)
    route_dialect = Dialect(dialect) if dialect else None
    return make_route(name, tuple(paths), upstream, strip, route_dialect, str(inject))


def _pattern_problem(pattern: str) -> str | None:
    """A pattern that could match a path the upstream URL cannot safely be built from."""
    if not pattern.startswith("/"):
        return "must start with '/'"
    if "*" in pattern[:-1] or (pattern.endswith("*") and not pattern.endswith("/*")):
        return "may hold '*' only at its end, right after '/'"
    if "{" in PLACEHOLDER.sub("", pattern) or "}" in PLACEHOLDER.sub("", pattern):
        return "has a malformed {placeholder}"
    if "?" in pattern or "#" in pattern:
        return "must not hold '?' or '#'"
    return None


def _strip_problem(strip: str) -> str | None:
    """strip_prefix must start and end on a segment boundary."""
    if not strip:
        return None
    if not strip.startswith("/"):
        return "must start with '/'"
    if strip.endswith("/") and strip != "/":
        return "must not end with '/' (it is removed up to a segment boundary)"
    if any(c in strip for c in "?#*{}"):
        return "must be a literal path"
    return None


def _upstream_problem(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return "is not an http(s) URL"
    try:
        parsed = URL(url)
        if not parsed.host:
            return "has no host"
        _ = parsed.port
    except ValueError:
        return "is not a valid URL"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "must not have a query or fragment"
    return None


def _validate(
    settings: Settings, origins: dict[str, str], problems: list[str], route_problems: list[str]
) -> None:
    def bad(key: str, why: str) -> None:
        where = f" ({origins[key]})" if key in origins else ""
        problems.append(f"{key}: {getattr(settings, key)!r}{where} {why}")

    try:
        _, port = split_listen(settings.listen)
        if not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        bad("listen", "is not HOST:PORT")
    if settings.intercept_listen:
        try:
            _, port = split_listen(settings.intercept_listen)
            if not 0 <= port <= 65535:
                raise ValueError
        except ValueError:
            bad("intercept_listen", "is not HOST:PORT")
        else:
            host = settings.intercept_listen.rpartition(":")[0].strip("[]")
            if not _loopback(host) and not settings.allow_remote:
                bad(
                    "intercept_listen",
                    "is not a loopback address: a forward proxy there would carry anyone's "
                    "traffic anywhere (set allow_remote = true to allow it)",
                )
    if settings.upstream and (problem := _upstream_problem(settings.upstream)):
        problems.append(f"upstream: {settings.public_upstream!r} {problem}")
    for key, choices in (
        ("log_format", LOG_FORMATS),
        ("log_level", LOG_LEVELS),
        ("event_loop", EVENT_LOOPS),
        ("dialect", ("auto", *(d.value for d in Dialect))),
    ):
        if getattr(settings, key) not in choices:
            bad(key, f"is not one of {', '.join(choices)}")
    if settings.otel_endpoint:
        if not _is_http_url(settings.otel_endpoint):
            bad("otel_endpoint", "is not an http(s) URL")
        elif importlib.util.find_spec("opentelemetry") is None:
            problems.append(
                "otel_endpoint is set but OpenTelemetry is not installed: "
                "pip install 'sseproxy[otel]'"
            )
    try:
        parse_rules(settings.inject)
    except InjectionError as exc:
        bad("inject", str(exc))
    ca_file = settings.upstream_ca_file
    if ca_file and not (os.path.isfile(ca_file) and os.access(ca_file, os.R_OK)):
        bad("upstream_ca_file", "is not a readable file")
    for key in ("allowed_hosts", "intercept_hosts"):
        for host in getattr(settings, key):
            if not re.fullmatch(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]", host):
                problems.append(f"{key}: {host!r} is not a host name (no port, no scheme)")
    for key in (
        "idle_timeout",
        "connect_timeout",
        "request_timeout",
        "resume_ledger_seconds",
        *INSPECTOR_BOUNDS,
    ):
        if getattr(settings, key) <= 0:
            bad(key, "must be positive")
    for key in (
        "shutdown_grace",
        "backlog",
        "resume_ledger_streams",
        "resume_ledger_events",
        "inspector_streams",
    ):
        if getattr(settings, key) < 0:
            bad(key, "must not be negative")
    if settings.content_timeout is not None and settings.content_timeout <= 0:
        bad("content_timeout", "must be positive (leave it unset to turn it off)")
    if settings.content_stall_action not in ("log", "cut"):
        bad("content_stall_action", "is not log or cut")
    for key in (
        "max_request_body_bytes",
        "max_total_request_body_bytes",
        "max_event_bytes",
        "max_ws_message_bytes",
        "max_concurrent_streams",
        "max_client_held_bytes",
        "max_held_bytes",
        "max_log_queue_bytes",
        "max_ws_held_bytes",
        "capture_max_bytes",
        "capture_max_total_bytes",
    ):
        if getattr(settings, key) <= 0:
            bad(key, "must be positive")
    if not settings.routes and not settings.upstream and not route_problems:
        problems.append("no routes and no upstream: nothing could be forwarded")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.netloc)
