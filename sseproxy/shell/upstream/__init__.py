"""The upstream leg: header and URL helpers, and the HTTP/1.1 connection pool the project owns.

    response = await pool.request(method, url, headers, body, receiver, head_timeout=...)

returns at the final head (or raises UpstreamFailed with an EndReason). The body then reaches
`receiver.on_body` from the transport's data callback, and `receiver.on_end` once. Body bytes
that came with the head are delivered on the loop's next turn: a relay that must await
something before it can take them calls `response.pause_reading()` first, and
`resume_reading()` when ready.
"""

from sseproxy.shell.upstream.connection import PoolStats, UpstreamResponse
from sseproxy.shell.upstream.egress import EgressProxy, ProxySettings
from sseproxy.shell.upstream.facts import LIMITS, BodyReceiver, Limits, UpstreamEnd, UpstreamFailed
from sseproxy.shell.upstream.headers import (
    HOP_BY_HOP,
    REQUEST_DROP,
    forwardable,
    head_refusal,
    upstream_url,
)
from sseproxy.shell.upstream.parser import Framing
from sseproxy.shell.upstream.pool import UpstreamPool

__all__ = [
    "HOP_BY_HOP",
    "LIMITS",
    "REQUEST_DROP",
    "BodyReceiver",
    "EgressProxy",
    "Framing",
    "Limits",
    "PoolStats",
    "ProxySettings",
    "UpstreamEnd",
    "UpstreamFailed",
    "UpstreamPool",
    "UpstreamResponse",
    "forwardable",
    "head_refusal",
    "upstream_url",
]
