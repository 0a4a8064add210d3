"""A throwaway CA and a server certificate for 127.0.0.1, for the TLS benchmark.

Made with `cryptography` when the benchmark runs (nothing secret is kept): PEM files a broker
reads as a Kafka PEM key store (`ssl.keystore.location`: PKCS#8 key, then the chain) and a
client reads as its CA (`ssl.ca.location`).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True, slots=True)
class LocalTls:
    ca: Path  # the CA certificate clients trust
    key_store: Path  # the broker's key and certificate chain


def _certificate(subject: str, issuer: x509.Name | None, public_key: ec.EllipticCurvePublicKey,
                 signing_key: ec.EllipticCurvePrivateKey, *, ca: bool) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name).public_key(public_key)
               .serial_number(x509.random_serial_number()).not_valid_before(now - _VALIDITY)
               .not_valid_after(now + _VALIDITY)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(signing_key, hashes.SHA256())


def create_local_tls(directory: Path) -> LocalTls:
    """Write a CA and a broker key store for 127.0.0.1/localhost into `directory`."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _certificate("kbroker bench CA", None, ca_key.public_key(), ca_key, ca=True)
    broker_key = ec.generate_private_key(ec.SECP256R1())
    broker_cert = _certificate("127.0.0.1", ca_cert.subject, broker_key.public_key(), ca_key, ca=False)
    pem = serialization.Encoding.PEM
    ca_pem = ca_cert.public_bytes(pem)
    key_pem = broker_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    tls = LocalTls(directory / "bench-ca.pem", directory / "bench-broker-store.pem")
    tls.ca.write_bytes(ca_pem)
    tls.key_store.write_bytes(key_pem + broker_cert.public_bytes(pem) + ca_pem)
    tls.key_store.chmod(0o600)
    return tls
