"""The intercept CA and its leaves: made once and reused, the key private, and leaves that the
strictest clients accept (AKI = the CA's SKI, SAN, serverAuth, < 200 days, ALPN http/1.1)."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from sseproxy.intercept import ca
from sseproxy.intercept.destination import Destination, intercepted_route

NOW = datetime.datetime(2026, 12, 3, 8, 0, tzinfo=datetime.UTC)


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> ca.Authority:
    return ca.load_or_create(tmp_path_factory.mktemp("ca") / "sseproxy")


@pytest.fixture(scope="module")
def leaves(authority: ca.Authority) -> ca.Leaves:
    return ca.Leaves(authority, limit=4)


def test_the_default_folder_follows_xdg() -> None:
    assert ca.default_directory({"XDG_DATA_HOME": "/data", "HOME": "/h"}) == Path("/data/sseproxy")
    assert ca.default_directory({"HOME": "/h"}) == Path("/h/.local/share/sseproxy")
    # a relative XDG_DATA_HOME is ignored, as the base directory spec says
    assert ca.default_directory({"XDG_DATA_HOME": "rel", "HOME": "/h"}) == Path(
        "/h/.local/share/sseproxy"
    )
    assert ca.ca_directory("/etc/x", {"HOME": "/h"}) == Path("/etc/x")


def test_made_once_with_a_private_key_then_reused(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "sseproxy"
    first = ca.load_or_create(folder)
    assert stat.S_IMODE(first.key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    again = ca.load_or_create(folder)
    assert again.fingerprint == first.fingerprint
    assert again.certificate == first.certificate
    assert len(first.fingerprint.split(":")) == 32  # SHA-256
    constraints = first.certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca


def test_a_key_without_its_certificate_is_refused(tmp_path: Path) -> None:
    made = ca.load_or_create(tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / ca.CA_KEY).write_bytes(made.key_path.read_bytes())
    with pytest.raises(ca.CAError, match="cannot read"):
        ca.load_or_create(tmp_path / "b")


def test_a_certificate_and_key_that_do_not_match_are_refused(tmp_path: Path) -> None:
    one, two = ca.load_or_create(tmp_path / "one"), ca.load_or_create(tmp_path / "two")
    one.key_path.write_bytes(two.key_path.read_bytes())
    with pytest.raises(ca.CAError, match="do not belong together"):
        ca.load_or_create(tmp_path / "one")


def ext(cert: x509.Certificate, kind: type[x509.ExtensionType]) -> x509.Extension:
    return cert.extensions.get_extension_for_class(kind)


def test_a_leaf_has_aki_san_eku_and_a_short_validity(
    authority: ca.Authority, leaves: ca.Leaves
) -> None:
    leaf = leaves.certificate("api.openai.com", now=NOW)
    aki = ext(leaf, x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == authority.key_identifier
    assert ext(leaf, x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName) == [
        "api.openai.com"
    ]
    assert list(ext(leaf, x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not ext(leaf, x509.BasicConstraints).value.ca
    assert leaf.not_valid_before_utc == NOW - datetime.timedelta(days=1)
    assert leaf.not_valid_after_utc - leaf.not_valid_before_utc < datetime.timedelta(days=200)
    assert leaf.issuer == authority.certificate.subject
    leaf.verify_directly_issued_by(authority.certificate)


def test_an_ip_address_gets_an_ip_san(leaves: ca.Leaves) -> None:
    leaf = leaves.certificate("127.0.0.1", now=NOW)
    san = ext(leaf, x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == []


def test_every_leaf_shares_one_key(leaves: ca.Leaves) -> None:
    a, b = leaves.certificate("a.example"), leaves.certificate("b.example")
    assert a.public_key() == b.public_key()
    assert a.serial_number != b.serial_number


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, name: str) -> str | None:
    """A real TLS handshake over a socket pair; the ALPN protocol the client got."""
    ours, theirs = socket.socketpair()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with server.wrap_socket(theirs, server_side=True) as tls:
                tls.recv(1)
        except (OSError, ssl.SSLError) as exc:
            errors.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client.wrap_socket(ours, server_hostname=name) as tls:
            protocol = tls.selected_alpn_protocol()
            tls.sendall(b"x")
    finally:
        thread.join(10)
    assert not errors, errors
    return protocol


def strict_client(authority: ca.Authority, alpn: list[str]) -> ssl.SSLContext:
    """A client as strict as Python 3.13's default (VERIFY_X509_STRICT: a leaf needs an AKI)."""
    client = ssl.create_default_context(cafile=str(authority.cert_path))
    client.verify_flags |= ssl.VERIFY_X509_STRICT
    client.set_alpn_protocols(alpn)
    return client


