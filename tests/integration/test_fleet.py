"""From one log to a fleet: a log the proxy wrote in this test, over every state, read by
`sseproxy report --json` and by the ClickHouse recipe on an embedded ClickHouse (chdb).
The report's counts are checked against the records' own; every ClickHouse view against the
report; the OpenTelemetry path against the JSONEachRow path."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from sseproxy.cli import main
from sseproxy.observe.record_schema import connect_fields, record_fields, session_fields
from tests.integration.conftest import LogCapture
from tests.integration.fake_upstream import Close, Reset, Script, Send, WaitFor
from tests.streams import chat_chunk, sse

chdb_session = pytest.importorskip("chdb.session")

CLICKHOUSE = Path(__file__).resolve().parents[2] / "deploy" / "clickhouse"
CHAT, MESSAGES = "/v1/chat/completions", "/v1/messages"
DONE = "[DONE]"
ANTHROPIC_OK = sse(
    ("message_start", {"type": "message_start", "message": {"id": "msg_1", "model": "claude-x"}}),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
    ("message_stop", {"type": "message_stop"}),
)


def scenarios() -> list[tuple[str | None, str, Script, str]]:
    """(model asked for, path, script, what the client does: "read" or "leave")."""
    return [
        (
            "gpt-a",
            CHAT,
            Script([Send(sse(chat_chunk("Hi"), chat_chunk(finish="stop"), DONE))]),
            "read",
        ),
        (
            "gpt-a",
            CHAT,
            Script([Send(sse(chat_chunk("Hey"), chat_chunk(finish="stop"), DONE))]),
            "read",
        ),
        (
            "gpt-a",
            CHAT,
            Script([Send(sse(chat_chunk("x"), chat_chunk(finish="length"), DONE))]),
            "read",
        ),
        (
            "gpt-a",
            CHAT,
            Script([Send(sse(chat_chunk("Hi"))), Send(b'data: {"choi'), Close()]),
            "read",
        ),
        ("gpt-b", CHAT, Script([Send(sse(chat_chunk("Hi"))), Reset()]), "read"),
        (
            "gpt-b",
            CHAT,
            Script([Send(sse({"error": {"message": "overloaded", "type": "server_error"}}))]),
            "read",
        ),
        ("gpt-b", CHAT, Script([Send(sse(chat_chunk("Hi"), DONE))]), "read"),
        ("gpt-b", CHAT, Script([Send(sse(chat_chunk("Hi"))), WaitFor(asyncio.Event())]), "leave"),
        (
            "gpt-b",
            CHAT,
            Script(
                [
                    Send(
                        b'{"error": {"message": "slow down", "type": "tokens", "code": "rate_limit"}}'
                    )
                ],
                status=429,
                headers={"Content-Type": "application/json"},
            ),
            "read",
        ),
        ("claude-x", MESSAGES, Script([Send(ANTHROPIC_OK)]), "read"),
        (
            None,
            CHAT,
            Script(
                [Send(sse(chat_chunk("Hi", model="served-m"), chat_chunk(finish="stop"), DONE))]
            ),
            "read",
        ),
    ]


STATES = {
    "completed",
    "incomplete",
    "interrupted",
    "failed",
    "unconfirmed",
    "cancelled",
    "http_error",
}


async def write_log(
    upstream: Any, make_proxy: Any, logs: LogCapture, unused_tcp_port: int
) -> list[str]:
    """Run every scenario through the proxy; the log lines it wrote, one per request."""
    fake, _ = upstream
    client = await make_proxy()
    played = scenarios()
    for n, (model, path, script, action) in enumerate(played, 1):
        fake.script(path, script)
        body = {"stream": True, **({"model": model} if model else {})}
        resp = await client.post(path, json=body)
        if action == "leave":
            await resp.content.readany()
            resp.close()
        else:
            # the cuts: the client sees a broken body, as it should
            with contextlib.suppress(aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
                await resp.read()
        await logs.wait(n)
    unreachable = await make_proxy(upstream=f"http://127.0.0.1:{unused_tcp_port}")
    resp = await unreachable.post(CHAT, json={"model": "gpt-a", "stream": True})
    assert resp.status == 502
    await logs.wait(len(played) + 1)
    refused = await client.get("/%0a")  # the proxy's own refusal: the report's proxy_refused
    assert refused.status == 400
    await logs.wait(len(played) + 2)
    return [line for line in logs.lines() if '"event":"request.finished"' in line]


@pytest.fixture
async def fleet_log(
    upstream, make_proxy, logs, unused_tcp_port, tmp_path
) -> tuple[Path, list[dict[str, Any]]]:
    lines = await write_log(upstream, make_proxy, logs, unused_tcp_port)
    path = tmp_path / "sseproxy.log"
    # a log as a sidecar leaves it: other events and a line that is not JSON among the records
    path.write_text(
        '{"event":"proxy.started","level":"info"}\n' + "\n".join(lines) + "\nnot json at all\n"
    )
    return path, [json.loads(line) for line in lines]


def run_report(capsys: Any, *args: str) -> dict[str, Any]:
    assert main(["report", "--json", *args]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def model_of(r: dict[str, Any]) -> str:
    return r.get("model") or r.get("response_model") or "-"


async def test_the_log_covers_every_state(fleet_log) -> None:
    _, records = fleet_log
    assert {r["state"] for r in records} == STATES
    reasons = {r["interruption"]["reason"] for r in records if r["interruption"]}
    assert {
        "upstream_closed",
        "upstream_reset",
        "client_disconnected",
        "upstream_unreachable",
    } <= reasons


async def test_report_counts_equal_the_records_own(fleet_log, capsys) -> None:
    path, records = fleet_log
    data = run_report(capsys, str(path))
    assert data["lines"] == {
        "records": len(records),
        "sessions": 0,
        "unparseable": 1,
        "drills": 0,
        "other_events": 1,
        "outside_window": 0,
    }
    refused = [r for r in records if r["answered_by"] == "proxy" and not r["interruption"]]
    assert len(refused) == 1 and refused[0]["state"] == "http_error"
    assert data["states"] == dict(
        Counter("proxy_refused" if r in refused else r["state"] for r in records)
    )
    assert {r["model"]: r["requests"] for r in data["by_model"]} == dict(
        Counter(map(model_of, records))
    )
    assert {r["dialect"]: r["requests"] for r in data["by_dialect"]} == dict(
        Counter(r.get("dialect") or "-" for r in records)
    )
    anomalies: Counter[str] = Counter()
    for r in records:
        anomalies.update(r["anomalies"])
    assert {a["name"]: a["occurrences"] for a in data["anomalies"]} == dict(anomalies)
    cuts = Counter(r["interruption"]["reason"] for r in records if r["interruption"])
    assert {c["reason"]: c["requests"] for c in data["cuts"]} == dict(cuts)
    stamps = sorted(r["timestamp"] for r in records)
    assert (data["span"]["first"], data["span"]["last"]) == (stamps[0], stamps[-1])
    worst = data["worst"]
    assert len(worst) == 10
    assert worst[0]["state"] == "interrupted"
    assert {w["request_id"] for w in worst} <= {r["request_id"] for r in records}
    ttft = sorted(
        r["ttft_ms"] for r in records if model_of(r) == "gpt-a" and r["ttft_ms"] is not None
    )
    [gpt_a] = [row for row in data["latency"] if row["model"] == "gpt-a"]
    assert gpt_a["ttft_ms"]["max"] == ttft[-1]
    assert gpt_a["ttft_ms"]["count"] == len(ttft)


async def test_report_reads_rotated_files_and_stdin_alike(
    fleet_log, capsys, monkeypatch, tmp_path
) -> None:
    path, _ = fleet_log
    lines = path.read_bytes().splitlines(keepends=True)
    older = tmp_path / "sseproxy.observe.log.1.gz"
    older.write_bytes(gzip.compress(b"".join(lines[:5])))
    newer = tmp_path / "sseproxy.observe.log.0"
    newer.write_bytes(b"".join(lines[5:]))
    whole = run_report(capsys, str(path))
    rotated = run_report(capsys, str(older), str(newer))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    piped = run_report(capsys)
    assert rotated["states"] == whole["states"] == piped["states"]
    assert rotated["lines"] == whole["lines"] == piped["lines"]


async def test_since_and_until_keep_only_their_window(fleet_log, capsys) -> None:
    path, records = fleet_log
    stamps = sorted(r["timestamp"] for r in records)
    middle = stamps[len(stamps) // 2]
    before = run_report(capsys, "--until", middle, str(path))
    after = run_report(capsys, "--since", middle, str(path))
    assert before["lines"]["records"] == sum(s < middle for s in stamps)
    assert after["lines"]["records"] == sum(s >= middle for s in stamps)
    assert before["lines"]["outside_window"] == after["lines"]["records"]


# -- ClickHouse -------------------------------------------------------------------------------


def statements(name: str) -> list[str]:
    """The statements of one of the recipe's SQL files, comments dropped."""
    text = (CLICKHOUSE / name).read_text()
    out = []
    for chunk in text.split(";\n"):
        body = "\n".join(line for line in chunk.splitlines() if not line.strip().startswith("--"))
        if body.strip():
            out.append(body.strip())
    return out


