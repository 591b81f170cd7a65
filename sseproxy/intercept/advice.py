"""`sseproxy ca`: the CA's file and fingerprint, and the environment each client family needs
to send its traffic through the intercept listener and trust the CA.

Clients trust a CA only from their own variables. Some add a file to the trust store they
have (`NODE_EXTRA_CA_CERTS`); others replace that store with the file (`SSL_CERT_FILE`,
`REQUESTS_CA_BUNDLE`), and would then refuse every host that is tunnelled, not intercepted.
Those are given a bundle: the system's CAs (or certifi's) followed by this one.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from sseproxy.intercept.ca import Authority

BUNDLE = "sseproxy-ca-bundle.pem"
# Where the proxy is reached when intercept_listen is not set yet (shown, not listened on).
SUGGESTED_LISTEN = "127.0.0.1:8791"
# Loopback bypasses the proxy: a local model server, the reverse proxy itself.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    value: str
    why: str  # which clients read it


def system_trust_file() -> Path | None:
    """The PEM file of the CAs this machine's OpenSSL trusts, else certifi's, else none."""
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile):
        if candidate and os.path.isfile(candidate):
            return Path(candidate)
    try:
        import certifi
    except ImportError:
        return None
    return Path(certifi.where())


def write_bundle(ca_cert: Path, system: Path | None) -> Path:
    """`system`'s CAs then the CA in `ca_cert`, in the CA's folder (rewritten each time: the
    system's store changes with updates)."""
    pem = ca_cert.read_bytes()
    base = system.read_bytes() if system is not None else b""
    path = ca_cert.parent / BUNDLE
    partial = ca_cert.parent / (BUNDLE + ".partial")
    partial.write_bytes(base.rstrip(b"\n") + b"\n" + pem if base else pem)
    partial.replace(path)
    return path


def proxy_url(listen: str) -> str:
    host, _, port = (listen or SUGGESTED_LISTEN).rpartition(":")
    host = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "": "127.0.0.1"}.get(host, host)
    return f"http://{host}:{port}"


def no_proxy(intercepted: frozenset[str] = frozenset()) -> str:
    """The loopback names, less any named for interception (a local stand-in for a provider,
    as the tests use, must go through the proxy to be intercepted)."""
    names = [n for n in LOOPBACK_NAMES if n not in intercepted and f"[{n}]" not in intercepted]
    return ",".join(names)


def client_environment(
    ca_file: Path, bundle: Path, listen: str, intercepted: frozenset[str] = frozenset()
) -> list[Variable]:
    """Every variable a client needs, in order (also what `sseproxy run --intercept` gives
    its child)."""
    proxy = proxy_url(listen)
    return [
        Variable("HTTPS_PROXY", proxy, "every client: where to send https traffic"),
        Variable("HTTP_PROXY", proxy, "every client: where to send http traffic"),
        Variable("http_proxy", proxy, "curl reads only this spelling for http:// URLs"),
        Variable("ALL_PROXY", proxy, "clients that read only this one (curl's fallback)"),
        Variable("NO_PROXY", no_proxy(intercepted), "every client: loopback stays direct"),
        Variable("NODE_EXTRA_CA_CERTS", str(ca_file), "Node, Bun, Claude Code (process env only)"),
        Variable("NODE_USE_ENV_PROXY", "1", "Node's built-in fetch reads HTTPS_PROXY only then"),
        Variable("SSL_CERT_FILE", str(bundle), "Codex, httpx (openai, anthropic SDKs), OpenSSL"),
        Variable("CODEX_CA_CERTIFICATE", str(bundle), "Codex"),
        Variable("REQUESTS_CA_BUNDLE", str(bundle), "requests"),
    ]


def render(
    authority: Authority,
    created: bool,
    bundle: Path,
    listen: str,
    env_only: bool,
    intercepted: frozenset[str] = frozenset(),
) -> str:
    variables = client_environment(authority.cert_path, bundle, listen, intercepted)
    exports = [f"export {v.name}={_quote(v.value)}" for v in variables]
    if env_only:
        return "\n".join(exports) + "\n"
    width = max(len(line) for line in exports)
    lines = [
        f"CA certificate:  {authority.cert_path}" + ("  (made just now)" if created else ""),
        f"SHA-256:         {authority.fingerprint}",
        f"CA plus system:  {bundle}",
        "",
    ]
    if not listen:
        lines.append(f"Start the proxy with --intercept-listen {SUGGESTED_LISTEN}, then set:")
    else:
        lines.append(f"The intercept listener is {listen}; in the client's environment set:")
    lines += [f"  {e.ljust(width)}  # {v.why}" for e, v in zip(exports, variables, strict=True)]
    lines += [
        "",
        "Nothing was installed into a system trust store. `sseproxy ca --env` prints only the",
        'export lines (eval "$(sseproxy ca --env)"). See docs/intercept.md for the limits.',
    ]
    return "\n".join(lines) + "\n"


def _quote(value: str) -> str:
    safe = all(c.isalnum() or c in "/._-:,+=@%" for c in value)
    return value if safe else "'" + value.replace("'", "'\\''") + "'"
