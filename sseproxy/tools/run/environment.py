"""What `sseproxy run` gives the command: the base-URL variables the supported clients read,
and for Codex, which reads none for a provider that can use the WebSocket, `-c` overrides.
With `--intercept`, instead: the HTTPS proxy and CA variables of `sseproxy ca`, and no base
URL, so that every client goes where it would go anyway, through the intercept listener."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# The variable, and the path after the proxy's address its client wants (the bundled routes
# keep the providers' own paths: /v1/... for OpenAI, /v1/messages for Anthropic, /v1beta/...
# for Gemini).
BASE_URL_VARIABLES = (
    ("OPENAI_BASE_URL", "/v1"),  # openai SDKs, Qwen Code, llm
    ("OPENAI_API_BASE", "/v1"),  # aider (litellm), older openai SDKs, LangChain
    ("ANTHROPIC_BASE_URL", ""),  # anthropic SDKs, Claude Code
    ("GOOGLE_GEMINI_BASE_URL", ""),  # google-genai, Gemini CLI
)
# The proxy's own address, for scripts of the user's.
PROXY_VARIABLE = "SSEPROXY_URL"
# Loopback must not go through an HTTP proxy the user's environment names.
NO_PROXY_HOSTS = ("127.0.0.1", "localhost")
# Codex: a provider of its own (it refuses to change its built-in `openai` one) with the
# Responses API over its WebSocket mode, which Codex opens only when the provider says so.
CODEX_PROVIDER = "sseproxy"
CODEX_KEY_VARIABLE = "OPENAI_API_KEY"


# Set in both spellings: Python's urllib and curl prefer the lower-case one when both are set.
LOWER_CASE_TOO = ("HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@dataclass(frozen=True, slots=True)
class Interception:
    """The proxy's intercept listener, as its `proxy.started` record names it, and the bundle
    (the system's CAs and the proxy's) for clients that replace their trust store."""

    listen: str  # HOST:PORT, bound
    ca_file: Path
    bundle: Path
    hosts: frozenset[str]


@dataclass(frozen=True, slots=True)
class Launch:
    """The command as it is started, and the environment it gets."""

    argv: list[str]
    env: dict[str, str]
    set: tuple[str, ...]  # the variables set, for the line printed at the start


def client_environment(base: str, environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """`environ` with every base-URL variable pointing at the proxy at `base`
    (http://127.0.0.1:PORT), loopback exempted from any HTTP proxy; and the names set."""
    env = dict(environ)
    names = []
    for name, path in BASE_URL_VARIABLES:
        env[name] = base + path
        names.append(name)
    env[PROXY_VARIABLE] = base
    for name in ("NO_PROXY", "no_proxy"):
        hosts = [h for h in env.get(name, "").split(",") if h.strip()]
        env[name] = ",".join([*hosts, *(h for h in NO_PROXY_HOSTS if h not in hosts)])
    return env, names


def exempts(entry: str, host: str) -> bool:
    """Whether a NO_PROXY entry sends `host` around the proxy, as curl, Python and Go read it:
    `*`, the host itself, or a domain it is under (`example.com`, `.example.com`)."""
    entry = entry.strip().lower().removeprefix("*")
    if entry == "":
        return True
    domain = entry.removeprefix(".")
    return host == domain or host.endswith("." + domain)


def intercept_environment(
    interception: Interception, base: str, environ: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """`environ` with the variables `sseproxy ca` advises (the intercept listener as the HTTPS
    proxy, the CA to trust), the entries of NO_PROXY that would exempt an intercepted host
    left out and loopback added; and the names set. The base URLs are the user's own."""
    from sseproxy.intercept import advice  # cryptography: only when intercepting

    env = dict(environ)
    env[PROXY_VARIABLE] = base
    names = []
    variables = advice.client_environment(
        interception.ca_file, interception.bundle, interception.listen, interception.hosts
    )
    for variable in variables:
        spellings = [variable.name]
        if variable.name in LOWER_CASE_TOO:
            spellings.append(variable.name.lower())
        for name in spellings:
            value = variable.value
            if variable.name == "NO_PROXY":
                value = _no_proxy(env.get(name, ""), value, interception.hosts)
            env[name] = value
        if variable.name.isupper():  # `http_proxy` is HTTP_PROXY's other spelling
            names.append(variable.name)
    return env, names


def _no_proxy(given: str, loopback: str, intercepted: frozenset[str]) -> str:
    entries = [e.strip() for e in given.split(",") if e.strip()]
    kept = [e for e in entries if not any(exempts(e, host) for host in intercepted)]
    return ",".join([*kept, *(n for n in loopback.split(",") if n and n not in kept)])


def codex_overrides(base: str) -> list[str]:
    """`-c` arguments that make Codex use the proxy, over its WebSocket and HTTP alike."""
    prefix = f"model_providers.{CODEX_PROVIDER}"
    return [
        *("-c", f'model_provider="{CODEX_PROVIDER}"'),
        *("-c", f'{prefix}.name="OpenAI through sseproxy"'),
        *("-c", f'{prefix}.base_url="{base}/v1"'),
        *("-c", f'{prefix}.wire_api="responses"'),
        *("-c", f"{prefix}.supports_websockets=true"),
        *("-c", f'{prefix}.env_key="{CODEX_KEY_VARIABLE}"'),
    ]


def is_codex(argv: Sequence[str]) -> bool:
    return bool(argv) and os.path.basename(argv[0]) in ("codex", "codex.exe")


def launch(
    argv: Sequence[str],
    base: str,
    environ: Mapping[str, str],
    interception: Interception | None = None,
) -> Launch:
    command = list(argv)
    if interception is not None:  # Codex keeps its own provider: a ChatGPT login works
        env, names = intercept_environment(interception, base, environ)
        return Launch(command, env, tuple(names))
    env, names = client_environment(base, environ)
    if is_codex(command):
        command = [command[0], *codex_overrides(base), *command[1:]]
        names.append(f"codex -c model_provider={CODEX_PROVIDER}")
    return Launch(command, env, tuple(names))
