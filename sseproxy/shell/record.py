"""The records, built once, redacted once, frozen, safe for any serialiser: a request's from its
facts and progress (`state.py`); a WebSocket turn's the same way, with its session's fields
(`turn_fields`); a WebSocket session's own (`build_session`) from how its connection went."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from sseproxy.capture.store import redact_headers
from sseproxy.core import EndReason, ErrorInfo, Interruption, State, Verdict, with_transport
from sseproxy.core.dialects import spec_for
from sseproxy.core.dialects.mcp import SESSION_HEADER, session_findings
from sseproxy.core.pacing import PacingSummary
from sseproxy.core.sessions import SessionSpec, TurnJudge, TurnResult
from sseproxy.observe.clients import client_fields
from sseproxy.observe.log import json_ready, json_rendered, json_safe
from sseproxy.observe.record_schema import SCHEMA_VERSION
from sseproxy.observe.redact import Secrets
from sseproxy.shell.ledger import Ended, Links
from sseproxy.shell.state import Progress, RequestFacts
from sseproxy.shell.tapping import close_tap

Record = Mapping[str, Any]
# `interruption.reason` of a request the proxy itself failed (an internal error), beside
# the core's EndReason values.
PROXY_ERROR = "proxy_error"
# The anomaly of the minimal record written when building the full one failed.
RECORD_ERROR = "record_error"
# Stray bytes the upstream wrote after its response's end (the leg counts them).
BYTES_AFTER_RESPONSE = "bytes_after_response"
# Responses that carry no body by definition (RFC 9110 §6.4.1).
NO_BODY_STATUSES = frozenset({204, 304})


def proxy_error(etype: str, message: str) -> ErrorInfo:
    return ErrorInfo(type=f"sseproxy_{etype}", code=None, message=message)


def verdict_of(
    facts: RequestFacts, progress: Progress, content_timeout: float | None = None
) -> tuple[Verdict, PacingSummary | None]:
    """Close the tap, then apply what only the shell knows: status, who left, own errors,
    and the pacing findings (their anomalies count like the core's)."""
    end = progress.end
    tap = progress.tap
    verdict = close_tap(tap, end, progress.http_complete)
    if "empty_body" in verdict.anomalies and (tap is None or no_body_due(facts, progress)):
        # Nothing to analyse was due (HEAD, 204, 304, 1xx) or none was taken (the proxy's
        # own answer, or no answer at all): an empty body says nothing here.
        anomalies = {k: n for k, n in verdict.anomalies.items() if k != "empty_body"}
        verdict = verdict.replace(anomalies=anomalies)
    pacing = paced(progress, verdict, content_timeout)
    names = list(pacing.anomalies) if pacing is not None else []
    if progress.bytes_after_end:
        # The upstream wrote past its response's end (a second response, or garbage): the
        # client never sees those bytes, and the connection is not reused.
        names.append(BYTES_AFTER_RESPONSE)
    if names:
        anomalies = dict(verdict.anomalies)
        for name in names:
            anomalies[name] = anomalies.get(name, 0) + 1
        verdict = verdict.replace(anomalies=anomalies)
    verdict = _transport(facts, progress, verdict)
    findings = session_findings(progress.status, session_of(facts))
    if findings:
        verdict = with_anomalies(verdict, findings)
    return verdict, pacing


def no_body_due(facts: RequestFacts, progress: Progress) -> bool:
    """The response carries no body by definition (RFC 9110 §6.4.1): a HEAD's, a 1xx, 204
    or 304 (a turn's 101 never comes here: its record is built from its messages)."""
    status = progress.status
    return (
        facts.method == "HEAD"
        or status in NO_BODY_STATUSES
        or (status is not None and 100 <= status < 200)
    )


def with_anomalies(verdict: Verdict, found: Mapping[str, int]) -> Verdict:
    """The verdict with the shell's findings counted like the core's."""
    anomalies = dict(verdict.anomalies)
    for name, count in found.items():
        anomalies[name] = anomalies.get(name, 0) + count
    return verdict.replace(anomalies=dict(sorted(anomalies.items())))


def session_of(facts: RequestFacts) -> str | None:
    """`MCP-Session-Id` as the client sent it (the server assigns it in its answer to
    `initialize`; every later request of the session carries it)."""
    return facts.headers.get(SESSION_HEADER) or None


def ended(facts: RequestFacts, progress: Progress, verdict: Verdict, keep_text: bool) -> Ended:
    """What the resume ledger keeps of this request and judges it by."""
    tap = progress.tap
    delivery = progress.delivery
    return Ended(
        request_id=facts.request_id,
        started=facts.start,
        method=facts.method,
        path=facts.path,
        headers=facts.headers,
        body=facts.body,
        route=facts.route.name if facts.route else None,
        session_id=session_of(facts),
        state=verdict.state,
        response_id=verdict.response_id,
        events=tap.ledger() if tap is not None else (),
        delivered=delivery.last_delivered()[0] if delivery is not None else 0,
        retry_ms=tap.retry_ms if tap is not None else None,
        text=tap.primary_text() if keep_text and tap is not None else None,
        finish_reason=verdict.finish_reason,
        mcp_stateless=facts.asked.mcp_stateless,
        mcp_call=facts.asked.mcp_call,
        mcp_round_trip=facts.asked.mcp_round_trip,
    )


def _transport(facts: RequestFacts, progress: Progress, verdict: Verdict) -> Verdict:
    end = progress.end
    if progress.proxy_error is not None:
        interruption = None if end == EndReason.END_OF_INPUT else Interruption(str(end), 0)
        return verdict.replace(
            state=State.HTTP_ERROR, error=progress.proxy_error, interruption=interruption
        )
    no_body = facts.method == "HEAD" or progress.status in NO_BODY_STATUSES
    if no_body and progress.status is not None and 200 <= progress.status < 300:
        # No body was expected: nothing was cut, and nothing confirms an answer either.
        return verdict.replace(state=State.UNCONFIRMED, interruption=None)
    rule = spec_for(verdict.dialect).on_client_close(facts.asked)
    return with_transport(verdict, progress.status, str(end), rule)


def paced(
    progress: Progress, verdict: Verdict, content_timeout: float | None = None
) -> PacingSummary | None:
    pacing = progress.pacing
    if pacing is None:
        return None
    output = verdict.usage.output_tokens if verdict.usage is not None else None
    return pacing.conclude(
        time.monotonic(),
        output if isinstance(output, int) else None,
        last_byte=progress.timings.last_chunk,
        content_timeout=content_timeout,
    )


def build(
    facts: RequestFacts,
    progress: Progress,
    verdict: Verdict,
    pacing: PacingSummary | None = None,
) -> Record:
    """The record: every field a sink may use, redacted once, JSON-safe, read-only."""
    return build_rendered(facts, progress, verdict, pacing)[0]


def build_rendered(
    facts: RequestFacts,
    progress: Progress,
    verdict: Verdict,
    pacing: PacingSummary | None = None,
    links: Links | None = None,
    extra: Mapping[str, Any] | None = None,
) -> tuple[Record, bytes | None]:
    """`build`'s record, and its JSON as `log.json_ready`'s test rendered it (None when the
    record had to be rebuilt): the log line reuses it instead of rendering it again. `extra`:
    fields that override the verdict's (a WebSocket turn's transport, session, dialect)."""
    body = verdict.to_dict()
    response_model = body.pop("model")
    fallback = body.pop("fallback", None)
    route = facts.route
    fields: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "request_id": facts.request_id,
        "upstream_request_id": progress.upstream_request_id,
        "method": facts.method,
        "path": facts.path,
        "route": route.name if route else None,
        "upstream": route.upstream if route else None,
        "status": progress.status,
        "answered_by": progress.answered_by,
        "content_type": progress.content_type,
        "model": facts.asked.model,
        "response_model": response_model,
        "stream": progress.stream,
        **(progress.client or client_fields(facts.headers)),
        **progress.timings.fields(time.monotonic()),
        **body,
    }
    if pacing is not None:
        fields.update(pacing.fields())
    if progress.delivery is not None:
        broken = not progress.http_complete or progress.end == EndReason.CLIENT_DISCONNECTED
        fields.update(progress.delivery.fields(broken))
    session = session_of(facts)
    if session is not None:
        fields["mcp_session_id"] = session  # not a secret; `Authorization` stays redacted
    if fallback is not None:
        fields["fallback_hops"] = fallback["hops"]
        text_model = fallback["text_model"]
        if text_model is not None and text_model != response_model:
            fields["text_model"] = text_model  # who wrote the answer, when not response_model
    if facts.asked.mcp_version is not None:
        fields["mcp_protocol_version"] = facts.asked.mcp_version  # the rules it was judged by
    retry_ms = progress.tap.retry_ms if progress.tap is not None else None
    if retry_ms is not None:
        fields["sse_retry_ms"] = retry_ms
    if links is not None and links.resume is not None:
        fields["resume"] = links.resume.fields()
    if links is not None and links.retry is not None:
        fields["retry"] = links.retry
    if links is not None and links.round_trip is not None:
        fields["round_trip"] = links.round_trip
    if facts.inject_rules:
        fields["injected"] = [str(rule) for rule in facts.inject_rules]
    if progress.trailers:
        fields["trailers"] = trailer_fields(progress.trailers, facts.secrets)
        fields["trailers_forwarded"] = list(progress.trailers_forwarded)
    if progress.span is not None:  # OpenTelemetry is on: logs and traces join on these
        from sseproxy.observe.tracing import log_ids

        fields.update(log_ids(progress.span))
    if facts.method == "HEAD" or progress.status in NO_BODY_STATUSES:
        fields["no_body_expected"] = True
    if extra:
        fields.update(extra)
    # Once: every sink gets only this, redacted and serialisable as JSON.
    ready, rendered = json_rendered(facts.secrets.redact(fields))
    return MappingProxyType(ready), rendered


