"""TLS listeners with real clients: confluent-kafka, kafka-python and kcat over server-auth and
mutual TLS, per-listener addresses in Metadata, refused certificates, and clients on the wrong
kind of port closed at once while everyone else is served.

One broker, three listeners: PLAINTEXT, SSL (server authentication only) and MTLS (an SSL
listener requiring client certificates, configured through `listener.name.mtls.ssl.*`, whose
principal mapping rule only admits OU=eng).
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer

from protocol.connection import ClientProtocol
from tests.brokers import BrokerProcess, free_port
from tests.rawclient import RawClient
from tests.tls_material import Identity, TlsMaterial

API_VERSIONS, METADATA = 18, 3
HANDSHAKE_DEADLINE_MS = 1500


@dataclass
class TlsBroker:
    process: BrokerProcess
    material: TlsMaterial
    ports: dict[str, int]

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    directory = tmp_path_factory.mktemp("tls-broker")
    material = TlsMaterial.create(directory / "tls", key_password="broker-key-secret")
    ports = {"PLAINTEXT": free_port(), "SSL": free_port(), "MTLS": free_port()}
    overrides = {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        **material.server_properties("none"),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=eng,.*$/$1/L",
        "socket.request.read.timeout.ms": str(HANDSHAKE_DEADLINE_MS),
        "num.partitions": "1", "offsets.topic.num.partitions": "3",
    }
    process = BrokerProcess(directory / "broker", port=ports["PLAINTEXT"], overrides=overrides).start()
    yield TlsBroker(process, material, ports)
    if process.alive:
        assert process.stop() == 0, process.log_tail()


def _confluent(broker: TlsBroker, listener: str, client: Identity | None) -> dict[str, str]:
    conf = {"bootstrap.servers": broker.bootstrap(listener), "security.protocol": "SSL",
            "ssl.ca.location": str(broker.material.ca.pem_path)}
    if client is not None:
        conf |= {"ssl.certificate.location": str(client.chain), "ssl.key.location": str(client.key)}
    return conf


def _confluent_round_trip(conf: dict[str, str], topic: str, count: int = 50) -> list[bytes]:
    producer = Producer(conf)
    for i in range(count):
        producer.produce(topic, f"message {i}".encode() * 200)  # several KiB each: fetches of real slices
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"{topic}-group", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
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


def _expected(count: int = 50) -> list[bytes]:
    return [f"message {i}".encode() * 200 for i in range(count)]


def test_confluent_kafka_over_server_authenticated_tls(tls_broker: TlsBroker) -> None:
    assert _confluent_round_trip(_confluent(tls_broker, "SSL", None), "tls-confluent") == _expected()


def test_confluent_kafka_over_mutual_tls(tls_broker: TlsBroker) -> None:
    client = tls_broker.material.client("alice")
    assert _confluent_round_trip(_confluent(tls_broker, "MTLS", client), "mtls-confluent") == _expected()


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_kafka_python_over_tls(tls_broker: TlsBroker, listener: str) -> None:
    client = tls_broker.material.client("bob")
    ssl_args = {"security_protocol": "SSL", "ssl_cafile": str(tls_broker.material.ca.pem_path),
                "ssl_check_hostname": True}
    if listener == "MTLS":
        ssl_args |= {"ssl_certfile": str(client.chain), "ssl_keyfile": str(client.key)}
    topic = f"kafka-python-{listener.lower()}"
    producer = KafkaProducer(bootstrap_servers=tls_broker.bootstrap(listener), **ssl_args)
    for i in range(20):
        producer.send(topic, f"kp {i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=tls_broker.bootstrap(listener), auto_offset_reset="earliest",
                             consumer_timeout_ms=10_000, **ssl_args)
    values = [message.value for message in consumer][:20]
    consumer.close()
    assert values == [f"kp {i}".encode() for i in range(20)]


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_kcat_over_tls(tls_broker: TlsBroker, listener: str) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.skip("kcat is not installed (scripts/test.sh installs it)")
    client = tls_broker.material.client("carol")
    args = [kcat, "-b", tls_broker.bootstrap(listener), "-X", "security.protocol=SSL",
            "-X", f"ssl.ca.location={tls_broker.material.ca.pem_path}"]
    if listener == "MTLS":
        args += ["-X", f"ssl.certificate.location={client.chain}", "-X", f"ssl.key.location={client.key}"]
    topic = f"kcat-{listener.lower()}"
    subprocess.run([*args, "-P", "-t", topic], input=b"one\ntwo\nthree\n", check=True, timeout=60)
    out = subprocess.run([*args, "-C", "-t", topic, "-o", "beginning", "-e", "-q"], capture_output=True,
                         check=True, timeout=60)
    assert out.stdout.split() == [b"one", b"two", b"three"]


# -- addresses per listener ----------------------------------------------------------------------


def _tls_client(broker: TlsBroker, listener: str, client: Identity | None = None) -> RawClient:
    context = ssl.create_default_context(cafile=str(broker.material.ca.pem_path))
    if client is not None:
        context.load_cert_chain(client.chain, client.key)
    raw = RawClient.__new__(RawClient)
    sock = socket.create_connection(("127.0.0.1", broker.ports[listener]), timeout=10)
    raw.sock = context.wrap_socket(sock, server_hostname="localhost")
    raw.conn = ClientProtocol("tls-test")
    return raw


@pytest.mark.parametrize("version", [1, 12])
def test_metadata_answers_with_the_addresses_of_the_listener_asked(tls_broker: TlsBroker, version: int) -> None:
    alice = tls_broker.material.client("alice")
    clients = {"PLAINTEXT": RawClient(tls_broker.bootstrap("PLAINTEXT")), "SSL": _tls_client(tls_broker, "SSL"),
               "MTLS": _tls_client(tls_broker, "MTLS", alice)}
    for listener, client in clients.items():
        with client.sock:
            answer = client.request(METADATA, version, {"topics": None, "allow_auto_topic_creation": False})
            assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(0, "127.0.0.1",
                                                                              tls_broker.ports[listener])]
            described = client.request(60, 0, {"include_cluster_authorized_operations": False})  # DescribeCluster
            assert [b.port for b in described.brokers] == [tls_broker.ports[listener]]
            coordinator = client.request(10, 3, {"key": "some-group", "key_type": 0})  # FindCoordinator
            assert (coordinator.error_code, coordinator.port) == (0, tls_broker.ports[listener])


# -- refused certificates and names ------------------------------------------------------------


def _refused(client: RawClient) -> bool:
    """The broker ends the session instead of answering (with TLS 1.3 the client learns that its
    certificate was refused on its first read)."""
    try:
        client.request(API_VERSIONS, 0, {})
    except (ssl.SSLError, ConnectionError, OSError):
        return True
    return False


@pytest.mark.parametrize("kind", ["expired", "untrusted", "no certificate", "unmapped name"])
def test_mutual_tls_refuses_bad_client_certificates(tls_broker: TlsBroker, kind: str) -> None:
    material = tls_broker.material
    client = {"expired": material.client("dave", expired=True), "untrusted": material.client("eve", other_ca=True),
              "no certificate": None, "unmapped name": material.client("frank", organizational_unit="sales")}[kind]
    try:
        raw = _tls_client(tls_broker, "MTLS", client)
    except (ssl.SSLError, ConnectionError):
        return  # refused in the handshake itself (TLS 1.2)
    with raw.sock:
        assert _refused(raw)
    # The same listener serves a good certificate.
    with _tls_client(tls_broker, "MTLS", material.client("alice")).sock as sock:
        good = RawClient.__new__(RawClient)
        good.sock, good.conn = sock, ClientProtocol("tls-test")
        assert good.request(API_VERSIONS, 0, {}).error_code == 0


# -- the wrong kind of client on a port ------------------------------------------------------------


def _closed_within(sock: socket.socket, seconds: float) -> float:
    """How long until the broker closes `sock` (reads return nothing or the connection resets)."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, ssl.SSLError):
        pass
    except TimeoutError:
        pytest.fail(f"the broker did not close the connection within {seconds} s")
    return time.monotonic() - started


