"""TLS material for tests and walkthroughs: a CA, server and client certificates, in PEM.

Made with `cryptography` at run time (nothing secret is committed). `TlsMaterial.create(dir)`
writes a CA and a server certificate for 127.0.0.1 / localhost; `client(...)` adds client
certificates, optionally expired or signed by another CA. Keys are PKCS#8, as Kafka's PEM
key stores require; `server_properties()` gives the broker settings that use them.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DAY = datetime.timedelta(days=1)


def _name(**attributes: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME,
            "C": NameOID.COUNTRY_NAME, "L": NameOID.LOCALITY_NAME, "E": NameOID.EMAIL_ADDRESS}
    # Most general first in the certificate, as openssl -subj "/C=../O=../CN=.." writes it.
    order = ["C", "L", "O", "OU", "CN", "E"]
    return x509.Name([x509.NameAttribute(oids[k], attributes[k]) for k in order if k in attributes])


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> str:
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption).decode()


def _cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@dataclass(frozen=True)
class Identity:
    """A key and its certificate chain, as files: `key` + `chain` apart, and `store` holding both
    (a Kafka PEM key store file)."""

    key: Path
    chain: Path
    store: Path
    password: str | None = None

    @property
    def key_pem(self) -> str:
        return self.key.read_text()

    @property
    def chain_pem(self) -> str:
        return self.chain.read_text()


class CertificateAuthority:
    def __init__(self, directory: Path, name: str = "kbroker test CA") -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        subject = _name(O="kbroker tests", CN=name)
        self.certificate = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - DAY).not_valid_after(now + 30 * DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.pem_path = directory / f"{name.replace(' ', '-')}.pem"
        self.pem_path.write_text(self.pem)

    @property
    def pem(self) -> str:
        return _cert_pem(self.certificate)

    def issue(self, file_stem: str, subject: x509.Name, *, server: bool, expired: bool = False,
              password: str | None = None) -> Identity:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        valid_from, valid_to = (now - 10 * DAY, now - DAY) if expired else (now - DAY, now + 30 * DAY)
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(self.certificate.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(valid_from).not_valid_after(valid_to)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
        )
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        key_pem, chain_pem = _key_pem(key, password), _cert_pem(cert) + self.pem
        paths = [self.directory / f"{file_stem}{suffix}" for suffix in ("-key.pem", "-chain.pem", "-store.pem")]
        for path, text in zip(paths, (key_pem, chain_pem, key_pem + chain_pem), strict=True):
            path.write_text(text)
        return Identity(*paths, password=password)


@dataclass
class TlsMaterial:
    directory: Path
    ca: CertificateAuthority
    server: Identity

    @classmethod
    def create(cls, directory: Path, key_password: str | None = None) -> TlsMaterial:
        directory.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority(directory)
        server = ca.issue("server", _name(O="kbroker tests", CN="localhost"), server=True, password=key_password)
        return cls(directory, ca, server)

    def client(self, common_name: str = "client", *, organizational_unit: str | None = "eng",
               expired: bool = False, other_ca: bool = False, password: str | None = None) -> Identity:
        """A client certificate for `CN=<common_name>,OU=<unit>,O=kbroker tests`; `other_ca`
        signs it with a CA the broker does not trust."""
        ca = CertificateAuthority(self.directory, "untrusted CA") if other_ca else self.ca
        attributes = {"O": "kbroker tests", "CN": common_name}
        if organizational_unit:
            attributes["OU"] = organizational_unit
        stem = f"client-{common_name}{'-expired' if expired else ''}{'-untrusted' if other_ca else ''}"
        return ca.issue(stem, _name(**attributes), server=False, expired=expired, password=password)

    def server_properties(self, client_auth: str = "none", prefix: str = "") -> dict[str, str]:
        """Broker settings for an SSL listener with the server certificate (`prefix`:
        `listener.name.<name>.` for one listener only)."""
        props = {
            f"{prefix}ssl.keystore.type": "PEM",
            f"{prefix}ssl.keystore.location": str(self.server.store),
            f"{prefix}ssl.truststore.type": "PEM",
            f"{prefix}ssl.truststore.location": str(self.ca.pem_path),
            f"{prefix}ssl.client.auth": client_auth,
        }
        if self.server.password:
            props[f"{prefix}ssl.key.password"] = self.server.password
        return props
