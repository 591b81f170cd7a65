"""Captures hold no credential: headers by allowlist, bodies masked byte for byte, the sidecar
redacted; a masked capture still replays to its recorded verdict; an unusable capture
directory disables capture instead of stopping the proxy."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from sseproxy.capture.format import load_capture
from sseproxy.observe.redact import REDACTED
from sseproxy.shell.app import STATE
from tests.integration.fake_upstream import Script, Send, WaitFor
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"
GROQ = "gsk_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6kL9nP2rS5uV8xA1dG4"
XAI = "xai-Zq9Yw8Xv7Ut6Sr5Qp4On3Ml2Kj1Ih0GfEdCbA9z8y7x6w5v4u3t2s1r0"
ECHO = sse(
    chat_chunk("Hi"),
    {
        "error": {
            "message": f"Incorrect API key provided: {GROQ}. Find your key at the console.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    },
)


async def wait_for(logs, event: str, n: int = 1) -> list[dict[str, Any]]:
    for _ in range(500):
        lines = [json.loads(line) for line in logs.lines()]
        found = [line for line in lines if line.get("event") == event]
        if len(found) >= n:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {event} in {logs.lines()}")


async def one_capture(client, logs, tmp_path: Path) -> tuple[Path, dict[str, Any], bytes]:
    await wait_for(logs, "request.finished")
    captures = client.app[STATE].captures
    await captures.drain()  # the sidecar is written in a worker thread
    [sidecar_path] = tmp_path.glob("*.json")
    sidecar, body = load_capture(sidecar_path)
    return sidecar_path, sidecar, body


async def post_in_two_reads(client, fake, data: bytes, split: int, **kwargs: Any) -> bytes:
    """The upstream sends `data` cut at `split`, the second part once the client has the
    first: the proxy reads (and captures) two chunks."""
    go = asyncio.Event()
    fake.script(PATH, Script([Send(data[:split]), WaitFor(go), Send(data[split:])]))
    resp = await client.post(PATH, **kwargs)
    got = await resp.content.readany()
    go.set()
    return got + await resp.read()


async def test_a_masked_capture_replays_to_its_recorded_verdict(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    client = await make_proxy(capture_dir=str(tmp_path))
    split = ECHO.index(GROQ.encode()) + 20  # the key is cut between two upstream chunks
    got = await post_in_two_reads(
        client,
        fake,
        ECHO,
        split,
        json={"model": "m", "stream": True},
        headers={"Authorization": f"Bearer {GROQ}"},
    )
    assert got == ECHO  # the client gets the upstream's bytes, key and all
    sidecar_path, sidecar, body = await one_capture(client, logs, tmp_path)
    masked = ECHO.replace(GROQ.encode(), b"*" * len(GROQ))
    assert body == masked and len(body) == len(got)
    assert split in [offset for offset, _, _ in sidecar["chunks"]]
    assert sum(size for _, size, _ in sidecar["chunks"]) == len(ECHO)
    assert GROQ[4:20] not in sidecar_path.read_text()
    recorded = sidecar["verdict"]
    assert recorded["state"] == "failed" == sidecar["record"]["state"]
    assert recorded["error"]["message"].startswith("Incorrect API key provided: *****")
    assert recorded["error"] == sidecar["record"]["error"]
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "sseproxy", "replay", str(sidecar_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr  # not completed
    assert json.loads(result.stdout.splitlines()[-1]) == recorded


async def test_captured_headers_keep_the_allowlist_and_redact_the_rest(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    response_headers = {
        "Content-Type": "text/event-stream",
        "x-request-id": "req_123",
        "openai-processing-ms": "12",
        "x-ratelimit-remaining-tokens": "9990",
        "Set-Cookie": "__cf_bm=cf-cookie-value-1; path=/",
        "X-Debug-Echo": f"the key was {GROQ}",
        "X-Upstream-Session": "upstream-session-1",
    }
    fake.script(
        PATH, Script([Send(sse(chat_chunk(finish="stop"), "[DONE]"))], headers=response_headers)
    )
    client = await make_proxy(capture_dir=str(tmp_path))
    request_headers = {
        "Authorization": f"Bearer {GROQ}",
        "X-Auth-Token": "auth-token-value-1",
        "anthropic-api-key": "anthropic-key-val",
        "Cookie": "sid=cookie-value-123",
        "X-Session-Id": "session-value-1",
        "X-Note": f"routed with {XAI}",
        "User-Agent": "OpenAI/Python 1.54.0",
        "X-Stainless-Lang": "python",
    }
    await (await client.post(PATH, json={"model": "m"}, headers=request_headers)).read()
    sidecar_path, sidecar, _ = await one_capture(client, logs, tmp_path)
    sent = {k.lower(): v for k, v in sidecar["request_headers"].items()}
    for name in ("authorization", "x-auth-token", "anthropic-api-key", "cookie"):
        assert sent[name] == REDACTED
    assert sent["x-session-id"] == "session-value-1"  # an identifier (issue 30), no credential
    assert sent["x-note"] == f"routed with {REDACTED}"
    assert sent["user-agent"] == "OpenAI/Python 1.54.0"
    assert sent["x-stainless-lang"] == "python"
    assert sent["content-type"] == "application/json"
    received = {k.lower(): v for k, v in sidecar["response_headers"].items()}
    assert received["x-request-id"] == "req_123"
    assert received["openai-processing-ms"] == "12"
    assert received["x-ratelimit-remaining-tokens"] == "9990"
    assert received["set-cookie"] == REDACTED
    assert received["x-upstream-session"] == REDACTED
    assert received["x-debug-echo"] == "the key was " + "*" * len(GROQ)
    text = sidecar_path.read_text()
    for secret in (GROQ, XAI, "auth-token-value-1", "anthropic-key-val", "cookie-value-123"):
        assert secret not in text


async def test_a_captured_request_body_is_masked_to_its_length(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(sse(chat_chunk(finish="stop"), "[DONE]"))]))
    client = await make_proxy(capture_dir=str(tmp_path), capture_request_bodies=True)
    body = b'{"model": "m", "api_key": "body-api-key-123", "messages": []}'
    await (await client.post(PATH, data=body, headers={"Content-Type": "application/json"})).read()
    _, sidecar, _ = await one_capture(client, logs, tmp_path)
    kept = base64.b64decode(sidecar["request_body_base64"])
    assert kept == body.replace(b"body-api-key-123", b"*" * 16)


async def test_a_key_cut_by_the_capture_cap_is_masked_too(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    start = ECHO.index(GROQ.encode())
    split = start + 30
    # The second chunk does not fit: the capture ends with the key's first 30 bytes.
    client = await make_proxy(capture_dir=str(tmp_path), capture_max_bytes=split + 10)
    await post_in_two_reads(client, fake, ECHO, split, json={}, headers={"x-api-key": GROQ})
    _, sidecar, body = await one_capture(client, logs, tmp_path)
    assert sidecar["truncated"] is True
    assert body == ECHO[:start] + b"*" * 30


async def test_an_unusable_capture_directory_disables_capture(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    done = sse(chat_chunk(finish="stop"), "[DONE]")
    fake.script(PATH, Script([Send(done)]))
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    for directory in (blocker, blocker / "captures"):
        client = await make_proxy(capture_dir=str(directory))  # the proxy starts
        assert client.app[STATE].captures is None
        assert await (await client.post(PATH, json={})).read() == done
    warnings = await wait_for(logs, "capture.disabled", 2)
    assert [w["directory"] for w in warnings] == [str(blocker), str(blocker / "captures")]
    assert all(w["level"] == "warning" and "Error" in w["error"] for w in warnings)
    assert len(await wait_for(logs, "request.finished", 2)) == 2
    assert blocker.read_text() == "not a directory"


async def test_a_compressed_body_holding_a_key_is_withheld(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    error = json.dumps({"error": {"message": f"Incorrect API key provided: {GROQ}"}}).encode()
    clean = json.dumps({"error": {"message": "Rate limit reached"}}).encode()
    for path, plain, status in (("/v1/models", error, 401), (PATH, clean, 429)):
        headers = {"Content-Type": "application/json", "content-encoding": "gzip"}
        fake.script(path, Script([Send(gzip.compress(plain))], status=status, headers=headers))
    client = await make_proxy(capture_dir=str(tmp_path))
    auth = {"Authorization": f"Bearer {GROQ}", "Accept-Encoding": "gzip"}
    assert await (await client.get("/v1/models", headers=auth)).read() == error
    assert await (await client.post(PATH, json={}, headers=auth)).read() == clean
    await wait_for(logs, "request.finished", 2)
    await client.app[STATE].captures.drain()
    sidecars = {}
    for sidecar_path in tmp_path.glob("*.json"):
        sidecar, body = load_capture(sidecar_path)
        assert GROQ[4:20] not in sidecar_path.read_text()
        sidecars[sidecar["status"]] = sidecar, body
    withheld, empty = sidecars[401]
    assert empty == b"" and withheld["body_bytes"] == 0
    assert withheld["body_withheld"] == "gzip body holds a credential of the request"
    assert withheld["record"]["error"]["message"].endswith("*" * len(GROQ))
    kept, body = sidecars[429]
    assert "body_withheld" not in kept
    assert gzip.decompress(body) == clean and kept["content_encoding"] == "gzip"


def test_a_key_deep_in_a_compressed_body_is_found_across_decoded_slices() -> None:
    # Decoded in slices (core.encoding.SLICE_BYTES): the key sits past the first ones and
    # straddles a slice boundary.
    from sseproxy.capture.format import CaptureSettings
    from sseproxy.capture.store import Capture, masked_body
    from sseproxy.core.encoding import SLICE_BYTES
    from sseproxy.observe.redact import Secrets

    plain = b"x" * (2 * SLICE_BYTES - 10) + GROQ.encode() + b"y" * 1000
    capture = Capture(CaptureSettings(Path("unused"), max_bytes=1 << 24), "id", 0.0)
    compressed = gzip.compress(plain)
    capture.chunk(compressed, 0.0)
    secrets = Secrets.from_request({"x-api-key": GROQ}, "/", b"")
    body, withheld = masked_body(capture, "gzip", secrets)
    assert body == b"" and withheld == "gzip body holds a credential of the request"
    clean = Secrets.from_request({"x-api-key": XAI}, "/", b"")
    assert masked_body(capture, "gzip", clean) == (compressed, None)
