"""`sseproxy mock`: bundled samples by default, recordings named `dialect/name`, collisions
refused at startup, a client leaving early logged as one line."""

from __future__ import annotations

import json
import os
import queue
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from sseproxy import cli
from sseproxy.core import Dialect
from sseproxy.tools.mock import MOCK_HEADER, MockServer, load_recordings, samples_dir
from tests.corpus import corpus_dir
from tests.streams import chat_chunk as chat
from tests.streams import sse

SAMPLE_NAMES = {
    "openai-chat/completed",
    "openai-chat/max-tokens",
    "openai-chat/cut-mid-sentence",
    "openai-chat/done-after-failure",
    "anthropic-messages/overloaded-after-200",
}


def test_bundled_samples_are_named_by_dialect_and_name() -> None:
    assert {r.name for r in load_recordings([samples_dir()])} == SAMPLE_NAMES


def test_the_corpus_loads_whole_with_unique_names() -> None:
    """A folder is searched recursively; MANIFEST.json and README.md are skipped."""
    recordings = load_recordings([corpus_dir()])
    files = [p for p in corpus_dir().rglob("*.sse")]
    assert len(recordings) == len(files) > 50
    assert all("/" in r.name and r.name.startswith(r.dialect.value + "/") for r in recordings)


def write_stream(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sse(chat(text), chat(finish="stop"), "[DONE]"))


