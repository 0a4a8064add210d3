"""A security setting kbroker does not honour stops the start: it never serves with less
protection than the operator asked for (before, each was logged as "ignoring unknown property"
and the broker served plaintext to anyone)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kbroker.config import BrokerConfig, ConfigError, is_unhonoured_security_setting
from tests.brokers import BrokerProcess, free_port

PROJECT = Path(__file__).resolve().parent.parent

REFUSED = [
    # TLS asked for but not configured completely: an SSL listener needs a key store.
    {"listeners": "SSL://127.0.0.1:9093"},
    {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093"},
    {"advertised.listeners": "SSL://example.com:9093"},
    # SASL listeners without what they need: a key store (SASL_SSL), a mechanism kbroker
    # implements (Kafka's default is GSSAPI); SASL features kbroker does not implement.
    {"listeners": "SASL_SSL://127.0.0.1:9093", "sasl.enabled.mechanisms": "SCRAM-SHA-512"},
    {"listeners": "SASL_PLAINTEXT://127.0.0.1:9093"},
    {"listeners": "CLIENT://127.0.0.1:9093", "listener.security.protocol.map": "CLIENT:SASL_SSL"},
    {"sasl.enabled.mechanisms": "GSSAPI"},
    {"sasl.kerberos.service.name": "kafka"},
    {"sasl.server.callback.handler.class": "com.example.Handler"},
    {"listener.name.internal.oauthbearer.sasl.jaas.config": "x"},
    {"listener.name.internal.plain.sasl.login.callback.handler.class": "com.example.Handler"},
    # Key and trust stores kbroker does not read (Kafka's default type is JKS).
    {"ssl.keystore.location": "/etc/kafka/keystore.pem"},
    {"ssl.keystore.type": "JKS", "ssl.keystore.location": "/etc/kafka/keystore.jks"},
    {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/etc/kafka/keystore.p12"},
    {"ssl.truststore.location": "/etc/kafka/truststore.jks"},
    {"listener.name.ssl.ssl.truststore.type": "PKCS12", "listener.name.ssl.ssl.truststore.location": "/t.p12",
     "listeners": "SSL://127.0.0.1:9093"},
    # TLS settings kbroker cannot apply.
    {"ssl.provider": "SunJSSE"},
    {"ssl.engine.factory.class": "com.example.Factory"},
    {"ssl.keymanager.algorithm": "NewSunX509"},
    {"ssl.enabled.protocols": "TLSv1.1,TLSv1.3"},
    {"ssl.enabled.protocols": "SSLv3"},
    {"ssl.cipher.suites": "TLS_AES_256_GCM_SHA384"},
    {"ssl.cipher.suites": "TLS_NO_SUCH_SUITE"},
    {"ssl.client.auth": "sometimes"},
    {"ssl.principal.mapping.rules": "RULE:^CN=(.*)$/$1/L,garbage"},
    {"zookeeper.ssl.client.enable": "true"},
    {"zookeeper.set.acl": "true"},
    # Neither TLS nor SASL: an authorizer kbroker cannot stand in for.
    {"authorizer.class.name": "com.example.MyAuthorizer"},
    {"authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer"},  # removed in Kafka 3.0
    {"principal.builder.class": "com.example.Builder"},
    {"quota.producer.default": "1048576"},
    {"delegation.token.secret.key": "s"},
]


@pytest.mark.parametrize("props", REFUSED, ids=lambda p: ",".join(p))
def test_unhonoured_security_settings_are_config_errors(props: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="refusing to start|not in listener.security.protocol.map"):
        BrokerConfig(props)


@pytest.mark.parametrize("props", [
    {"listeners": "PLAINTEXT://127.0.0.1:9092",
     # Kafka's own example file maps every protocol; only the listeners in use matter.
     "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL"},
    {"listeners": "CLIENT://127.0.0.1:9092", "listener.security.protocol.map": "CLIENT:PLAINTEXT"},
    {"authorizer.class.name": ""},
    # Kafka's authorizers: kbroker's decides as they do (docs/security.md, "Authorization").
    {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin"},
    {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
     "allow.everyone.if.no.acl.found": "true"},
    {"security.inter.broker.protocol": "PLAINTEXT"},
    {"connections.max.reauth.ms": "0"},
    {"connections.max.reauth.ms": "3600000", "sasl.enabled.mechanisms": "SCRAM-SHA-512"},
    # TLS settings that every SSL listener honours (there is none here, as Kafka allows).
    {"ssl.client.auth": "required", "ssl.enabled.protocols": "TLSv1.2", "ssl.protocol": "TLSv1.2",
     "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=(.*)$/$1/L,DEFAULT", "ssl.keymanager.algorithm": "SunX509",
     "ssl.endpoint.identification.algorithm": ""},
    {"zookeeper.ssl.client.enable": "false"},
])
def test_settings_that_ask_for_nothing_more_are_accepted(props: dict[str, str]) -> None:
    BrokerConfig(props)


def test_unknown_listener_names_need_a_protocol() -> None:
    with pytest.raises(ConfigError, match="not in listener.security.protocol.map"):
        BrokerConfig({"listeners": "CLIENT://127.0.0.1:9092"})


def test_the_check_is_reusable_for_runtime_changes() -> None:
    assert is_unhonoured_security_setting("ssl.provider", "SunJSSE")
    assert is_unhonoured_security_setting("listener.name.ssl.ssl.engine.factory.class", "x")
    assert not is_unhonoured_security_setting("ssl.truststore.location", "/x")
    assert not is_unhonoured_security_setting("listener.name.ssl.ssl.client.auth", "required")
    assert is_unhonoured_security_setting("sasl.kerberos.min.time.before.relogin", "60000")
    assert not is_unhonoured_security_setting("log.retention.ms", "1")
    assert not is_unhonoured_security_setting("authorizer.class.name", "")


@pytest.mark.parametrize("override", ["listeners=SSL://127.0.0.1:{port}", "sasl.enabled.mechanisms=GSSAPI"])
def test_kbroker_start_exits_with_the_reason(tmp_path: Path, override: str) -> None:
    port = free_port()
    broker = BrokerProcess(tmp_path, port=port)
    args = broker.command() + ["--override", override.format(port=port)]
    result = subprocess.run(args, cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "refusing to start" in result.stderr
    assert "started" not in result.stdout


def test_the_cli_reads_refusals_from_a_properties_file(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text(f"listeners=PLAINTEXT://127.0.0.1:{free_port()}\nlog.dirs={tmp_path / 'logs'}\n"
                     "ssl.keystore.type=PKCS12\nssl.keystore.location=/etc/kafka/broker.p12\n")
    result = subprocess.run([sys.executable, "-m", "kbroker.cli.main", "start", str(props)], cwd=PROJECT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "ssl.keystore.type=PKCS12" in result.stderr and "PEM" in result.stderr


# -- authorization -------------------------------------------------------------------------------


def test_an_unknown_authorizer_refuses_the_start(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path)
    args = broker.command() + ["--override", "authorizer.class.name=com.example.OpenDoorAuthorizer"]
    result = subprocess.run(args, cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "refusing to start" in result.stderr and "authorizer.class.name" in result.stderr
    assert "started" not in result.stdout


def test_acls_that_cannot_be_read_refuse_the_start_instead_of_allowing(tmp_path: Path) -> None:
    """An ACL entry the store cannot read (here a DENY without its operation) must not be taken
    for no ACL: with allow.everyone.if.no.acl.found that would open the resource to everyone."""
    broker = BrokerProcess(tmp_path)
    broker.log_dir.mkdir(parents=True)
    (broker.log_dir / "__kbroker_metadata.json").write_text(
        '{"version": 1, "topics": [], "broker_configs": {}, "acls": [{"resource_type": "Topic", '
        '"pattern_type": "LITERAL", "name": "payroll", "version": 1, '
        '"acls": [{"principal": "User:*", "permissionType": "Deny", "host": "*"}]}]}')
    args = broker.command() + ["--override", "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
                               "--override", "allow.everyone.if.no.acl.found=true"]
    result = subprocess.run(args, cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "refusing to start" in result.stderr and "cannot be read" in result.stderr
    assert "started" not in result.stdout
