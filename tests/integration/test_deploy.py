"""The deployment examples in deploy/ are checked: each file parses, the proxy's shutdown grace
fits the orchestrator's stop timeout, probes hit healthz, the Kubernetes objects match the
Kubernetes schemas, the image's healthcheck works on any port, every dashboard panel follows the
dashboard's variables, every metric the alert rules and the dashboard read exists in a real
/_sseproxy/metrics exposition, and every command in a deploy/ file's header works as written
(promtool on the Prometheus config, the rules, their unit tests and every dashboard query)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.fake_upstream import Script, Send
from tests.streams import chat_chunk, sse

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROMTOOL = shutil.which("promtool")
# The oldest Kubernetes with native sidecars on by default (init containers that keep running).
KUBERNETES = "1.29.0"
# The dashboard's variables, and the label each one filters.
VARIABLES = {"route": "$route", "dialect": "$dialect", "model": "$model"}
# Families without those labels: the gauge counts the proxy's slots (a stream's dialect is
# known only once its bytes arrive), Prometheus' `up` is per target.
UNFILTERED = {"sseproxy_active_streams", "up"}
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
    # the proxy listens beyond loopback there: Prometheus presents the proxy's token, read
    # relative to its config (/etc/prometheus/ in compose, deploy/ for promtool on the host)
    token = scrape["authorization"]["credentials_file"]
    assert not token.startswith("/")
    prometheus = compose["services"]["prometheus"]
    assert f"./{token}:/etc/prometheus/{token}:ro" in prometheus["volumes"]
    assert compose["secrets"]["sseproxy_admin_token"]["file"] == f"./{token}"
    assert "/run/secrets/sseproxy_admin_token" in " ".join(proxy["entrypoint"])
    assert (ROOT / ".gitignore").read_text().count("deploy/secrets/") == 1  # never committed


def kubernetes_objects() -> dict[str, dict[str, Any]]:
    text = (DEPLOY / "kubernetes/sseproxy-sidecar.yaml").read_text()
    return {doc["kind"]: doc for doc in yaml.safe_load_all(text)}


def test_kubernetes_native_sidecar() -> None:
    """The proxy is an init container that keeps running: it starts before the app and the
    kubelet stops it only after the app exited, so the app's last calls are served."""
    objects = kubernetes_objects()
    assert set(objects) == {"Deployment", "Service", "PodMonitor"}
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    [proxy] = pod["initContainers"]
    [app] = pod["containers"]
    assert proxy["name"] == "sseproxy" and proxy["restartPolicy"] == "Always"
    assert app["env"][0]["value"].startswith("http://127.0.0.1:8790")
    env = {e["name"]: e for e in proxy["env"]}
    grace = float(env["SSEPROXY_SHUTDOWN_GRACE"]["value"])
    assert pod["terminationGracePeriodSeconds"] > grace + 10  # the app's own shutdown first
    assert "secretKeyRef" in env["SSEPROXY_ADMIN_TOKEN"]["valueFrom"]
    port = proxy["ports"][0]
    assert env["SSEPROXY_LISTEN"]["value"].endswith(f":{port['containerPort']}")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert proxy[probe]["httpGet"]["path"] == "/_sseproxy/healthz"
        assert proxy[probe]["httpGet"]["port"] == port["name"]
    security = proxy["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    assert set(proxy["resources"]) == {"requests", "limits"}
    # a reference a cluster can pull: a registry host and a version, not Docker Hub's latest
    registry, _, rest = proxy["image"].partition("/")
    assert "." in registry and rest.startswith("sseproxy:")
    assert rest.split(":")[1] == __import__("sseproxy").__version__


def test_kubernetes_service_and_podmonitor_reach_the_proxy() -> None:
    objects = kubernetes_objects()
    pod_labels = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    service, monitor = objects["Service"], objects["PodMonitor"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "sseproxy"
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("sseproxy", "/_sseproxy/metrics")
    proxy = objects["Deployment"]["spec"]["template"]["spec"]["initContainers"][0]
    token = next(e for e in proxy["env"] if e["name"] == "SSEPROXY_ADMIN_TOKEN")
    secret = token["valueFrom"]["secretKeyRef"]
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": secret}


def test_kubernetes_objects_match_the_kubernetes_schemas() -> None:
    """Strict: an unknown or misplaced field fails (kubernetes-validate ships the schemas)."""
    import kubernetes_validate

    checked = 0
    for kind, obj in kubernetes_objects().items():
        if kind == "PodMonitor":  # a CRD: no schema shipped, its fields are checked above
            continue
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
        checked += 1
    assert checked == 2
    # the check has teeth: a misspelt probe is refused
    deployment = kubernetes_objects()["Deployment"]
    proxy = deployment["spec"]["template"]["spec"]["initContainers"][0]
    proxy["startupProb"] = proxy.pop("startupProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES, strict=True)


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def test_the_image_runs_the_python_ci_tests() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    tested = pyproject["tool"]["mypy"]["python_version"]
    [base] = re.findall(r"^FROM python:(\d+\.\d+)-slim$", dockerfile(), re.M)
    assert base == tested == f"{sys.version_info.major}.{sys.version_info.minor}"


async def test_the_image_healthcheck_uses_the_configured_port(proxy_server) -> None:
    """The HEALTHCHECK's command, run as Docker runs it, against a proxy on another port."""
    url = await proxy_server("http://127.0.0.1:9")
    port = url.rsplit(":", 1)[1].split("/")[0]
    [command] = re.findall(r'^\s*CMD (python -c ".*")$', dockerfile(), re.M)
    argv = shlex.split(command)
    argv[0] = sys.executable
    env = {**os.environ, "SSEPROXY_LISTEN": f"0.0.0.0:{port}"}
    ok = await asyncio.to_thread(subprocess.run, argv, env=env, capture_output=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    env["SSEPROXY_LISTEN"] = "0.0.0.0:9"  # nothing listens there: unhealthy
    down = await asyncio.to_thread(subprocess.run, argv, env=env, capture_output=True, timeout=30)
    assert down.returncode != 0


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


SELECTOR = re.compile(r"\b((?:sseproxy|up)[a-z0-9_]*)\b(\{[^}]*\})?(?!\s*\()")


def test_every_dashboard_panel_follows_the_variables() -> None:
    variables = {v["name"] for v in dashboard()["templating"]["list"]}
    assert variables == set(VARIABLES)
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            selectors = SELECTOR.findall(target["expr"])
            assert selectors, target["expr"]  # the scan itself works
            for name, matchers in selectors:
                if name in UNFILTERED:
                    continue
                for label, variable in VARIABLES.items():
                    assert f'{label}=~"{variable}"' in matchers, (panel["title"], name, label)


def header_commands(path: Path) -> list[str]:
    """The commands a deploy/ file's header comment tells the reader to run."""
    commands = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        match = re.match(r"#\s{3}(\S.*)$", line)
        if match:
            commands.append(match.group(1))
    return commands


@pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (.ci/run installs Debian's prometheus package)",
)
def test_promtool_commands_in_the_headers_work_as_written(tmp_path: Path) -> None:
    """In a copy of the repository's deploy/, from its root, after the compose file's first
    command has made the token file."""
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    [make_token] = [
        c for c in header_commands(DEPLOY / "docker-compose.yml") if c.startswith("mkdir ")
    ]
    if shutil.which("openssl"):
        subprocess.run(["sh", "-c", make_token], cwd=tmp_path, check=True, timeout=30)
    else:  # what the command makes
        (tmp_path / "deploy/secrets").mkdir()
        (tmp_path / "deploy/secrets/sseproxy-admin-token").write_text("t" * 64 + "\n")
    assert len((tmp_path / "deploy/secrets/sseproxy-admin-token").read_text().strip()) == 64
    found = [c for path in sorted(DEPLOY.rglob("*.y*ml")) for c in header_commands(path)]
    commands = list(dict.fromkeys(c for c in found if c.startswith("promtool ")))
    assert len(commands) == 3, commands  # check config, check rules, test rules
    for command in commands:
        argv = shlex.split(command)
        result = subprocess.run(
            [PROMTOOL, *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, (command, result.stdout + result.stderr)
        assert "SUCCESS" in result.stdout + result.stderr


def test_the_kubernetes_header_command_works_as_written() -> None:
    [command] = [
        c
        for c in header_commands(DEPLOY / "kubernetes/sseproxy-sidecar.yaml")
        if c.startswith("kubernetes-validate ")
    ]
    argv = shlex.split(command)
    tool = Path(sys.executable).with_name("kubernetes-validate")
    result = subprocess.run(
        [str(tool), *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "did not validate" not in result.stdout + result.stderr
    assert f"against version {KUBERNETES.rsplit('.', 1)[0]}" in result.stdout + result.stderr


@pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (.ci/run installs Debian's prometheus package)",
)
def test_promtool_accepts_every_dashboard_query(tmp_path: Path) -> None:
    assert PROMTOOL is not None
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
    for args in (["check", "rules", str(tmp_path / "dashboard-rules.yml")],):
        result = subprocess.run(
            [PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS" in result.stdout + result.stderr
