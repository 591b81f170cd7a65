"""Where an intercepted connection goes, carried by the connection's transport.

The listener answers each intercepted `CONNECT host:port` with an `InterceptContext` made for
that destination; admission reads `transport.get_extra_info("sslcontext")` and routes the
request to `https://host:port` only when it is one. A plain-HTTP request in absolute-form to an
intercepted host is handed over on a transport that answers `ROUTE_EXTRA` with its
`http://host:port` route (`plain.py`). Only the listener makes these, so a Host header, a path
or an absolute URL sent to the reverse proxy can never choose an intercept route: the
connection the request arrived on does. No `cryptography` import here: admission loads this on
every run.
"""

from __future__ import annotations

import datetime
import ssl
from dataclasses import dataclass
from typing import Any

from sseproxy.config import Route, make_route

ROUTE_NAME = "intercept"
# The transport's extra-info name under which a plain-HTTP intercepted connection names its
# route (asyncio's `get_extra_info`; no transport of asyncio's or uvloop's has it).
ROUTE_EXTRA = "sseproxy_intercept_route"


@dataclass(frozen=True, slots=True)
class Destination:
    host: str  # lower case; an IPv6 address without brackets
    port: int

    @property
    def authority(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def route(self, scheme: str = "https") -> Route:
        """Every path of this connection to the real host, the dialect detected as usual."""
        return make_route(ROUTE_NAME, ("/*",), f"{scheme}://{self.authority}")


class InterceptContext(ssl.SSLContext):
    """A server-side TLS context for one destination, and that destination's route."""

    destination: Destination
    route: Route
    minted_at: datetime.datetime  # when its leaf was signed


def intercepted_route(sslcontext: object) -> Route | None:
    """The route of a connection the intercept listener terminated, else None."""
    return sslcontext.route if isinstance(sslcontext, InterceptContext) else None


def transport_route(transport: Any) -> Route | None:
    """The route of a connection the intercept listener handed over, TLS or plain, else None."""
    route = transport.get_extra_info(ROUTE_EXTRA)
    if isinstance(route, Route):
        return route
    return intercepted_route(transport.get_extra_info("sslcontext"))
