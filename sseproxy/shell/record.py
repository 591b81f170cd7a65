"""What one request is (immutable facts), what happened to it (a small mutable progress), and
the record both become: built once, redacted once, frozen, safe for any serialiser."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..capture import Capture
from ..config import Route
from ..core import EndReason, ErrorInfo, Interruption, State, StreamTap, Verdict, with_transport
from ..core.inject import Rule
from ..core.pacing import Pacing, PacingSummary
from ..core.request import RequestFacts as CoreRequestFacts
from ..inspector import StreamView
from ..log import json_rendered, json_safe
from ..redact import Secrets
from .delivery import ClientDelivery
from .tapping import close_tap

if TYPE_CHECKING:
    from opentelemetry.trace import Span

Record = Mapping[str, Any]
BYTES_AFTER_RESPONSE = "bytes_after_response"
# Responses that carry no body by definition (RFC 9110 §6.4.1).
NO_BODY_STATUSES = frozenset({204, 304})


# What a request asked for before its body was read (frozen: one for all).
NOTHING_ASKED = CoreRequestFacts()


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What the client asked for, fixed once the request has been admitted."""

    request_id: str
    method: str
    path: str  # the raw target as sent, its credentials redacted
    started_at: float  # wall clock, for people
    start: float  # monotonic, for durations
    route: Route | None = None
    body: bytes = b""
    inject_rules: tuple[Rule, ...] = ()
    headers: Mapping[str, str] = field(default_factory=dict)  # as received (read-only)
    secrets: Secrets = field(default_factory=lambda: Secrets.from_request({}, "/", b""))
    asked: CoreRequestFacts = NOTHING_ASKED  # for the core's checks

    def routed(self, route: Route) -> RequestFacts:
        """These facts with their route (`dataclasses.replace`, built directly: per request)."""
        return RequestFacts(
            self.request_id,
            self.method,
            self.path,
            self.started_at,
            self.start,
            route,
            self.body,
            self.inject_rules,
            self.headers,
            self.secrets,
            self.asked,
        )

    def admitted(
        self,
        body: bytes,
        asked: CoreRequestFacts,
        inject_rules: tuple[Rule, ...],
        secrets: Secrets,
    ) -> RequestFacts:
        """These facts with what the body and the drill header say."""
        return RequestFacts(
            self.request_id,
            self.method,
            self.path,
            self.started_at,
            self.start,
            self.route,
            body,
            inject_rules,
            self.headers,
            secrets,
            asked,
        )


@dataclass
class Timings:
    """Clock readings of one request; the core never reads the clock, the shell does."""

    start: float
    headers: float | None = None
    last_chunk: float | None = None
    max_gap: float = 0.0
    first_content: float | None = None
    last_content: float | None = None
    max_content_gap: float = 0.0

    def chunk(self, arrived: float, now: float, content_deltas: int) -> None:
        """A chunk that `arrived` from upstream reached the client at `now`.

        The gap is the upstream's silence (arrival minus the previous chunk's delivery), so a
        client that reads slowly shows in `client_wait_ms`, not in `max_gap_ms`.
        """
        last = self.last_chunk or self.headers or self.start
        if arrived - last > self.max_gap:
            self.max_gap = arrived - last
        self.last_chunk = now
        if content_deltas:
            if self.first_content is None:
                self.first_content = now
            elif self.last_content is not None:
                self.max_content_gap = max(self.max_content_gap, now - self.last_content)
            self.last_content = now

    def resumed(self, now: float) -> None:
        """The upstream was paused for a client that did not read, until `now`: the next
        gap starts here, so max_gap_ms keeps measuring the upstream's silence."""
        if self.last_chunk is not None and now > self.last_chunk:
            self.last_chunk = now

    def fields(self, end: float) -> dict[str, float | None]:
        def ms(t: float | None) -> float | None:
            return None if t is None else round((t - self.start) * 1000, 3)

        # Silence up to the end counts too: it is the gap a timeout or a cut ends.
        content_gap = self.max_content_gap
        if self.last_content is not None:
            content_gap = max(content_gap, end - self.last_content)
        last_byte = self.last_chunk or self.headers
        max_gap = self.max_gap if last_byte is None else max(self.max_gap, end - last_byte)
        return {
            "ttfb_ms": ms(self.headers),
            "ttft_ms": ms(self.first_content),
            "duration_ms": round((end - self.start) * 1000, 3),
            "max_gap_ms": None if last_byte is None else round(max_gap * 1000, 3),
            "content_gap_ms": round(content_gap * 1000, 3) if self.first_content else None,
        }


@dataclass
class Progress:
    """What happened so far; the shell's only mutable per-request state."""

    timings: Timings
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    content_type: str | None = None
    upstream_request_id: str | None = None
    stream: bool = False
    tap: StreamTap | None = None
    view: StreamView | None = None
    capture: Capture | None = None
    span: Span | None = None
    delivery: ClientDelivery | None = None
    pacing: Pacing | None = None
    end: EndReason | str = EndReason.END_OF_INPUT
    http_complete: bool = False
    bytes_after_end: int = 0  # stray bytes after the upstream response's end (the leg's count)
    proxy_error: ErrorInfo | None = None


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
                    "request_id": facts.request_id,
                    "method": facts.method,
                    "path": facts.path,
                    "status": progress.status,
                    "state": str(State.UNCONFIRMED),
                    "interruption": {"reason": str(progress.end), "partial_event_bytes": 0},
                    "anomalies": {"record_error": 1},
                    "error": {"type": "sseproxy_record_error", "message": repr(why)[:300]},
                }
            )
        )
    )
