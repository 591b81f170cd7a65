"""A capture at its size cap stops storing body bytes there and says so; `sseproxy replay` of
it says it is partial. (Before: later small chunks were still stored, so the file was the
body with holes, `AAAA|BBBBBBBB|CC` saved as `AAAACC`, and replay fed spliced bytes.)"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

from sseproxy.capture.format import CaptureSettings, load_capture
from sseproxy.capture.store import Capture
from sseproxy.shell.app import STATE
from sseproxy.tools.replay import EXIT_PARTIAL, ReplayOptions, replay
from tests.integration.fake_upstream import Script, Send, WaitFor
from tests.streams import chat_chunk, sse

PATH = "/v1/chat/completions"


def test_no_byte_is_stored_after_the_first_chunk_that_does_not_fit() -> None:
    capture = Capture(CaptureSettings(Path("unused"), max_bytes=10), "id", 0.0)
    for chunk in (b"AAAA", b"BBBBBBBB", b"CC"):
        capture.chunk(chunk, 0.0)
    assert b"".join(capture.parts) == b"AAAA"
    sidecar = capture.sidecar({}, "x.body")
    assert (sidecar["truncated"], sidecar["truncated_at"], sidecar["truncated_reason"]) == (
        True,
        4,
        "capture_max_bytes",
    )
    assert (sidecar["body_bytes"], sidecar["chunks"]) == (
        4,
        [(0, 4, 0.0), (4, 8, 0.0), (12, 2, 0.0)],
    )


def test_a_capture_under_its_cap_says_nothing_of_truncation() -> None:
    capture = Capture(CaptureSettings(Path("unused"), max_bytes=10), "id", 0.0)
    capture.chunk(b"AAAA", 0.0)
    sidecar = capture.sidecar({}, "x.body")
    assert sidecar["truncated"] is False
    assert not {"truncated_at", "truncated_reason"} & set(sidecar)


async def test_a_capped_capture_is_the_bodys_first_bytes_and_replays_as_partial(
    upstream, make_proxy, logs, tmp_path: Path
) -> None:
    fake, _ = upstream
    first = sse(chat_chunk("Hello"))
    second = sse(chat_chunk(" " + "world" * 40))
    last = sse(chat_chunk(finish="stop"), "[DONE]")
    gates = [asyncio.Event(), asyncio.Event()]
    fake.script(
        PATH,
        Script([Send(first), WaitFor(gates[0]), Send(second), WaitFor(gates[1]), Send(last)]),
    )
    cap = len(first) + len(last)  # the second chunk does not fit; the small last one would
    client = await make_proxy(capture_dir=str(tmp_path), capture_max_bytes=cap)
    response = await client.post(PATH, json={"stream": True})
    got = await response.content.readany()
    for gate in gates:  # each piece is one upstream read: the client has the one before
        gate.set()
        await asyncio.sleep(0.05)
    got += await response.read()
    assert got == first + second + last
    record = (await logs.wait())[0]
    assert record["state"] == "completed"
    await client.app[STATE].captures.drain()
    [sidecar_path] = tmp_path.glob("*.json")
    sidecar, body = load_capture(sidecar_path)
    assert body == first  # the first bytes only: never `first + last`
    assert (sidecar["truncated_at"], sidecar["truncated_reason"]) == (
        len(first),
        "capture_max_bytes",
    )
    out, err = io.StringIO(), io.StringIO()
    assert replay(body, ReplayOptions(), out, capture=sidecar, err=err) == EXIT_PARTIAL
    replayed = json.loads(out.getvalue().splitlines()[-1])
    assert replayed["partial_capture"] == {
        "truncated_at": len(first),
        "reason": "capture_max_bytes",
    }
    assert replayed["state"] != "completed"
    assert "partial capture" in err.getvalue()
