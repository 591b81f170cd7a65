"""The official SDKs of the providers added in issue 13 (boto3 for Bedrock, cohere, openai's
AzureOpenAI), through the proxy on its default or documented routes, in front of a scripted
fake upstream sending real wire bytes: what the SDK assembles must agree with the record."""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import replace
from typing import Any

import pytest

from sseproxy.config import load, make_route
from sseproxy.core.eventstream import event, exception
from sseproxy.shell.app import create_app
from tests.corpus import file as corpus
from tests.integration.fake_upstream import Close, Script, Send

pytestmark = pytest.mark.e2e
boto3 = pytest.importorskip("boto3")
botocore = pytest.importorskip("botocore")
botocore_config = pytest.importorskip("botocore.config")
cohere = pytest.importorskip("cohere")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

EVENTSTREAM = "application/vnd.amazon.eventstream"
MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


def routes_to(fake_url: str, extra: tuple[Any, ...] = ()) -> Any:
    settings = load()
    routes = tuple(
        make_route(r.name, r.paths, fake_url + upstream_path(r.upstream), r.strip_prefix, r.dialect)
        for r in (*extra, *settings.routes)
    )
    return replace(settings, routes=routes)


def upstream_path(url: str) -> str:
    """Keep the upstream's own path (e.g. `/v1/openai`), change only its host."""
    parts = url.split("/", 3)
    return "/" + parts[3] if len(parts) > 3 else ""


@pytest.fixture
async def proxy_url(aiohttp_server, upstream, logs) -> str:
    _, fake_url = upstream
    server = await aiohttp_server(create_app(routes_to(fake_url)))
    return str(server.make_url("")).rstrip("/")


def serve(upstream, body: bytes, ctype: str, *, cut: bool = False, status: int = 200) -> None:
    fake, _ = upstream
    chunks: list[Any] = [Send(body[i : i + 29]) for i in range(0, len(body), 29)]
    if cut:
        chunks.append(Close())
    fake.script("*", Script(chunks, status=status, headers={"Content-Type": ctype}))


# -- AWS Bedrock -------------------------------------------------------------------------


def ev(name: str, **payload: Any) -> bytes:
    return event(name, json.dumps({**payload, "p": "abcd"}).encode())


def converse_stream(stop: str | None = "end_turn", tail: bytes = b"") -> bytes:
    parts = [
        ev("messageStart", role="assistant"),
        ev("contentBlockDelta", contentBlockIndex=0, delta={"text": "Bonjour, "}),
        ev("contentBlockDelta", contentBlockIndex=0, delta={"text": "le monde 🌍"}),
        ev("contentBlockStop", contentBlockIndex=0),
        ev(
            "contentBlockStart",
            contentBlockIndex=1,
            start={"toolUse": {"toolUseId": "tooluse_1", "name": "lookup"}},
        ),
        ev("contentBlockDelta", contentBlockIndex=1, delta={"toolUse": {"input": '{"q": '}}),
        ev("contentBlockDelta", contentBlockIndex=1, delta={"toolUse": {"input": '"x"}'}}),
        ev("contentBlockStop", contentBlockIndex=1),
    ]
    if stop is not None:
        parts += [
            ev("messageStop", stopReason=stop),
            ev(
                "metadata",
                usage={"inputTokens": 12, "outputTokens": 9, "totalTokens": 21},
                metrics={"latencyMs": 321},
            ),
        ]
    return b"".join(parts) + tail


TOKEN = "bedrock-api-key-test"


def bedrock_client(endpoint: str, inject: str | None = None) -> Any:
    """A Bedrock API key over plain HTTP: botocore refuses its own bearer auth without HTTPS,
    so the client is unsigned and the key goes in the header (as docs/providers.md shows)."""
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=endpoint,
        config=botocore_config.Config(
            signature_version=botocore.UNSIGNED, retries={"total_max_attempts": 1}
        ),
    )

    def add_key(request: Any, **_: Any) -> None:
        request.headers["Authorization"] = f"Bearer {TOKEN}"
        if inject is not None:
            request.headers["x-sseproxy-inject"] = inject

    client.meta.events.register("before-send.bedrock-runtime", add_key)
    return client


