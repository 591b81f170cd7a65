"""Framing only: no dialect semantics, so nothing can confirm that a stream was whole.

A body that ends cleanly is `unconfirmed` (anomaly `no_terminal_signal`), never `completed`;
one cut mid-body is `interrupted`. An event that is only an error object still fills `error`.
"""

from __future__ import annotations

from sseproxy.core.dialects.base import Assembler
from sseproxy.core.dialects.spec import DialectSpec, Drills, done_marker, generic_error
from sseproxy.core.events import Framing, SSEEvent
from sseproxy.core.jsonvalue import loads
from sseproxy.core.verdict import Dialect


class PlainSSEAssembler(Assembler):
    dialect = Dialect.SSE

    def on_event(self, event: SSEEvent) -> None:
        data = event.data
        if data == "[DONE]":
            self.last_event = "[DONE]"
            return
        self.last_event = event.type if event.type != "message" else "chunk"
        if event.type == "error" or (data[:1] == "{" and '"error"' in data):
            try:
                obj = loads(data)
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                if not self.in_band_error(obj) and event.type == "error":
                    self.set_error(obj)
            elif event.type == "error":
                self.set_error(data)


class TextAssembler(Assembler):
    """A body of plain text (`text/plain`, e.g. the Vercel AI SDK's text stream): its text is
    counted; no protocol means no terminal signal."""

    dialect = Dialect.TEXT

    def on_text(self, text: str) -> None:
        self.add_text(0, text)


SSE_SPEC = DialectSpec(
    dialect=Dialect.SSE,
    assembler=PlainSSEAssembler,
    drills=Drills(is_terminal=done_marker, error=generic_error),
    fallback_for=frozenset({Framing.SSE}),
    otel_operation=None,
    resumable=lambda asked: True,  # any SSE stream with ids resumes with Last-Event-ID
)
TEXT_SPEC = DialectSpec(
    dialect=Dialect.TEXT,
    assembler=TextAssembler,
    # Text has no protocol: no terminal to drop, no in-band error to imitate; the drill writes
    # a visible marker instead.
    drills=Drills(
        is_terminal=lambda event, raw: False,
        error=lambda _: b"\n[sseproxy: injected error]\n",
        end_marker=b"",
    ),
    media_type="text/plain; charset=utf-8",
    fallback_for=frozenset({Framing.TEXT}),  # a text body is read as text, whatever was detected
    otel_operation=None,
)
