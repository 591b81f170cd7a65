"""The command line: every flag says what it does and its default; a bad setting is one line
on stderr naming the key and quoting the value, exit 2."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

import sseproxy
from sseproxy import cli
from sseproxy.config import Settings, unknown_env
from sseproxy.server import own_urls


def subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices[name]
    return parser


@pytest.mark.parametrize("command", cli.COMMANDS)
def test_every_flag_says_what_it_does_and_its_default(command: str) -> None:
    for action in subparser(command)._actions:
        if isinstance(action, argparse._HelpAction) or action.required:
            continue
        assert action.help and len(action.help) > 20, action.dest
        assert "default: " in action.help, (command, action.dest)


@pytest.mark.parametrize(
    ("flag", "shown"),
    [
        ("--idle-timeout", "(default: 600; env SSEPROXY_IDLE_TIMEOUT)"),
        ("--shutdown-grace", "(default: 8;"),
        ("--max-request-body-bytes", "(default: 33554432 = 32 MiB;"),
        ("--listen", "(default: 127.0.0.1:8790;"),
        ("--allow-remote", "(default: off;"),
        ("--backlog", "0: the system's somaxconn (default: 0;"),
        ("--allowed-hosts", "(default: none;"),
    ],
)
def test_serve_help_shows_the_real_defaults(flag: str, shown: str, capsys) -> None:
    [action] = [a for a in subparser("serve")._actions if flag in a.option_strings]
    assert action.help is not None and shown in action.help
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    assert shown in " ".join(capsys.readouterr().out.split())


def test_every_setting_has_a_flag_but_the_secret() -> None:
    dests = {a.dest for a in subparser("serve")._actions}
    settings = {f.name for f in fields(Settings)} - {"routes", "admin_token"}
    assert settings <= dests
    assert "admin_token" not in dests  # a flag would show it in `ps`


def run(
    argv: list[str], capsys, monkeypatch, env: dict[str, str] | None = None
) -> tuple[int, list[str]]:
    for key in list(__import__("os").environ):
        if key.startswith("SSEPROXY_"):
            monkeypatch.delenv(key)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    code = cli.main(argv)
    return code, capsys.readouterr().err.splitlines()


def test_a_non_finite_environment_value_is_one_line(capsys, monkeypatch) -> None:
    code, err = run(["serve"], capsys, monkeypatch, {"SSEPROXY_IDLE_TIMEOUT": "nan"})
    assert code == 2
    assert err == [
        "sseproxy: config: idle_timeout: 'nan' (SSEPROXY_IDLE_TIMEOUT) is not a finite number"
    ]


def test_a_non_finite_flag_is_refused(capsys, monkeypatch) -> None:
    code, err = run(["serve", "--connect-timeout", "inf"], capsys, monkeypatch)
    assert (code, len(err)) == (2, 1)
    assert "connect_timeout: inf (--connect-timeout) is not a finite number" in err[0]


def test_a_bad_route_upstream_is_one_line_naming_it(tmp_path: Path, capsys, monkeypatch) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[routes]]\nname = "mine"\npaths = ["/v1/*"]\nupstream = "htp://oops"\n')
    code, err = run(["serve", "--config", str(cfg)], capsys, monkeypatch)
    assert code == 2
    assert err == [
        f"sseproxy: config: route 'mine' in {cfg}: upstream 'htp://oops' is not an http(s) URL"
    ]


def test_a_typo_inside_a_route_is_one_line_naming_the_key(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[[routes]]\nname = "ds"\npaths = ["/ds/*"]\nupstream = "https://api.deepseek.com"\n'
        'strip-prefix = "/ds"\n'
    )
    code, err = run(["serve", "--config", str(cfg)], capsys, monkeypatch)
    assert code == 2 and len(err) == 1
    assert "route 'ds'" in err[0] and "unknown key 'strip-prefix'" in err[0]


def test_a_mistyped_environment_variable_is_one_warning_naming_the_closest(
    capsys, monkeypatch
) -> None:
    """As a config-file typo names the key it meant, but a warning: the proxy still starts
    (here it stops at the next problem, to stay a unit test)."""
    env = {"SSEPROXY_IDLE_TIMOUT": "5", "SSEPROXY_LISTEN": "nowhere"}
    code, err = run(["serve"], capsys, monkeypatch, env)
    assert err[0] == (
        "sseproxy: config: warning: SSEPROXY_IDLE_TIMOUT is not a setting "
        "(did you mean SSEPROXY_IDLE_TIMEOUT?): ignored"
    )
    assert code == 2 and "listen" in err[1]  # the load went on: only the real error stops it


def test_every_variable_sseproxy_reads_is_known() -> None:
    env = {f"SSEPROXY_{f.name.upper()}": "x" for f in fields(Settings) if f.name != "routes"}
    env |= {"SSEPROXY_CONFIG": "x", "SSEPROXY_CORPUS": "x", "PATH": "x"}
    assert unknown_env(env) == []
    assert unknown_env({"sseproxy_listen": "x"}) == [
        "sseproxy_listen is not a setting (did you mean SSEPROXY_LISTEN?): ignored"
    ]


@pytest.mark.parametrize("name", ["SSEPROXY_SRC", "SSEPROXY_HOME", "SSEPROXY_VERSION"])
def test_a_users_own_variable_is_not_called_a_typo(name: str) -> None:
    """Scripts keep their own SSEPROXY_* variables; only a name close to a setting warns."""
    assert unknown_env({name: "x"}) == []


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("SSEPROXY_LISTNE", "SSEPROXY_LISTEN"),
        ("SSEPROXY_IDLE_TIMEOUTS", "SSEPROXY_IDLE_TIMEOUT"),
        ("SSEPROXY_LOGLEVEL", "SSEPROXY_LOG_LEVEL"),
        ("SSEPROXY_PORT", "SSEPROXY_LISTEN"),  # Settings.port is read from listen
    ],
)
def test_a_variable_close_to_a_setting_warns_naming_it(name: str, meant: str) -> None:
    assert unknown_env({name: "x"}) == [f"{name} is not a setting (did you mean {meant}?): ignored"]


@pytest.mark.parametrize(
    ("host", "inspector"),
    [
        ("127.0.0.1", "http://127.0.0.1:8790/_sseproxy/"),
        ("::1", "http://[::1]:8790/_sseproxy/"),
        ("0.0.0.0", "http://127.0.0.1:8790/_sseproxy/"),
        ("::", "http://[::1]:8790/_sseproxy/"),
    ],
)
def test_the_startup_urls_are_ones_a_browser_opens(host: str, inspector: str) -> None:
    urls = own_urls(host, 8790)
    assert urls == {
        "inspector": inspector,
        "metrics": inspector + "metrics",
        "healthz": inspector + "healthz",
    }


def exits(argv: list[str], capsys) -> tuple[int | str | None, str, list[str]]:
    """Run a command line that ends in SystemExit: its code, stdout and stderr lines."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    out, err = capsys.readouterr()
    return info.value.code, out, err.splitlines()


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["-V"], ["serve", "--version"], ["serve", "-V"], ["--listen", "x:1", "-V"]],
)
def test_version_is_printed_at_the_top_level_and_after_serve(argv: list[str], capsys) -> None:
    code, out, err = exits(argv, capsys)
    assert (code, out, err) == (0, f"sseproxy {sseproxy.__version__}\n", [])


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["repaly", "x.json"], "unknown command 'repaly' (did you mean 'replay'?)"),
        (["mok"], "unknown command 'mok' (did you mean 'mock'?)"),
        (
            ["x.json"],
            "unknown command 'x.json' (commands: serve, run, replay, mock, demo, report, ca)",
        ),
    ],
)
def test_an_unknown_command_is_named_with_the_closest(argv: list[str], error: str, capsys) -> None:
    """serve takes no positional argument: a first word is a command, or a mistyped one
    (argparse alone said `unrecognized arguments: repaly x.json`)."""
    code, _, err = exits(argv, capsys)
    assert (code, err[-1]) == (2, f"sseproxy: error: {error}")


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--listne", "1"], "unrecognized arguments: --listne 1 (did you mean --listen?)"),
        (["serve", "--port", "80"], "unrecognized arguments: --port 80 (did you mean --listen?)"),
        (
            ["--idle-timout=3"],
            "unrecognized arguments: --idle-timout=3 (did you mean --idle-timeout?)",
        ),
        (
            ["--listne", "1", "--no-allow-remotes"],
            "unrecognized arguments: --listne 1 --no-allow-remotes "
            "(did you mean --listen for --listne, --no-allow-remote for --no-allow-remotes?)",
        ),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["report", "--jsn"], "unrecognized arguments: --jsn (did you mean --json?)"),
        (["mock", "--no-dealy"], "unrecognized arguments: --no-dealy (did you mean --no-delay?)"),
    ],
)
def test_a_mistyped_flag_is_argparses_error_and_the_closest_flag(
    argv: list[str], error: str, capsys
) -> None:
    code, _, err = exits(argv, capsys)
    assert (code, err[-1]) == (2, f"sseproxy: error: {error}")


