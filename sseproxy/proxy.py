"""The aiohttp shell's public face; the shell itself lives in `sseproxy.shell`."""

from __future__ import annotations

from .shell.app import OWN_PREFIX, SETTINGS, STATE, ProxyState, create_app, is_loopback
from .shell.tapping import request_model

__all__ = [
    "OWN_PREFIX",
    "SETTINGS",
    "STATE",
    "ProxyState",
    "create_app",
    "is_loopback",
    "request_model",
]
