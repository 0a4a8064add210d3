"""SASL settings (per listener, JAAS entries, inter-broker login), the client properties of the
tools, and the SASL session of one connection as a state machine (Kafka's
SaslServerAuthenticator rules), with the clock given by the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.cli.common import load_command_config
from kbroker.config import BrokerConfig, ConfigError
from kbroker.security.client_config import ClientConfigError, ClientSecurity
from kbroker.security.jaas import JaasError, parse_login_module
from kbroker.security.sasl_config import SaslCredentials, SaslListenerSettings
from kbroker.security.sasl_server import Admission, SaslSession
from kbroker.security.scram import SCRAM_SHA_512, ScramClient, ScramCredential
from protocol.errors import ErrorCode

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="b-secret";'
API_VERSIONS, METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 3, 17, 36


def _sasl_listener(**extra: str) -> dict[str, str]:
    return {"listeners": "SASL_PLAINTEXT://127.0.0.1:9093", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS, **extra}


def test_jaas_entries_are_read_as_kafka_reads_them() -> None:
    module = parse_login_module(
        "org.apache.kafka.common.security.plain.PlainLoginModule required /* comment */ user_a='x\\'y' "
        "user_b=plainword // trailing comment\n;")
    assert module.control_flag == "required"
    assert module.options == {"user_a": "x'y", "user_b": "plainword"}
    for text, message in [("", "does not contain any login modules"), (PLAIN_JAAS + PLAIN_JAAS, "contains 2"),
                          ("org.Module sometimes a=b;", "control flag 'sometimes'"), ("org.Module required a=b", "';'"),
                          ("org.Module required a;", "name=value")]:
        with pytest.raises(JaasError, match=message):
            parse_login_module(text)


def test_a_sasl_listener_takes_its_mechanisms_users_and_reauth_limit() -> None:
    config = BrokerConfig(_sasl_listener(**{
        "connections.max.reauth.ms": "60000", "listener.name.sasl_plaintext.scram-sha-512.connections.max.reauth.ms": "5000"}))
    settings = config.listener_sasl["SASL_PLAINTEXT"]
    assert settings.mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert dict(settings.plain_users) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert dict(settings.reauth_ms) == {"PLAIN": 60000, "SCRAM-SHA-512": 5000}
    assert settings.max_receive_size == 524288
    assert "alice-secret" not in repr(settings)  # passwords never reach a log line


@pytest.mark.parametrize(("extra", "message"), [
    ({"sasl.enabled.mechanisms": "PLAIN,GSSAPI"}, "GSSAPI is not implemented"),
    ({"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER"}, "OAUTHBEARER"),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": SCRAM_JAAS}, "PLAIN takes .*PlainLoginModule"),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": "com.example.Custom required;"}, "not implemented"),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": "garbage"}, "control flag"),
    ({"sasl.server.max.receive.size": "0"}, "at least 1"),
    ({"connections.max.reauth.ms": "-1"}, "at least 0"),
])
def test_sasl_settings_kbroker_cannot_apply_stop_the_start(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=f"refusing to start: .*{message}"):
        BrokerConfig(_sasl_listener(**extra))


def test_plain_needs_its_users() -> None:
    props = _sasl_listener()
    del props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    with pytest.raises(ConfigError, match="no listener.name.sasl_plaintext.plain.sasl.jaas.config"):
        BrokerConfig(props)


def _cluster(**extra: str) -> dict[str, str]:
    return {"listeners": "INTERNAL://127.0.0.1:9093", "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL", "zookeeper.connect": "127.0.0.1:2181",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512", **extra}


def test_the_inter_broker_login_comes_from_the_listeners_jaas_entry() -> None:
    config = BrokerConfig(_cluster(**{"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                                      "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS}))
    assert config.inter_broker_sasl == SaslCredentials("SCRAM-SHA-512", "broker", "b-secret")
    # kbroker also takes it from a sasl.jaas.config without prefix (Kafka ignores that on a broker).
    config = BrokerConfig(_cluster(**{"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                                      "sasl.jaas.config": SCRAM_JAAS}))
    assert config.inter_broker_sasl == SaslCredentials("SCRAM-SHA-512", "broker", "b-secret")


@pytest.mark.parametrize(("extra", "message"), [
    ({}, "sasl.mechanism.inter.broker.protocol=GSSAPI"),  # Kafka's default
    ({"sasl.mechanism.inter.broker.protocol": "PLAIN"}, "must be included in sasl.enabled.mechanisms"),
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"}, "no username and password"),
])
def test_a_sasl_inter_broker_listener_needs_a_login(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(_cluster(**extra))


def test_tool_client_properties(tmp_path: Path) -> None:
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM_JAAS})
    assert security.sasl == SaslCredentials("SCRAM-SHA-512", "broker", "b-secret") and security.ssl_context is None
    rdkafka = ClientSecurity.from_properties({"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
                                              "sasl.username": "alice", "sasl.password": "pw"})
    assert rdkafka.sasl == SaslCredentials("PLAIN", "alice", "pw")
    for props, message in [({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism=GSSAPI"),
                           ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "username and password"),
                           ({"sasl.login.class": "x"}, "sasl.login.class"),
                           ({"security.protocol": "KERBEROS"}, "expected one of")]:
        with pytest.raises(ClientConfigError, match=message):
            ClientSecurity.from_properties(props)
    file = tmp_path / "client.properties"
    file.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
                    "    username=\"alice\" password=\"alice-secret\";\n")
    assert load_command_config(str(file)).sasl == SaslCredentials("PLAIN", "alice", "alice-secret")
    assert load_command_config(None) == ClientSecurity()


# -- the session of one connection ---------------------------------------------------------------------


def _session(reauth_ms: int = 0) -> SaslSession:
    settings = SaslListenerSettings(("PLAIN", "SCRAM-SHA-512"), {"alice": "alice-secret", "bob": "bob-secret"},
                                    {"PLAIN": reauth_ms, "SCRAM-SHA-512": reauth_ms})
    credential = ScramCredential.from_password(SCRAM_SHA_512, "carol-secret", 4096)
    return SaslSession(settings, lambda mechanism, user: credential if user == "carol" else None)


def _login(session: SaslSession, now: float, user: str = "alice", version: int = 2) -> dict:
    assert session.admit(SASL_HANDSHAKE, 1, now)[0] is Admission.SASL
    assert session.handshake(1, "PLAIN") == ({"error_code": 0, "mechanisms": ["PLAIN", "SCRAM-SHA-512"]}, False)
    assert session.admit(SASL_AUTHENTICATE, version, now)[0] is Admission.SASL
    answer, close = session.authenticate(version, f"\0{user}\0{user}-secret".encode(), now)
    assert not close and answer is not None
    return answer


def test_before_authentication_only_api_versions_once_and_the_handshake_are_served() -> None:
    session = _session()
    assert session.admit(METADATA, 12, 0.0) == (Admission.CLOSE, "Unexpected Kafka request of type METADATA during "
                                                                 "SASL handshake.")
    assert session.admit(API_VERSIONS, 99, 0.0)[0] is Admission.SERVE  # unsupported: may be retried lower
    assert session.admit(API_VERSIONS, 3, 0.0)[0] is Admission.SERVE
    assert session.admit(API_VERSIONS, 3, 0.0)[0] is Admission.CLOSE  # a second one: Kafka closes
    assert session.admit(SASL_HANDSHAKE, 1, 0.0)[0] is Admission.SASL
    answer, close = session.handshake(1, "GSSAPI")
    assert answer == {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": ["PLAIN", "SCRAM-SHA-512"]}
    assert close


def test_during_the_exchange_other_requests_are_illegal() -> None:
    session = _session()
    session.admit(SASL_HANDSHAKE, 1, 0.0)
    session.handshake(1, "PLAIN")
    assert session.admit(METADATA, 12, 0.0) == (
        Admission.ILLEGAL_STATE, "Unexpected Kafka request of type METADATA during SASL authentication.")


def test_a_scram_login_and_its_principal() -> None:
    session = _session()
    session.admit(SASL_HANDSHAKE, 1, 0.0)
    session.handshake(1, "SCRAM-SHA-512")
    client = ScramClient(SCRAM_SHA_512, "carol", "carol-secret")
    first, close = session.authenticate(2, client.first(), 0.0)
    assert first is not None and not close and not session.authenticated
    final, close = session.authenticate(2, client.final(first["auth_bytes"]), 0.0)
    assert final is not None and not close
    client.verify(final["auth_bytes"])
    assert session.authenticated and session.principal == "User:carol"
    assert session.admit(METADATA, 12, 1e9)[0] is Admission.SERVE  # no connections.max.reauth.ms: never expires


def test_a_wrong_password_fails_with_kafkas_message_and_closes() -> None:
    session = _session()
    session.admit(SASL_HANDSHAKE, 1, 0.0)
    session.handshake(1, "SCRAM-SHA-512")
    client = ScramClient(SCRAM_SHA_512, "carol", "wrong")
    first, _ = session.authenticate(2, client.first(), 0.0)
    assert first is not None
    answer, close = session.authenticate(2, client.final(first["auth_bytes"]), 0.0)
    assert close and answer == {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message":
                                "Authentication failed during authentication due to invalid credentials with SASL "
                                "mechanism SCRAM-SHA-512"}
    assert not session.authenticated


def test_raw_tokens_after_a_v0_handshake() -> None:
    session = _session()
    session.admit(SASL_HANDSHAKE, 0, 0.0)
    session.handshake(0, "PLAIN")
    assert session.expects_raw_token
    assert session.raw_token(b"\0alice\0alice-secret", 0.0) == b""
    assert session.authenticated and not session.expects_raw_token
    failing = _session()
    failing.admit(SASL_HANDSHAKE, 0, 0.0)
    failing.handshake(0, "PLAIN")
    assert failing.raw_token(b"\0alice\0wrong", 0.0) is None


def test_re_authentication_before_the_session_expires() -> None:
    session = _session(reauth_ms=3000)
    assert _login(session, 0.0)["session_lifetime_ms"] == 3000
    assert _login(session, 2.0)["session_lifetime_ms"] == 3000  # renewed: until 5.0 now
    assert session.admit(METADATA, 12, 4.9)[0] is Admission.SERVE
    # Within a second of the last re-authentication, a handshake is an ordinary request (ILLEGAL_SASL_STATE).
    session_2 = _session(reauth_ms=3000)
    _login(session_2, 0.0)
    _login(session_2, 0.5)
    assert session_2.admit(SASL_HANDSHAKE, 1, 1.0)[0] is Admission.SERVE
    assert session_2.admit(METADATA, 12, 3.6) == (
        Admission.CLOSE, "its SASL session expired (connections.max.reauth.ms) without re-authentication")


def test_re_authentication_keeps_the_principal_and_the_mechanism() -> None:
    session = _session(reauth_ms=3000)
    _login(session, 0.0)
    session.admit(SASL_HANDSHAKE, 1, 1.0)
    session.handshake(1, "PLAIN")
    answer, close = session.authenticate(2, b"\0bob\0bob-secret", 1.0)
    assert close and answer is not None
    assert answer["error_message"] == "Cannot change principals during re-authentication from User.alice: User.bob"
    other = _session(reauth_ms=3000)
    _login(other, 0.0)
    other.admit(SASL_HANDSHAKE, 1, 1.0)
    assert other.handshake(1, "SCRAM-SHA-512")[1] is False  # Kafka answers the handshake, then fails the token
    assert other.authenticate(2, b"n,,n=carol,r=abc", 1.0) == (None, True)


def test_no_re_authentication_without_a_session_limit() -> None:
    session = _session()
    _login(session, 0.0)
    assert session.admit(SASL_HANDSHAKE, 1, 5.0)[0] is Admission.SERVE  # answered ILLEGAL_SASL_STATE by the handler