def insert_query(name: str = "QUERY") -> str:
    """An INSERT that ingest.sh sends: the test runs the shipped query, not a copy."""
    script = (CLICKHOUSE / "ingest.sh").read_text()
    match = re.search(rf'^{name}="([^"]+)"', script, re.MULTILINE)
    assert match, f"ingest.sh has no {name}"
    return match.group(1)


def rows(session: Any, query: str) -> list[dict[str, Any]]:
    text = session.query(query, "JSONEachRow").bytes().decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def clickhouse(tmp_path) -> Any:
    session = chdb_session.Session(str(tmp_path / "chdb"))
    for name in ("schema.sql", "views.sql"):
        for statement in statements(name):
            session.query(statement)
    yield session
    session.close()


def ingest(session: Any, path: Path) -> None:
    """ingest.sh's filter and query: the request.finished lines, as JSONEachRow."""
    lines = path.read_text().splitlines(keepends=True)
    data = "".join(line for line in lines if '"event":"request.finished"' in line)
    session.query(f"{insert_query()}\n{data}")


async def test_every_view_agrees_with_the_report(fleet_log, clickhouse, capsys) -> None:
    path, records = fleet_log
    ingest(clickhouse, path)
    data = run_report(capsys, str(path))
    assert rows(clickhouse, "SELECT count() AS n FROM sseproxy.requests") == [{"n": len(records)}]
    assert rows(clickhouse, "SELECT * FROM sseproxy.requests_by_state") == [
        {"state": s, "requests": n} for s, n in data["states"].items()
    ]

    def rates(table: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
        return [
            {
                **{k: r[k] for k in keys},
                **{k: r[k] for k in ("requests", "failures", "failure_rate")},
            }
            for r in table
        ]

    assert rows(clickhouse, "SELECT * FROM sseproxy.failure_rate_by_model_route") == rates(
        data["by_model_route"], "model", "route"
    )
    assert rows(clickhouse, "SELECT * FROM sseproxy.failure_rate_by_model") == rates(
        data["by_model"], "model"
    )
    assert rows(clickhouse, "SELECT * FROM sseproxy.failure_rate_by_route") == rates(
        data["by_route"], "route"
    )
    assert rows(clickhouse, "SELECT * FROM sseproxy.failure_rate_by_client") == rates(
        data["by_client"], "client", "version"
    )
    assert data["by_client"]  # the fleet's clients name themselves
    assert rows(clickhouse, "SELECT * FROM sseproxy.cuts_by_reason") == data["cuts"]
    assert rows(clickhouse, "SELECT * FROM sseproxy.anomalies_top") == data["anomalies"][:20]
    for view, metric in (("ttft_by_model", "ttft_ms"), ("duration_by_model", "duration_ms")):
        expected = [
            {"model": r["model"], **{k: r[metric][k] for k in ("count", "p50", "p95", "max")}}
            for r in data["latency"]
            if r[metric]["count"]
        ]
        expected.sort(key=lambda r: (-r["count"], r["model"]))
        got = rows(clickhouse, f"SELECT * FROM sseproxy.{view}")
        assert [(r["model"], r["count"]) for r in got] == [
            (r["model"], r["count"]) for r in expected
        ]
        for g, e in zip(got, expected, strict=True):
            # both round to 3 decimals, each its own way: at most one unit apart
            assert (g["p50"], g["p95"], g["max"]) == pytest.approx(
                (e["p50"], e["p95"], e["max"]), abs=0.0011
            )
    worst = rows(clickhouse, "SELECT state, request_id, duration_ms FROM sseproxy.worst_requests")
    assert [(w["state"], w["duration_ms"]) for w in worst] == [
        (w["state"], w["duration_ms"]) for w in data["worst"]
    ]


async def test_the_otel_path_fills_the_same_rows(fleet_log, clickhouse) -> None:
    path, records = fleet_log
    ingest(clickhouse, path)
    direct = rows(clickhouse, "SELECT * FROM sseproxy.requests ORDER BY request_id")
    clickhouse.query("TRUNCATE TABLE sseproxy.requests")
    # the exporter's otel_logs table, reduced to the columns the view reads
    clickhouse.query("CREATE DATABASE otel")
    clickhouse.query(
        "CREATE TABLE otel.otel_logs (Timestamp DateTime64(9) DEFAULT now64(9), Body String) "
        "ENGINE = MergeTree ORDER BY Timestamp"
    )
    for statement in statements("otel.sql"):
        clickhouse.query(statement)
    # every line as filelog sends it, the other event and the garbage too
    clickhouse.query(f"INSERT INTO otel.otel_logs (Body) FORMAT LineAsString\n{path.read_text()}")
    via_otel = rows(clickhouse, "SELECT * FROM sseproxy.requests ORDER BY request_id")
    assert len(direct) == len(records)
    assert via_otel == direct


def test_the_table_has_a_column_for_every_schema_field(tmp_path) -> None:
    session = chdb_session.Session(str(tmp_path / "chdb"))
    try:
        for statement in statements("schema.sql"):
            session.query(statement)
        columns = rows(
            session,
            "SELECT name FROM system.columns WHERE database = 'sseproxy' AND table = 'requests' "
            "AND default_kind != 'MATERIALIZED'",
        )
    finally:
        session.close()
    assert {c["name"] for c in columns} == record_fields()


def test_the_otel_view_reads_the_table_the_collector_writes() -> None:
    config = yaml.safe_load((CLICKHOUSE / "otel-collector.yaml").read_text())
    exporter = config["exporters"]["clickhouse"]
    pipeline = config["service"]["pipelines"]["logs"]
    assert pipeline["receivers"] == ["filelog"] and pipeline["exporters"] == ["clickhouse"]
    assert "operators" not in config["receivers"]["filelog"]  # the body is the line, verbatim
    source = f"FROM {exporter['database']}.{exporter['logs_table_name']}"
    assert source in (CLICKHOUSE / "otel.sql").read_text()


# -- sessions: session.finished records in the report and in ClickHouse --------------------

GEMINI_LIVE = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"


def _realtime_turn(n: int) -> list[str]:
    rid = f"resp_{n}"
    return [
        json.dumps({"type": "response.created", "response": {"id": rid}}),
        json.dumps({"type": "response.done", "response": {"id": rid, "status": "completed"}}),
    ]


async def _scripted_sessions(aiohttp_server: Any) -> str:
    """A WebSocket upstream whose answer depends on the path: each session ends its own way."""
    from aiohttp import WSMsgType, web

    async def handle(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(protocols=("realtime",), autoping=False, autoclose=False)
        await ws.prepare(request)
        msg = await ws.receive()
        if request.path == GEMINI_LIVE:
            await ws.send_str(json.dumps({"goAway": {"timeLeft": "10s"}}))
            await ws.close(code=1001, message=b"going away")
            return ws
        if request.query.get("end") == "1011":
            await ws.send_str(json.dumps({"type": "response.created", "response": {"id": "r"}}))
            await ws.close(code=1011, message=b"Deadline expired")
            return ws
        for text in _realtime_turn(1):
            await ws.send_str(text)
        while msg.type is not WSMsgType.CLOSE:  # until the client closes
            msg = await ws.receive()
        await ws.close(code=msg.data, message=msg.extra.encode())
        return ws

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    server = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


@pytest.fixture
async def session_log(aiohttp_server, logs, tmp_path) -> tuple[Path, list[dict[str, Any]]]:
    from sseproxy.config import load
    from sseproxy.shell.app import create_app
    from sseproxy.shell.websocket.session import SESSIONS_SUPPORTED

    if not SESSIONS_SUPPORTED:
        pytest.skip("WebSocket sessions need aiohttp 3.14")
    upstream = await _scripted_sessions(aiohttp_server)
    proxy = await aiohttp_server(create_app(load(None, {}, {"upstream": upstream})))
    base = str(proxy.make_url("")).rstrip("/")
    async with aiohttp.ClientSession() as http:
        for path in (
            "/v1/realtime?model=m",
            "/v1/realtime?model=m",
            "/v1/realtime?model=m&end=1011",
            GEMINI_LIVE,
        ):
            async with http.ws_connect(base + path, protocols=("realtime",), autoclose=False) as ws:
                await ws.send_str(json.dumps({"type": "response.create", "setup": {}}))
                async for msg in ws:
                    if msg.type is aiohttp.WSMsgType.TEXT and '"response.done"' in msg.data:
                        await ws.close(code=1000, message=b"bye")
                        break
                    if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING):
                        break
    sessions = await logs.wait_sessions(4)
    path = tmp_path / "sseproxy.log"
    path.write_text("\n".join(logs.lines()) + "\n")
    return path, sessions


def ingest_sessions(session: Any, path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    data = "".join(line for line in lines if '"event":"session.finished"' in line)
    session.query(f"{insert_query('SESSIONS_QUERY')}\n{data}")


async def test_sessions_in_the_report_equal_the_records_own(session_log, capsys) -> None:
    path, sessions = session_log
    data = run_report(capsys, str(path))
    assert data["lines"]["sessions"] == len(sessions) == 4
    assert data["sessions"]["turns"] == sum(s["turns"] for s in sessions)
    closes = Counter(
        (s["route"], s["closed_by"], str(s["close_code"]) if s["close_code"] is not None else "-")
        for s in sessions
    )
    assert {
        (r["route"], r["closed_by"], r["close_code"]): r["sessions"]
        for r in data["sessions"]["by_close"]
    } == dict(closes)
    # written out: what the scripted upstream did with each session
    assert closes == Counter(
        {
            ("upstream", "client", "1000"): 2,
            ("upstream", "upstream", "1011"): 1,
            ("upstream", "upstream", "1001"): 1,
        }
    )
    assert {"name": "go_away", "occurrences": 1, "sessions": 1} in data["sessions"]["anomalies"]


async def test_the_sessions_table_agrees_with_the_report_both_paths(
    session_log, clickhouse, capsys
) -> None:
    path, sessions = session_log
    ingest_sessions(clickhouse, path)
    data = run_report(capsys, str(path))
    assert (
        rows(clickhouse, "SELECT * FROM sseproxy.sessions_by_close") == data["sessions"]["by_close"]
    )
    assert (
        rows(clickhouse, "SELECT * FROM sseproxy.session_anomalies_top")
        == data["sessions"]["anomalies"]
    )
    got = rows(
        clickhouse,
        "SELECT session_id, close_code, turns FROM sseproxy.sessions ORDER BY session_id",
    )
    assert got == sorted(
        (
            {"session_id": s["session_id"], "close_code": s["close_code"], "turns": s["turns"]}
            for s in sessions
        ),
        key=lambda r: r["session_id"],
    )
    direct = rows(clickhouse, "SELECT * FROM sseproxy.sessions ORDER BY session_id")
    clickhouse.query("TRUNCATE TABLE sseproxy.sessions")
    clickhouse.query("CREATE DATABASE otel")
    clickhouse.query(
        "CREATE TABLE otel.otel_logs (Timestamp DateTime64(9) DEFAULT now64(9), Body String) "
        "ENGINE = MergeTree ORDER BY Timestamp"
    )
    for statement in statements("otel.sql"):
        clickhouse.query(statement)
    clickhouse.query(f"INSERT INTO otel.otel_logs (Body) FORMAT LineAsString\n{path.read_text()}")
    assert rows(clickhouse, "SELECT * FROM sseproxy.sessions ORDER BY session_id") == direct


def test_the_sessions_table_has_a_column_for_every_schema_field(tmp_path) -> None:
    session = chdb_session.Session(str(tmp_path / "chdb"))
    try:
        for statement in statements("schema.sql"):
            session.query(statement)
        columns = rows(
            session,
            "SELECT name FROM system.columns WHERE database = 'sseproxy' AND table = 'sessions' "
            "AND default_kind != 'MATERIALIZED'",
        )
    finally:
        session.close()
    assert {c["name"] for c in columns} == session_fields()


# -- connects: intercept mode's connect.finished records in ClickHouse ----------------------


@pytest.fixture
async def connect_log(logs, tmp_path) -> tuple[Path, list[dict[str, Any]]]:
    """A log with the listener's records of each kind: a tunnel that closed, a refused head,
    a forwarded request whose host could not be reached."""
    import socket

    from sseproxy.intercept.ca import Leaves, load_or_create
    from sseproxy.intercept.listener import InterceptListener, ListenerSettings

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
        writer.close()

    echo_server = await asyncio.start_server(echo, "127.0.0.1", 0)
    echo_port = echo_server.sockets[0].getsockname()[1]
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        free = closed.getsockname()[1]
    leaves = Leaves(load_or_create(tmp_path / "ca"))
    listener = InterceptListener(ListenerSettings(set(), 5), leaves, asyncio.Protocol)
    port = await listener.start("127.0.0.1", 0)
    heads = [
        f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n\r\nping",
        "BREW /pot HTTP/1.1\r\n\r\n",
        f"GET http://127.0.0.1:{free}/ HTTP/1.1\r\n\r\n",
    ]
    try:
        async with asyncio.timeout(10):
            for head in heads:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(head.encode())
                if head.startswith("CONNECT"):
                    await reader.readuntil(b"\r\n\r\n")
                    assert await reader.readexactly(4) == b"ping"
                    writer.close()
                else:
                    await reader.read()
                    writer.close()
            while len(connects(logs)) < len(heads):
                await asyncio.sleep(0.01)
    finally:
        await listener.stop()
        echo_server.close()
    path = tmp_path / "sseproxy.log"
    path.write_text("\n".join(logs.lines()) + "\n")
    return path, connects(logs)


def connects(logs: LogCapture) -> list[dict[str, Any]]:
    parsed = (json.loads(line) for line in logs.lines())
    return [r for r in parsed if r.get("event") == "connect.finished"]


async def test_the_connects_table_holds_each_record_both_paths(connect_log, clickhouse) -> None:
    path, records = connect_log
    lines = path.read_text().splitlines(keepends=True)
    data = "".join(line for line in lines if '"event":"connect.finished"' in line)
    clickhouse.query(f"{insert_query('CONNECTS_QUERY')}\n{data}")
    wanted = ("host", "port", "mode", "outcome", "bytes_up", "bytes_down", "closed_by")
    got = rows(clickhouse, f"SELECT {', '.join(wanted)} FROM sseproxy.connects ORDER BY outcome")
    assert got == sorted(({k: r[k] for k in wanted} for r in records), key=lambda r: r["outcome"])
    assert {r["outcome"] for r in got} == {"closed", "bad_connect", "upstream_unreachable"}
    direct = rows(clickhouse, "SELECT * FROM sseproxy.connects ORDER BY outcome")
    clickhouse.query("TRUNCATE TABLE sseproxy.connects")
    clickhouse.query("CREATE DATABASE otel")
    clickhouse.query(
        "CREATE TABLE otel.otel_logs (Timestamp DateTime64(9) DEFAULT now64(9), Body String) "
        "ENGINE = MergeTree ORDER BY Timestamp"
    )
    for statement in statements("otel.sql"):
        clickhouse.query(statement)
    clickhouse.query(f"INSERT INTO otel.otel_logs (Body) FORMAT LineAsString\n{path.read_text()}")
    assert rows(clickhouse, "SELECT * FROM sseproxy.connects ORDER BY outcome") == direct


def test_the_connects_table_has_a_column_for_every_schema_field(tmp_path) -> None:
    session = chdb_session.Session(str(tmp_path / "chdb"))
    try:
        for statement in statements("schema.sql"):
            session.query(statement)
        columns = rows(
            session,
            "SELECT name FROM system.columns WHERE database = 'sseproxy' AND table = 'connects' "
            "AND default_kind != 'MATERIALIZED'",
        )
    finally:
        session.close()
    assert {c["name"] for c in columns} == connect_fields()
