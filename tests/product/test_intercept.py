"""Intercept mode through the installed `sseproxy` command: SDK clients given only an HTTPS
proxy and the proxy's CA (as `sseproxy ca` tells them), a TLS "provider" reached as
`localhost` (a trustme certificate, the proxy told to trust that CA upstream), on both event
loops. The records must say what the reverse proxy's say for the same streams."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import websockets
from google import genai
from google.genai import types

from tests.product.fake_provider import FakeProvider
from tests.product.proxy_process import ProxyProcess, start_proxy
from tests.product.tls_front import Egress, Fronts
from tests.record_contract import VALIDATOR

pytestmark = pytest.mark.product
CLIENT_TIMEOUT = 30.0
# What differs between two requests for the same stream whichever way they came: identity,
# clocks, and where the route says they went.
VARYING = {"timestamp", "request_id", "upstream_request_id", "route", "upstream", "level"}


def varying(field: str) -> bool:
    """Clock readings, and rates from them (a single write has no rate)."""
    return (
        field in VARYING
        or field.endswith(("_ms", "_at"))
        or field.startswith("output_tokens_per_s")
    )


@pytest.fixture(scope="module")
def trusted(fake: FakeProvider) -> Iterator[Fronts]:
    fronts = Fronts(int(fake.url.rsplit(":", 1)[1])).start()
    yield fronts
    fronts.stop()


@pytest.fixture(scope="module")
def untrusted(fake: FakeProvider) -> Iterator[Fronts]:
    """The same provider behind a certificate from a CA the proxy was not told to trust."""
    fronts = Fronts(int(fake.url.rsplit(":", 1)[1])).start()
    yield fronts
    fronts.stop()


@pytest.fixture(scope="module")
def intercepting(
    fake: FakeProvider,
    loop: str | None,
    trusted: Fronts,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ProxyProcess]:
    folder = tmp_path_factory.mktemp("intercept")
    upstream_ca = folder / "upstream-ca.pem"
    trusted.ca.cert_pem.write_to_path(str(upstream_ca))
    args = [
        "--intercept-listen",
        "127.0.0.1:0",
        "--intercept-host",
        "localhost",
        "--upstream-ca-file",
        str(upstream_ca),
        "--ca-dir",
        str(folder / "ca"),
    ]
    process = start_proxy(folder, fake.url, loop, args)
    yield process
    process.stop()


def proxy_address(process: ProxyProcess) -> str:
    return f"http://{process.started['intercept_listen']}"


def client_tls(process: ProxyProcess) -> ssl.SSLContext:
    """What SSL_CERT_FILE gives httpx: a context trusting the proxy's CA."""
    return ssl.create_default_context(cafile=process.started["intercept_ca"])


def http_client(process: ProxyProcess) -> httpx.AsyncClient:
    return httpx.AsyncClient(proxy=proxy_address(process), verify=client_tls(process))


async def chat(client: openai.AsyncOpenAI, name: str) -> tuple[str, str | None]:
    text, finish = "", None
    try:
        async with asyncio.timeout(CLIENT_TIMEOUT):
            stream = await client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "hi"}], stream=True
            )
            async for chunk in stream:
                for choice in chunk.choices:
                    if choice.index == 0:
                        text += choice.delta.content or ""
                        finish = choice.finish_reason or finish
    finally:
        await client.close()
    return text, finish


def same_content(reverse: dict[str, Any], intercepted: dict[str, Any]) -> None:
    left = {k: v for k, v in reverse.items() if not varying(k)}
    right = {k: v for k, v in intercepted.items() if not varying(k)}
    assert right == left


