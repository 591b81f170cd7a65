"""`sseproxy run --intercept -- COMMAND` as a user runs it (the installed command): a child
using the openai SDK configured by its environment alone (no base URL or proxy in its code)
reaches its provider through the intercept listener, and the stream is recorded with route
`intercept`. The provider is a local TLS stand-in: reached as `localhost` (named for
interception, so left out of NO_PROXY), or, with the default intercepted hosts, as
`api.openai.com` through an egress proxy (the proxy's own HTTPS_PROXY) that tunnels every
CONNECT to it; the proxy trusts its CA with --upstream-ca-file. On both event loops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.product.fake_provider import FakeProvider
from tests.product.proxy_process import installed_command, product_config
from tests.product.tls_front import Fronts

pytestmark = pytest.mark.product
TIMEOUT = 60
# The command: its environment written to a file, then one streamed chat over the openai SDK
# as the environment configures it.
CHILD = """
import json, os, sys
import openai
with open(sys.argv[1], "w") as f:
    json.dump(dict(os.environ), f)
client = openai.OpenAI(api_key="sk-test", max_retries=0, timeout=30)
stream = client.chat.completions.create(
    model=sys.argv[2], messages=[{"role": "user", "content": "hi"}], stream=True
)
print("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
"""
# Proxy variables of the machine the tests run on: the run gets only the test's own.
PROXY_VARIABLES = {"https_proxy", "http_proxy", "all_proxy", "no_proxy"}


@pytest.fixture(scope="module")
def provider(fake: FakeProvider) -> Iterator[Fronts]:
    fronts = Fronts(int(fake.url.rsplit(":", 1)[1]), names=("api.openai.com",)).start()
    yield fronts
    fronts.stop()


def direct_text(fake: FakeProvider, model: str) -> str:
    """What the fake streams for `model`, asked directly (no proxy at all)."""
    client = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test", max_retries=0)
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def base_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SSEPROXY_")
        and k.lower() not in PROXY_VARIABLES
        and not k.startswith("OPENAI_")
    }
    return {**env, **extra}


class RunResult:
    def __init__(self, done: subprocess.CompletedProcess[str], folder: Path) -> None:
        self.done = done
        self.records: list[dict[str, Any]] = [
            json.loads(line) for line in (folder / "run.jsonl").read_text().splitlines() if line
        ]
        self.child_env: dict[str, str] = json.loads((folder / "env.json").read_text())

    @property
    def started(self) -> dict[str, Any]:
        return next(r for r in self.records if r.get("event") == "proxy.started")

    def streams(self, model: str) -> list[dict[str, Any]]:
        return [
            r
            for r in self.records
            if r.get("event") == "request.finished" and r.get("model") == model
        ]


def run_intercept(
    folder: Path,
    fake: FakeProvider,
    provider: Fronts,
    loop: str | None,
    model: str,
    flags: list[str],
    env: dict[str, str],
) -> RunResult:
    config = folder / "sseproxy.toml"
    config.write_text(product_config(fake.url), "utf-8")
    upstream_ca = folder / "upstream-ca.pem"
    provider.ca.cert_pem.write_to_path(str(upstream_ca))
    argv = [str(installed_command()), "run", "--intercept", "--config", str(config)]
    argv += ["--log-file", str(folder / "run.jsonl"), "--ca-dir", str(folder / "ca")]
    argv += ["--upstream-ca-file", str(upstream_ca), *flags]
    argv += ["--event-loop", loop] if loop else []
    child = folder / "child.py"
    child.write_text(CHILD, "utf-8")
    done = subprocess.run(
        [*argv, "--", sys.executable, str(child), str(folder / "env.json"), model],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        cwd=folder,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    return RunResult(done, folder)


def assert_ca_variables(run: RunResult) -> None:
    env, ca_file = run.child_env, Path(run.started["intercept_ca"])
    assert env["HTTPS_PROXY"] == env["https_proxy"] == f"http://{run.started['intercept_listen']}"
    assert env["NODE_EXTRA_CA_CERTS"] == str(ca_file)
    assert env["NODE_USE_ENV_PROXY"] == "1"
    bundle = ca_file.with_name("sseproxy-ca-bundle.pem")
    for name in ("SSL_CERT_FILE", "CODEX_CA_CERTIFICATE", "REQUESTS_CA_BUNDLE"):
        assert env[name] == str(bundle), name
    assert bundle.read_text().endswith(ca_file.read_text())
    assert env["SSEPROXY_URL"].startswith("http://127.0.0.1:")
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        assert env[name] == env["HTTPS_PROXY"], name
    assert (
        "set HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY, NODE_EXTRA_CA_CERTS" in run.done.stderr
    )


def test_a_local_stand_in_named_for_interception_is_intercepted(
    tmp_path: Path, fake: FakeProvider, provider: Fronts, loop: str | None
) -> None:
    model = f"ok-{uuid.uuid4().hex[:10]}"
    origin = f"https://localhost:{provider.tls_port}"
    env = base_env(OPENAI_BASE_URL=origin + "/v1", NO_PROXY="corp.example,localhost")
    flags = ["--intercept-host", "localhost"]
    run = run_intercept(tmp_path, fake, provider, loop, model, flags, env)
    assert run.done.stdout.strip() == direct_text(fake, model) != ""
    assert_ca_variables(run)
    # localhost is intercepted: it must not bypass the listener; the user's other entry stays
    assert run.child_env["NO_PROXY"] == "corp.example,127.0.0.1,::1"
    assert run.child_env["no_proxy"] == "127.0.0.1,::1"
    assert run.child_env["OPENAI_BASE_URL"] == origin + "/v1"  # the user's, untouched
    [record] = run.streams(model)
    assert (record["route"], record["upstream"], record["path"]) == (
        "intercept",
        origin,
        "/v1/chat/completions",
    )
    assert (record["dialect"], record["state"], record["status"]) == (
        "openai-chat",
        "completed",
        200,
    )
    assert f"intercepting localhost on {run.started['intercept_listen']}" in run.done.stderr
    assert "1 streams, 0 WebSocket sessions" in run.done.stderr


def test_the_default_hosts_are_intercepted_with_no_base_url_set(
    tmp_path: Path, fake: FakeProvider, provider: Fronts, loop: str | None
) -> None:
    """The SDK goes to api.openai.com, its default: intercepted by default; the proxy's own
    upstream leg reaches the stand-in through the egress proxy the run was started with."""
    model = f"ok-{uuid.uuid4().hex[:10]}"
    egress = f"http://127.0.0.1:{provider.egress_port}"
    env = base_env(HTTPS_PROXY=egress)
    before = len(provider.connects)
    run = run_intercept(tmp_path, fake, provider, loop, model, [], env)
    assert run.done.stdout.strip() == direct_text(fake, model) != ""
    assert_ca_variables(run)
    assert run.child_env["NO_PROXY"] == "localhost,127.0.0.1,::1"
    assert "OPENAI_BASE_URL" not in run.child_env
    assert "api.openai.com" in run.started["intercept_hosts"]
    assert "chatgpt.com" in run.started["intercept_hosts"]
    [record] = run.streams(model)
    assert (record["route"], record["upstream"], record["state"]) == (
        "intercept",
        "https://api.openai.com:443",
        "completed",
    )
    assert provider.connects[before:] == ["CONNECT api.openai.com:443"]
