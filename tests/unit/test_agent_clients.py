"""Every record names its client and, where the client says it, the agent run: from the
agents' own request headers (tests/data/agent_headers/, sources named there). Their ids are
identifiers, kept; their keys are credentials, masked."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sseproxy.capture.store import redact_headers
from sseproxy.observe.clients import MAX_NAME_CHARS, MAX_RUN_ID_CHARS, client_fields
from sseproxy.observe.redact import REDACTED, Secrets, names_credential
from tests.agent_headers import AGENTS


def test_every_agent_the_issue_names_has_a_header_set() -> None:
    assert set(AGENTS) == {
        "codex", "claude-code", "gemini-cli", "qwen-code", "opencode", "aider", "llm"
    }  # fmt: skip


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_the_client_and_run_are_named_from_the_agents_headers(agent: str) -> None:
    f = AGENTS[agent]
    assert client_fields(f["headers"]) == {"client": f["client"], "run_id": f["run_id"]}


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_header_names_in_any_case_name_the_same_client(agent: str) -> None:
    f = AGENTS[agent]
    upper = {k.title(): v for k, v in f["headers"].items()}
    assert client_fields(upper) == {"client": f["client"], "run_id": f["run_id"]}


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_keys_are_secrets_and_ids_are_not(agent: str) -> None:
    f = AGENTS[agent]
    body = orjson.dumps(f["body"])
    secrets = Secrets.from_request(f["headers"], f["path"], body)
    for secret in f["secrets"]:
        assert secret in secrets.values
        assert secret not in secrets.redact_text(f"x {secret} y")
    for value in f["ids"]:
        assert all(value not in s for s in secrets.values)
        assert secrets.mask(body).count(value.encode()) == body.count(value.encode())
    shown = redact_headers(f["headers"], secrets)
    for name in f["secret_headers"]:
        assert shown[name] == REDACTED
    for name in f["id_headers"]:
        assert shown[name] == f["headers"][name]


def test_codex_s_run_id_is_in_its_body_and_kept_there() -> None:
    """`prompt_cache_key` and `client_metadata` carry it: masked, they lost the run."""
    f = AGENTS["codex"]
    body = orjson.dumps(f["body"])
    masked = Secrets.from_request(f["headers"], f["path"], body).mask(body)
    assert masked.count(f["run_id"].encode()) == 2 and masked == body


@pytest.mark.parametrize(
    ("name", "credential"),
    [
        ("session-id", False),  # Codex
        ("session_id", False),  # Codex before 0.50
        ("x-claude-code-session-id", False),
        ("mcp-session-id", False),
        ("x-session-affinity", False),  # opencode
        ("x-opencode-session", False),
        ("x-session-id", False),
        ("session", True),
        ("x-session-token", True),
        ("x-upstream-session", True),
        ("x-auth-session-id", True),  # the rest of the name says credential
        ("sessionid", True),
        ("x-api-key", True),
        ("authorization", True),
        ("cookie", True),
    ],
)
def test_a_session_id_header_is_an_identifier_a_session_token_a_credential(
    name: str, credential: bool
) -> None:
    assert names_credential(name) is credential


def run(value: str) -> Any:
    return client_fields({"x-claude-code-session-id": value})["run_id"]


def test_a_run_id_at_its_bound_is_taken_and_one_character_more_is_not() -> None:
    assert run("r" * MAX_RUN_ID_CHARS) == "r" * MAX_RUN_ID_CHARS
    assert run("r" * (MAX_RUN_ID_CHARS + 1)) is None


@pytest.mark.parametrize("value", ["", "a b", "a\x01b", "a\tb", "é"])
def test_a_run_id_of_spaces_controls_or_nothing_is_not_taken(value: str) -> None:
    assert run(value) is None


def test_a_client_name_and_version_are_cut_at_their_bound() -> None:
    at = client_fields({"user-agent": f"{'n' * MAX_NAME_CHARS}/{'1' * MAX_NAME_CHARS}"})
    assert at["client"] == {"name": "n" * MAX_NAME_CHARS, "version": "1" * MAX_NAME_CHARS}
    over = client_fields({"user-agent": f"{'n' * (MAX_NAME_CHARS + 1)}/{'1' * 65}"})
    assert over["client"] == {"name": "n" * MAX_NAME_CHARS, "version": "1" * MAX_NAME_CHARS}


@pytest.mark.parametrize(
    ("headers", "client"),
    [
        ({}, None),
        ({"user-agent": "curl/8.5.0"}, {"name": "curl", "version": "8.5.0"}),
        ({"user-agent": "Anthropic/Python 0.60.0"}, {"name": "anthropic-python", "version": "0.60.0"}),
        ({"user-agent": "codex_cli_rs/0.171.0 (Mac OS 26.0.1; arm64)"}, {"name": "codex", "version": "0.171.0"}),
        ({"user-agent": "python-httpx/0.28.1"}, {"name": "python-httpx", "version": "0.28.1"}),
        ({"user-agent": "Mozilla"}, {"name": "Mozilla", "version": None}),
    ],
)  # fmt: skip
def test_other_clients_are_named_by_their_user_agent(
    headers: dict[str, str], client: dict[str, Any] | None
) -> None:
    assert client_fields(headers)["client"] == client
