"""TLS for listeners and inter-broker connections, from Kafka's `ssl.*` settings (PEM form).

Kafka's property names and rules (DefaultSslEngineFactory): a PEM key store is
`ssl.keystore.type=PEM` with `ssl.keystore.location` (one file: private key and certificate
chain) or `ssl.keystore.key` + `ssl.keystore.certificate.chain` (PEM text), the key encrypted
with `ssl.key.password` if it is; a PEM trust store is `ssl.truststore.location` or
`ssl.truststore.certificates`. JKS and PKCS12 stores are not read: they stop the start (a key
store that is not read would serve without the certificate the operator configured).

Every setting here is honoured or refused, never ignored: `TlsSettings.from_properties` raises
`TlsConfigError` for anything it cannot apply (an unknown `ssl.*` name, a protocol or cipher
suite Python's `ssl` cannot restrict to, a Java-only provider).
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kbroker.security.principal import SslPrincipalMapper

PEM = "PEM"
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
             "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# TLS 1.3's suites, which OpenSSL names as IANA does; Python's ssl cannot restrict them.
TLS13_SUITES = frozenset({"TLS_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256", "TLS_CHACHA20_POLY1305_SHA256"})
# TLS 1.2 suites: Kafka (Java) names them as IANA does, OpenSSL by its own names.
TLS12_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
}

# Every ssl.* setting kbroker applies. Anything else under ssl. stops the start.
HONOURED = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.client.auth", "ssl.enabled.protocols", "ssl.protocol", "ssl.cipher.suites",
    "ssl.principal.mapping.rules", "ssl.endpoint.identification.algorithm",
    # Java-only knobs: their defaults name what OpenSSL does anyway (checked in from_properties).
    "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.secure.random.implementation",
    # Checks of a key store replaced at run time, which kbroker never does.
    "ssl.allow.dn.changes", "ssl.allow.san.changes",
})
_JAVA_DEFAULTS = {"ssl.keymanager.algorithm": {"SunX509", "PKIX"}, "ssl.trustmanager.algorithm": {"PKIX", "SunX509"}}


class TlsConfigError(ValueError):
    """TLS settings that cannot be applied as given: the broker does not start."""


@dataclass(frozen=True, slots=True)
class KeyStore:
    certificate_chain: str = field(repr=False)  # PEM text: the certificate first, then its issuers
    private_key: str = field(repr=False)  # PEM text; never in a log line
    key_password: str | None = field(repr=False)


@dataclass(frozen=True, slots=True)
class TlsSettings:
    key_store: KeyStore | None
    trusted_certificates: str | None = field(repr=False)  # PEM text; None: the system's trust store
    client_auth: str  # none, requested, required
    minimum_version: ssl.TLSVersion
    maximum_version: ssl.TLSVersion
    ciphers: str | None  # OpenSSL cipher list for TLS 1.2 and below; None: OpenSSL's defaults
    principal_mapper: SslPrincipalMapper
    check_hostname: bool  # ssl.endpoint.identification.algorithm=https, when connecting as a client

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TlsSettings:
        """Settings of one listener: `props` holds its `ssl.*` values, overrides already applied."""
        unknown = sorted(n for n in props if n.startswith("ssl.") and n not in HONOURED)
        if unknown:
            raise TlsConfigError(f"{', '.join(unknown)}: not implemented by kbroker")
        for name, allowed in _JAVA_DEFAULTS.items():
            if props.get(name) and props[name].strip() not in allowed:
                raise TlsConfigError(f"{name}={props[name]}: only the JVM's defaults ({', '.join(sorted(allowed))}) "
                                     "match what kbroker's TLS does")
        client_auth = (props.get("ssl.client.auth") or "none").strip().lower()
        if client_auth not in CLIENT_AUTH:
            raise TlsConfigError(f"ssl.client.auth={client_auth}: expected none, requested or required")
        minimum, maximum = _versions(props)
        ciphers, maximum = _ciphers(props.get("ssl.cipher.suites"), minimum, maximum)
        try:
            mapper = SslPrincipalMapper(props.get("ssl.principal.mapping.rules"))
        except ValueError as e:
            raise TlsConfigError(f"ssl.principal.mapping.rules: {e}") from None
        algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
        if algorithm not in ("https", ""):
            raise TlsConfigError(f"ssl.endpoint.identification.algorithm={algorithm}: expected https or empty")
        return cls(_key_store(props), _trust_store(props), client_auth, minimum, maximum, ciphers, mapper,
                   algorithm == "https")

    # -- contexts -------------------------------------------------------------------------------

    def server_context(self) -> ssl.SSLContext:
        """The context of a listener: its certificate, and client certificates checked per ssl.client.auth."""
        if self.key_store is None:
            raise TlsConfigError("an SSL listener needs a key store: ssl.keystore.type=PEM with ssl.keystore.location, "
                                 "or ssl.keystore.key and ssl.keystore.certificate.chain")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._common(context)
        context.verify_mode = CLIENT_AUTH[self.client_auth]
        if self.client_auth != "none":
            self._trust(context, ssl.Purpose.CLIENT_AUTH)
        return context

    def client_context(self) -> ssl.SSLContext:
        """The context of this broker connecting to another's listener (replication, markers)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = self.check_hostname
        context.verify_mode = ssl.CERT_REQUIRED
        self._common(context)
        self._trust(context, ssl.Purpose.SERVER_AUTH)
        return context

    def _common(self, context: ssl.SSLContext) -> None:
        try:
            context.minimum_version = self.minimum_version
            context.maximum_version = self.maximum_version
            if self.ciphers is not None:
                context.set_ciphers(self.ciphers)
        except (ValueError, ssl.SSLError) as e:
            raise TlsConfigError(f"ssl.enabled.protocols / ssl.cipher.suites cannot be applied: {e}") from None
        if self.key_store is not None:
            _load_key_store(context, self.key_store)

    def _trust(self, context: ssl.SSLContext, purpose: ssl.Purpose) -> None:
        if self.trusted_certificates is None:
            context.load_default_certs(purpose)  # as Java falls back to the JVM's trust store
            return
        try:
            context.load_verify_locations(cadata=self.trusted_certificates)
        except (ssl.SSLError, ValueError) as e:
            raise TlsConfigError(f"the trust store holds no readable PEM certificate: {e}") from None