def test_the_wrong_kind_of_client_is_closed_at_once_and_others_are_served(tls_broker: TlsBroker) -> None:
    served = RawClient(tls_broker.bootstrap("PLAINTEXT"))
    assert served.request(API_VERSIONS, 0, {}).error_code == 0
    # A plaintext Kafka client on the TLS port: its ApiVersions is no TLS handshake.
    plaintext_on_tls = socket.create_connection(("127.0.0.1", tls_broker.ports["SSL"]), timeout=5)
    plaintext_on_tls.sendall(ClientProtocol("wrong-port").encode_request(API_VERSIONS, 3, {
        "client_software_name": "x", "client_software_version": "1"})[1])
    # A TLS client on the plaintext port: its ClientHello is no Kafka frame.
    context = ssl.create_default_context(cafile=str(tls_broker.material.ca.pem_path))
    tls_on_plaintext = context.wrap_socket(socket.socket(), server_hostname="localhost", do_handshake_on_connect=False)
    tls_on_plaintext.connect(("127.0.0.1", tls_broker.ports["PLAINTEXT"]))
    tls_on_plaintext.settimeout(5)
    started = time.monotonic()
    with pytest.raises((ssl.SSLError, ConnectionError)):
        tls_on_plaintext.do_handshake()
    assert time.monotonic() - started < 1.0
    with plaintext_on_tls, tls_on_plaintext:
        assert _closed_within(plaintext_on_tls, 1.0) < 1.0
    with served.sock:
        assert served.request(API_VERSIONS, 0, {}).error_code == 0


def test_a_stalled_handshake_does_not_hold_anyone_up_and_ends_at_its_deadline(tls_broker: TlsBroker) -> None:
    # Connected to the TLS ports, sending nothing (or half a ClientHello): the handshake waits
    # on the event loop without blocking it, and gives up at socket.request.read.timeout.ms.
    silent = socket.create_connection(("127.0.0.1", tls_broker.ports["SSL"]), timeout=5)
    partial = socket.create_connection(("127.0.0.1", tls_broker.ports["MTLS"]), timeout=5)
    partial.sendall(b"\x16\x03\x01\x02\x00\x01\x00")
    started = time.monotonic()
    for _ in range(20):
        with _tls_client(tls_broker, "SSL").sock as sock:
            client = RawClient.__new__(RawClient)
            client.sock, client.conn = sock, ClientProtocol("tls-test")
            assert client.request(API_VERSIONS, 0, {}).error_code == 0
    with silent, partial:
        for sock in (silent, partial):
            _closed_within(sock, HANDSHAKE_DEADLINE_MS / 1000 + 2.0)
        assert time.monotonic() - started >= HANDSHAKE_DEADLINE_MS / 1000 - 0.1
