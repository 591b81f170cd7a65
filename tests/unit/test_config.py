"""Settings: defaults < file < environment < flags; every problem reported at once."""

from __future__ import annotations

import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from sseproxy.config import ConfigError, Settings, default_config_text, load

ROOT = Path(__file__).resolve().parents[2]


def test_default_config_is_the_shipped_one() -> None:
    assert default_config_text() == (ROOT / "config" / "sseproxy.toml").read_text()


def test_the_bundled_file_agrees_with_the_settings_defaults() -> None:
    """Every setting is documented in the bundled file, with the value Settings defaults to
    (so `--help`, which shows Settings' defaults, tells the truth)."""
    server = tomllib.loads(default_config_text())["server"]
    text = default_config_text()
    for f in fields(Settings):
        if f.name == "routes":
            continue
        assert f.name in server or f"# {f.name} = " in text, f.name
        if f.name in server:
            value = server[f.name]
            expected = f.default
            if isinstance(value, list):
                value = tuple(value) if isinstance(expected, tuple) else ",".join(value)
            assert value == expected, f.name


def test_defaults() -> None:
    s = load()
    assert (s.host, s.port, s.idle_timeout, s.upstream) == ("127.0.0.1", 8790, 600.0, None)
    assert (s.shutdown_grace, s.backlog, s.allowed_hosts) == (8.0, 0, ())
    assert (s.max_client_held_bytes, s.max_held_bytes) == (256 * 1024, 64 * 1024 * 1024)
    assert {
        "openai",
        "anthropic",
        "gemini",
        "deepseek",
        "openrouter",
        "groq",
        "mistral",
        "ollama",
    } <= {r.name for r in s.routes}


@pytest.mark.parametrize(
    ("path", "route", "target"),
    [
        ("/v1/chat/completions", "openai", "https://api.openai.com/v1/chat/completions"),
        ("/v1/responses", "openai", "https://api.openai.com/v1/responses"),
        ("/v1/models", "openai", "https://api.openai.com/v1/models"),
        ("/v1/messages", "anthropic", "https://api.anthropic.com/v1/messages"),
        (
            "/v1/messages/count_tokens",
            "anthropic",
            "https://api.anthropic.com/v1/messages/count_tokens",
        ),
        (
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            "gemini",
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        ),
        ("/v1/models/gemini-2.5-flash:generateContent", "gemini", None),
        ("/deepseek/chat/completions", "deepseek", "https://api.deepseek.com/chat/completions"),
        (
            "/openrouter/chat/completions",
            "openrouter",
            "https://openrouter.ai/api/v1/chat/completions",
        ),
        ("/ollama/api/chat", "ollama", "http://127.0.0.1:11434/api/chat"),
    ],
)
def test_default_routes(path: str, route: str, target: str | None) -> None:
    r = load().route_for(path)
    assert r is not None and r.name == route
    if target:
        assert str(r.target(path)) == target


def test_unmatched_path() -> None:
    assert load().route_for("/admin") is None


def test_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        default_config_text()
        .replace("idle_timeout = 600", "idle_timeout = 5")
        .replace('log_level = "info"', 'log_level = "warning"')
    )
    env = {"SSEPROXY_IDLE_TIMEOUT": "7", "SSEPROXY_LISTEN": "127.0.0.1:9999"}
    s = load(cfg, env, {"idle_timeout": 9.0})
    assert (s.idle_timeout, s.port, s.log_level) == (9.0, 9999, "warning")
    assert load(cfg, env).idle_timeout == 7.0
    assert load(cfg).idle_timeout == 5.0


def test_config_path_from_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[server]\nupstream = "http://127.0.0.1:1"\n')
    s = load(None, {"SSEPROXY_CONFIG": str(cfg)})
    assert s.upstream == "http://127.0.0.1:1"
    assert s.route_for("/anything") is not None