def _versions(props: Mapping[str, str]) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    """ssl.enabled.protocols (a contiguous range) capped by ssl.protocol, as in Kafka: a context
    made for TLSv1.2 never negotiates TLSv1.3 even when it is enabled."""
    enabled_text = props.get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3"
    names = [p.strip() for p in enabled_text.split(",") if p.strip()]
    unknown = [n for n in names if n not in _VERSIONS]
    if unknown or not names:
        raise TlsConfigError(f"ssl.enabled.protocols={enabled_text}: kbroker serves {', '.join(_VERSIONS)}")
    versions = sorted(_VERSIONS[n] for n in names)
    every = sorted(_VERSIONS.values())
    if every[every.index(versions[0]):every.index(versions[-1]) + 1] != versions:
        raise TlsConfigError(f"ssl.enabled.protocols={enabled_text}: OpenSSL enables a range of versions, "
                             "not one with gaps")
    protocol = (props.get("ssl.protocol") or "TLSv1.3").strip()
    if protocol == "TLS":
        cap = ssl.TLSVersion.TLSv1_3
    elif protocol in _VERSIONS:
        cap = _VERSIONS[protocol]
    else:
        raise TlsConfigError(f"ssl.protocol={protocol}: expected TLS, TLSv1.2 or TLSv1.3")
    maximum = min(versions[-1], cap)
    if maximum < versions[0]:
        raise TlsConfigError(f"ssl.protocol={protocol} allows none of ssl.enabled.protocols={enabled_text}")
    return versions[0], maximum


def _ciphers(text: str | None, minimum: ssl.TLSVersion,
             maximum: ssl.TLSVersion) -> tuple[str | None, ssl.TLSVersion]:
    """ssl.cipher.suites (IANA names, as Java's) as an OpenSSL list for TLS 1.2 and below. TLS 1.3
    suites cannot be restricted through Python's ssl: a list naming some but not all of them is
    refused; one naming none keeps TLS 1.3 off, as Java does (it has no suite to offer)."""
    suites = [s.strip() for s in (text or "").split(",") if s.strip()]
    if not suites:
        return None, maximum
    unknown = [s for s in suites if s not in TLS12_SUITES and s not in TLS13_SUITES]
    if unknown:
        raise TlsConfigError(f"ssl.cipher.suites: {', '.join(unknown)} not known to kbroker "
                             f"(TLS 1.2: {', '.join(TLS12_SUITES)}; TLS 1.3: {', '.join(sorted(TLS13_SUITES))})")
    tls13 = {s for s in suites if s in TLS13_SUITES}
    if tls13 and tls13 != TLS13_SUITES and maximum >= ssl.TLSVersion.TLSv1_3:
        raise TlsConfigError("ssl.cipher.suites: kbroker cannot restrict TLS 1.3 to some of its suites; "
                             f"list all of {', '.join(sorted(TLS13_SUITES))} or none")
    if not tls13:
        maximum = min(maximum, ssl.TLSVersion.TLSv1_2)
    tls12 = [TLS12_SUITES[s] for s in suites if s in TLS12_SUITES]
    if not tls12:
        if minimum < ssl.TLSVersion.TLSv1_3:
            raise TlsConfigError("ssl.cipher.suites names no TLS 1.2 suite, but ssl.enabled.protocols enables "
                                 "TLS 1.2 or older")
        return None, maximum
    if minimum > maximum:
        raise TlsConfigError("ssl.cipher.suites leaves no enabled protocol usable")
    return ":".join(tls12), maximum


