"""An aiohttp client response's body, handed to the relay as the upstream leg's callbacks.

Reads with the documented `content.readany()` and calls `receiver.on_body(chunk)` for each
chunk, then `receiver.on_end(end)` exactly once. Pausing stops the reading (aiohttp's own flow
control then stops the socket); `abort` closes the response: never reused.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from ..core import EndReason
from .errors import UPSTREAM_IO, Ended, describe


@dataclass(frozen=True, slots=True)
class UpstreamEnd:
    """How a response body ended: by its own HTTP framing (`complete`) or not, and why."""

    complete: bool
    reason: EndReason
    cause: str = ""
    bytes_after_end: int = 0


class BodyReceiver(Protocol):
    def on_body(self, chunk: bytes) -> None: ...
    def on_end(self, end: UpstreamEnd) -> None: ...


class ResponseBody:
    """Feeds one `aiohttp.ClientResponse` body to a `BodyReceiver` from a reading task."""

    __slots__ = ("_ended", "_receiver", "_resumed", "_task", "response")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self._receiver: BodyReceiver | None = None
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._ended = False
        self._task: asyncio.Task[None] | None = None

    def start(self, receiver: BodyReceiver) -> None:
        self._receiver = receiver
        self._task = asyncio.get_running_loop().create_task(self._read(receiver))

    async def _read(self, receiver: BodyReceiver) -> None:
        content, resumed = self.response.content, self._resumed
        try:
            while True:
                if not resumed.is_set():
                    await resumed.wait()
                with UPSTREAM_IO:
                    chunk = await content.readany()
                if not chunk:
                    self._end(UpstreamEnd(True, EndReason.UPSTREAM_CLOSED))
                    return
                receiver.on_body(chunk)
        except Ended as ended:
            self._end(UpstreamEnd(False, ended.reason, ended.cause))
        except Exception as exc:  # not a transport failure the table knows: still an end
            self._end(UpstreamEnd(False, EndReason.UPSTREAM_CLOSED, describe(exc)))

    def _end(self, end: UpstreamEnd) -> None:
        if not self._ended:
            self._ended = True
            if self._receiver is not None:
                self._receiver.on_end(end)

    def pause_reading(self) -> None:
        self._resumed.clear()

    def resume_reading(self) -> None:
        self._resumed.set()

    def abort(self, reason: EndReason = EndReason.UPSTREAM_CLOSED, cause: str = "") -> None:
        """Stop now (generation and billing stop with the connection); never reused."""
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
        self.response.close()
        self._end(UpstreamEnd(False, reason, cause))

    async def stop(self) -> None:
        """The relay is done: the reading task ends before the response is released."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
