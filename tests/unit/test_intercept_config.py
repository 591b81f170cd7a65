"""Intercept mode's settings: the listener's address, the hosts intercepted, the CA's folder."""

from __future__ import annotations

import pytest

from sseproxy import cli
from sseproxy.config import ConfigError, load


def test_by_default_the_bundled_providers_and_chatgpt_are_intercepted() -> None:
    hosts = load().intercepted_hosts
    for host in (
        "api.openai.com",
        "api.anthropic.com",
        "generativelanguage.googleapis.com",
        "bedrock-runtime.us-east-1.amazonaws.com",
        "chatgpt.com",
    ):
        assert host in hosts
    assert "127.0.0.1" not in hosts  # the ollama route is plain http on loopback
    assert "your-resource.openai.azure.com" not in hosts  # a commented-out route is no route
    assert load().intercept_listen == ""  # off unless asked for


def test_the_flag_repeats_and_replaces_the_defaults() -> None:
    args = cli.build_parser().parse_args(
        ["serve", "--intercept-host", "localhost", "--intercept-host", "Example.COM"]
    )
    settings = load(overrides={"intercept_hosts": args.intercept_hosts})
    assert settings.intercepted_hosts == frozenset({"localhost", "example.com"})


def test_the_environment_takes_a_comma_separated_list() -> None:
    settings = load(environ={"SSEPROXY_INTERCEPT_HOSTS": "a.example, b.example"})
    assert settings.intercept_hosts == ("a.example", "b.example")
    assert load(environ={"SSEPROXY_INTERCEPT_LISTEN": "127.0.0.1:0"}).intercept_listen == (
        "127.0.0.1:0"
    )


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        (
            {"intercept_listen": "nowhere"},
            "intercept_listen: 'nowhere' (--intercept-listen) is not HOST:PORT",
        ),
        (
            {"intercept_listen": "127.0.0.1:70000"},
            "intercept_listen: '127.0.0.1:70000' (--intercept-listen) is not HOST:PORT",
        ),
        (
            {"intercept_hosts": ["api.openai.com:443"]},
            "intercept_hosts: 'api.openai.com:443' is not a host name (no port, no scheme)",
        ),
    ],
)
def test_bad_values_are_named(overrides: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(overrides=overrides)
    assert caught.value.problems == [problem]


def test_a_forward_proxy_beyond_loopback_needs_allow_remote() -> None:
    """A CONNECT proxy on a public address would carry anyone's traffic anywhere: refused at
    startup, not only warned about as `listen` is."""
    with pytest.raises(ConfigError) as caught:
        load(overrides={"intercept_listen": "0.0.0.0:8791"})
    [problem] = caught.value.problems
    assert problem.startswith(
        "intercept_listen: '0.0.0.0:8791' (--intercept-listen) is not a loopback"
    )
    allowed = load(overrides={"intercept_listen": "0.0.0.0:8791", "allow_remote": True})
    assert allowed.intercept_listen == "0.0.0.0:8791"
    assert load(overrides={"intercept_listen": "[::1]:0"}).intercept_listen == "[::1]:0"
