"""SASL listeners with real clients: confluent-kafka, kafka-python, kcat and kbroker's own tools,
with PLAIN (users of the listener's JAAS entry) and SCRAM-SHA-256/512 (credentials created through
AlterUserScramCredentials), over SASL_PLAINTEXT and SASL_SSL; and Kafka's answers to a wrong
password, an unknown mechanism, a request before authentication and an expired session, each
closing that connection within a second while every other client is served.

One broker, four listeners: PLAINTEXT (to create the first SCRAM credentials), SASL_PLAINTEXT,
SASL_SSL and REAUTH (SASL_PLAINTEXT whose sessions last REAUTH_MS, so clients must
re-authenticate). It logs at DEBUG, and the last test looks for every password in its log and
its data directory.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError as KafkaPythonError

from kbroker.security.plain import client_message
from kbroker.security.scram import MECHANISMS as MECHANISMS_BY_NAME
from kbroker.security.scram import ScramClient
from tests.brokers import PROJECT_ROOT, BrokerProcess, free_port
from tests.rawclient import RawClient
from tests.tls_material import TlsMaterial
from tests.waiting import wait_until

API_VERSIONS, METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 3, 17, 36
REAUTH_MS = 2000
PLAIN_USERS = {"alice": "alice-plain-secret-7f3a", "admin": "admin-plain-secret-1c9e"}
SCRAM_USER, SCRAM_PASSWORD = "scram-user", "scram-secret-5d2b"
LATE_USER, LATE_PASSWORD = "late-user", "late-secret-8e41"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
ALL_PASSWORDS = [*PLAIN_USERS.values(), SCRAM_PASSWORD, LATE_PASSWORD]


@dataclass
class SaslBroker:
    process: BrokerProcess
    material: TlsMaterial
    ports: dict[str, int]
    directory: Path

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def credentials(self, mechanism: str) -> tuple[str, str]:
        return ("alice", PLAIN_USERS["alice"]) if mechanism == "PLAIN" else (SCRAM_USER, SCRAM_PASSWORD)


def _plain_jaas() -> str:
    users = " ".join(f'user_{name}="{password}"' for name, password in PLAIN_USERS.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"


def kbroker_tool(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kbroker.cli.main", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=60, check=check)


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    directory = tmp_path_factory.mktemp("sasl-broker")
    material = TlsMaterial.create(directory / "tls")
    ports = {name: free_port() for name in ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "REAUTH")}
    overrides = {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,"
                                          "REAUTH:SASL_PLAINTEXT",
        **material.server_properties("none"),
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        **{f"listener.name.{name}.plain.sasl.jaas.config": _plain_jaas() for name in ("sasl_plaintext", "sasl_ssl",
                                                                                        "reauth")},
        "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
        "num.partitions": "1", "offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0",
    }
    process = BrokerProcess(directory / "broker", port=ports["PLAINTEXT"], overrides=overrides, start_command=[
        sys.executable, "-m", "kbroker.cli.main", "start", "--log-level", "DEBUG"]).start()
    # The first SCRAM credentials, through the PLAINTEXT listener (see docs/security.md).
    kbroker_tool("configs", "--bootstrap-server", f"127.0.0.1:{ports['PLAINTEXT']}", "--entity-type", "users",
                 "--entity-name", SCRAM_USER, "--alter", "--add-config",
                 f"SCRAM-SHA-256=[iterations=8192,password={SCRAM_PASSWORD}],SCRAM-SHA-512=[password={SCRAM_PASSWORD}]")
    yield SaslBroker(process, material, ports, directory)
    if process.alive:
        assert process.stop() == 0, process.log_tail()


# -- real clients -----------------------------------------------------------------------------------


def _confluent(broker: SaslBroker, listener: str, mechanism: str, password: str | None = None) -> dict[str, str]:
    user, secret = broker.credentials(mechanism)
    conf = {"bootstrap.servers": broker.bootstrap(listener), "security.protocol": "SASL_SSL" if listener == "SASL_SSL"
            else "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password or secret}
    if listener == "SASL_SSL":
        conf["ssl.ca.location"] = str(broker.material.ca.pem_path)
    return conf


def _produce_and_read(conf: dict[str, str], topic: str, count: int = 30) -> list[bytes]:
    producer = Producer({**conf, "acks": "all"})
    for i in range(count):
        producer.produce(topic, f"{topic} {i}".encode() * 50)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"{topic}-group", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka(sasl_broker: SaslBroker, listener: str, mechanism: str) -> None:
    topic = f"confluent-{listener}-{mechanism}".lower()
    expected = [f"{topic} {i}".encode() * 50 for i in range(30)]
    assert _produce_and_read(_confluent(sasl_broker, listener, mechanism), topic) == expected


def _kafka_python(broker: SaslBroker, listener: str, mechanism: str, password: str | None = None) -> dict[str, object]:
    user, secret = broker.credentials(mechanism)
    args: dict[str, object] = {
        "bootstrap_servers": broker.bootstrap(listener), "sasl_mechanism": mechanism,
        "security_protocol": "SASL_SSL" if listener == "SASL_SSL" else "SASL_PLAINTEXT",
        "sasl_plain_username": user, "sasl_plain_password": password or secret}
    if listener == "SASL_SSL":
        args |= {"ssl_cafile": str(broker.material.ca.pem_path), "ssl_check_hostname": True}
    return args


@pytest.mark.parametrize(("listener", "mechanism"), [("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-512"),
                                                     ("SASL_PLAINTEXT", "SCRAM-SHA-256")])
def test_kafka_python(sasl_broker: SaslBroker, listener: str, mechanism: str) -> None:
    topic = f"kafka-python-{listener}-{mechanism}".lower()
    args = _kafka_python(sasl_broker, listener, mechanism)
    producer = KafkaProducer(**args)
    for i in range(20):
        producer.send(topic, f"kp {i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10_000, **args)
    values = [message.value for message in consumer][:20]
    consumer.close()
    assert values == [f"kp {i}".encode() for i in range(20)]


@pytest.mark.parametrize(("listener", "mechanism"), [("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("SASL_SSL", "PLAIN")])
def test_kcat(sasl_broker: SaslBroker, listener: str, mechanism: str) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.skip("kcat is not installed (scripts/test.sh installs it)")
    args = [kcat, "-b", sasl_broker.bootstrap(listener)]
    for key, value in _confluent(sasl_broker, listener, mechanism).items():
        if key != "bootstrap.servers":
            args += ["-X", f"{key}={value}"]
    topic = f"kcat-{listener}-{mechanism}".lower()
    subprocess.run([*args, "-P", "-t", topic], input=b"one\ntwo\nthree\n", check=True, timeout=60)
    out = subprocess.run([*args, "-C", "-t", topic, "-o", "beginning", "-e", "-q"], capture_output=True,
                         check=True, timeout=60)
    assert out.stdout.split() == [b"one", b"two", b"three"]


def test_kbroker_tools_with_command_config(sasl_broker: SaslBroker, tmp_path: Path) -> None:
    properties = tmp_path / "client.properties"
    properties.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f"    username=\"{SCRAM_USER}\" password=\"{SCRAM_PASSWORD}\";\n"
        f"ssl.truststore.type=PEM\nssl.truststore.location={sasl_broker.material.ca.pem_path}\n")
    secured = ["--bootstrap-server", sasl_broker.bootstrap("SASL_SSL"), "--command-config", str(properties)]
    kbroker_tool("topics", *secured, "--create", "--topic", "tools-over-sasl")
    assert "tools-over-sasl" in kbroker_tool("topics", *secured, "--list").stdout.split()
    # `kbroker acls` too: the broker, which has no authorizer, answers it over SASL_SSL.
    acls = kbroker_tool("acls", *secured, "--list", check=False)
    assert "SECURITY_DISABLED" in acls.stderr, acls.stderr
    # A user's credentials, created, described and deleted over SASL_SSL.
    users = [*secured, "--entity-type", "users", "--entity-name", LATE_USER]
    created = kbroker_tool("configs", *users, "--alter", "--add-config", f"SCRAM-SHA-256=[password={LATE_PASSWORD}]")
    assert created.stdout.strip() == f"Completed updating config for user {LATE_USER}."
    described = kbroker_tool("configs", *users, "--describe").stdout.strip()
    assert described == f"SCRAM credential configs for user-principal '{LATE_USER}' are SCRAM-SHA-256=iterations=4096"
    late = _confluent(sasl_broker, "SASL_PLAINTEXT", "SCRAM-SHA-256") | {"sasl.username": LATE_USER,
                                                                           "sasl.password": LATE_PASSWORD}
    assert AdminClient(late).list_topics(timeout=10).topics  # the new user logs in at once
    kbroker_tool("configs", *users, "--alter", "--delete-config", "SCRAM-SHA-256")
    assert kbroker_tool("configs", *users, "--describe").stdout == ""  # as kafka-configs.sh: nothing to show
    missing = kbroker_tool("configs", *users, "--alter", "--delete-config", "SCRAM-SHA-256", check=False)
    assert missing.returncode == 1
    assert "RESOURCE_NOT_FOUND: Attempt to delete a user credential that does not exist" in missing.stderr
    with pytest.raises(KafkaException):
        AdminClient(late).list_topics(timeout=5)
    # A wrong password: the tool says why.
    properties.write_text(properties.read_text().replace(SCRAM_PASSWORD, "not-the-password"))
    refused = kbroker_tool("topics", *secured, "--list", check=False)
    assert refused.returncode == 1
    assert "SASL_AUTHENTICATION_FAILED: Authentication failed during authentication due to invalid credentials " \
           "with SASL mechanism SCRAM-SHA-512" in refused.stderr


# -- refusals ----------------------------------------------------------------------------------------


def _closed_within(client: RawClient, seconds: float = 1.0) -> float:
    """How long until the broker closes the connection (asserting it sends nothing first)."""
    started = time.monotonic()
    client.sock.settimeout(seconds + 1)
    try:
        data = client.sock.recv(4096)
    except ConnectionResetError:
        data = b""
    except TimeoutError:
        pytest.fail(f"the broker did not close the connection within {seconds} s")
    assert data == b"", f"expected a close, got {data!r}"
    elapsed = time.monotonic() - started
    assert elapsed < seconds
    return elapsed


def _served(broker: SaslBroker) -> None:
    """Another client, authenticated on the same listener, is served meanwhile."""
    with RawClient(broker.bootstrap("SASL_PLAINTEXT")) as client:
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
        answer = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": client_message("alice", PLAIN_USERS["alice"])})
        assert answer.error_code == 0
        assert client.request(METADATA, 12, {"topics": None}).brokers[0].port == broker.ports["SASL_PLAINTEXT"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_gets_kafkas_error_then_a_close(sasl_broker: SaslBroker, mechanism: str) -> None:
    with RawClient(sasl_broker.bootstrap("SASL_PLAINTEXT")) as client:
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code == 0
        if mechanism == "PLAIN":
            answer = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": client_message("alice", "wrong")})
            expected = "Authentication failed: Invalid username or password"
        else:
            scram = ScramClient(MECHANISMS_BY_NAME[mechanism], SCRAM_USER, "wrong")
            first = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.first()})
            assert first.error_code == 0
            answer = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.final(bytes(first.auth_bytes))})
            expected = f"Authentication failed during authentication due to invalid credentials with SASL mechanism " \
                       f"{mechanism}"
        assert (answer.error_code, answer.error_message) == (58, expected)  # SASL_AUTHENTICATION_FAILED
        _closed_within(client)
    _served(sasl_broker)


def test_failed_authentication_is_answered_after_kafkas_delay(sasl_broker: SaslBroker) -> None:
    """connection.failed.authentication.delay.ms (100 ms by default) slows down password guessing."""
    with RawClient(sasl_broker.bootstrap("SASL_PLAINTEXT")) as client:
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
        started = time.monotonic()
        answer = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": client_message("alice", "guess")})
        assert answer.error_code == 58 and time.monotonic() - started >= 0.1
        _closed_within(client)
    _served(sasl_broker)


def test_real_clients_report_the_wrong_password(sasl_broker: SaslBroker, caplog: pytest.LogCaptureFixture) -> None:
    errors: list[str] = []
    conf = _confluent(sasl_broker, "SASL_SSL", "SCRAM-SHA-512", password="wrong") | {
        "error_cb": lambda error: errors.append(str(error))}
    producer = Producer(conf)
    wait_until(lambda: producer.poll(0.1) is not None and errors, timeout_s=10, what="an error from confluent-kafka")
    assert any("Authentication failed during authentication due to invalid credentials with SASL mechanism "
               "SCRAM-SHA-512" in error for error in errors), errors
    # kafka-python logs the broker's answer and gives up bootstrapping.
    with caplog.at_level(logging.ERROR, logger="kafka"), pytest.raises(KafkaPythonError):
        KafkaProducer(**_kafka_python(sasl_broker, "SASL_PLAINTEXT", "PLAIN", password="wrong"), max_block_ms=3000)
    # Every attempt reads the answer: the broker waits for the client to hang up before closing,
    # as kafka-python drops an answer read together with the connection's end.
    assert "SaslAuthenticationFailedError: Authentication failed: Invalid username or password" in caplog.text
    assert "socket disconnected" not in caplog.text
    _served(sasl_broker)


def test_an_unknown_mechanism_gets_the_enabled_ones_then_a_close(sasl_broker: SaslBroker) -> None:
    with RawClient(sasl_broker.bootstrap("SASL_PLAINTEXT")) as client:
        answer = client.request(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert (answer.error_code, list(answer.mechanisms)) == (33, list(MECHANISMS))  # UNSUPPORTED_SASL_MECHANISM
        _closed_within(client)
    _served(sasl_broker)


@pytest.mark.parametrize("first", ["Metadata", "ApiVersions twice", "garbage"])
def test_a_request_before_authentication_closes_the_connection(sasl_broker: SaslBroker, first: str) -> None:
    with RawClient(sasl_broker.bootstrap("SASL_PLAINTEXT")) as client:
        if first == "Metadata":
            client.sock.sendall(client.conn.encode_request(METADATA, 12, {"topics": None})[1])
        elif first == "garbage":
            client.send_raw(b"GET / HTTP/1.1\r\n\r\n")
        else:
            versions = {"client_software_name": "t", "client_software_version": "1"}
            assert client.request(API_VERSIONS, 3, versions).error_code == 0
            client.sock.sendall(client.conn.encode_request(API_VERSIONS, 3, versions)[1])
        _closed_within(client)
    _served(sasl_broker)


def test_a_request_during_the_exchange_gets_illegal_sasl_state(sasl_broker: SaslBroker) -> None:
    with RawClient(sasl_broker.bootstrap("SASL_PLAINTEXT")) as client:
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
        answer = client.request(METADATA, 12, {"topics": [{"name": "t", "topic_id": None}]})
        assert [t.error_code for t in answer.topics] == [34]  # ILLEGAL_SASL_STATE
        _closed_within(client)


def test_a_frame_too_large_before_authentication_closes(sasl_broker: SaslBroker) -> None:
    with RawClient(sasl_broker.bootstrap("SASL_PLAINTEXT")) as client:
        client.sock.sendall(struct.pack(">i", 524288 + 1))  # sasl.server.max.receive.size
        _closed_within(client)


def test_raw_tokens_after_a_v0_handshake(sasl_broker: SaslBroker) -> None:
    with RawClient(sasl_broker.bootstrap("SASL_PLAINTEXT")) as client:
        assert client.request(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
        client.send_raw(client_message("alice", PLAIN_USERS["alice"]))
        assert client.read_frame() == b""
        assert client.request(METADATA, 12, {"topics": None}).brokers
    with RawClient(sasl_broker.bootstrap("SASL_PLAINTEXT")) as client:
        assert client.request(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
        client.send_raw(client_message("alice", "wrong"))
        _closed_within(client)


def test_after_authentication_sasl_requests_are_illegal_without_a_session_limit(sasl_broker: SaslBroker) -> None:
    with RawClient(sasl_broker.bootstrap("SASL_PLAINTEXT")) as client:
        client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        done = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": client_message("alice", PLAIN_USERS["alice"])})
        assert (done.error_code, done.session_lifetime_ms) == (0, 0)
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 34
        again = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b""})
        assert (again.error_code, again.error_message) == (
            34, "SaslAuthenticate request received after successful authentication")
    with RawClient(sasl_broker.bootstrap("PLAINTEXT")) as client:  # no SASL on this listener
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 34


# -- re-authentication (KIP-368) --------------------------------------------------------------------------


def _login(client: RawClient, user: str = "alice") -> int:
    assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
    answer = client.request(SASL_AUTHENTICATE, 1, {"auth_bytes": client_message(user, PLAIN_USERS[user])})
    assert answer.error_code == 0, answer.error_message
    return answer.session_lifetime_ms


def test_an_expired_session_is_closed_at_its_next_request(sasl_broker: SaslBroker) -> None:
    with RawClient(sasl_broker.bootstrap("REAUTH")) as client:
        authenticated = time.monotonic()
        assert _login(client) == REAUTH_MS
        assert client.request(METADATA, 12, {"topics": None}).brokers
        expiry = authenticated + REAUTH_MS / 1000 + 0.05
        wait_until(lambda: time.monotonic() >= expiry, timeout_s=REAUTH_MS / 1000 + 1, what="the session's end")
        client.sock.sendall(client.conn.encode_request(METADATA, 12, {"topics": None})[1])
        _closed_within(client)
    _served(sasl_broker)


def test_re_authenticating_in_time_keeps_the_connection(sasl_broker: SaslBroker) -> None:
    with RawClient(sasl_broker.bootstrap("REAUTH")) as client:
        first = time.monotonic()
        _login(client)
        renewal = first + 1.2  # past Kafka's one second between re-authentications, before the end
        wait_until(lambda: time.monotonic() >= renewal, timeout_s=3, what="the time to re-authenticate")
        assert _login(client) == REAUTH_MS
        past_first_session = first + REAUTH_MS / 1000 + 0.2
        wait_until(lambda: time.monotonic() >= past_first_session, timeout_s=3, what="the first session's end")
        assert client.request(METADATA, 12, {"topics": None}).brokers
        # Re-authenticating as someone else is refused, and closes the connection.
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
        other = client.request(SASL_AUTHENTICATE, 1, {"auth_bytes": client_message("admin", PLAIN_USERS["admin"])})
        assert (other.error_code, other.error_message) == (
            58, "Cannot change principals during re-authentication from User.alice: User.admin")
        _closed_within(client)


@pytest.mark.parametrize("client_kind", ["confluent-kafka", "kafka-python"])
def test_real_clients_re_authenticate_and_keep_producing(sasl_broker: SaslBroker, client_kind: str) -> None:
    """Produce for three session lifetimes on one connection: the client re-authenticates in time."""
    topic = f"reauth-{client_kind}"
    log_before = len(sasl_broker.process.log_text())
    ends = time.monotonic() + 3 * REAUTH_MS / 1000
    sent = 0
    if client_kind == "confluent-kafka":
        producer = Producer(_confluent(sasl_broker, "REAUTH", "SCRAM-SHA-512") | {"acks": "all", "linger.ms": "0"})
        while time.monotonic() < ends:
            producer.produce(topic, f"{sent}".encode())
            sent += 1
            assert producer.flush(10) == 0
    else:
        kp = KafkaProducer(**_kafka_python(sasl_broker, "REAUTH", "SCRAM-SHA-256"))
        while time.monotonic() < ends:
            kp.send(topic, f"{sent}".encode()).get(10)
            sent += 1
        kp.close()
    assert sent > 10
    conf = _confluent(sasl_broker, "SASL_PLAINTEXT", "PLAIN")
    consumer = Consumer({**conf, "group.id": f"{topic}-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(read) < sent and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read.append(message.value())
    consumer.close()
    assert read == [f"{i}".encode() for i in range(sent)]
    log = sasl_broker.process.log_text()[log_before:]
    assert "SASL re-authentication authenticated User:" in log  # the broker saw re-authentications
    assert "SASL session expired" not in log  # and closed no connection for want of one


# -- last: no password was written anywhere ------------------------------------------------------------


def test_no_password_reaches_the_log_or_the_data(sasl_broker: SaslBroker) -> None:
    """After everything above (at DEBUG level, wrong passwords included), no password is in the
    broker's log or any file of its data directory; SCRAM credentials are there, salted and hashed."""
    sasl_broker.process.stop()
    found = []
    for path in (sasl_broker.directory / "broker").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path}: {password}" for password in ALL_PASSWORDS if password.encode() in data]
    assert found == []
    stored = (sasl_broker.process.log_dir / "__kbroker_metadata.json").read_text()
    assert SCRAM_USER in stored and "stored_key=" in stored
    assert os.path.getsize(sasl_broker.process.stderr_path) > 0
