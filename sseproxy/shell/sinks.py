"""Sinks receive the finished record, each behind its own guard (mitmproxy's `safecall`): a
sink that raises never changes a client's bytes or ending; it is counted
(`sseproxy_sink_errors_total{sink}`) and reported once per sink on stderr."""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections.abc import Callable
from typing import Any

from sseproxy.capture.store import Capture, redact_headers
from sseproxy.core import Dialect, Verdict
from sseproxy.core.request_body import decode_request_body
from sseproxy.observe.log import json_ready, level_for, request_finished
from sseproxy.shell.record import Record
from sseproxy.shell.state import Progress, ProxyState, RequestFacts


def safecall(state: ProxyState, sink: str, call: Callable[[], Any]) -> None:
    try:
        call()
    except Exception as exc:
        with contextlib.suppress(Exception):
            state.metrics.sink_failed(sink)
        if sink not in state.failed_sinks:
            state.failed_sinks.add(sink)
            with contextlib.suppress(Exception):
                # Once per sink: a broken pipe on every request must not flood stderr too.
                detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                sys.stderr.write(f"sseproxy: the {sink} sink failed (reported once): {detail}\n")
                sys.stderr.flush()


def deliver(
    state: ProxyState,
    facts: RequestFacts,
    progress: Progress,
    verdict: Verdict,
    record: Record,
    rendered: bytes | None = None,
) -> None:
    """Hand the one record to every sink; none sees anything the record does not hold.
    `rendered`: the record's JSON, when `record.build_rendered` has it."""
    safecall(
        state, "log", lambda: request_finished(record, level_for(str(record["state"])), rendered)
    )
    chunks = progress.timings.chunk_times
    safecall(
        state, "metrics", lambda: state.metrics.observe(verdict, progress.status, record, chunks)
    )
    inspector = state.inspector
    tap = progress.tap
    text = tap.primary_text() if inspector.keep_content and tap is not None else None
    text = facts.secrets.redact_text(text) if text else text
    safecall(
        state,
        "inspector",
        lambda: inspector.finished(
            facts.request_id,
            record,
            text,
            headers=(
                redact_headers(facts.headers, facts.secrets),
                progress.response_headers if progress.status is not None else None,
            ),
            secrets=facts.secrets,
            started_at=facts.started_at,
        ),
    )
    tracing = state.tracing
    span = progress.span
    if span is not None and tracing is not None:
        safecall(
            state,
            "tracing",
            lambda: tracing.end(span, verdict, record, request=_plain_body(facts)),
        )
    captures, capture = state.captures, progress.capture
    if capture is not None and captures is not None:

        def save() -> None:
            meta = capture_meta(state, facts, progress, verdict, record)
            captures.save(capture, meta, facts.secrets)

        safecall(state, "capture", save)


def start_capture(
    state: ProxyState, facts: RequestFacts, progress: Progress, dialect: Dialect | None
) -> Capture | None:
    """The response's capture, its files begun now with what its head says (`capture_meta`
    completes them at the end), or None without capture (or if starting one failed)."""
    captures = state.captures
    if captures is None:
        return None
    started: list[Capture] = []

    def start() -> None:
        head = {
            "method": facts.method,
            "path": facts.path,
            "request_headers": redact_headers(facts.headers, facts.secrets),
            "request_body_base64": captures.request_body(facts.body),
            "status": progress.status,
            "response_headers": progress.response_headers,
            "dialect": str(dialect) if dialect else None,
            "content_encoding": _content_encoding(progress),
        }
        started.append(captures.new(facts.request_id, facts.start, head, facts.secrets))

    safecall(state, "capture", start)
    return started[0] if started else None


def _content_encoding(progress: Progress) -> str | None:
    return next(
        (v for k, v in progress.response_headers.items() if k.lower() == "content-encoding"),
        None,
    )


def capture_meta(
    state: ProxyState, facts: RequestFacts, progress: Progress, verdict: Verdict, record: Record
) -> dict[str, Any]:
    assert state.captures is not None
    return {
        "method": facts.method,
        "path": record["path"],
        "request_headers": redact_headers(facts.headers, facts.secrets),
        "request_body_base64": state.captures.request_body(facts.body),
        "status": progress.status,
        "response_headers": progress.response_headers,
        "dialect": str(verdict.dialect),
        "content_encoding": _content_encoding(progress),
        "end": str(progress.end),
        "http_complete": progress.http_complete,
        "verdict": json_ready(verdict.to_dict()),  # captures.save redacts all it writes
        "record": dict(record),
    }


def _plain_body(facts: RequestFacts) -> bytes:
    """The request body for the span's parameters: a compressed one decoded again (bounded;
    only with tracing on), b"" when it cannot be."""
    plain = decode_request_body(facts.body, facts.headers.get("Content-Encoding"))
    return plain if isinstance(plain, bytes) else b""
