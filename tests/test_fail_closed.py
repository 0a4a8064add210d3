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
    {"listeners": "SSL://127.0.0.1:9093"},
    {"listeners": "SASL_SSL://127.0.0.1:9093"},
    {"listeners": "SASL_PLAINTEXT://127.0.0.1:9093"},
    {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093"},
    {"listeners": "CLIENT://127.0.0.1:9093", "listener.security.protocol.map": "CLIENT:SASL_SSL"},
    {"advertised.listeners": "SSL://example.com:9093"},
    {"ssl.keystore.location": "/etc/kafka/keystore.pem"},
    {"ssl.client.auth": "required"},
    {"sasl.enabled.mechanisms": "SCRAM-SHA-512"},
    {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"},
    {"super.users": "User:admin"},
    {"principal.builder.class": "com.example.Builder"},
    {"security.inter.broker.protocol": "SSL"},
    {"listener.name.internal.plain.sasl.jaas.config": "x"},
    {"quota.window.num": "11"},
    {"connections.max.reauth.ms": "3600000"},
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
    {"security.inter.broker.protocol": "PLAINTEXT"},
    {"connections.max.reauth.ms": "0"},
])
def test_settings_that_ask_for_nothing_more_are_accepted(props: dict[str, str]) -> None:
    BrokerConfig(props)


def test_unknown_listener_names_need_a_protocol() -> None:
    with pytest.raises(ConfigError, match="not in listener.security.protocol.map"):
        BrokerConfig({"listeners": "CLIENT://127.0.0.1:9092"})


def test_the_check_is_reusable_for_runtime_changes() -> None:
    assert is_unhonoured_security_setting("ssl.truststore.location", "/x")
    assert is_unhonoured_security_setting("sasl.kerberos.min.time.before.relogin", "60000")
    assert not is_unhonoured_security_setting("log.retention.ms", "1")
    assert not is_unhonoured_security_setting("authorizer.class.name", "")


@pytest.mark.parametrize("override", ["listeners=SSL://127.0.0.1:{port}", "sasl.enabled.mechanisms=PLAIN"])
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
                     "ssl.keystore.type=PEM\n")
    result = subprocess.run([sys.executable, "-m", "kbroker.cli.main", "start", str(props)], cwd=PROJECT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "ssl.keystore.type" in result.stderr