def test_a_strict_client_verifies_the_leaf_and_gets_http_1_1(
    authority: ca.Authority, leaves: ca.Leaves
) -> None:
    context = leaves.context(Destination("localhost", 443))
    assert handshake(context, strict_client(authority, ["h2", "http/1.1"]), "localhost") == (
        "http/1.1"
    )


def test_a_client_asking_only_for_h2_gets_no_protocol(
    authority: ca.Authority, leaves: ca.Leaves
) -> None:
    """h2 is never offered: a client that asks only for it is told nothing and must fall back
    (or fail), never speak h2 to the HTTP/1.1 handler."""
    context = leaves.context(Destination("localhost", 443))
    assert handshake(context, strict_client(authority, ["h2"]), "localhost") is None


def test_a_client_without_the_ca_refuses_the_leaf(leaves: ca.Leaves) -> None:
    context = leaves.context(Destination("localhost", 443))
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(context, ssl.create_default_context(), "localhost")


def test_the_context_carries_its_route(leaves: ca.Leaves) -> None:
    context = leaves.context(Destination("api.anthropic.com", 8443))
    route = intercepted_route(context)
    assert route is not None
    assert str(route.url) == "https://api.anthropic.com:8443"
    assert str(route.target("/v1/messages?beta=true")) == (
        "https://api.anthropic.com:8443/v1/messages?beta=true"
    )
    assert intercepted_route(ssl.create_default_context()) is None
    assert intercepted_route(None) is None


def test_contexts_are_kept_up_to_the_bound_and_the_oldest_goes(authority: ca.Authority) -> None:
    leaves = ca.Leaves(authority, limit=ca.MAX_CONTEXTS)
    hosts = [Destination(f"h{i}.example", 443) for i in range(ca.MAX_CONTEXTS)]
    first = [leaves.context(d) for d in hosts]
    assert len(leaves) == ca.MAX_CONTEXTS and leaves.minted == ca.MAX_CONTEXTS
    assert leaves.context(hosts[0]) is first[0]  # at the bound: all kept, none minted again
    assert leaves.minted == ca.MAX_CONTEXTS
    leaves.context(Destination("one-more.example", 443))  # one more: the oldest used goes
    assert len(leaves) == ca.MAX_CONTEXTS
    assert leaves.context(hosts[0]) is first[0]  # used just now: kept
    assert leaves.minted == ca.MAX_CONTEXTS + 1
    assert leaves.context(hosts[1]) is not first[1]  # the oldest: minted again
    assert leaves.minted == ca.MAX_CONTEXTS + 2


def test_a_kept_context_is_made_again_before_its_leaf_expires(
    authority: ca.Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    leaves = ca.Leaves(authority)
    destination = Destination("api.openai.com", 443)
    monkeypatch.setattr(ca, "_now", lambda: NOW)
    first = leaves.context(destination)
    later = NOW + ca.LEAF_REFRESH - datetime.timedelta(seconds=1)
    monkeypatch.setattr(ca, "_now", lambda: later)
    assert leaves.context(destination) is first
    monkeypatch.setattr(ca, "_now", lambda: NOW + ca.LEAF_REFRESH)
    again = leaves.context(destination)
    assert again is not first and len(leaves) == 1
    assert again.minted_at == NOW + ca.LEAF_REFRESH
    assert ca.LEAF_REFRESH < ca.LEAF_VALIDITY - ca.BACKDATE  # refreshed while still valid
