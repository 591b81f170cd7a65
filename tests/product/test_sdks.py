"""The official SDKs, as an app uses them, through the installed `sseproxy` command on its
defaults (default event loop, JSON lines to a pipe, the bundled routes) in front of a fake
provider: what each client got, and the records the process wrote on stdout."""

from __future__ import annotations

import asyncio
import ssl
import uuid
from typing import Any

import anthropic
import openai
import pytest
import trustme
import websockets
from google import genai
from google.genai import types

from tests.product.fake_provider import FakeProvider
from tests.product.proxy_process import ProxyProcess

pytestmark = pytest.mark.product
# Seconds any one client exchange may take: far above what it needs, only so nothing hangs.
CLIENT_TIMEOUT = 30.0


def model(kind: str) -> str:
    """A model name of this test's own: `kind` is the fake's scenario."""
    return f"{kind}-{uuid.uuid4().hex[:10]}"


def asked(name: str) -> Any:
    return lambda r: r.get("model") == name


async def chat(base_url: str, name: str) -> tuple[str, str | None]:
    """Chat Completions streamed: the text of choice 0 and its finish reason."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
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


async def test_openai_chat_stream(proxy: ProxyProcess, fake: FakeProvider) -> None:
    name = model("ok")
    direct = await chat(fake.url + "/v1", name)
    assert await chat(proxy.url + "/v1", name) == direct
    assert direct[0] and direct[1]
    [record] = await proxy.wait_records(asked(name))
    assert (record["route"], record["dialect"], record["status"]) == ("openai", "openai-chat", 200)
    assert (record["state"], record["finish_reason"]) == ("completed", direct[1])
    assert record["text_chars"] == len(direct[0])


async def test_openai_chat_cut_mid_stream(proxy: ProxyProcess, fake: FakeProvider) -> None:
    """The fake drops the connection halfway: the SDK raises or ends short, and the record
    says the stream was interrupted by the upstream."""
    full, _ = await chat(fake.url + "/v1", model("ok"))
    name = model("cut")
    text = ""
    client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-test", max_retries=0)
    raised = None
    try:
        async with asyncio.timeout(CLIENT_TIMEOUT):
            stream = await client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "hi"}], stream=True
            )
            async for chunk in stream:
                text += "".join(c.delta.content or "" for c in chunk.choices if c.index == 0)
    except TimeoutError:
        raise
    except Exception as exc:  # what an app sees: a raised error, or a short text
        raised = exc
    finally:
        await client.close()
    assert full.startswith(text) and len(text) < len(full), (text, full, raised)
    [record] = await proxy.wait_records(asked(name))
    assert (record["state"], record["interruption"]["reason"]) == (
        "interrupted",
        "upstream_closed",
    )
    assert (record["http_complete"], record["finish_reason"]) == (False, None)
    assert record["text_chars"] == len(text)


async def test_openai_responses_stream(proxy: ProxyProcess) -> None:
    name = model("ok")
    client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-test", max_retries=0)
    text, final = "", None
    try:
        async with asyncio.timeout(CLIENT_TIMEOUT):
            stream = await client.responses.create(model=name, input="hi", stream=True)
            async for event in stream:
                if event.type == "response.output_text.delta":
                    text += event.delta
                if event.type == "response.completed":
                    final = event.response
    finally:
        await client.close()
    assert final is not None and text == final.output_text and text
    [record] = await proxy.wait_records(asked(name))
    assert (record["dialect"], record["state"], record["route"]) == (
        "openai-responses",
        "completed",
        "openai",
    )
    assert record["text_chars"] == len(text)
    assert final.usage is not None
    assert record["usage"]["output_tokens"] == final.usage.output_tokens


async def test_openai_realtime_connect(proxy: ProxyProcess) -> None:
    name = model("ok")
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=proxy.url + "/v1", max_retries=0)
    text, status = "", None
    async with asyncio.timeout(CLIENT_TIMEOUT), client.realtime.connect(model=name) as conn:
        await conn.response.create()
        async for event in conn:
            if event.type == "response.output_text.delta":
                text += event.delta
            elif event.type == "response.done":
                status = event.response.status
                break
    assert (text, status) == ("Hello", "completed")
    [turn] = await proxy.wait_records(lambda r: asked(name)(r) and "turn" in r)
    assert (turn["dialect"], turn["state"], turn["transport"], turn["turn"]) == (
        "openai-realtime",
        "completed",
        "websocket",
        1,
    )
    assert (turn["text_chars"], turn["usage"]["output_tokens"]) == (len(text), 2)
    [session] = await proxy.wait_records(
        lambda r: r["event"] == "session.finished" and r["session_id"] == turn["session_id"]
    )
    assert (session["route"], session["dialect"], session["turns"]) == (
        "openai",
        "openai-realtime",
        1,
    )
    assert (session["closed_by"], session["close_code"]) == ("client", 1000)


async def test_openai_responses_connect(proxy: ProxyProcess) -> None:
    """The Responses API's WebSocket mode (`client.responses.connect()`)."""
    name = model("ok")
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=proxy.url + "/v1", max_retries=0)
    text, status = "", None
    async with asyncio.timeout(CLIENT_TIMEOUT), client.responses.connect() as conn:
        await conn.response.create(model=name, input="hi")
        async for event in conn:
            if event.type == "response.output_text.delta":
                text += event.delta
            elif event.type == "response.completed":
                status = event.response.status
                break
    assert (text, status) == ("Hi!", "completed")
    [turn] = await proxy.wait_records(asked(name))
    assert (turn["dialect"], turn["state"], turn["transport"]) == (
        "openai-responses",
        "completed",
        "websocket",
    )
    assert (turn["text_chars"], turn["usage"]["output_tokens"]) == (3, 1)
    [session] = await proxy.wait_records(
        lambda r: r["event"] == "session.finished" and r["session_id"] == turn["session_id"]
    )
    assert (session["route"], session["turns"], session["closed_by"]) == ("openai", 1, "client")


