"""TLS settings of listeners: PEM key stores (file or inline, encrypted or not), per-listener
overrides, the inter-broker listener, and the refusals that keep the broker from serving with
less protection than configured."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from kbroker.config import BrokerConfig, ConfigError
from tests.tls_material import TlsMaterial


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return TlsMaterial.create(tmp_path_factory.mktemp("tls"), key_password="key-secret")


def _two_listeners(**extra: str) -> dict[str, str]:
    return {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", **extra}


def test_a_pem_key_store_file_with_an_encrypted_key(material: TlsMaterial) -> None:
    config = BrokerConfig(_two_listeners(**material.server_properties("required")))
    settings = config.listener_tls["SSL"]
    assert settings.client_auth == "required"
    assert settings.server_context().verify_mode == ssl.CERT_REQUIRED
    assert "PLAINTEXT" not in config.listener_tls


def test_inline_pem_and_requested_client_auth(material: TlsMaterial) -> None:
    config = BrokerConfig(_two_listeners(**{
        "ssl.keystore.type": "PEM", "ssl.keystore.key": material.server.key_pem, "ssl.key.password": "key-secret",
        "ssl.keystore.certificate.chain": material.server.chain_pem,
        "ssl.truststore.type": "PEM", "ssl.truststore.certificates": material.ca.pem, "ssl.client.auth": "requested",
    }))
    assert config.listener_tls["SSL"].server_context().verify_mode == ssl.CERT_OPTIONAL


@pytest.mark.parametrize(("password", "message"), [(None, "ssl.key.password is not set"),
                                                   ("wrong", "cannot be loaded")])
def test_an_encrypted_key_needs_its_password(material: TlsMaterial, password: str | None, message: str) -> None:
    props = material.server_properties()
    props.pop("ssl.key.password")
    if password:
        props["ssl.key.password"] = password
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(_two_listeners(**props))


def test_listener_prefixed_settings_override_the_shared_ones(material: TlsMaterial) -> None:
    props = {"listeners": "SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
             "listener.security.protocol.map": "SSL:SSL,MTLS:SSL", "security.inter.broker.protocol": "SSL",
             **material.server_properties("none"), "listener.name.mtls.ssl.client.auth": "required",
             "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/"}
    config = BrokerConfig(props)
    assert config.listener_tls["SSL"].client_auth == "none"
    assert config.listener_tls["MTLS"].client_auth == "required"
    assert config.listener_tls["MTLS"].principal_mapper.name("CN=a,O=b") == "a"
    assert config.inter_broker_listener == "SSL"


@pytest.mark.parametrize(("props", "message"), [
    ({"ssl.keystore.password": "x"}, "ssl.keystore.password cannot be specified with PEM"),
    ({"ssl.truststore.password": "x"}, "ssl.truststore.password cannot be specified for PEM"),
    ({"ssl.keystore.type": "PKCS12"}, "reads PEM key stores only"),
    ({"ssl.truststore.type": "JKS"}, "reads PEM trust stores only"),
    ({"ssl.keystore.location": "/nonexistent.pem"}, "cannot be read"),
    ({"listener.name.ssl.ssl.cipher.suites": "TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"},
     "cannot restrict TLS 1.3"),
])
def test_settings_that_cannot_be_applied_stop_the_start(material: TlsMaterial, props: dict[str, str],
                                                        message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(_two_listeners(**{**material.server_properties(), **props}))


def test_protocols_and_cipher_suites(material: TlsMaterial) -> None:
    tls12 = BrokerConfig(_two_listeners(**material.server_properties(), **{
        "ssl.protocol": "TLSv1.2"})).listener_tls["SSL"]
    assert (tls12.minimum_version, tls12.maximum_version) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2)
    # Only TLS 1.2 suites listed: TLS 1.3 has none to offer, as with Java.
    suites = BrokerConfig(_two_listeners(**material.server_properties(), **{
        "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"})).listener_tls["SSL"]
    assert suites.maximum_version == ssl.TLSVersion.TLSv1_2
    assert suites.ciphers == "ECDHE-ECDSA-AES128-GCM-SHA256"


def test_the_inter_broker_listener(material: TlsMaterial, tmp_path: Path) -> None:
    cluster = {"zookeeper.connect": "127.0.0.1:2181"}
    with pytest.raises(ConfigError, match="must be a listener name defined in advertised.listeners"):
        BrokerConfig({"listeners": "SSL://127.0.0.1:0", **material.server_properties(), **cluster})
    with pytest.raises(ConfigError, match="Only one of"):
        BrokerConfig(_two_listeners(**material.server_properties(), **{
            "inter.broker.listener.name": "SSL", "security.inter.broker.protocol": "SSL"}))
    with pytest.raises(ConfigError, match="not found in listener.security.protocol.map"):
        BrokerConfig(_two_listeners(**material.server_properties(), **{"inter.broker.listener.name": "INTERNAL"}))
    config = BrokerConfig(_two_listeners(**material.server_properties(), **{"inter.broker.listener.name": "ssl"},
                                         **cluster))
    assert config.inter_broker_listener == "SSL"
    assert config.inter_broker_tls() is config.listener_tls["SSL"]
    assert config.inter_broker_tls().client_context().check_hostname