def test_all_problems_are_reported_together(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(
        '[server]\nlisten = "nope"\nidle_timeout = -1\nlog_format = "xml"\nbogus = 1\n'
        '[[routes]]\nname = "x"\npaths = []\nupstream = "ftp://x"\n'
    )
    with pytest.raises(ConfigError) as exc:
        load(cfg, {"SSEPROXY_MAX_EVENT_BYTES": "lots"})
    text = str(exc.value)
    for fragment in ("listen", "idle_timeout", "log_format", "bogus", "paths", "max_event_bytes"):
        assert fragment in text


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(bad)


def problems(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> list[str]:
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load(cfg, env)
    return exc.value.problems


def test_a_file_overrides_the_defaults_key_by_key(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[server]\nidle_timeout = 5\n")
    s = load(cfg)
    assert s.idle_timeout == 5.0
    assert s.listen == "127.0.0.1:8790"  # the bundled value stays
    assert [r.name for r in s.routes] == [r.name for r in load().routes]


def test_routes_are_replaced_only_when_the_file_defines_them(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[[routes]]\nname = "local"\npaths = ["/v1/*"]\nupstream = "http://127.0.0.1:9"\n'
    )
    s = load(cfg)
    assert [r.name for r in s.routes] == ["local"]
    assert s.idle_timeout == 600.0
    assert load(cfg).route_for("/v1beta/models") is None  # the default gemini route is gone


def test_an_empty_routes_list_in_a_file_means_no_routes(tmp_path: Path) -> None:
    assert problems(tmp_path, "routes = []\n") == [
        "no routes and no upstream: nothing could be forwarded"
    ]
    cfg = tmp_path / "up.toml"
    cfg.write_text('routes = []\n[server]\nupstream = "http://127.0.0.1:9"\n')
    assert load(cfg).routes == ()


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("[servr]\nlisten = 1\n", ["'servr'", "did you mean 'server'"]),
        ("[server]\nidle-timeout = 5\n", ["'idle-timeout'", "did you mean 'idle_timeout'"]),
        (
            '[[routes]]\nname = "x"\npaths = ["/x/*"]\nupstream = "http://h"\n'
            'strip-prefix = "/x"\n',
            ["route 'x'", "'strip-prefix'", "did you mean 'strip_prefix'"],
        ),
        ("[server]\nport = 8080\n", ["'port'", "did you mean 'listen'"]),
    ],
)
def test_unknown_keys_anywhere_are_errors(tmp_path: Path, text: str, fragments: list[str]) -> None:
    [problem] = problems(tmp_path, text)
    for fragment in fragments:
        assert fragment in problem


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        ({"port": 0}, ["'port'", "did you mean 'listen'"]),
        ({"idle_timout": 5.0}, ["'idle_timout'", "did you mean 'idle_timeout'"]),
        ({"nothing_like_it": None}, ["'nothing_like_it'"]),  # unset, but still no setting
    ],
)
def test_an_unknown_override_is_a_config_error_naming_it(
    overrides: dict[str, object], fragments: list[str]
) -> None:
    """A caller's typo (a flag table, the demo) is one ConfigError, as a file's is, not a
    KeyError from deep inside the load."""
    with pytest.raises(ConfigError) as info:
        load(None, {}, {"upstream": "http://127.0.0.1:1", **overrides})
    [problem] = info.value.problems
    for fragment in fragments:
        assert fragment in problem


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_non_finite_numbers_are_errors_from_every_source(tmp_path: Path, value: str) -> None:
    toml_value = {"1e999": "inf"}.get(value, value)
    [problem] = problems(tmp_path, f"[server]\nidle_timeout = {toml_value}\n")
    assert problem.startswith("idle_timeout:") and "finite" in problem
    with pytest.raises(ConfigError) as exc:
        load(None, {"SSEPROXY_IDLE_TIMEOUT": value})
    [problem] = exc.value.problems
    assert f"{value!r}" in problem and "SSEPROXY_IDLE_TIMEOUT" in problem and "finite" in problem
    with pytest.raises(ConfigError) as exc:
        load(None, {}, {"shutdown_grace": float(value)})
    [problem] = exc.value.problems
    assert problem.startswith("shutdown_grace:") and "--shutdown-grace" in problem


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("max_event_bytes = 1.5", "max_event_bytes"),
        ("allow_remote = 1", "allow_remote"),
        ("max_concurrent_streams = true", "max_concurrent_streams"),
        ('idle_timeout = "5"', "idle_timeout"),
        ("listen = 8790", "listen"),
    ],
)
def test_toml_values_keep_their_type(tmp_path: Path, line: str, key: str) -> None:
    [problem] = problems(tmp_path, f"[server]\n{line}\n")
    assert problem.startswith(f"{key}: ") and "is not a" in problem


def test_environment_strings_are_parsed() -> None:
    s = load(
        None,
        {
            "SSEPROXY_ALLOW_REMOTE": "yes",
            "SSEPROXY_ALLOWED_HOSTS": "sseproxy, Proxy.Example",
            "SSEPROXY_BACKLOG": "128",
        },
    )
    assert (s.allow_remote, s.allowed_hosts, s.backlog) == (
        True,
        ("sseproxy", "proxy.example"),
        128,
    )
    with pytest.raises(ConfigError, match="'maybe'"):
        load(None, {"SSEPROXY_ALLOW_REMOTE": "maybe"})