def converse(endpoint: str, inject: str | None = None) -> dict[str, Any]:
    """What a boto3 user gets from ConverseStream: text, tool input, stop reason, usage, or
    the exception the SDK raised."""
    client = bedrock_client(endpoint, inject)
    out: dict[str, Any] = {"text": "", "tool": "", "stop": None, "usage": None, "error": None}
    stream = None
    try:
        response = client.converse_stream(
            modelId=MODEL, messages=[{"role": "user", "content": [{"text": "hi"}]}]
        )
        stream = response["stream"]
        for item in stream:
            delta = item.get("contentBlockDelta", {}).get("delta", {})
            out["text"] += delta.get("text", "")
            out["tool"] += delta.get("toolUse", {}).get("input", "")
            if "messageStop" in item:
                out["stop"] = item["messageStop"]["stopReason"]
            if "metadata" in item:
                out["usage"] = item["metadata"]["usage"]
    except Exception as exc:  # the SDK's own failure is part of what is compared
        out["error"] = type(exc).__name__
    finally:
        if stream is not None:
            stream.close()  # returns the connection even after the SDK raised mid-stream
        client.close()
    return out


@pytest.fixture
def bearer(monkeypatch) -> str:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    return TOKEN


def test_botocore_bearer_auth_needs_https(monkeypatch, bearer) -> None:
    """Why the clients here are unsigned: docs/providers.md tells users the same."""
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", bearer)
    client = boto3.client(
        "bedrock-runtime", region_name="us-east-1", endpoint_url="http://127.0.0.1:9"
    )
    with pytest.raises(Exception, match="Bearer authorization requires an HTTPS endpoint"):
        client.converse_stream(modelId=MODEL, messages=[])
    client.close()


async def test_bedrock_converse_stream(upstream, proxy_url, logs, bearer) -> None:
    fake, fake_url = upstream
    serve(upstream, converse_stream(), EVENTSTREAM)
    direct = await asyncio.to_thread(converse, fake_url)
    via_proxy = await asyncio.to_thread(converse, proxy_url + "/bedrock/us-east-1")
    assert via_proxy == direct
    assert via_proxy["text"] == "Bonjour, le monde 🌍" and via_proxy["stop"] == "end_turn"
    seen = fake.seen[-1]
    assert seen.path_qs.startswith("/model/anthropic.claude-3-haiku")
    assert seen.path_qs.endswith("/converse-stream")
    assert seen.headers["Authorization"] == f"Bearer {bearer}"
    [record] = await logs.wait()
    assert (record["route"], record["dialect"], record["state"]) == (
        "bedrock",
        "bedrock-converse",
        "completed",
    )
    assert record["finish_reason"] == via_proxy["stop"]
    assert record["text_chars"] == len(via_proxy["text"])
    assert record["tool_calls"] == [
        {
            "id": "tooluse_1",
            "name": "lookup",
            "arguments_bytes": len(via_proxy["tool"]),
            "arguments_valid_json": True,
        }
    ]
    assert record["usage"]["input_tokens"] == via_proxy["usage"]["inputTokens"]
    assert record["usage"]["output_tokens"] == via_proxy["usage"]["outputTokens"]
    assert record["model"] == MODEL
    assert record["stream"] is True  # an event stream, whatever its media type


async def test_bedrock_converse_exception(upstream, proxy_url, logs, bearer) -> None:
    error = exception(
        "modelStreamErrorException",
        json.dumps(
            {"message": "Model produced invalid sequence", "originalStatusCode": 500}
        ).encode(),
    )
    serve(upstream, converse_stream(stop=None, tail=error), EVENTSTREAM)
    result = await asyncio.to_thread(converse, proxy_url + "/bedrock/us-east-1")
    assert result["error"] == "EventStreamError"  # botocore raises on the exception message
    [record] = await logs.wait()
    assert (record["state"], record["last_event"]) == ("failed", "modelStreamErrorException")
    assert record["error"]["message"] == "Model produced invalid sequence"


