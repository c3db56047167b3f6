"""Test certificates made at run time (never committed): certificate authorities, server and
client certificates signed by them, written as PEM files.

Used by the secured Kafka tests (the broker's certificate, clients' certificates by CN) and
by the gRPC TLS tests. Keys are EC P-256: quick to make, and accepted by the JVM, OpenSSL
and gRPC alike.

    ca = make_ca("test-ca", directory)            # or make_ca("test-ca"): a temporary dir
    broker = issue(ca, "broker", server=True, ips=["127.0.0.1"], dns=["localhost"])
    client = issue(ca, "processor")
    expired = issue(ca, "late", not_after=datetime.now(UTC) - timedelta(days=1))
"""

from __future__ import annotations

import datetime
import ipaddress
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

UTC = datetime.UTC
#: How long certificates are valid by default: longer than any test run.
VALID = datetime.timedelta(days=2)


@dataclass(frozen=True)
class Issued:
    """A certificate and its key as PEM files (``chain``: the certificate, then its CA's)."""

    cn: str
    cert: Path
    key: Path
    chain: Path

    @property
    def pem(self) -> bytes:
        return self.cert.read_bytes()

    @property
    def key_pem(self) -> bytes:
        return self.key.read_bytes()


@dataclass(frozen=True)
class CA:
    """A certificate authority: its certificate (``cert``, the file clients trust) and key."""

    name: str
    cert: Path
    key: Path
    directory: Path
    certificate: x509.Certificate
    private_key: ec.EllipticCurvePrivateKey

    @property
    def pem(self) -> bytes:
        return self.cert.read_bytes()


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(name: str, directory: Path | None = None) -> CA:
    """A new self-signed CA named ``name``, its files ``<name>-ca.pem``/``<name>-ca.key``
    in ``directory`` (created if missing; default: a new temporary directory, which the
    certificates it issues share)."""
    if directory is None:
        directory = Path(tempfile.mkdtemp(prefix="sow-pki-"))
    directory.mkdir(parents=True, exist_ok=True)
    key = _key()
    now = datetime.datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}-ca.pem", directory / f"{name}-ca.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    _write_key(key, key_path)
    return CA(name, cert_path, key_path, directory, certificate, key)


def issue(
    ca: CA,
    cn: str,
    *,
    server: bool = False,
    not_after: datetime.datetime | None = None,
    not_before: datetime.datetime | None = None,
    ips: Sequence[str] = (),
    dns: Sequence[str] = (),
    directory: Path | None = None,
) -> Issued:
    """A certificate for ``cn`` signed by ``ca``: a server certificate (server and client
    authentication, with the SANs ``ips`` and ``dns``) when ``server``, else a client one.
    ``not_after`` in the past makes an expired certificate. Files ``<cn>.pem``,
    ``<cn>.key`` and ``<cn>-chain.pem`` in ``directory`` (default: the CA's)."""
    directory = directory or ca.directory
    directory.mkdir(parents=True, exist_ok=True)
    key = _key()
    now = datetime.datetime.now(UTC)
    after = not_after or now + VALID
    before = not_before or min(now - datetime.timedelta(minutes=5), after - VALID)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if server:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(before)
        .not_valid_after(after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.private_key.public_key()),
            critical=False,
        )
    )
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    certificate = builder.sign(ca.private_key, hashes.SHA256())
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    cert_path, key_path = directory / f"{cn}.pem", directory / f"{cn}.key"
    chain_path = directory / f"{cn}-chain.pem"
    cert_path.write_bytes(pem)
    chain_path.write_bytes(pem + ca.pem)
    _write_key(key, key_path)
    return Issued(cn, cert_path, key_path, chain_path)