def test_allowed_hosts_and_backlog_are_checked(tmp_path: Path) -> None:
    found = problems(
        tmp_path, '[server]\nallowed_hosts = ["http://x", "ok.example"]\nbacklog = -1\n'
    )
    assert found == [
        "allowed_hosts: 'http://x' is not a host name (no port, no scheme)",
        f"backlog: -1 ([server] in {tmp_path / 'c.toml'}) must not be negative",
    ]
    cfg = tmp_path / "ok.toml"
    cfg.write_text('[server]\nallowed_hosts = ["sseproxy", "[::1]"]\n')
    assert load(cfg).allowed_hosts == ("sseproxy", "[::1]")


ROUTE = '[[routes]]\nname = "r"\npaths = [{paths}]\nupstream = "{upstream}"\n{extra}\n'


def route_problems(
    tmp_path: Path, paths: str = '"/r/*"', upstream: str = "http://h", extra: str = ""
) -> list[str]:
    return problems(tmp_path, ROUTE.format(paths=paths, upstream=upstream, extra=extra))


@pytest.mark.parametrize("strip", ["/sp/", "sp", "/a*", "/a?b"])
def test_strip_prefix_must_sit_on_segment_boundaries(tmp_path: Path, strip: str) -> None:
    [problem] = route_problems(tmp_path, extra=f'strip_prefix = "{strip}"')
    assert problem.startswith("route 'r'") and f"strip_prefix {strip!r}" in problem


@pytest.mark.parametrize("pattern", ["/np*", "np/*", "/a/*/b", "/a/{x", "/a?b=1"])
def test_patterns_that_could_leave_the_path_are_refused(tmp_path: Path, pattern: str) -> None:
    [problem] = route_problems(tmp_path, paths=f'"{pattern}"')
    assert f"path pattern {pattern!r}" in problem


def test_good_routes_load(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        ROUTE.format(paths='"/r/*", "/r", "/*"', upstream="http://h", extra='strip_prefix = "/r"')
    )
    [route] = load(cfg).routes
    assert route.strip_prefix == "/r" and route.matches("/r/x") and route.matches("/other")


@pytest.mark.parametrize(
    ("upstream", "why"),
    [
        ("ftp://h", "is not an http(s) URL"),
        ("http://h:99999", "is not a valid URL"),
        ("http://h/v1?key=1", "must not have a query or fragment"),
    ],
)
def test_a_bad_route_upstream_is_one_problem_quoting_it(
    tmp_path: Path, upstream: str, why: str
) -> None:
    found = route_problems(tmp_path, upstream=upstream)
    assert found == [f"route 'r' in {tmp_path / 'c.toml'}: upstream {upstream!r} {why}"]


def test_a_bad_upstream_never_prints_its_userinfo(tmp_path: Path) -> None:
    [problem] = route_problems(tmp_path, upstream="ftp://user:hunter2@h")
    assert "hunter2" not in problem and "'ftp://***@h'" in problem


def test_duplicate_route_names_are_errors(tmp_path: Path) -> None:
    one = ROUTE.format(paths='"/r/*"', upstream="http://h", extra="")
    [problem] = problems(tmp_path, one + one)
    assert "two routes are named 'r'" in problem


@pytest.mark.parametrize(
    "key",
    ["max_client_held_bytes", "max_held_bytes", "max_log_queue_bytes", "max_ws_held_bytes"],
)
def test_the_held_bytes_bounds_must_be_positive(key: str) -> None:
    assert getattr(load(None, {}, {key: 1}), key) == 1
    with pytest.raises(ConfigError, match=key):
        load(None, {}, {key: 0})


def test_the_upstream_ca_file_is_off_by_default_and_set_by_every_layer(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    assert load().upstream_ca_file == ""
    environ = {"SSEPROXY_UPSTREAM_CA_FILE": str(ca)}
    assert load(None, environ).upstream_ca_file == str(ca)
    assert load(None, {}, {"upstream_ca_file": str(ca)}).upstream_ca_file == str(ca)


@pytest.mark.parametrize("name", ["nowhere.pem", "."])
def test_an_upstream_ca_file_that_cannot_be_read_is_a_config_error(
    tmp_path: Path, name: str
) -> None:
    missing = tmp_path / name  # absent, or a folder
    with pytest.raises(ConfigError) as error:
        load(None, {"SSEPROXY_UPSTREAM_CA_FILE": str(missing)})
    assert error.value.problems == [
        f"upstream_ca_file: {str(missing)!r} (SSEPROXY_UPSTREAM_CA_FILE) is not a readable file"
    ]