async def test_bedrock_converse_cut_is_interrupted(upstream, proxy_url, logs, bearer) -> None:
    body = converse_stream()
    serve(upstream, body[: len(body) // 2], EVENTSTREAM, cut=True)
    result = await asyncio.to_thread(converse, proxy_url + "/bedrock/us-east-1")
    assert result["stop"] is None  # the SDK never saw messageStop
    [record] = await logs.wait()
    assert record["state"] == "interrupted"
    assert record["text_chars"] == len(result["text"])


async def test_bedrock_http_error_body(upstream, proxy_url, logs, bearer) -> None:
    body = json.dumps({"message": "Too many tokens, please wait before trying again."}).encode()
    fake, _ = upstream
    fake.script(
        "*",
        Script(
            [Send(body)],
            status=429,
            headers={"Content-Type": "application/json", "x-amzn-ErrorType": "ThrottlingException"},
        ),
    )
    result = await asyncio.to_thread(converse, proxy_url + "/bedrock/us-east-1")
    assert result["error"] == "ThrottlingException"
    [record] = await logs.wait()
    assert (record["state"], record["status"]) == ("http_error", 429)
    assert record["error"]["message"] == "Too many tokens, please wait before trying again."


def invoke_chunk(obj: dict[str, Any]) -> bytes:
    data = base64.b64encode(json.dumps(obj).encode()).decode()
    return event("chunk", json.dumps({"bytes": data}).encode())


def invoke(endpoint: str) -> dict[str, Any]:
    client = bedrock_client(endpoint)
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 100})
    text, stop, types = "", None, []
    stream = None
    try:
        response = client.invoke_model_with_response_stream(modelId=MODEL, body=body)
        stream = response["body"]
        for item in stream:
            payload = json.loads(item["chunk"]["bytes"])
            types.append(payload["type"])
            if payload["type"] == "content_block_delta":
                text += payload["delta"].get("text", "")
            if payload["type"] == "message_delta":
                stop = payload["delta"]["stop_reason"]
    finally:
        if stream is not None:
            stream.close()
        client.close()
    return {"text": text, "stop": stop, "types": types}


async def test_bedrock_invoke_anthropic(upstream, proxy_url, logs, bearer) -> None:
    body = b"".join(
        invoke_chunk(obj)
        for obj in [
            {
                "type": "message_start",
                "message": {
                    "id": "msg_bdrk_1",
                    "model": "claude-3-haiku",
                    "usage": {"input_tokens": 8, "output_tokens": 1},
                },
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Salut"},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": " à tous"},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "max_tokens"},
                "usage": {"output_tokens": 5},
            },
            {
                "type": "message_stop",
                "amazon-bedrock-invocationMetrics": {"inputTokenCount": 8, "outputTokenCount": 5},
            },
        ]
    )
    serve(upstream, body, EVENTSTREAM)
    result = await asyncio.to_thread(invoke, proxy_url + "/bedrock/us-east-1")
    assert result["text"] == "Salut à tous" and result["types"][-1] == "message_stop"
    [record] = await logs.wait()
    assert (record["dialect"], record["state"], record["finish_reason"]) == (
        "bedrock-invoke",
        "incomplete",
        result["stop"],
    )
    assert (record["text_chars"], record["response_id"]) == (len(result["text"]), "msg_bdrk_1")


# -- Cohere ------------------------------------------------------------------------------


def cohere_ev(obj: dict[str, Any]) -> bytes:
    return f"event: {obj['type']}\ndata: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def cohere_stream(finish: str | None = "COMPLETE") -> bytes:
    parts = [
        {
            "id": "5a1b",
            "type": "message-start",
            "delta": {
                "message": {
                    "role": "assistant",
                    "content": [],
                    "tool_plan": "",
                    "tool_calls": [],
                    "citations": [],
                }
            },
        },
        {
            "type": "content-start",
            "index": 0,
            "delta": {"message": {"content": {"type": "text", "text": ""}}},
        },
        {
            "type": "content-delta",
            "index": 0,
            "delta": {"message": {"content": {"text": "Hola, "}}},
        },
        {
            "type": "content-delta",
            "index": 0,
            "delta": {"message": {"content": {"text": "qué tal 🙂"}}},
        },
        {"type": "content-end", "index": 0},
    ]
    if finish is not None:
        usage = {
            "billed_units": {"input_tokens": 3, "output_tokens": 4},
            "tokens": {"input_tokens": 70, "output_tokens": 4},
        }
        parts.append({"type": "message-end", "delta": {"finish_reason": finish, "usage": usage}})
    return b"".join(cohere_ev(p) for p in parts)