async def test_openai_sdk_through_https_proxy(
    intercepting: ProxyProcess, trusted: Fronts, fake: FakeProvider
) -> None:
    name = f"ok-{uuid.uuid4().hex[:10]}"
    base = f"https://localhost:{trusted.tls_port}/v1"
    got = await chat(
        openai.AsyncOpenAI(
            base_url=base, api_key="sk-test", max_retries=0, http_client=http_client(intercepting)
        ),
        name,
    )
    reverse = await chat(
        openai.AsyncOpenAI(base_url=intercepting.url + "/v1", api_key="sk-test", max_retries=0),
        name,
    )
    assert got == reverse and got[0] and got[1]
    records = await intercepting.wait_records(lambda r: r.get("model") == name, n=2)
    by_route = {r["route"]: r for r in records}
    assert set(by_route) == {"intercept", "openai"}
    assert by_route["intercept"]["upstream"] == f"https://localhost:{trusted.tls_port}"
    assert (by_route["intercept"]["dialect"], by_route["intercept"]["state"]) == (
        "openai-chat",
        "completed",
    )
    same_content(by_route["openai"], by_route["intercept"])


async def anthropic_message(client: anthropic.AsyncAnthropic, name: str) -> Any:
    try:
        async with (
            asyncio.timeout(CLIENT_TIMEOUT),
            client.messages.stream(
                model=name, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            ) as stream,
        ):
            return await stream.get_final_message()
    finally:
        await client.close()


async def test_anthropic_sdk_through_https_proxy(
    intercepting: ProxyProcess, trusted: Fronts
) -> None:
    name = f"ok-{uuid.uuid4().hex[:10]}"
    got = await anthropic_message(
        anthropic.AsyncAnthropic(
            base_url=f"https://localhost:{trusted.tls_port}",
            api_key="k",
            max_retries=0,
            http_client=anthropic.DefaultAsyncHttpxClient(
                proxy=proxy_address(intercepting), verify=client_tls(intercepting)
            ),
        ),
        name,
    )
    reverse = await anthropic_message(
        anthropic.AsyncAnthropic(base_url=intercepting.url, api_key="k", max_retries=0), name
    )
    assert got.model_dump() == reverse.model_dump()
    records = await intercepting.wait_records(lambda r: r.get("model") == name, n=2)
    by_route = {r["route"]: r for r in records}
    assert set(by_route) == {"intercept", "anthropic"}
    assert by_route["intercept"]["dialect"] == "anthropic-messages"
    assert by_route["intercept"]["state"] == "completed"
    same_content(by_route["anthropic"], by_route["intercept"])


async def test_openai_sdk_through_http_proxy_to_a_plain_http_host(
    intercepting: ProxyProcess, fake: FakeProvider
) -> None:
    """httpx given a proxy sends an http:// URL's request in absolute-form: the listener
    gives it to the same handler, recorded with the real host's http:// upstream."""
    name = f"ok-{uuid.uuid4().hex[:10]}"
    port = int(fake.url.rsplit(":", 1)[1])
    got = await chat(
        openai.AsyncOpenAI(
            base_url=f"http://localhost:{port}/v1",
            api_key="sk-test",
            max_retries=0,
            http_client=httpx.AsyncClient(proxy=proxy_address(intercepting)),
        ),
        name,
    )
    reverse = await chat(
        openai.AsyncOpenAI(base_url=intercepting.url + "/v1", api_key="sk-test", max_retries=0),
        name,
    )
    assert got == reverse and got[0] and got[1]
    records = await intercepting.wait_records(lambda r: r.get("model") == name, n=2)
    by_route = {r["route"]: r for r in records}
    assert set(by_route) == {"intercept", "openai"}
    assert by_route["intercept"]["upstream"] == f"http://localhost:{port}"
    same_content(by_route["openai"], by_route["intercept"])


def connect_lines(process: ProxyProcess, **match: Any) -> list[dict[str, Any]]:
    return [
        r
        for r in process.records()
        if r.get("event") == "connect.finished" and all(r.get(k) == v for k, v in match.items())
    ]


async def wait_connect_line(process: ProxyProcess, **match: Any) -> dict[str, Any]:
    async with asyncio.timeout(20):
        while not (found := connect_lines(process, **match)):
            await asyncio.sleep(0.02)
    [line] = found
    return line


async def open_connect(process: ProxyProcess, authority: str) -> tuple[Any, Any, bytes]:
    host, port = process.started["intercept_listen"].rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    return reader, writer, head