def _read(name: str, location: str) -> str:
    try:
        return Path(location).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TlsConfigError(f"{name}={location}: cannot be read: {e}") from None


def _key_store(props: Mapping[str, str]) -> KeyStore | None:
    """Kafka's rules (DefaultSslEngineFactory.createKeystore), for PEM only."""
    store_type = (props.get("ssl.keystore.type") or "JKS").strip().upper()
    location = props.get("ssl.keystore.location") or None
    key, chain = props.get("ssl.keystore.key") or None, props.get("ssl.keystore.certificate.chain") or None
    key_password = props.get("ssl.key.password") or None
    if (location or key or chain) and store_type != PEM:
        raise TlsConfigError(f"ssl.keystore.type={store_type}: kbroker reads PEM key stores only (ssl.keystore.type=PEM); "
                             "convert with `openssl pkcs12 -in store.p12 -nodes` or keytool -importkeystore first")
    if props.get("ssl.keystore.password"):
        raise TlsConfigError("ssl.keystore.password cannot be specified with PEM format, "
                             "only ssl.key.password may be specified")
    if key is not None:
        if chain is None:
            raise TlsConfigError("ssl.keystore.key is specified, but ssl.keystore.certificate.chain is not")
        if location is not None:
            raise TlsConfigError("both ssl.keystore.location and ssl.keystore.key are specified")
        return KeyStore(chain, key, key_password)
    if chain is not None:
        raise TlsConfigError("ssl.keystore.certificate.chain is specified, but ssl.keystore.key is not")
    if location is None:
        return None
    text = _read("ssl.keystore.location", location)
    return KeyStore(text, text, key_password)


def _trust_store(props: Mapping[str, str]) -> str | None:
    store_type = (props.get("ssl.truststore.type") or "JKS").strip().upper()
    location = props.get("ssl.truststore.location") or None
    certificates = props.get("ssl.truststore.certificates") or None
    if (location or certificates) and store_type != PEM:
        raise TlsConfigError(f"ssl.truststore.type={store_type}: kbroker reads PEM trust stores only "
                             "(ssl.truststore.type=PEM)")
    if props.get("ssl.truststore.password"):
        raise TlsConfigError("ssl.truststore.password cannot be specified for PEM format")
    if location and certificates:
        raise TlsConfigError("both ssl.truststore.location and ssl.truststore.certificates are specified")
    if certificates is not None:
        return certificates
    return _read("ssl.truststore.location", location) if location else None


def _load_key_store(context: ssl.SSLContext, store: KeyStore) -> None:
    """Python's ssl loads a key and chain from files only: they go through an in-memory file
    (memfd), never written to disk."""

    def password() -> str:
        # Without this, OpenSSL would prompt on the terminal for an encrypted key.
        if store.key_password is None:
            raise TlsConfigError("the private key is encrypted, but ssl.key.password is not set")
        return store.key_password

    with _in_memory_file(store.certificate_chain) as chain, _in_memory_file(store.private_key) as key:
        try:
            context.load_cert_chain(chain, key, password)
        except ssl.SSLError as e:
            raise TlsConfigError(f"the key store's key and certificate chain cannot be loaded (a wrong "
                                 f"ssl.key.password, a key that does not match the certificate?): {e}") from None


@contextlib.contextmanager
def _in_memory_file(text: str) -> Iterator[str]:
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("kbroker-tls", 0)
        try:
            data = memoryview(text.encode())
            while data:
                data = data[os.write(fd, data):]
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.NamedTemporaryFile("w", suffix=".pem") as handle:  # 0600, removed at once
        handle.write(text)
        handle.flush()
        yield handle.name
