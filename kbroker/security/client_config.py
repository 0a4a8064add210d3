"""How kbroker's tools connect to a secured listener: a client properties file, as Kafka's tools
take it with `--command-config client.properties`.

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="alice" password="alice-secret";
    ssl.truststore.type=PEM
    ssl.truststore.location=/etc/kbroker/ca.pem

Read: `security.protocol`, `sasl.mechanism`, `sasl.jaas.config` (or librdkafka's
`sasl.username` / `sasl.password`), the PEM `ssl.*` settings of Kafka's clients (those
docs/security.md lists), and librdkafka's `ssl.ca.location`, `ssl.certificate.location`,
`ssl.key.location`, `ssl.key.password`. Any other `sasl.*` or `ssl.*` name is an error (it
would be ignored); other client settings (`client.id`, timeouts, ...) are ignored.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kbroker.security import jaas, tls
from kbroker.security.sasl_config import (
    KAFKA_DEFAULT_MECHANISM,
    LOGIN_MODULES,
    SUPPORTED_MECHANISMS,
    SaslCredentials,
)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_SASL_NAMES = frozenset({"sasl.mechanism", "sasl.jaas.config", "sasl.username", "sasl.password"})
_LIBRDKAFKA_TLS = {"ssl.ca.location", "ssl.certificate.location", "ssl.key.location"}


class ClientConfigError(ValueError):
    """Client properties that cannot be applied: the tool stops with the reason."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    sasl: SaslCredentials | None = None

    def wrap(self, sock: object, host: str) -> object:
        """The socket with TLS on it when the protocol asks for TLS (its handshake done)."""
        if self.ssl_context is None:
            return sock
        return self.ssl_context.wrap_socket(sock, server_hostname=host)  # type: ignore[arg-type]

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        protocol = (props.get("security.protocol") or "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise ClientConfigError(f"security.protocol={protocol}: expected one of {', '.join(PROTOCOLS)}")
        unknown = sorted(n for n in props if (n.startswith("sasl.") and n not in _SASL_NAMES)
                         or (n.startswith("ssl.") and n not in tls.HONOURED and n not in _LIBRDKAFKA_TLS))
        if unknown:
            raise ClientConfigError(f"{', '.join(unknown)}: not implemented by kbroker's tools")
        context = _tls_context(props) if protocol in ("SSL", "SASL_SSL") else None
        credentials = _credentials(props) if protocol.startswith("SASL_") else None
        return cls(protocol, context, credentials)


def _tls_context(props: Mapping[str, str]) -> ssl.SSLContext:
    tls_props = {k: v for k, v in props.items() if k.startswith("ssl.") and k not in _LIBRDKAFKA_TLS}
    try:
        if props.get("ssl.ca.location"):
            tls_props.setdefault("ssl.truststore.type", "PEM")
            tls_props["ssl.truststore.location"] = props["ssl.ca.location"]
        if props.get("ssl.certificate.location") or props.get("ssl.key.location"):
            tls_props.setdefault("ssl.keystore.type", "PEM")
            tls_props["ssl.keystore.certificate.chain"] = _read(props, "ssl.certificate.location")
            tls_props["ssl.keystore.key"] = _read(props, "ssl.key.location")
        return tls.TlsSettings.from_properties(tls_props).client_context()
    except tls.TlsConfigError as e:
        raise ClientConfigError(str(e)) from None


def _read(props: Mapping[str, str], name: str) -> str:
    location = props.get(name)
    if not location:
        raise ClientConfigError("ssl.certificate.location and ssl.key.location go together")
    try:
        return Path(location).read_text()
    except OSError as e:
        raise ClientConfigError(f"{name}={location}: {e.strerror or e}") from None


def _credentials(props: Mapping[str, str]) -> SaslCredentials:
    mechanism = (props.get("sasl.mechanism") or KAFKA_DEFAULT_MECHANISM).strip()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ClientConfigError(f"sasl.mechanism={mechanism}: kbroker's tools implement "
                                f"{', '.join(SUPPORTED_MECHANISMS)}")
    if props.get("sasl.jaas.config"):
        try:
            module = jaas.parse_login_module(props["sasl.jaas.config"])
        except jaas.JaasError as e:
            raise ClientConfigError(f"sasl.jaas.config: {e}") from None
        if module.class_name != LOGIN_MODULES[mechanism]:
            raise ClientConfigError(f"sasl.jaas.config: {mechanism} takes {LOGIN_MODULES[mechanism]}, "
                                    f"not {module.class_name}")
        username, password = module.options.get("username"), module.options.get("password")
    else:
        username, password = props.get("sasl.username"), props.get("sasl.password")
    if not username or password is None:
        raise ClientConfigError("SASL needs a username and password: sasl.jaas.config with username=\"...\" "
                                "password=\"...\", or sasl.username and sasl.password")
    return SaslCredentials(mechanism, username, password)
