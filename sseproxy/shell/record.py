"""The record a request's facts and progress (`state.py`) become: built once, redacted once,
frozen, safe for any serialiser."""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..core import EndReason, ErrorInfo, Interruption, State, Verdict, with_transport
from ..core.pacing import PacingSummary
from ..log import json_rendered, json_safe
from ..record_schema import SCHEMA_VERSION
from .state import Progress, RequestFacts
from .tapping import close_tap

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
    return _transport(facts, progress, verdict), pacing


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
    return with_transport(verdict, progress.status, str(end))


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
) -> tuple[Record, bytes | None]:
    """`build`'s record, and its JSON as `log.json_ready`'s test rendered it (None when the
    record had to be rebuilt): the log line reuses it instead of rendering it again."""
    body = verdict.to_dict()
    response_model = body.pop("model")
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
        "content_type": progress.content_type,
        "model": facts.asked.model,
        "response_model": response_model,
        "stream": progress.stream,
        **progress.timings.fields(time.monotonic()),
        **body,
    }
    if pacing is not None:
        fields.update(pacing.fields())
    if progress.delivery is not None:
        broken = not progress.http_complete or progress.end == EndReason.CLIENT_DISCONNECTED
        fields.update(progress.delivery.fields(broken))
    if facts.inject_rules:
        fields["injected"] = [str(rule) for rule in facts.inject_rules]
    if progress.span is not None:  # OpenTelemetry is on: logs and traces join on these
        from ..tracing import log_ids

        fields.update(log_ids(progress.span))
    if facts.method == "HEAD" or progress.status in NO_BODY_STATUSES:
        fields["no_body_expected"] = True
    # Once: every sink gets only this, redacted and serialisable as JSON.
    ready, rendered = json_rendered(facts.secrets.redact(fields))
    return MappingProxyType(ready), rendered


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
                    "state": str(State.UNCONFIRMED),
                    "interruption": {"reason": str(progress.end), "partial_event_bytes": 0},
                    "anomalies": {RECORD_ERROR: 1},
                    "error": {"type": "sseproxy_record_error", "message": repr(why)[:300]},
                }
            )
        )
    )
