"""A sink that raises (log, metrics, inspector, capture) never changes a client's bytes or
ending; it is counted in sseproxy_sink_errors_total{sink} and reported once on stderr."""

from __future__ import annotations

import io

import pytest

from sseproxy.observe import log
from sseproxy.shell.app import STATE
from tests.integration.fake_upstream import Script, Send
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"
COMPLETE = sse(chat_chunk("Hello, "), chat_chunk("world"), chat_chunk(finish="stop"), "[DONE]")


class BrokenPipe(io.StringIO):
    """stdout whose reader is gone."""

    def write(self, s: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def sink_errors(exposition: str, sink: str) -> float:
    for line in exposition.splitlines():
        if line.startswith(f'sseproxy_sink_errors_total{{sink="{sink}"}}'):
            return float(line.split()[-1])
    return 0.0


async def two_clean_streams(client) -> None:
    for _ in range(2):
        resp = await client.post(PATH, json={})
        assert await resp.read() == COMPLETE  # every byte and a clean end (else this raises)
        assert resp.status == 200


async def test_a_log_sink_with_a_broken_pipe_changes_nothing_for_clients(
    upstream, make_proxy, capsys
) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(COMPLETE)]))
    client = await make_proxy()
    log.configure("json", "info", BrokenPipe(), cache=False)
    await two_clean_streams(client)
    # log.py's writer reports its own output failing, once (the sink guard is the backstop).
    assert capsys.readouterr().err.count("BrokenPipeError") == 1


@pytest.mark.parametrize("sink", ["metrics", "inspector", "capture"])
async def test_a_raising_sink_changes_nothing_for_clients(
    sink, upstream, make_proxy, logs, tmp_path, capsys
) -> None:
    fake, _ = upstream
    fake.script(PATH, Script([Send(COMPLETE)]))
    client = await make_proxy(capture_dir=str(tmp_path))
    state = client.app[STATE]

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"{sink} is broken")

    target = {"metrics": state.metrics, "inspector": state.inspector, "capture": state.captures}
    name = {"metrics": "observe", "inspector": "finished", "capture": "save"}[sink]
    setattr(target[sink], name, boom)
    await two_clean_streams(client)
    records = await logs.wait(2)
    assert [r["state"] for r in records] == ["completed", "completed"]  # other sinks still ran
    assert sink_errors(state.metrics.exposition().decode(), sink) == 2
    assert not state.inspector.active  # the inspector entry is released on every path
    assert capsys.readouterr().err.count(f"the {sink} sink failed") == 1


async def test_a_record_that_cannot_be_built_still_leaves_a_record_and_a_clean_end(
    upstream, make_proxy, logs, monkeypatch
) -> None:
    from sseproxy.shell import record

    def broken(*args: object) -> None:
        raise ValueError("a value no serialiser takes")

    monkeypatch.setattr(record, "build_rendered", broken)
    fake, _ = upstream
    fake.script(PATH, Script([Send(COMPLETE)]))
    client = await make_proxy()
    resp = await client.post(PATH, json={})
    assert await resp.read() == COMPLETE
    [fallback] = await logs.wait(1)
    assert fallback["request_id"] == resp.headers["x-sseproxy-request-id"]
    assert (fallback["status"], fallback["anomalies"]) == (200, {"record_error": 1})
    assert "a value no serialiser takes" in fallback["error"]["message"]
