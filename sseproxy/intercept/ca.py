"""The local certificate authority of intercept mode, and the leaves it signs per destination.

Made once with `cryptography`, on first use, in the user's data directory (or `ca_dir`), and
reused afterwards: clients are told to trust `sseproxy-ca.pem` once. Its key is written `0600`
in a `0700` directory and never leaves it (no record, capture or page shows it). Nothing is
ever installed into a system trust store: each client is pointed at the file (`sseproxy ca`).

Leaves follow what clients are known to demand (mitmproxy's choices): one leaf key per process
for every leaf, so a new host costs one signature; the CA's subject key identifier copied into
each leaf's authority key identifier (Python 3.13's `ssl` refuses a leaf without one); the
host as a DNS or IP subject alternative name; the serverAuth extended key usage; validity
back-dated a day (a client's clock behind ours) and under 200 days in all (Chromium refuses
longer ones). Each destination's context offers ALPN `http/1.1` only: a client offered
nothing may try HTTP/2 (Codex's does), and the handler speaks HTTP/1.1.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import ssl
import tempfile
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sseproxy.intercept.destination import Destination, InterceptContext

CA_CERT = "sseproxy-ca.pem"
CA_KEY = "sseproxy-ca-key.pem"
CA_NAME = "sseproxy local interception CA"
CA_VALIDITY = datetime.timedelta(days=3650)
BACKDATE = datetime.timedelta(days=1)
# Leaf validity from its back-dated start: under Chromium's 200 days (180 + the day before).
LEAF_VALIDITY = datetime.timedelta(days=181)
# A kept context is made again once its leaf is this old (a proxy that runs for months).
LEAF_REFRESH = datetime.timedelta(days=90)
# Destinations whose TLS context is kept (a context per host and port; the oldest goes first).
MAX_CONTEXTS = 256
ALPN = ("http/1.1",)
# How long a process that lost the race to create the CA waits for the winner's certificate.
CREATE_RACE_WAIT = 2.0


class CAError(Exception):
    """The CA's folder cannot be used: said in one line, for the command line."""


def default_directory(environ: Mapping[str, str]) -> Path:
    """`$XDG_DATA_HOME/sseproxy`, else `~/.local/share/sseproxy` (the XDG base directory)."""
    base = environ.get("XDG_DATA_HOME") or ""
    if not os.path.isabs(base):  # the spec: a relative value is ignored
        home = environ.get("HOME") or str(Path.home())
        base = os.path.join(home, ".local", "share")
    return Path(base) / "sseproxy"


def ca_directory(configured: str, environ: Mapping[str, str]) -> Path:
    """`ca_dir` when set, else the default."""
    return Path(configured).expanduser() if configured else default_directory(environ)


@dataclass(frozen=True, slots=True)
class Authority:
    directory: Path
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_path(self) -> Path:
        return self.directory / CA_CERT

    @property
    def key_path(self) -> Path:
        return self.directory / CA_KEY

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the certificate, as `openssl x509 -fingerprint -sha256` prints it."""
        return self.certificate.fingerprint(hashes.SHA256()).hex(":").upper()

    @property
    def key_identifier(self) -> bytes:
        return self.certificate.extensions.get_extension_for_class(
            x509.SubjectKeyIdentifier
        ).value.digest


def load_or_create(directory: Path, now: datetime.datetime | None = None) -> Authority:
    """The CA in `directory`, made there first if it holds none. Raises CAError."""
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    if not key_path.exists() and not cert_path.exists():
        try:
            return _create(directory, now or _now())
        except FileExistsError:  # another process is making it: use theirs
            deadline = time.monotonic() + CREATE_RACE_WAIT
            while not cert_path.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        except OSError as exc:
            raise CAError(f"cannot create the CA in {directory}: {exc.strerror}") from exc
    return _load(directory)


def _load(directory: Path) -> Authority:
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    try:
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except OSError as exc:
        raise CAError(f"cannot read the CA in {directory}: {exc.strerror}: {exc.filename}") from exc
    except ValueError as exc:
        raise CAError(f"the CA in {directory} is not a PEM certificate and key: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CAError(f"the CA key in {directory} is not an elliptic-curve key")
    if certificate.public_key() != key.public_key():
        raise CAError(f"the CA certificate and key in {directory} do not belong together")
    return Authority(directory, certificate, key)


def _create(directory: Path, now: datetime.datetime) -> Authority:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # O_EXCL: two processes starting at once cannot both write a key (FileExistsError).
    fd = os.open(directory / CA_KEY, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(key_pem)
    partial = directory / (CA_CERT + ".partial")
    partial.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    partial.replace(directory / CA_CERT)  # whole or absent, for a process waiting on it
    return Authority(directory, certificate, key)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def san_for(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


class Leaves:
    """Leaf certificates and TLS contexts per destination, at most `limit` of them kept."""

    def __init__(self, authority: Authority, limit: int = MAX_CONTEXTS) -> None:
        self.authority = authority
        self.limit = limit
        self.minted = 0  # signatures made, for tests and metrics
        self._key = ec.generate_private_key(ec.SECP256R1())  # one for every leaf
        self._key_pem = self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        self._aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(
            authority.certificate.extensions.get_extension_for_class(
                x509.SubjectKeyIdentifier
            ).value
        )
        self._ski = x509.SubjectKeyIdentifier.from_public_key(self._key.public_key())
        self._contexts: OrderedDict[Destination, InterceptContext] = OrderedDict()

    def __len__(self) -> int:
        return len(self._contexts)

    def context(self, destination: Destination) -> InterceptContext:
        """The server-side context for `destination`, made on first use (one signature)."""
        context = self._contexts.get(destination)
        now = _now()
        if context is not None and now - context.minted_at < LEAF_REFRESH:
            self._contexts.move_to_end(destination)
            return context
        context = self._make_context(destination, self.certificate(destination.host, now))
        context.minted_at = now
        self._contexts[destination] = context
        self._contexts.move_to_end(destination)
        if len(self._contexts) > self.limit:
            self._contexts.popitem(last=False)
        return context

    def certificate(self, host: str, now: datetime.datetime | None = None) -> x509.Certificate:
        now = now or _now()
        self.minted += 1
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self.authority.certificate.subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now - BACKDATE + LEAF_VALIDITY)
            .add_extension(x509.SubjectAlternativeName([san_for(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(self._ski, critical=False)
            .add_extension(self._aki, critical=False)
            .sign(self.authority.key, hashes.SHA256())
        )

    def _make_context(
        self, destination: Destination, certificate: x509.Certificate
    ) -> InterceptContext:
        context = InterceptContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(list(ALPN))
        pem = certificate.public_bytes(serialization.Encoding.PEM) + self._key_pem
        # `ssl` loads a chain only from a file: a private one, unlinked as soon as it is read.
        with tempfile.TemporaryDirectory(prefix="sseproxy-leaf-") as folder:
            path = os.path.join(folder, secrets.token_hex(8))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as file:
                file.write(pem)
            context.load_cert_chain(path)
        context.destination = destination
        context.route = destination.route()
        return context