def trailer_fields(trailers: tuple[tuple[bytes, bytes], ...], secrets: Secrets) -> dict[str, str]:
    """The upstream's trailer fields by lower-case name (repeated ones joined with `, `, as
    RFC 9110 §5.3 combines them), redacted as a capture's headers are. The leg bounds them."""
    joined: dict[str, str] = {}
    for raw_name, raw_value in trailers:
        name = raw_name.decode("ascii", "replace").lower()
        value = raw_value.decode("utf-8", "replace")
        joined[name] = f"{joined[name]}, {value}" if name in joined else value
    return redact_headers(joined, secrets)


def fallback(facts: RequestFacts, progress: Progress, why: BaseException) -> Record:
    """A record with what is surely serialisable, when building the full one failed;
    redacted like every record (the log writes records as they are)."""
    return MappingProxyType(
        json_safe(
            facts.secrets.redact(
                {
                    "schema_version": SCHEMA_VERSION,
                    "request_id": facts.request_id,
                    "method": facts.method,
                    "path": facts.path,
                    "status": progress.status,
                    "answered_by": progress.answered_by,
                    "state": str(State.UNCONFIRMED),
                    "interruption": {"reason": str(progress.end), "partial_event_bytes": 0},
                    "anomalies": {RECORD_ERROR: 1},
                    "error": {"type": "sseproxy_record_error", "message": repr(why)[:300]},
                }
            )
        )
    )


