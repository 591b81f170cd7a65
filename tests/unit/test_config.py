"""Settings: defaults < file < environment < flags; every problem reported at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from sseproxy.config import ConfigError, default_config_text, load

ROOT = Path(__file__).resolve().parents[2]


def test_default_config_is_the_shipped_one() -> None:
    assert default_config_text() == (ROOT / "config" / "sseproxy.toml").read_text()


def test_defaults() -> None:
    s = load()
    assert (s.host, s.port, s.idle_timeout, s.upstream) == ("127.0.0.1", 8790, 600.0, None)
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
        assert r.target(path, "") == target


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
