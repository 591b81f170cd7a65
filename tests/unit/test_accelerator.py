"""The accelerator's framing and its one-time detection against the running aiohttp: on when
aiohttp frames exactly as `frame` does, off (the documented path) when the probe disagrees or
fails."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from sseproxy.shell import accelerator


@pytest.fixture(autouse=True)
def undetected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accelerator.Detection, "enabled", None)
    monkeypatch.setattr(accelerator.Detection, "trailers", False)


def test_a_chunk_is_framed_as_rfc_9112_section_7_1_says() -> None:
    assert accelerator.frame(b"hello", True) == b"5\r\nhello\r\n"
    assert accelerator.frame(b"x" * 26, True) == b"1a\r\n" + b"x" * 26 + b"\r\n"
    assert accelerator.frame(b"hello", False) == b"hello"


async def test_the_running_aiohttp_frames_as_the_accelerator_does() -> None:
    assert await accelerator.probe("1.1") == (True, accelerator.expected_body(True))
    assert await accelerator.probe("1.0") == (False, accelerator.expected_body(False))
    assert await accelerator.detect() is True and accelerator.enabled()


async def test_a_probe_that_disagrees_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    async def other_framing(version: str) -> tuple[bool, bytes]:
        return True, b"3;ext=1\r\nab\r\n"  # say, a writer that adds chunk extensions

    monkeypatch.setattr(accelerator, "probe", other_framing)
    assert await accelerator.detect() is False and not accelerator.enabled()


async def test_a_probe_that_fails_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(version: str) -> tuple[bool, bytes]:
        raise RuntimeError("a changed aiohttp")

    monkeypatch.setattr(accelerator, "probe", broken)
    assert await accelerator.detect() is False


async def test_detection_runs_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    probe = accelerator.probe

    async def counted(version: str) -> tuple[bool, bytes]:
        nonlocal calls
        calls += 1
        return await probe(version)

    monkeypatch.setattr(accelerator, "probe", counted)
    assert await accelerator.detect() and await accelerator.detect()
    assert calls == 2  # one HTTP/1.1 probe, one HTTP/1.0 probe, once


async def test_the_running_aiohttp_ends_a_response_with_trailers_as_the_accelerator_does() -> None:
    head, body = await accelerator.probe_trailers()
    assert b"\r\nConnection: close" in head  # said before the end, as `force_close` promises
    assert body == b"2\r\nab\r\n0\r\nx-probe: 1\r\n\r\n"  # ours, and nothing of aiohttp's after
    assert accelerator.trailers_hold(head, body)
    assert await accelerator.detect() and accelerator.trailers_enabled()


async def test_a_trailer_probe_that_disagrees_turns_only_trailers_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def aiohttp_ends_too() -> tuple[bytes, bytes]:
        return (
            b"HTTP/1.1 200 OK\r\nConnection: close",
            b"2\r\nab\r\n0\r\nx-probe: 1\r\n\r\n0\r\n\r\n",
        )

    monkeypatch.setattr(accelerator, "probe_trailers", aiohttp_ends_too)
    assert await accelerator.detect() is True
    assert accelerator.enabled() and not accelerator.trailers_enabled()


async def test_trailers_need_the_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accelerator.Detection, "enabled", False)
    monkeypatch.setattr(accelerator.Detection, "trailers", True)
    assert not accelerator.trailers_enabled()


def test_ending_with_trailers_on_a_closed_connection_writes_nothing() -> None:
    class Closing:
        written: list[bytes] = []

        def is_closing(self) -> bool:
            return True

        def write(self, data: bytes) -> None:
            self.written.append(data)

    transport = Closing()
    assert accelerator.end_with_trailers(transport, b"0\r\n\r\n") is False  # type: ignore[arg-type]
    assert transport.written == []
    assert accelerator.end_with_trailers(None, b"0\r\n\r\n") is False


def test_the_trailer_ending_holds_on_uvloop_the_proxy_s_default_loop() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert accelerator.trailers_hold(*runner.run(accelerator.probe_trailers()))