def turn_fields(session_id: str, spec: SessionSpec, result: TurnResult) -> dict[str, Any]:
    """What a WebSocket turn's record holds beyond a request's (`build_rendered`'s `extra`);
    `lane` and `continues` only where the turn has them (Responses lanes and steering)."""
    fields: dict[str, Any] = {
        "transport": "websocket",
        "session_id": session_id,
        "turn": result.number,
        "model": result.model,
        "dialect": str(spec.dialect),
        "audio_bytes": result.audio_bytes,
        "audio_ms": result.audio_ms,
    }
    if result.lane is not None:
        fields["lane"] = result.lane
    if result.continues is not None:
        fields["continues"] = {
            "turn": result.continues.turn,
            "response_id": result.continues.response_id,
        }
    return fields


@dataclass(frozen=True, slots=True)
class SessionEnd:
    """How one WebSocket connection went, as its relay saw it; with its judge's tallies, the
    `session.finished` record. Sizes and counts are by side (`client`, `upstream`)."""

    dialect: str
    subprotocol: str | None
    extensions: Mapping[str, list[str]]
    close_code: int | None
    close_reason: str
    closed_by: str | None
    close_frame: bool
    end: EndReason
    duration_s: float
    messages: Mapping[str, int]
    sizes: Mapping[str, int]
    largest_message_bytes: int
    ping_ms: Sequence[float]
    client_wait_s: float
    last_message_delivered: str | None


def build_session(facts: RequestFacts, end: SessionEnd, judge: TurnJudge) -> Record:
    """The `session.finished` record of one connection (its turns have records of their own),
    redacted with the handshake's secrets, JSON-safe."""
    route = facts.route
    fields: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "transport": "websocket",
        "session_id": facts.request_id,
        "route": route.name if route else None,
        "upstream": route.upstream if route else None,
        "path": facts.path,
        "dialect": end.dialect,
        "subprotocol": end.subprotocol,
        "extensions": dict(end.extensions),
        "close_code": end.close_code,
        "close_reason": end.close_reason or None,
        "closed_by": end.closed_by,
        "close_frame": end.close_frame,
        "end_reason": str(end.end),
        "duration_ms": round(end.duration_s * 1000, 3),
        "turns": judge.turns,
        "states": dict(sorted(judge.states.items())),
        "errors": judge.errors,
        "messages": {"client": end.messages["client"], "upstream": end.messages["upstream"]},
        "bytes": {"client": end.sizes["client"], "upstream": end.sizes["upstream"]},
        "largest_message_bytes": end.largest_message_bytes,
        "ping_ms": list(end.ping_ms),
        "client_wait_ms": round(end.client_wait_s * 1000, 3),
        "last_message_delivered": end.last_message_delivered,
        "go_away_s": judge.go_away_s,
        "resumable": judge.resumable,
        "anomalies": dict(sorted((+judge.anomalies).items())),
        **client_fields(facts.headers),
    }
    steering = +judge.steering
    if steering:
        fields["steering"] = dict(sorted(steering.items()))
    return MappingProxyType(json_ready(facts.secrets.redact(fields)))