def test_a_name_that_collides_is_refused_naming_both_files(tmp_path: Path, capsys: Any) -> None:
    write_stream(tmp_path / "a" / "same.sse", "one")
    write_stream(tmp_path / "b" / "same.sse", "two")
    with pytest.raises(ValueError) as exc:
        load_recordings([tmp_path])
    message = str(exc.value)
    assert "'openai-chat/same'" in message
    assert (
        str(tmp_path / "a" / "same.sse") in message and str(tmp_path / "b" / "same.sse") in message
    )
    assert cli.main(["mock", str(tmp_path), "--listen", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and str(tmp_path / "b" / "same.sse") in err[0]


async def test_streams_are_chosen_by_dialect_and_name(aiohttp_client: Any, tmp_path: Path) -> None:
    # The same stem in another dialect: both load, the bare stem is then ambiguous.
    write_stream(tmp_path / "overloaded-after-200.sse", "an openai-chat stream")
    mock = MockServer(load_recordings([samples_dir(), tmp_path]), speed=0)
    client = await aiohttp_client(mock.app())
    path = "/v1/chat/completions"
    sample = (samples_dir() / "openai-chat" / "max-tokens.sse").read_bytes()
    resp = await client.post(path, headers={MOCK_HEADER: "openai-chat/max-tokens"})
    assert await resp.read() == sample
    resp = await client.post(path, headers={MOCK_HEADER: "max-tokens"})  # a unique stem
    assert await resp.read() == sample
    mine = await client.post(path, headers={MOCK_HEADER: "openai-chat/overloaded-after-200"})
    assert await mine.read() == (tmp_path / "overloaded-after-200.sse").read_bytes()
    ambiguous = await client.post(path, headers={MOCK_HEADER: "overloaded-after-200"})
    assert ambiguous.status == 404
    listed = set((await ambiguous.json())["error"]["streams"])
    assert SAMPLE_NAMES | {"openai-chat/overloaded-after-200"} == listed


def test_a_second_path_with_the_same_name_is_refused(tmp_path: Path) -> None:
    write_stream(tmp_path / "max-tokens.sse", "mine")
    with pytest.raises(ValueError, match="'openai-chat/max-tokens'"):
        load_recordings([samples_dir(), tmp_path])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_mock_without_paths_serves_the_samples_and_logs_a_client_leaving_as_one_line() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sseproxy", "mock", "--listen", f"127.0.0.1:{port}"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True)
    reader.start()

    def next_line() -> str:
        return lines.get(timeout=30)

    try:
        first = next_line()
        assert f"serving 5 streams on http://127.0.0.1:{port}" in first
        for name in SAMPLE_NAMES:
            assert name in first
        request = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
            f"{MOCK_HEADER}: openai-chat/cut-mid-sentence\r\n\r\n{{}}"
        ).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(request)
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")  # headers: the stream began
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        left = next_line()
        assert left.startswith("sseproxy mock: the client left openai-chat/cut-mid-sentence after")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        reader.join(timeout=30)
        proc.stderr.close()
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert not any("Traceback" in line or "Error handling request" in line for line in rest), rest


# -- `stream: false`: the dialect's one JSON document, read by the official SDKs --------------

CORPUS_STREAMS = {
    "chat": "openai-chat/parallel-tool-calls",
    "responses": "openai-responses/text-basic",
    "anthropic": "anthropic-messages/text-basic-pings",
}


async def documents_mock(aiohttp_client: Any) -> str:
    """The mock on the samples and the corpus; its base URL for an SDK."""
    mock = MockServer(load_recordings([samples_dir(), corpus_dir()]), speed=0)
    client = await aiohttp_client(mock.app())
    return str(client.make_url("/v1"))


def pinned(name: str) -> dict[str, dict[str, str]]:
    return {"extra_headers": {MOCK_HEADER: name}}


async def test_stream_false_gets_chat_completions_one_document(aiohttp_client: Any) -> None:
    openai = pytest.importorskip("openai")
    base = await documents_mock(aiohttp_client)
    async with openai.AsyncOpenAI(base_url=base, api_key="k") as sdk:
        completion = await sdk.chat.completions.create(
            model="m", messages=[], stream=False, **pinned("openai-chat/completed")
        )
        calls = await sdk.chat.completions.create(
            model="m", messages=[], stream=False, **pinned(CORPUS_STREAMS["chat"])
        )
    assert completion.object == "chat.completion"
    choice = completion.choices[0]
    assert (choice.message.content, choice.finish_reason) == (
        "Paris is the capital of France.",
        "stop",
    )
    assert completion.usage is not None and completion.usage.prompt_tokens == 12
    tool_calls = calls.choices[0].message.tool_calls
    assert tool_calls is not None and len(tool_calls) == 2
    assert json.loads(tool_calls[0].function.arguments)["city"] == "Edinburgh"


async def test_stream_false_gets_the_responses_and_messages_documents(aiohttp_client: Any) -> None:
    openai = pytest.importorskip("openai")
    anthropic = pytest.importorskip("anthropic")
    base = await documents_mock(aiohttp_client)
    async with openai.AsyncOpenAI(base_url=base, api_key="k") as sdk:
        response = await sdk.responses.create(
            model="m", input="hi", stream=False, **pinned(CORPUS_STREAMS["responses"])
        )
    assert response.status == "completed" and response.output_text
    async with anthropic.AsyncAnthropic(base_url=base.removesuffix("/v1"), api_key="k") as sdk:
        message = await sdk.messages.create(
            model="m",
            max_tokens=9,
            messages=[],
            stream=False,
            **pinned(CORPUS_STREAMS["anthropic"]),
        )
    assert (message.content[0].text, message.stop_reason) == ("4200 + 42 = 4242", "end_turn")


async def test_stream_false_keeps_how_the_recording_went_wrong(aiohttp_client: Any) -> None:
    """An in-band failure is the dialect's HTTP error; a cut stream is a cut document."""
    anthropic = pytest.importorskip("anthropic")
    openai = pytest.importorskip("openai")
    base = await documents_mock(aiohttp_client)
    async with anthropic.AsyncAnthropic(
        base_url=base.removesuffix("/v1"), api_key="k", max_retries=0
    ) as sdk:
        with pytest.raises(anthropic.APIStatusError) as failed:
            await sdk.messages.create(
                model="m",
                max_tokens=9,
                messages=[],
                stream=False,
                **pinned("anthropic-messages/overloaded-after-200"),
            )
    assert failed.value.status_code == 529
    assert failed.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    async with openai.AsyncOpenAI(base_url=base, api_key="k", max_retries=0) as sdk:
        with pytest.raises(openai.APIConnectionError):
            await sdk.chat.completions.create(
                model="m", messages=[], stream=False, **pinned("openai-chat/cut-mid-sentence")
            )


async def test_stream_true_or_unsaid_is_still_the_stream(aiohttp_client: Any) -> None:
    mock = MockServer(load_recordings([samples_dir()]), speed=0)
    client = await aiohttp_client(mock.app())
    sample = (samples_dir() / "openai-chat" / "completed.sse").read_bytes()
    headers = {MOCK_HEADER: "openai-chat/completed"}
    for body in ({"stream": True}, {}):
        resp = await client.post("/v1/chat/completions", json=body, headers=headers)
        assert await resp.read() == sample


async def test_stream_false_for_a_dialect_without_a_document_says_so(
    aiohttp_client: Any,
) -> None:
    mock = MockServer(load_recordings([corpus_dir()]), speed=0)
    client = await aiohttp_client(mock.app())
    resp = await client.post(
        "/v1/x", json={"stream": False}, headers={MOCK_HEADER: "gemini/max-tokens"}
    )
    assert resp.status == 400
    assert (await resp.json())["error"]["type"] == "sseproxy_mock_no_document"


async def test_stream_false_gets_ollama_s_one_document(aiohttp_client: Any, tmp_path: Path) -> None:
    """Ollama streams unless told `stream: false`; then one object, `done` true."""
    lines = [
        {"model": "llama3", "message": {"role": "assistant", "content": "Hi "}, "done": False},
        {"model": "llama3", "message": {"role": "assistant", "content": "there"}, "done": False},
        {"model": "llama3", "message": {"role": "assistant", "content": ""}, "done": True}
        | {"done_reason": "stop", "prompt_eval_count": 3, "eval_count": 2},
    ]
    (tmp_path / "chat.ndjson").write_text("".join(json.dumps(line) + "\n" for line in lines))
    mock = MockServer(load_recordings([tmp_path], Dialect.OLLAMA), speed=0)
    client = await aiohttp_client(mock.app())
    resp = await client.post("/api/chat", json={"model": "llama3", "stream": False})
    assert resp.status == 200 and resp.content_type == "application/json"
    doc = await resp.json()
    assert doc["message"] == {"role": "assistant", "content": "Hi there"}
    assert (doc["done"], doc["done_reason"], doc["eval_count"]) == (True, "stop", 2)
