"""Each agent's request headers through the proxy (tests/data/agent_headers/, sources named
there): the record names the client and the run; the ids stay, the keys are masked, in the
record, the capture (headers and body) and the inspector."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from sseproxy.observe.redact import REDACTED
from tests.agent_headers import AGENTS
from tests.integration.conftest import captured
from tests.integration.fake_upstream import Script, Send
from tests.streams import chat_chunk, sse


@pytest.mark.parametrize("agent", sorted(AGENTS))
async def test_ids_are_kept_and_keys_masked_everywhere(
    agent: str, upstream: Any, make_proxy: Any, logs: Any, tmp_path: Path
) -> None:
    f = AGENTS[agent]
    fake, _ = upstream
    fake.script("*", Script([Send(sse(chat_chunk("hi"), chat_chunk(finish="stop"), "[DONE]"))]))
    client = await make_proxy(
        capture_dir=str(tmp_path), capture_request_bodies=True, keep_content=True
    )
    body = orjson.dumps(f["body"])
    headers = {k: v for k, v in f["headers"].items() if k != "content-type"}
    resp = await client.post(
        f["path"], data=body, headers={**headers, "Content-Type": "application/json"}
    )
    await resp.read()
    [record] = await logs.wait()
    # the upstream got every header as sent: ids and keys alike
    seen = {k.lower(): v for k, v in fake.seen[-1].headers.items()}
    assert all(seen[k] == v for k, v in f["headers"].items())

    assert (record["client"], record["run_id"]) == (f["client"], f["run_id"])
    line = json.dumps(record)
    sidecar_path, sidecar, _ = await captured(client, tmp_path)
    sent = {k.lower(): v for k, v in sidecar["request_headers"].items()}
    kept_body = base64.b64decode(sidecar["request_body_base64"])
    detail = await (await client.get(f"/_sseproxy/streams/{record['request_id']}")).json()
    shown = {k.lower(): v for k, v in detail["request_headers"].items()}
    written = [line, sidecar_path.read_text(), kept_body.decode(), json.dumps(detail)]
    for secret in f["secrets"]:
        assert all(secret not in text for text in written)
    for name in f["secret_headers"]:
        assert sent[name] == shown[name] == REDACTED
    for name in f["id_headers"]:
        assert sent[name] == shown[name] == f["headers"][name]
    assert kept_body == body  # no credential in these bodies: every id in it kept
    for value in f["ids"]:
        assert value in line  # the record's run_id


async def test_the_client_is_worked_out_once_per_request(
    upstream: Any, make_proxy: Any, logs: Any, monkeypatch: Any
) -> None:
    """The inspector's row and the record name the same client, from one look at the
    headers (issue 32: each costs about as much as a small record)."""
    from sseproxy.observe import clients
    from sseproxy.shell import forward, record

    looks: list[int] = []

    def counted(headers: Any) -> dict[str, Any]:
        looks.append(1)
        return clients.client_fields(headers)

    monkeypatch.setattr(forward, "client_fields", counted)
    monkeypatch.setattr(record, "client_fields", counted)
    f = AGENTS["codex"]
    fake, _ = upstream
    fake.script("*", Script([Send(sse(chat_chunk("hi"), chat_chunk(finish="stop"), "[DONE]"))]))
    client = await make_proxy()
    headers = {k: v for k, v in f["headers"].items() if k != "content-type"}
    resp = await client.post(
        f["path"],
        data=orjson.dumps(f["body"]),
        headers={**headers, "Content-Type": "application/json"},
    )
    await resp.read()
    [rec] = await logs.wait()
    assert (rec["client"], rec["run_id"]) == (f["client"], f["run_id"])
    assert len(looks) == 1
    row = await (await client.get(f"/_sseproxy/streams/{rec['request_id']}")).json()
    label = f"{f['client']['name']} {f['client']['version']}"
    assert (row["client"], row["run_id"]) == (label, f["run_id"])
