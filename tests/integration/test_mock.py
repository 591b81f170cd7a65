"""`sseproxy mock`: bundled samples by default, recordings named `dialect/name`, collisions
refused at startup, a client leaving early logged as one line."""

from __future__ import annotations

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
from sseproxy.mock import MOCK_HEADER, MockServer, load_recordings, samples_dir
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
