"""The accelerator's framing and its one-time detection against the running aiohttp: on when
aiohttp frames exactly as `frame` does, off (the documented path) when the probe disagrees or
fails."""

from __future__ import annotations

import pytest

from sseproxy.shell import accelerator


@pytest.fixture(autouse=True)
def undetected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accelerator.Detection, "enabled", None)


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
