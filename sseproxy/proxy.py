"""The aiohttp shell's public face; the shell itself lives in `sseproxy.shell`."""

from __future__ import annotations

from .shell.app import OWN_PREFIX, SETTINGS, STATE, ProxyState, create_app, is_loopback

__all__ = [
    "OWN_PREFIX",
    "SETTINGS",
    "STATE",
    "ProxyState",
    "create_app",
    "is_loopback",
]