async def anthropic_message(base_url: str, name: str) -> Any:
    client = anthropic.AsyncAnthropic(base_url=base_url, api_key="k", max_retries=0)
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


async def test_anthropic_messages_stream(proxy: ProxyProcess, fake: FakeProvider) -> None:
    name = model("ok")
    direct = await anthropic_message(fake.url, name)
    message = await anthropic_message(proxy.url, name)
    assert message.model_dump() == direct.model_dump()
    text = "".join(b.text for b in message.content if b.type == "text")
    assert text and message.stop_reason
    [record] = await proxy.wait_records(asked(name))
    assert (record["route"], record["dialect"], record["state"]) == (
        "anthropic",
        "anthropic-messages",
        "completed",
    )
    assert record["finish_reason"] == message.stop_reason
    assert (record["text_chars"], record["usage"]["output_tokens"]) == (
        len(text),
        message.usage.output_tokens,
    )


async def test_anthropic_overloaded_after_200(proxy: ProxyProcess) -> None:
    """An `overloaded_error` event after HTTP 200: the SDK raises, and the record is not
    `completed` although the status was 200."""
    name = model("overloaded")
    client = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.APIError, match="Overloaded"):
        try:
            async with asyncio.timeout(CLIENT_TIMEOUT):
                stream = await client.messages.create(
                    model=name,
                    max_tokens=10,
                    messages=[{"role": "user", "content": "hi"}],
                    stream=True,
                )
                async for _ in stream:
                    pass
        finally:
            await client.close()
    [record] = await proxy.wait_records(asked(name))
    assert (record["state"], record["status"], record["error"]["type"]) == (
        "failed",
        200,
        "overloaded_error",
    )


async def gemini_text(base_url: str, name: str) -> str:
    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=base_url))
    text = ""
    async with asyncio.timeout(CLIENT_TIMEOUT), client.aio as aio:
        async for chunk in await aio.models.generate_content_stream(model=name, contents="hi"):
            text += chunk.text or ""
    return text


async def test_gemini_generate_content_stream(proxy: ProxyProcess, fake: FakeProvider) -> None:
    name = model("ok")
    direct = await gemini_text(fake.url, name)
    assert await gemini_text(proxy.url, name) == direct and direct
    [record] = await proxy.wait_records(asked(name))
    assert (record["route"], record["dialect"], record["state"]) == (
        "gemini",
        "gemini",
        "completed",
    )
    assert record["text_chars"] == len(direct)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def test_gemini_live_connect(proxy: ProxyProcess) -> None:
    """google-genai's Live client always opens TLS (wss://): as docs/providers.md says, it reaches the
    proxy through a TLS terminator in front of it, here one in the test."""
    ca = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_tls)
    client_tls = ssl.create_default_context()
    ca.configure_trust(client_tls)
    port = int(proxy.url.rsplit(":", 1)[1])

    async def terminate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    front = await asyncio.start_server(terminate, "127.0.0.1", 0, ssl=server_tls)
    front_port = front.sockets[0].getsockname()[1]
    name = model("ok")
    client = genai.Client(
        api_key="gk-test",
        http_options=types.HttpOptions(
            base_url=f"https://127.0.0.1:{front_port}", async_client_args={"ssl": client_tls}
        ),
    )
    text = ""
    try:
        async with (
            asyncio.timeout(CLIENT_TIMEOUT),
            client.aio.live.connect(model=name, config={"response_modalities": ["TEXT"]}) as live,
        ):
            await live.send_client_content(turns={"role": "user", "parts": [{"text": "hi"}]})
            async for message in live.receive():
                text += message.text or ""
                if message.server_content and message.server_content.turn_complete:
                    break
    finally:
        front.close()
        await client.aio.aclose()
    assert text == "Hi there"
    [turn] = await proxy.wait_records(asked(name))
    assert (turn["dialect"], turn["state"], turn["transport"]) == (
        "gemini-live",
        "completed",
        "websocket",
    )
    assert (turn["text_chars"], turn["usage"]["output_tokens"]) == (len(text), 2)
    [session] = await proxy.wait_records(
        lambda r: r["event"] == "session.finished" and r["session_id"] == turn["session_id"]
    )
    assert (session["route"], session["turns"], session["closed_by"]) == ("gemini", 1, "client")


async def test_plain_websocket_session(proxy: ProxyProcess, fake: FakeProvider) -> None:
    """A `websockets` client on a path no dialect knows: text both ways, relayed exactly, and
    the upstream's close code and reason reach the client."""
    key = uuid.uuid4().hex
    got = []
    async with asyncio.timeout(CLIENT_TIMEOUT):
        async with websockets.connect(f"ws{proxy.url[4:]}/v1/echo?id={key}") as ws:
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
    [session] = await proxy.wait_records(
        lambda r: r["event"] == "session.finished" and r["path"] == f"/v1/echo?id={key}"
    )
    assert (session["dialect"], session["route"], session["turns"]) == ("websocket", "openai", 0)
    assert (session["close_code"], session["close_reason"], session["closed_by"]) == (
        4000,
        "done",
        "upstream",
    )
    assert session["messages"] == {"client": 2, "upstream": 2}
