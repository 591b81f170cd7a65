"""Framing only: no dialect semantics, so the only evidence is where the bytes stopped."""

from __future__ import annotations

from ..events import SSEEvent
from ..verdict import Dialect, State
from .base import Assembler, Outcome


class PlainSSEAssembler(Assembler):
    dialect = Dialect.SSE

    def on_event(self, event: SSEEvent) -> None:
        if event.data == "[DONE]":
            self.last_event = "[DONE]"
        else:
            self.last_event = event.type if event.type != "message" else "chunk"

    def conclude(self, partial: bool, clean_end: bool) -> Outcome:
        if self.error is not None:
            return super().conclude(partial, clean_end)
        return Outcome(State.INTERRUPTED if partial or not clean_end else State.COMPLETED)