async def cohere_chat(base_url: str) -> dict[str, Any]:
    out: dict[str, Any] = {"text": "", "finish": None, "usage": None, "id": None}
    async with httpx.AsyncClient() as http:
        client = cohere.AsyncClientV2(api_key="co-test", base_url=base_url, httpx_client=http)
        async for item in client.chat_stream(
            model="command-a-03-2025", messages=[{"role": "user", "content": "hi"}]
        ):
            if item.type == "message-start":
                out["id"] = item.id
            if item.type == "content-delta":
                out["text"] += item.delta.message.content.text
            if item.type == "message-end":
                out["finish"] = item.delta.finish_reason
                out["usage"] = item.delta.usage.tokens.output_tokens
    return out


async def test_cohere_chat_stream(upstream, proxy_url, logs) -> None:
    fake, fake_url = upstream
    serve(upstream, cohere_stream(), "text/event-stream")
    direct = await cohere_chat(fake_url)
    via_proxy = await cohere_chat(proxy_url + "/cohere")
    assert via_proxy == direct and via_proxy["text"] == "Hola, qué tal 🙂"
    assert fake.seen[-1].path_qs == "/v2/chat"
    [record] = await logs.wait()
    assert (record["route"], record["dialect"], record["state"]) == (
        "cohere",
        "cohere-chat",
        "completed",
    )
    assert (record["finish_reason"], record["response_id"]) == (
        via_proxy["finish"],
        via_proxy["id"],
    )
    assert record["text_chars"] == len(via_proxy["text"])
    assert record["usage"]["output_tokens"] == via_proxy["usage"]
    assert record["model"] == "command-a-03-2025"


async def test_cohere_stream_without_message_end(upstream, proxy_url, logs) -> None:
    serve(upstream, cohere_stream(finish=None), "text/event-stream")
    result = await cohere_chat(proxy_url + "/cohere")
    assert result["finish"] is None  # the SDK just ends: only the record tells
    [record] = await logs.wait()
    assert (record["state"], record["last_event"]) == ("interrupted", "content-end")


# -- Azure OpenAI and Vertex AI (documented, commented-out route templates) --------------

AZURE = make_route("azure", ("/azure/*",), "https://example.openai.azure.com", "/azure", None)
VERTEX = make_route(
    "vertex", ("/vertex/*",), "https://us-central1-aiplatform.googleapis.com", "/vertex", None
)


@pytest.fixture
async def documented_proxy_url(aiohttp_server, upstream, logs) -> str:
    """The default config plus docs/providers.md's Azure and Vertex routes, re-pointed at the fake."""
    _, fake_url = upstream
    server = await aiohttp_server(create_app(routes_to(fake_url, (AZURE, VERTEX))))
    return str(server.make_url("")).rstrip("/")