@pytest.mark.parametrize("command", cli.COMMANDS)
def test_every_flag_of_a_command_can_be_suggested(command: str) -> None:
    """The options the parser keeps for suggestions are all of its options (a group's
    arguments are added through the group, and must be counted by hand)."""
    parser = cli.build_parser().commands[command]
    options = {o for a in subparser(command)._actions for o in a.option_strings}
    assert sorted(parser.options) == sorted(options)


@pytest.mark.parametrize(("no_color", "color"), [(None, True), ("", True), ("1", False)])
def test_no_color_reaches_the_log_configuration(
    no_color: str | None, color: bool, capsys, monkeypatch
) -> None:
    """NO_COLOR (https://no-color.org: any non-empty value) is read by the command line and
    handed to serve's and the demo's log configuration."""
    from sseproxy import server
    from sseproxy.tools import demo

    seen: list[bool] = []

    def fake_run(settings: Settings, color: bool = True) -> int:
        seen.append(color)
        return 0

    def fake_demo(log_format: str, color: bool = True) -> int:
        seen.append(color)
        return 0

    monkeypatch.setattr(server, "run", fake_run)
    monkeypatch.setattr(demo, "main", fake_demo)
    monkeypatch.delenv("NO_COLOR", raising=False)
    env = {} if no_color is None else {"NO_COLOR": no_color}
    assert run(["serve"], capsys, monkeypatch, env)[0] == 0
    assert run(["demo"], capsys, monkeypatch, env)[0] == 0
    assert seen == [color, color]


INSTALLED = Path(sys.executable).with_name("sseproxy")


@pytest.mark.skipif(not INSTALLED.exists(), reason="the sseproxy script is not installed")
def test_the_installed_command_says_its_version_and_names_a_mistyped_command() -> None:
    version = subprocess.run(
        [INSTALLED, "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (version.returncode, version.stdout) == (0, f"sseproxy {sseproxy.__version__}\n")
    typo = subprocess.run(
        [INSTALLED, "repaly", "x.json"], capture_output=True, text=True, timeout=60, check=False
    )
    assert typo.returncode == 2
    assert typo.stderr.splitlines()[-1] == (
        "sseproxy: error: unknown command 'repaly' (did you mean 'replay'?)"
    )