async def test_a_host_not_intercepted_is_tunnelled_byte_for_byte(
    intercepting: ProxyProcess, trusted: Fronts
) -> None:
    """127.0.0.1 is not an intercepted host: its bytes pass untouched, both ways, with flow
    control (4 MiB, more than the tunnel buffers), and one line says so."""
    payload = os.urandom(4 * 1024 * 1024)
    authority = f"127.0.0.1:{trusted.echo_port}"
    async with asyncio.timeout(CLIENT_TIMEOUT):
        reader, writer, head = await open_connect(intercepting, authority)
        assert head == b"HTTP/1.1 200 Connection established\r\n\r\n"

        async def send() -> None:
            writer.write(payload)
            await writer.drain()

        sending = asyncio.ensure_future(send())
        echoed = await reader.readexactly(len(payload))
        await sending
        writer.close()
    assert echoed == payload
    line = await wait_connect_line(intercepting, port=trusted.echo_port, mode="tunnel")
    assert (line["host"], line["outcome"], line["closed_by"]) == ("127.0.0.1", "closed", "client")
    assert line["bytes_up"] == line["bytes_down"] == len(payload)
    assert not list(VALIDATOR.iter_errors(line))  # a record of the schema


async def test_an_upstream_certificate_that_does_not_verify_is_refused(
    intercepting: ProxyProcess, untrusted: Fronts
) -> None:
    name = f"ok-{uuid.uuid4().hex[:10]}"
    client = openai.AsyncOpenAI(
        base_url=f"https://localhost:{untrusted.tls_port}/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=http_client(intercepting),
    )
    with pytest.raises(openai.APIStatusError) as raised:
        await chat(client, name)
    assert raised.value.status_code == 502
    [record] = await intercepting.wait_records(lambda r: r.get("model") == name)
    assert (record["route"], record["status"], record["answered_by"]) == ("intercept", 502, "proxy")
    assert record["error"]["type"] == "sseproxy_upstream_unreachable"
    assert "CERTIFICATE_VERIFY_FAILED" in record["error"]["message"]
    assert record["interruption"]["reason"] == "upstream_unreachable"


def refuse_in_a_thread(listen: str, authority: str) -> None:
    """A blocking client (its TLS alert is written before it gives up, as curl's, Node's and
    rustls' are) that does not trust the proxy's CA."""
    host, port = listen.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=CLIENT_TIMEOUT) as sock:
        sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += sock.recv(1)
        assert head.startswith(b"HTTP/1.1 200")
        refusing = ssl.create_default_context()  # the system's CAs: not the proxy's
        with pytest.raises(ssl.SSLCertVerificationError):
            refusing.wrap_socket(sock, server_hostname="localhost")


async def test_a_client_that_refuses_the_ca_is_recorded(
    intercepting: ProxyProcess, trusted: Fronts
) -> None:
    authority = f"localhost:{trusted.tls_port}"
    await asyncio.to_thread(refuse_in_a_thread, intercepting.started["intercept_listen"], authority)
    line = await wait_connect_line(intercepting, port=trusted.tls_port, mode="intercept")
    assert (line["host"], line["outcome"]) == ("localhost", "tls_client_refused_certificate")
    assert "UNKNOWN_CA" in line["error"]


async def test_a_client_that_hangs_up_in_the_handshake_is_recorded(
    intercepting: ProxyProcess, untrusted: Fronts
) -> None:
    """asyncio's client drops the connection without its alert: the handshake failed, and the
    line says the likely cause."""
    authority = f"localhost:{untrusted.tls_port}"
    async with asyncio.timeout(CLIENT_TIMEOUT):
        _, writer, head = await open_connect(intercepting, authority)
        assert head.startswith(b"HTTP/1.1 200")
        with pytest.raises(ssl.SSLCertVerificationError):
            await writer.start_tls(ssl.create_default_context(), server_hostname="localhost")
        writer.close()
    line = await wait_connect_line(intercepting, port=untrusted.tls_port, mode="intercept")
    assert (line["host"], line["outcome"]) == ("localhost", "tls_handshake_failed")
    assert "does it trust the sseproxy CA?" in line["hint"]


