"""The deployment examples in deploy/ are checked: each file parses, the proxy's shutdown grace
fits the orchestrator's stop timeout, probes hit healthz, every metric the alert rules and the
dashboard read exists in a real /_sseproxy/metrics exposition, and promtool accepts the
Prometheus config, the rules and every dashboard query."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.fake_upstream import Script, Send
from tests.streams import chat_chunk, sse

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMTOOL = shutil.which("promtool")
# Series Prometheus makes itself for every scrape target.
SYNTHETIC = {"up"}
METRIC = re.compile(r"\b((?:sseproxy|process|python)_[a-z0-9_]+|up)\b(?!\s*\()")


def load_yaml(name: str) -> Any:
    return yaml.safe_load((DEPLOY / name).read_text("utf-8"))


def alert_exprs() -> list[str]:
    rules = load_yaml("alerts.yml")
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DEPLOY / "grafana/sseproxy-dashboard.json").read_text())
    return data


def dashboard_exprs() -> list[str]:
    exprs = [t["expr"] for panel in dashboard()["panels"] for t in panel["targets"]]
    exprs += [v["definition"] for v in dashboard()["templating"]["list"]]
    return exprs


def as_promql(expr: str) -> str:
    """A Grafana query as plain PromQL: its variables replaced by values."""
    expr = expr.replace("$__rate_interval", "5m")
    return re.sub(r"\$[a-z_]+", ".*", expr)


def seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", duration)
    assert match, duration
    return int(match.group(1)) * (60 if match.group(2) == "m" else 1)


def test_compose_stops_after_the_shutdown_grace() -> None:
    compose = load_yaml("docker-compose.yml")
    proxy = compose["services"]["sseproxy"]
    grace = float(proxy["environment"]["SSEPROXY_SHUTDOWN_GRACE"])
    assert seconds(proxy["stop_grace_period"]) > grace
    assert set(compose["services"]) >= {"app", "sseproxy", "prometheus"}
    assert "http://sseproxy:8790" in compose["services"]["app"]["environment"]["OPENAI_BASE_URL"]
    scrape = load_yaml("prometheus.yml")["scrape_configs"][0]
    assert scrape["metrics_path"] == "/_sseproxy/metrics"
    assert scrape["static_configs"][0]["targets"] == ["sseproxy:8790"]
    # the proxy listens beyond loopback there: Prometheus presents the proxy's token
    secret = "/run/secrets/sseproxy_admin_token"
    assert scrape["authorization"]["credentials_file"] == secret
    assert secret in " ".join(proxy["entrypoint"])


def test_kubernetes_sidecar() -> None:
    [deployment] = list(
        yaml.safe_load_all((DEPLOY / "kubernetes/sseproxy-sidecar.yaml").read_text())
    )
    assert deployment["kind"] == "Deployment"
    pod = deployment["spec"]["template"]["spec"]
    app, proxy = pod["containers"]
    assert proxy["name"] == "sseproxy"
    assert app["env"][0]["value"].startswith("http://127.0.0.1:8790")
    env = {e["name"]: e for e in proxy["env"]}
    assert pod["terminationGracePeriodSeconds"] > float(env["SSEPROXY_SHUTDOWN_GRACE"]["value"])
    assert "secretKeyRef" in env["SSEPROXY_ADMIN_TOKEN"]["valueFrom"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert proxy[probe]["httpGet"]["path"] == "/_sseproxy/healthz"
        assert proxy[probe]["httpGet"]["port"] == proxy["ports"][0]["name"]
    security = proxy["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert set(proxy["resources"]) == {"requests", "limits"}


async def test_every_metric_used_exists_in_a_real_exposition(upstream, make_proxy, logs) -> None:
    fake, _ = upstream
    fake.script("/v1/chat/completions", Script([Send(sse(chat_chunk("Hi"), "[DONE]"))]))
    client = await make_proxy()
    await (await client.post("/v1/chat/completions", json={"model": "m"})).read()
    text = await (await client.get("/_sseproxy/metrics")).text()
    exposed = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    for expr in alert_exprs() + dashboard_exprs():
        used = set(METRIC.findall(expr))
        assert used, f"no metric found in {expr!r}"  # the scan itself works
        assert used - SYNTHETIC <= exposed, (expr, used - exposed)


def test_dashboard_panels() -> None:
    board = dashboard()
    titles = " ".join(p["title"] for p in board["panels"]).lower()
    for topic in ("state", "time to first token", "duration", "silence", "anomalies", "active"):
        assert topic in titles, topic
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    datasources = {json.dumps(p["datasource"]) for p in board["panels"]}
    provisioned = load_yaml("grafana/datasource.yml")["datasources"][0]["uid"]
    assert datasources == {json.dumps({"type": "prometheus", "uid": provisioned})}


@pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (.ci/run installs Debian's prometheus package)",
)
def test_promtool_accepts_config_rules_and_dashboard_queries(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    token = tmp_path / "token"
    token.write_text("t\n")
    config = (DEPLOY / "prometheus.yml").read_text()
    # the token file exists only inside the container; promtool checks that it exists
    (tmp_path / "prometheus.yml").write_text(
        config.replace("/run/secrets/sseproxy_admin_token", str(token))
    )
    shutil.copy(DEPLOY / "alerts.yml", tmp_path / "alerts.yml")
    # every dashboard query, as a recording rule, so that promtool parses its PromQL
    queries = [as_promql(e) for e in dashboard_exprs() if not e.startswith("label_values")]
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [{"record": f"dashboard:q{i}", "expr": q} for i, q in enumerate(queries)],
            }
        ]
    }
    (tmp_path / "dashboard-rules.yml").write_text(yaml.safe_dump(rules))
    for args in (
        ["check", "config", str(tmp_path / "prometheus.yml")],
        ["check", "rules", str(tmp_path / "alerts.yml")],
        ["check", "rules", str(tmp_path / "dashboard-rules.yml")],
    ):
        result = subprocess.run(
            [PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS" in result.stdout + result.stderr
