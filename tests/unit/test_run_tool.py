"""`sseproxy run`'s pure parts: the environment the command gets (the variables each client
reads, for the bundled routes' paths), Codex's overrides, and the summary read back from
records (states, cuts and who caused them, retries, errors), with its bounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sseproxy.tools.run import environment, proxy
from sseproxy.tools.run.command import flags_for
from sseproxy.tools.run.summary import MAX_KEYS, MAX_LINE_BYTES, MAX_NAMED, OTHER, Tally, summarise

BASE = "http://127.0.0.1:43210"


def test_every_client_variable_points_at_the_proxy_on_its_route() -> None:
    env, names = environment.client_environment(BASE, {"PATH": "/bin", "OPENAI_BASE_URL": "x"})
    # What each client appends (README "Point your app at it"): OpenAI's SDKs want .../v1,
    # Anthropic's and google-genai the bare origin.
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:43210/v1"
    assert env["OPENAI_API_BASE"] == "http://127.0.0.1:43210/v1"
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:43210"
    assert env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:43210"
    assert env["SSEPROXY_URL"] == BASE
    assert env["PATH"] == "/bin"
    assert names == [
        "OPENAI_BASE_URL",
        "OPENAI_API_BASE",
        "ANTHROPIC_BASE_URL",
        "GOOGLE_GEMINI_BASE_URL",
    ]


def test_loopback_is_exempted_from_an_http_proxy_once() -> None:
    env, _ = environment.client_environment(BASE, {"NO_PROXY": "corp.example,localhost"})
    assert env["NO_PROXY"] == "corp.example,localhost,127.0.0.1"
    assert env["no_proxy"] == "127.0.0.1,localhost"


def test_codex_gets_a_websocket_provider_before_its_subcommand() -> None:
    launch = environment.launch(["/opt/bin/codex", "exec", "hi"], BASE, {})
    assert launch.argv[0] == "/opt/bin/codex" and launch.argv[-2:] == ["exec", "hi"]
    overrides = launch.argv[1:-2]
    assert overrides[0::2] == ["-c"] * 6
    assert overrides[1::2] == [
        'model_provider="sseproxy"',
        'model_providers.sseproxy.name="OpenAI through sseproxy"',
        'model_providers.sseproxy.base_url="http://127.0.0.1:43210/v1"',
        'model_providers.sseproxy.wire_api="responses"',
        "model_providers.sseproxy.supports_websockets=true",
        'model_providers.sseproxy.env_key="OPENAI_API_KEY"',
    ]


INTERCEPTION = environment.Interception(
    "127.0.0.1:43211",
    Path("/ca/sseproxy-ca.pem"),
    Path("/ca/sseproxy-ca-bundle.pem"),
    frozenset({"localhost", "chatgpt.com", "api.openai.com"}),
)


def test_intercept_gives_the_https_proxy_and_the_ca_and_no_base_url() -> None:
    given = {"PATH": "/bin", "OPENAI_BASE_URL": "https://example.test/v1", "HTTP_PROXY": "h"}
    launch = environment.launch(["/opt/bin/codex", "exec", "hi"], BASE, given, INTERCEPTION)
    env = launch.env
    assert launch.argv == ["/opt/bin/codex", "exec", "hi"]  # Codex keeps its login's provider
    assert env["HTTPS_PROXY"] == env["https_proxy"] == "http://127.0.0.1:43211"
    assert env["NODE_EXTRA_CA_CERTS"] == "/ca/sseproxy-ca.pem"
    assert env["NODE_USE_ENV_PROXY"] == "1"
    for name in ("SSL_CERT_FILE", "CODEX_CA_CERTIFICATE", "REQUESTS_CA_BUNDLE"):
        assert env[name] == "/ca/sseproxy-ca-bundle.pem", name
    # localhost is intercepted: a local stand-in must go through the listener
    assert env["NO_PROXY"] == env["no_proxy"] == "127.0.0.1,::1"
    # plain HTTP goes through the listener too (it forwards absolute-form requests)
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        assert env[name] == "http://127.0.0.1:43211", name
    # the user's own: where the clients go
    assert (env["OPENAI_BASE_URL"], env["PATH"]) == ("https://example.test/v1", "/bin")
    assert "ANTHROPIC_BASE_URL" not in env and "OPENAI_API_BASE" not in env
    assert env["SSEPROXY_URL"] == BASE
    assert launch.set == (
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "NODE_EXTRA_CA_CERTS",
        "NODE_USE_ENV_PROXY",
        "SSL_CERT_FILE",
        "CODEX_CA_CERTIFICATE",
        "REQUESTS_CA_BUNDLE",
    )


def test_intercept_drops_no_proxy_entries_that_would_exempt_an_intercepted_host() -> None:
    given = {
        "NO_PROXY": "corp.example,.openai.com,127.0.0.1,chatgpt.com:443,*.com",
        "no_proxy": "*",
    }
    env = environment.launch(["app"], BASE, given, INTERCEPTION).env
    assert env["NO_PROXY"] == "corp.example,127.0.0.1,chatgpt.com:443,::1"
    assert env["no_proxy"] == "127.0.0.1,::1"


@pytest.mark.parametrize(
    ("entry", "host", "exempt"),
    [
        ("*", "chatgpt.com", True),
        ("chatgpt.com", "chatgpt.com", True),
        (" ChatGPT.com ", "chatgpt.com", True),
        (".openai.com", "api.openai.com", True),
        ("openai.com", "api.openai.com", True),
        ("*.openai.com", "api.openai.com", True),
        ("openai.com", "notopenai.com", False),
        ("api.openai.com", "openai.com", False),
        ("localhost", "127.0.0.1", False),
    ],
)
def test_which_no_proxy_entries_exempt_a_host(entry: str, host: str, exempt: bool) -> None:
    assert environment.exempts(entry, host) is exempt


def test_serve_flags_repeat_a_repeatable_setting_once_per_value() -> None:
    given = [("intercept_hosts", ["localhost", "example.com"]), ("keep_content", False)]
    assert flags_for(given, None) == [
        "--intercept-host=localhost",
        "--intercept-host=example.com",
        "--no-keep-content",
    ]


def test_the_started_record_names_the_intercept_listener() -> None:
    record = {
        "event": "proxy.started",
        "intercept_listen": "127.0.0.1:43211",
        "intercept_ca": "/ca/sseproxy-ca.pem",
        "intercept_hosts": ["LocalHost", "[::1]"],
    }
    listener = proxy.intercept_listener(record)
    assert listener == proxy.InterceptListener(
        "127.0.0.1:43211", Path("/ca/sseproxy-ca.pem"), frozenset({"localhost", "::1"})
    )
    assert proxy.intercept_listener({"event": "proxy.started"}) is None


@pytest.mark.parametrize("argv", [["claude", "-p", "hi"], ["./codex-wrapper"], ["python", "codex"]])
def test_other_commands_run_as_given(argv: list[str]) -> None:
    assert environment.launch(argv, BASE, {}).argv == argv


def stream(state: str, **extra: object) -> dict[str, object]:
    return {
        "event": "request.finished",
        "state": state,
        "method": "POST",
        "path": "/v1/messages",
        "model": "m",
        "duration_ms": 1500.0,
        **extra,
    }


def write(tmp_path: Path, records: list[object], before: bytes = b"") -> tuple[Path, int]:
    path = tmp_path / "records.jsonl"
    path.write_bytes(before + b"".join(json.dumps(r).encode() + b"\n" for r in records))
    return path, len(before)


def test_the_summary_counts_states_cuts_by_cause_retries_and_errors(tmp_path: Path) -> None:
    records = [
        {"event": "proxy.started"},
        stream("completed"),
        stream("interrupted", interruption={"reason": "upstream_closed", "partial_event_bytes": 0}),
        stream("completed", retry={"of": "r1", "regenerated": True, "shared_prefix_chars": 3}),
        stream(
            "cancelled", interruption={"reason": "client_disconnected", "partial_event_bytes": 0}
        ),
        stream("interrupted", interruption={"reason": "idle_timeout", "partial_event_bytes": 0}),
        stream("http_error", status=429, error={"type": "rate_limit_error", "code": None}),
        stream(
            "http_error",
            status=502,
            answered_by="proxy",
            error={"type": "sseproxy_upstream_unreachable"},
        ),
        stream("failed", error={"type": "overloaded_error"}),
        {
            "event": "session.finished",
            "path": "/v1/responses",
            "end_reason": "upstream_reset",
            "closed_by": None,
            "close_code": None,
            "states": {"completed": 2, "interrupted": 1},
        },
    ]
    path, offset = write(
        tmp_path, records, before=b'{"event":"request.finished","state":"failed"}\n'
    )
    lines = summarise(path, offset).lines()
    text = "\n".join(lines)
    assert lines[0] == "8 streams, 1 WebSocket sessions"
    assert "  streams: 2 completed, 2 interrupted, 2 http_error, 1 cancelled, 1 failed" in lines
    assert "  session turns: 2 completed, 1 interrupted" in lines
    assert "  linked: 1 retries, 0 resumes" in lines
    assert "upstream_closed by the upstream" in text
    assert "client_disconnected by the client" in text
    assert "idle_timeout by the proxy (upstream silent)" in text
    assert "session upstream_reset by the upstream" in text
    assert "rate_limit_error (HTTP 429)" in text
    assert "sseproxy_upstream_unreachable (HTTP 502 from the proxy)" in text
    assert "overloaded_error (in-band)" in text
    assert (
        "  interrupted  POST /v1/messages m after 1.5s; cut: upstream_closed by the upstream"
        in lines
    )


def test_not_completed_streams_are_named_up_to_the_bound(tmp_path: Path) -> None:
    path, offset = write(tmp_path, [stream("failed")] * (MAX_NAMED + 1))
    lines = summarise(path, offset).lines()
    assert sum(line.startswith("  failed ") for line in lines) == MAX_NAMED
    assert lines[-1] == "  ... and 1 more not completed"


def test_a_tally_keeps_its_bound_and_counts_the_rest_as_other() -> None:
    tally = Tally()
    for n in range(MAX_KEYS):
        tally.add(f"k{n}")
    assert OTHER not in tally
    tally.add("one-more")
    tally.add("k0")
    assert len(tally) == MAX_KEYS + 1 and tally[OTHER] == 1 and tally["k0"] == 2


def test_unreadable_and_too_long_lines_are_counted_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    long = b'{"event":"request.finished","x":"' + b"a" * MAX_LINE_BYTES + b'"}\n'
    path.write_bytes(b"not json\n[1]\n" + long + json.dumps(stream("completed")).encode() + b"\n")
    summary = summarise(path, 0)
    assert summary.unreadable == 3 and summary.streams == {"completed": 1}


@pytest.mark.parametrize(
    ("argv", "env", "listen_flags"),
    [
        (["--intercept"], {}, ["--intercept-listen=127.0.0.1:0"]),
        (
            ["--intercept", "--intercept-listen", "127.0.0.1:9"],
            {},
            ["--intercept-listen=127.0.0.1:9"],
        ),
        (["--intercept"], {"SSEPROXY_INTERCEPT_LISTEN": "127.0.0.1:9"}, []),  # serve reads it
        ([], {}, []),
    ],
)
def test_run_intercept_starts_the_listener_on_a_free_port_unless_one_is_set(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], env: dict[str, str], listen_flags: list[str]
) -> None:
    from sseproxy import cli
    from sseproxy.tools.run import command

    for name in ("SSEPROXY_INTERCEPT_LISTEN", "SSEPROXY_CONFIG", "SSEPROXY_LOG_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    got: list[command.RunOptions] = []
    monkeypatch.setattr(command, "run", lambda options: got.append(options) or 0)
    assert cli.main(["run", *argv, "--", "app"]) == 0
    (options,) = got
    assert options.intercept is ("--intercept" in argv)
    assert [f for f in options.serve_flags if f.startswith("--intercept-listen")] == listen_flags