def test_ca_dir_holds_a_private_key(intercepting: ProxyProcess) -> None:
    ca_file = Path(intercepting.started["intercept_ca"])
    key = ca_file.with_name("sseproxy-ca-key.pem")
    assert key.stat().st_mode & 0o077 == 0
    assert "PRIVATE KEY" not in "".join(json.dumps(r) for r in intercepting.records())


@pytest.mark.skipif(
    int(websockets.__version__.split(".")[0]) < 15,
    reason="websockets' client reaches an HTTP proxy from 15.0 (the floor run has 13.0)",
)
async def test_a_websocket_session_through_the_intercept(
    intercepting: ProxyProcess, trusted: Fronts, fake: FakeProvider
) -> None:
    """`websockets` (15: HTTP proxies through CONNECT) to wss://localhost: the session is
    relayed and judged as through the reverse proxy, its route the intercepted host."""
    key = uuid.uuid4().hex
    got = []
    url = f"wss://localhost:{trusted.tls_port}/v1/echo?id={key}"
    async with asyncio.timeout(CLIENT_TIMEOUT):
        async with websockets.connect(
            url, proxy=proxy_address(intercepting), ssl=client_tls(intercepting)
        ) as ws:
            got.append(await ws.recv())
            await ws.send("ping ü 1")
            got.append(await ws.recv())
            await ws.send("bye")
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.recv()
    assert got == ["hello", "echo: ping ü 1"]
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4000, "done")
    assert (await asyncio.to_thread(fake.session, key)).received == ["ping ü 1", "bye"]
    [session] = await intercepting.wait_records(
        lambda r: r["event"] == "session.finished" and r["path"] == f"/v1/echo?id={key}"
    )
    assert (session["dialect"], session["route"], session["turns"]) == ("websocket", "intercept", 0)
    assert (session["close_code"], session["closed_by"]) == (4000, "upstream")
    assert session["messages"] == {"client": 2, "upstream": 2}


NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="needs Node.js")
async def test_a_node_client_trusting_the_ca_from_node_extra_ca_certs(
    intercepting: ProxyProcess, trusted: Fronts, fake: FakeProvider
) -> None:
    """Node's OpenSSL and its own trust store plus NODE_EXTRA_CA_CERTS: the leaf verifies,
    ALPN settles on http/1.1 though h2 was offered first, and the stream is recorded."""
    assert NODE is not None
    name = f"ok-{uuid.uuid4().hex[:10]}"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "NODE_EXTRA_CA_CERTS": intercepting.started["intercept_ca"],
        "PROXY_ADDRESS": intercepting.started["intercept_listen"],
        "TARGET": f"localhost:{trusted.tls_port}",
        "MODEL": name,
    }
    script = Path(__file__).with_name("node_connect.js")
    process = await asyncio.create_subprocess_exec(
        NODE, str(script), env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(CLIENT_TIMEOUT):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    got = json.loads(out)
    assert (got["status"], got["alpn"]) == (200, "http/1.1")
    assert got["body"].rstrip().endswith("data: [DONE]")
    [record] = await intercepting.wait_records(lambda r: r.get("model") == name)
    assert (record["route"], record["dialect"], record["state"]) == (
        "intercept",
        "openai-chat",
        "completed",
    )
    assert record["bytes"] == len(got["body"].encode())


async def test_a_tunnel_open_at_shutdown_is_closed_and_written_before_the_proxy_stops(
    fake: FakeProvider, loop: str | None, trusted: Fronts, tmp_path: Path
) -> None:
    args = ["--intercept-listen", "127.0.0.1:0", "--ca-dir", str(tmp_path / "ca")]
    process = start_proxy(tmp_path, fake.url, loop, args)
    try:
        async with asyncio.timeout(CLIENT_TIMEOUT):
            reader, writer, head = await open_connect(process, f"127.0.0.1:{trusted.echo_port}")
            assert head.startswith(b"HTTP/1.1 200")
            writer.write(b"abc")
            assert await reader.readexactly(3) == b"abc"
            process.send(signal.SIGTERM)
            assert await reader.read() == b""  # the proxy closed the tunnel
            writer.close()
        assert await process.wait_exit() == 0
        events = [r.get("event") for r in process.records()]
        assert events.index("connect.finished") < events.index("proxy.stopped")
        [line] = connect_lines(process, mode="tunnel")
        assert (line["closed_by"], line["bytes_up"], line["bytes_down"]) == ("proxy", 3, 3)
    finally:
        process.stop()


def gemini_text_sync(base_url: str, name: str, client_args: dict[str, Any] | None) -> str:
    """google-genai's sync client (httpx); `client_args`: the proxy and the CA."""
    client = genai.Client(
        api_key="gk-test",
        http_options=types.HttpOptions(base_url=base_url, client_args=client_args),
    )
    try:
        stream = client.models.generate_content_stream(model=name, contents="hi")
        return "".join(chunk.text or "" for chunk in stream)
    finally:
        client.close()


async def test_google_genai_through_https_proxy(
    intercepting: ProxyProcess, trusted: Fronts
) -> None:
    name = f"ok-{uuid.uuid4().hex[:10]}"
    base = f"https://localhost:{trusted.tls_port}"
    through = {"proxy": proxy_address(intercepting), "verify": client_tls(intercepting)}
    async with asyncio.timeout(CLIENT_TIMEOUT):
        got = await asyncio.to_thread(gemini_text_sync, base, name, through)
        reverse = await asyncio.to_thread(gemini_text_sync, intercepting.url, name, None)
    assert got == reverse and got
    records = await intercepting.wait_records(lambda r: r.get("model") == name, n=2)
    by_route = {r["route"]: r for r in records}
    assert set(by_route) == {"intercept", "gemini"}
    assert (by_route["intercept"]["dialect"], by_route["intercept"]["state"]) == (
        "gemini",
        "completed",
    )
    same_content(by_route["gemini"], by_route["intercept"])


async def test_tunnels_and_intercepted_requests_go_through_the_processs_egress_proxy(
    fake: FakeProvider, loop: str | None, trusted: Fronts, tmp_path: Path
) -> None:
    """HTTPS_PROXY in the proxy's own environment: the intercepted request's upstream leg and
    a tunnel both reach their hosts by a CONNECT to it."""
    upstream_ca = tmp_path / "upstream-ca.pem"
    trusted.ca.cert_pem.write_to_path(str(upstream_ca))
    egress = Egress().start()
    args = ["--intercept-listen", "127.0.0.1:0", "--intercept-host", "localhost"]
    args += ["--upstream-ca-file", str(upstream_ca), "--ca-dir", str(tmp_path / "ca")]
    environ = {"HTTPS_PROXY": egress.url, "NO_PROXY": "", "no_proxy": "", "https_proxy": ""}
    process: ProxyProcess | None = None
    try:
        process = start_proxy(tmp_path, fake.url, loop, args, environ=environ)
        name = f"ok-{uuid.uuid4().hex[:10]}"
        got = await chat(
            openai.AsyncOpenAI(
                base_url=f"https://localhost:{trusted.tls_port}/v1",
                api_key="sk-test",
                max_retries=0,
                http_client=http_client(process),
            ),
            name,
        )
        assert got[0] and got[1]
        [record] = await process.wait_records(lambda r: r.get("model") == name)
        assert (record["route"], record["state"]) == ("intercept", "completed")
        async with asyncio.timeout(CLIENT_TIMEOUT):
            reader, writer, head = await open_connect(process, f"127.0.0.1:{trusted.echo_port}")
            assert head.startswith(b"HTTP/1.1 200")
            writer.write(b"abc")
            assert await reader.readexactly(3) == b"abc"
            writer.close()
        line = await wait_connect_line(process, port=trusted.echo_port, mode="tunnel")
    finally:
        if process is not None:
            process.stop()
        egress.stop()
    assert line["egress"] == egress.url
    targets = [h.split(b" ")[1].decode() for h in egress.heads]
    assert f"localhost:{trusted.tls_port}" in targets  # the intercepted upstream leg
    assert f"127.0.0.1:{trusted.echo_port}" in targets  # the tunnel
