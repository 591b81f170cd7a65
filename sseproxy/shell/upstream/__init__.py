"""The upstream leg: header and URL helpers, and the connection pool the project owns."""

from .headers import HOP_BY_HOP, REQUEST_DROP, forwardable, head_refusal, upstream_url
from .legacy_aiohttp import (
    AUTO_HEADERS_SKIPPED,
    ForwardingRequest,
    IsolatedConnector,
    IsolatedHandler,
    new_session,
    refusal,
)

__all__ = [
    "AUTO_HEADERS_SKIPPED",
    "HOP_BY_HOP",
    "REQUEST_DROP",
    "ForwardingRequest",
    "IsolatedConnector",
    "IsolatedHandler",
    "forwardable",
    "head_refusal",
    "new_session",
    "refusal",
    "upstream_url",
]