async def test_azure_openai_deployment_chat(upstream, documented_proxy_url, logs) -> None:
    fake, _ = upstream
    serve(upstream, corpus("openai-chat/azure-prompt-filter-results.sse"), "text/event-stream")
    client = openai.AsyncAzureOpenAI(
        azure_endpoint=documented_proxy_url + "/azure",
        api_version="2024-10-21",
        api_key="azure-key",
        max_retries=0,
    )
    stream = await client.chat.completions.create(
        model="my-gpt", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text, finish = "", None
    async for item in stream:
        for choice in item.choices:
            text += choice.delta.content or "" if choice.delta else ""
            finish = choice.finish_reason or finish
    await client.close()
    seen = fake.seen[-1]
    assert seen.path_qs == "/openai/deployments/my-gpt/chat/completions?api-version=2024-10-21"
    assert seen.headers["api-key"] == "azure-key"
    [record] = await logs.wait()
    assert (record["route"], record["dialect"], record["state"]) == (
        "azure",
        "openai-chat",
        "completed",
    )
    assert (record["finish_reason"], record["text_chars"], record["anomalies"]) == (
        finish,
        len(text),
        {},
    )
    assert record["model"] == "my-gpt"


async def test_azure_v1_responses(upstream, documented_proxy_url, logs) -> None:
    fake, _ = upstream
    serve(upstream, corpus("openai-responses/text-basic.sse"), "text/event-stream")
    client = openai.AsyncOpenAI(
        base_url=documented_proxy_url + "/azure/openai/v1", api_key="azure-key", max_retries=0
    )
    stream = await client.responses.create(model="my-gpt", input="hi", stream=True)
    final = None
    async for item in stream:
        if item.type == "response.completed":
            final = item.response.output_text
    await client.close()
    assert fake.seen[-1].path_qs == "/openai/v1/responses"
    [record] = await logs.wait()
    assert (record["dialect"], record["state"], record["text_chars"]) == (
        "openai-responses",
        "completed",
        len(final or ""),
    )


@pytest.mark.parametrize(
    ("publisher_path", "stream", "dialect"),
    [
        (
            "publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            "gemini/text-basic-crlf.sse",
            "gemini",
        ),
        (
            "publishers/anthropic/models/claude-sonnet-4-5:streamRawPredict",
            "anthropic-messages/text-basic-pings.sse",
            "anthropic-messages",
        ),
    ],
)
async def test_vertex_paths(
    upstream, documented_proxy_url, logs, publisher_path, stream, dialect
) -> None:
    fake, _ = upstream
    serve(upstream, corpus(stream), "text/event-stream")
    path = f"/v1/projects/p1/locations/us-central1/{publisher_path}"
    async with httpx.AsyncClient() as http:
        response = await http.post(documented_proxy_url + "/vertex" + path, json={"contents": []})
        body = response.content
    assert body == corpus(stream)
    assert fake.seen[-1].path_qs == path
    [record] = await logs.wait()
    assert (record["route"], record["dialect"], record["state"]) == ("vertex", dialect, "completed")


# -- drills on an AWS event stream, as boto3 sees them -------------------------------------


@pytest.fixture
async def drill_proxy_url(aiohttp_server, upstream, logs) -> str:
    _, fake_url = upstream
    settings = replace(routes_to(fake_url), allow_inject=True)
    server = await aiohttp_server(create_app(settings))
    return str(server.make_url("")).rstrip("/")


async def test_bedrock_drill_inject_error(upstream, drill_proxy_url, logs, bearer) -> None:
    serve(upstream, converse_stream(), EVENTSTREAM)
    result = await asyncio.to_thread(
        converse, drill_proxy_url + "/bedrock/us-east-1", "inject-error=2"
    )
    assert result["error"] == "EventStreamError" and result["stop"] is None
    [record] = await logs.wait()
    assert (record["state"], record["last_event"]) == ("failed", "modelStreamErrorException")
    assert record["error"]["message"] == "Model stream error (injected)"


async def test_bedrock_drill_drop_terminal(upstream, drill_proxy_url, logs, bearer) -> None:
    serve(upstream, converse_stream(), EVENTSTREAM)
    result = await asyncio.to_thread(
        converse, drill_proxy_url + "/bedrock/us-east-1", "drop-terminal,rechunk=5"
    )
    assert result["error"] is None and result["stop"] is None  # boto3 raises nothing
    assert result["usage"] is not None  # metadata still came, without messageStop
    [record] = await logs.wait()
    assert (record["state"], record["text_chars"]) == ("interrupted", len(result["text"]))


# -- `sseproxy mock` serving a recorded Bedrock body to boto3 ---------------------------------


async def test_mock_serves_a_recorded_event_stream_to_boto3(
    aiohttp_server, tmp_path, bearer
) -> None:
    from sseproxy.tools.mock import MockServer, load_recordings

    (tmp_path / "converse.eventstream").write_bytes(converse_stream())
    mock = MockServer(load_recordings([tmp_path]), speed=0)
    server = await aiohttp_server(mock.app())
    result = await asyncio.to_thread(converse, str(server.make_url("")).rstrip("/"))
    assert (result["text"], result["stop"], result["error"]) == (
        "Bonjour, le monde 🌍",
        "end_turn",
        None,
    )
    assert [r.name for r in mock.recordings] == ["bedrock-converse/converse"]
