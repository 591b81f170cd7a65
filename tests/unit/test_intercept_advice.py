"""`sseproxy ca`: the CA's path and fingerprint, and per client family the variables to set."""

from __future__ import annotations

import hashlib
import ssl
from pathlib import Path

import pytest

from sseproxy import cli


def run_ca(argv: list[str], home: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(["ca", *argv])
    return code, capsys.readouterr().out


@pytest.fixture
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("SSEPROXY_CA_DIR", "SSEPROXY_INTERCEPT_LISTEN", "SSEPROXY_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data"


def test_ca_prints_the_file_its_fingerprint_and_the_variables(
    data_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_ca([], data_home, capsys)
    assert code == 0
    cert = data_home / "sseproxy" / "sseproxy-ca.pem"
    der = ssl.PEM_cert_to_DER_cert(cert.read_text())
    fingerprint = hashlib.sha256(der).hexdigest().upper()
    lines = out.splitlines()
    assert lines[0] == f"CA certificate:  {cert}  (made just now)"
    assert lines[1].split()[-1].replace(":", "") == fingerprint
    bundle = data_home / "sseproxy" / "sseproxy-ca-bundle.pem"
    for expected in (
        "export HTTPS_PROXY=http://127.0.0.1:8791",
        "export HTTP_PROXY=http://127.0.0.1:8791",
        "export http_proxy=http://127.0.0.1:8791",
        "export ALL_PROXY=http://127.0.0.1:8791",
        "export NO_PROXY=localhost,127.0.0.1,::1",
        f"export NODE_EXTRA_CA_CERTS={cert}",
        "export NODE_USE_ENV_PROXY=1",
        f"export SSL_CERT_FILE={bundle}",
        f"export CODEX_CA_CERTIFICATE={bundle}",
        f"export REQUESTS_CA_BUNDLE={bundle}",
    ):
        assert any(line.strip().startswith(expected + " ") for line in lines), expected
    assert "--intercept-listen 127.0.0.1:8791" in out
    # the bundle ends with the CA: clients that replace their store still trust tunnelled hosts
    assert bundle.read_text().endswith(cert.read_text())
    code, again = run_ca([], data_home, capsys)
    assert "(made just now)" not in again
    assert again.splitlines()[1] == lines[1]  # the same CA, reused


def test_ca_env_prints_only_export_lines_for_the_configured_listener(
    data_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "elsewhere"
    code, out = run_ca(
        ["--env", "--ca-dir", str(folder), "--intercept-listen", "localhost:9"], data_home, capsys
    )
    assert code == 0
    lines = out.splitlines()
    assert all(line.startswith("export ") for line in lines)
    assert lines[0] == "export HTTPS_PROXY=http://localhost:9"
    assert f"export NODE_EXTRA_CA_CERTS={folder / 'sseproxy-ca.pem'}" in lines
    assert not (data_home / "sseproxy").exists()


def test_ca_in_a_folder_it_cannot_write_says_so(
    data_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = cli.main(["ca", "--ca-dir", str(blocker / "sub")])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("sseproxy ca: cannot create the CA in ")


@pytest.mark.parametrize(
    ("intercepted", "expected"),
    [
        (frozenset(), "localhost,127.0.0.1,::1"),
        (frozenset({"api.openai.com", "chatgpt.com"}), "localhost,127.0.0.1,::1"),
        (frozenset({"localhost"}), "127.0.0.1,::1"),  # a local stand-in, intercepted in tests
        (frozenset({"127.0.0.1", "[::1]"}), "localhost"),
    ],
)
def test_no_proxy_keeps_loopback_less_what_is_intercepted(
    intercepted: frozenset[str], expected: str
) -> None:
    from sseproxy.intercept.advice import no_proxy

    assert no_proxy(intercepted) == expected


def test_ca_leaves_an_intercepted_loopback_name_out_of_no_proxy(
    data_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSEPROXY_INTERCEPT_HOSTS", "localhost")
    code, out = run_ca(["--env"], data_home, capsys)
    assert code == 0
    assert "export NO_PROXY=127.0.0.1,::1" in out.splitlines()
