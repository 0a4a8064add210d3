"""Authorization against a real broker, with real clients: a denial matrix of principals and
operations whose expected outcomes are written out from Kafka's KafkaApis rules (not read from
kbroker's answers), Metadata's hiding of topics, authorized-operations bitfields, and the check
that nothing denied leaves a trace.

One broker with `authorizer.class.name` set to Kafka's StandardAuthorizer and an MTLS listener:
each principal is a client certificate (`User:<CN>` by the mapping rule), so another principal
source (SASL) can replace `Principal.tls` later without touching the table.

The principals and their ACLs (set up through CreateAcls by the super user):

- admin: `super.users`, no ACL;
- producer: WRITE on topic `pre-orders` (LITERAL), WRITE on transactional id `tx-producer`;
- consumer: READ on topic `pre-orders`, READ on group `orders-group`;
- prefixed: ALL on topics prefixed `pre-` (PREFIXED);
- nobody: no ACL.
"""

from __future__ import annotations

import gc
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, Producer, TopicPartition
from confluent_kafka import KafkaError as CKError
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)
from kafka import KafkaProducer
from kafka.admin import ACL as KPACL
from kafka.admin import ACLOperation as KPACLOperation
from kafka.admin import ACLPermissionType as KPACLPermissionType
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KPNewTopic
from kafka.admin import ResourcePattern as KPResourcePattern
from kafka.admin import ResourceType as KPResourceType
from kafka.errors import KafkaTimeoutError

from protocol.connection import ClientProtocol
from protocol.errors import ErrorCode
from protocol.record_batch import Record, encode_batch
from tests.brokers import BrokerProcess, free_port
from tests.rawclient import RawClient
from tests.tls_material import TlsMaterial

TOPIC = "pre-orders"
GROUP = "orders-group"
PRINCIPALS = ("admin", "producer", "consumer", "prefixed", "nobody")
OK = "OK"
TOPIC_DENIED = "TOPIC_AUTHORIZATION_FAILED"
GROUP_DENIED = "GROUP_AUTHORIZATION_FAILED"
CLUSTER_DENIED = "CLUSTER_AUTHORIZATION_FAILED"
TXN_DENIED = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
ALL_CLUSTER_OPS = "all cluster operations"
NO_CLUSTER_OPS = "no cluster operation"

# The expected outcome of each operation for each principal, from KafkaApis:
#   produce          Produce: WRITE on the topic (ALL via prefix counts)
#   fetch            Fetch (consumer): READ on the topic
#   create_topic     CreateTopics `pre-c-<principal>`: CREATE on the cluster or the topic
#   delete_topic     DeleteTopics `pre-d-<principal>`: DELETE on the topic
#   describe_configs DescribeConfigs of the topic: DESCRIBE_CONFIGS (implied by ALTER_CONFIGS, ALL)
#   alter_configs    IncrementalAlterConfigs of the topic: ALTER_CONFIGS
#   join_group       JoinGroup `orders-group`: READ on the group
#   commit           OffsetCommit to `orders-group` for the topic: READ on the group, then on the topic
#   transactional    InitProducerId + produce in a transaction `tx-<principal>`: WRITE on the
#                    transactional id (FindCoordinator first needs DESCRIBE on it, implied by WRITE)
#   list_offsets     ListOffsets: DESCRIBE on the topic (implied by READ, WRITE, ALL)
#   delete_records   DeleteRecords: DELETE on the topic
#   describe_cluster DescribeCluster's authorized operations: all with DESCRIBE on the cluster, else 0
#   create_acls      CreateAcls: ALTER on the cluster
EXPECTED: dict[str, dict[str, str]] = {
    "produce": {"admin": OK, "producer": OK, "consumer": TOPIC_DENIED, "prefixed": OK, "nobody": TOPIC_DENIED},
    "fetch": {"admin": OK, "producer": TOPIC_DENIED, "consumer": OK, "prefixed": OK, "nobody": TOPIC_DENIED},
    "create_topic": {"admin": OK, "producer": TOPIC_DENIED, "consumer": TOPIC_DENIED, "prefixed": OK,
                     "nobody": TOPIC_DENIED},
    "delete_topic": {"admin": OK, "producer": TOPIC_DENIED, "consumer": TOPIC_DENIED, "prefixed": OK,
                     "nobody": TOPIC_DENIED},
    "describe_configs": {"admin": OK, "producer": TOPIC_DENIED, "consumer": TOPIC_DENIED, "prefixed": OK,
                         "nobody": TOPIC_DENIED},
    "alter_configs": {"admin": OK, "producer": TOPIC_DENIED, "consumer": TOPIC_DENIED, "prefixed": OK,
                      "nobody": TOPIC_DENIED},
    "join_group": {"admin": OK, "producer": GROUP_DENIED, "consumer": OK, "prefixed": GROUP_DENIED,
                   "nobody": GROUP_DENIED},
    "commit": {"admin": OK, "producer": GROUP_DENIED, "consumer": OK, "prefixed": GROUP_DENIED,
               "nobody": GROUP_DENIED},
    "transactional": {"admin": OK, "producer": OK, "consumer": TXN_DENIED, "prefixed": TXN_DENIED,
                      "nobody": TXN_DENIED},
    "list_offsets": {"admin": OK, "producer": OK, "consumer": OK, "prefixed": OK, "nobody": TOPIC_DENIED},
    "delete_records": {"admin": OK, "producer": TOPIC_DENIED, "consumer": TOPIC_DENIED, "prefixed": OK,
                       "nobody": TOPIC_DENIED},
    "describe_cluster": {"admin": ALL_CLUSTER_OPS, "producer": NO_CLUSTER_OPS, "consumer": NO_CLUSTER_OPS,
                         "prefixed": NO_CLUSTER_OPS, "nobody": NO_CLUSTER_OPS},
    "create_acls": {"admin": OK, "producer": CLUSTER_DENIED, "consumer": CLUSTER_DENIED, "prefixed": CLUSTER_DENIED,
                    "nobody": CLUSTER_DENIED},
}
# Kafka's supported cluster operations (AclEntry.supportedOperations), as a DescribeCluster bitfield.
CLUSTER_BITS = sum(1 << op for op in (5, 9, 10, 11, 12, 7, 8))


@dataclass
class Secured:
    process: BrokerProcess
    material: TlsMaterial
    port: int
    certs: dict[str, Any]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def raw(self, principal: str) -> RawClient:
        """A protocol client authenticated as `principal` (mutual TLS)."""
        context = ssl.create_default_context(cafile=str(self.material.ca.pem_path))
        cert = self.certs[principal]
        context.load_cert_chain(cert.chain, cert.key)
        client = RawClient.__new__(RawClient)
        client.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", self.port), timeout=15),
                                          server_hostname="localhost")
        client.conn = ClientProtocol(f"acl-{principal}")
        return client

    def confluent(self, principal: str, **extra: Any) -> dict[str, Any]:
        cert = self.certs[principal]
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SSL",
                "ssl.ca.location": str(self.material.ca.pem_path), "ssl.certificate.location": str(cert.chain),
                "ssl.key.location": str(cert.key), **extra}


def _acl(resource_type: int, name: str, pattern: int, principal: str, operation: int) -> dict[str, Any]:
    return {"resource_type": resource_type, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": "*", "operation": operation, "permission_type": 3}


TOPIC_T, GROUP_T, CLUSTER_T, TXN_T = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
ALL, READ, WRITE = 2, 3, 4
GRANTS = [
    _acl(TOPIC_T, TOPIC, LITERAL, "User:producer", WRITE),
    _acl(TXN_T, "tx-producer", LITERAL, "User:producer", WRITE),
    _acl(TOPIC_T, TOPIC, LITERAL, "User:consumer", READ),
    _acl(GROUP_T, GROUP, LITERAL, "User:consumer", READ),
    _acl(TOPIC_T, "pre-", PREFIXED, "User:prefixed", ALL),
]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("acl-broker")
    material = TlsMaterial.create(directory / "tls")
    plain, mtls = free_port(), free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},MTLS://127.0.0.1:{mtls}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL",
        **material.server_properties("required"),
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "auto.create.topics.enable": "false", "num.partitions": "1", "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
    }
    process = BrokerProcess(directory / "broker", port=plain, overrides=overrides).start()
    certs = {name: material.client(name) for name in PRINCIPALS}
    broker = Secured(process, material, mtls, certs)
    try:
        _set_up(broker)
        yield broker
    finally:
        if process.alive:
            assert process.stop() == 0, process.log_tail()


def _set_up(broker: Secured) -> None:
    with broker.raw("admin") as admin:
        names = [TOPIC] + [f"pre-d-{p}" for p in PRINCIPALS]
        created = admin.request(19, 5, {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1,
                                                    "assignments": [], "configs": []} for n in names],
                                        "timeout_ms": 10000})
        assert [t.error_code for t in created.topics] == [0] * len(names)
        answer = admin.request(30, 3, {"creations": GRANTS})
        assert [r.error_code for r in answer.results] == [0] * len(GRANTS)
        _produce_raw(admin, TOPIC, [b"first", b"second", b"third"])


def _produce_raw(client: RawClient, topic: str, values: list[bytes], transactional_id: str | None = None,
                 producer: tuple[int, int] | None = None) -> int:
    records = [Record(i, int(time.time() * 1000), None, v) for i, v in enumerate(values)]
    pid, epoch = producer or (-1, -1)
    batch = encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=0 if producer else -1,
                         transactional=transactional_id is not None)
    answer = client.request(0, 9, {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 10000,
                                   "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return answer.responses[0].partition_responses[0].error_code


def _name(code: int) -> str:
    return OK if code == 0 else ErrorCode(code).name


def _end_offset(broker: Secured) -> int:
    with broker.raw("admin") as admin:
        answer = admin.request(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        return answer.topics[0].partitions[0].offset


def _topic_exists(broker: Secured, name: str) -> bool:
    with broker.raw("admin") as admin:
        answer = admin.request(3, 12, {"topics": [{"name": name, "topic_id": None}],
                                       "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})
        return answer.topics[0].error_code == 0


def _retention(broker: Secured) -> str:
    with broker.raw("admin") as admin:
        answer = admin.request(32, 4, {"resources": [{"resource_type": 2, "resource_name": TOPIC,
                                                      "configuration_keys": ["retention.ms"]}],
                                       "include_synonyms": False, "include_documentation": False})
        return answer.results[0].configs[0].value


def _acl_count(broker: Secured) -> int:
    with broker.raw("admin") as admin:
        answer = admin.request(29, 3, {"resource_type_filter": 1, "resource_name_filter": None,
                                       "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                       "operation": 1, "permission_type": 1})
        return sum(len(r.acls) for r in answer.resources)


# -- the operations through the protocol (kbroker's own raw client) -------------------------------


def _raw_produce(c: RawClient, p: str) -> str:
    return _name(_produce_raw(c, TOPIC, [f"from {p}".encode()]))


def _raw_fetch(c: RawClient, p: str) -> str:
    answer = c.request(1, 12, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                               "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                   {"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                                    "fetch_offset": 0, "log_start_offset": -1,
                                                                    "partition_max_bytes": 1 << 20}]}],
                               "forgotten_topics_data": [], "rack_id": ""})
    part = answer.responses[0].partitions[0]
    assert part.error_code != 0 or len(part.records) > 0
    return _name(part.error_code)


def _raw_create_topic(c: RawClient, p: str) -> str:
    answer = c.request(19, 5, {"topics": [{"name": f"pre-c-raw-{p}", "num_partitions": 1, "replication_factor": 1,
                                           "assignments": [], "configs": []}], "timeout_ms": 10000})
    return _name(answer.topics[0].error_code)


def _raw_delete_topic(c: RawClient, p: str) -> str:
    answer = c.request(20, 5, {"topic_names": [f"pre-d-{p}"], "timeout_ms": 10000})
    return _name(answer.responses[0].error_code)


def _raw_describe_configs(c: RawClient, p: str) -> str:
    answer = c.request(32, 4, {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}],
                               "include_synonyms": False, "include_documentation": False})
    return _name(answer.results[0].error_code)


def _raw_alter_configs(c: RawClient, p: str) -> str:
    value = str(86_400_000 + PRINCIPALS.index(p))
    answer = c.request(44, 1, {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": value}]}], "validate_only": False})
    return _name(answer.responses[0].error_code)


def _raw_join_group(c: RawClient, p: str) -> str:
    answer = c.request(11, 3, {"group_id": GROUP, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                               "member_id": "", "protocol_type": "consumer",
                               "protocols": [{"name": "range", "metadata": b""}]})
    if answer.error_code == 0:  # leave again, so the next member's join is not held up
        c.request(13, 0, {"group_id": GROUP, "member_id": answer.member_id})
    return _name(answer.error_code)


def _raw_commit(c: RawClient, p: str) -> str:
    answer = c.request(8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
                              "group_instance_id": None, "topics": [
                                  {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                  "committed_leader_epoch": -1,
                                                                  "committed_metadata": ""}]}]})
    return _name(answer.topics[0].partitions[0].error_code)


def _raw_transactional(c: RawClient, p: str) -> str:
    txn = f"tx-{p}"
    found = c.request(10, 3, {"key": txn, "key_type": 1})
    if found.error_code:
        return _name(found.error_code)
    init = c.request(22, 1, {"transactional_id": txn, "transaction_timeout_ms": 60000})
    if init.error_code:
        return _name(init.error_code)
    added = c.request(24, 3, {"v3_and_below_transactional_id": txn, "v3_and_below_producer_id": init.producer_id,
                              "v3_and_below_producer_epoch": init.producer_epoch,
                              "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]})
    code = added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    if code:
        return _name(code)
    code = _produce_raw(c, TOPIC, [b"in a transaction"], txn, (init.producer_id, init.producer_epoch))
    if code:
        return _name(code)
    ended = c.request(26, 1, {"transactional_id": txn, "producer_id": init.producer_id,
                              "producer_epoch": init.producer_epoch, "committed": True})
    return _name(ended.error_code)


def _raw_list_offsets(c: RawClient, p: str) -> str:
    answer = c.request(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return _name(answer.topics[0].partitions[0].error_code)


def _raw_delete_records(c: RawClient, p: str) -> str:
    answer = c.request(21, 1, {"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 0}]}],
                               "timeout_ms": 10000})
    return _name(answer.topics[0].partitions[0].error_code)


def _raw_describe_cluster(c: RawClient, p: str) -> str:
    answer = c.request(60, 0, {"include_cluster_authorized_operations": True})
    assert answer.error_code == 0
    return {CLUSTER_BITS: ALL_CLUSTER_OPS, 0: NO_CLUSTER_OPS}.get(answer.cluster_authorized_operations,
                                                                   str(answer.cluster_authorized_operations))


def _raw_create_acls(c: RawClient, p: str) -> str:
    answer = c.request(30, 3, {"creations": [_acl(GROUP_T, f"probe-raw-{p}", LITERAL, "User:probe", READ)]})
    return _name(answer.results[0].error_code) if answer.results else "no results"


RAW: dict[str, Callable[[RawClient, str], str]] = {
    "produce": _raw_produce, "fetch": _raw_fetch, "create_topic": _raw_create_topic,
    "delete_topic": _raw_delete_topic, "describe_configs": _raw_describe_configs,
    "alter_configs": _raw_alter_configs, "join_group": _raw_join_group, "commit": _raw_commit,
    "transactional": _raw_transactional, "list_offsets": _raw_list_offsets,
    "delete_records": _raw_delete_records, "describe_cluster": _raw_describe_cluster, "create_acls": _raw_create_acls,
}


def test_denial_matrix_through_the_protocol(secured: Secured) -> None:
    outcomes = {}
    for principal in PRINCIPALS:
        for operation, run in RAW.items():
            if operation == "delete_topic" or operation == "create_topic":
                continue  # the topic-lifecycle cells run once, through confluent-kafka below
            with secured.raw(principal) as client:
                outcomes[(operation, principal)] = run(client, principal)
    expected = {(op, p): EXPECTED[op][p] for op in RAW if op not in ("delete_topic", "create_topic")
                for p in PRINCIPALS}
    assert outcomes == expected


def test_create_and_delete_topics_through_the_protocol(secured: Secured) -> None:
    outcomes = {}
    for principal in PRINCIPALS:
        with secured.raw(principal) as client:
            outcomes[("create_topic", principal)] = _raw_create_topic(client, principal)
    assert outcomes == {("create_topic", p): EXPECTED["create_topic"][p] for p in PRINCIPALS}
    # Nothing denied leaves a trace: the refused topics do not exist.
    for principal in PRINCIPALS:
        assert _topic_exists(secured, f"pre-c-raw-{principal}") == (EXPECTED["create_topic"][principal] == OK)


# -- the same operations with confluent-kafka (librdkafka) ----------------------------------------


def _code(error: Any) -> str:
    """The Kafka error name of a confluent-kafka error (its codes are Kafka's)."""
    if isinstance(error, KafkaException):
        error = error.args[0]
    if isinstance(error, CKError):
        if error.code() == CKError.NO_ERROR:
            return OK
        # librdkafka names broker errors as Kafka does; its own (negative codes) start with "_".
        return error.name() if error.code() > 0 else f"{error.name()}: {error.str()}"
    raise AssertionError(f"not a Kafka error: {error!r}")


def _future(admin: AdminClient, future: Any) -> str:
    """The outcome of an admin call (the client must live until its future completes)."""
    try:
        future.result(15)
    except KafkaException as e:
        return _code(e)
    finally:
        del admin
    return OK


def _ck_produce(b: Secured, p: str) -> str:
    errors: list[Any] = []
    producer = Producer(b.confluent(p, **{"enable.idempotence": False, "acks": "all", "message.timeout.ms": 10000}))
    producer.produce(TOPIC, f"confluent {p}".encode(), on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(15) == 0
    return OK if errors == [None] else _code(errors[0])


def _ck_fetch(b: Secured, p: str) -> str:
    consumer = CKConsumer(b.confluent(p, **{"group.id": f"fetch-{p}", "enable.auto.commit": False}))
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == CKError.GROUP_AUTHORIZATION_FAILED:
                continue  # the consumer's group lookup (FindCoordinator), not the fetch asked about
            return OK if error is None else _code(error)
        return "timed out"
    finally:
        consumer.close()


def _ck_admin(b: Secured, p: str) -> AdminClient:
    return AdminClient(b.confluent(p))


def _ck_create_topic(b: Secured, p: str) -> str:
    admin = _ck_admin(b, p)
    return _future(admin, admin.create_topics([NewTopic(f"pre-c-{p}", 1, 1)], operation_timeout=10)[f"pre-c-{p}"])


def _ck_delete_topic(b: Secured, p: str) -> str:
    admin = _ck_admin(b, p)
    return _future(admin, admin.delete_topics([f"pre-d-{p}"], operation_timeout=10)[f"pre-d-{p}"])


def _ck_describe_configs(b: Secured, p: str) -> str:
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC)
    admin = _ck_admin(b, p)
    return _future(admin, admin.describe_configs([resource])[resource])


def _ck_alter_configs(b: Secured, p: str) -> str:
    entry = ConfigEntry("retention.ms", str(90_000_000 + PRINCIPALS.index(p)),
                        incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[entry])
    admin = _ck_admin(b, p)
    return _future(admin, admin.incremental_alter_configs([resource])[resource])


def _ck_commit(b: Secured, p: str) -> str:
    # The admin client's commit (OffsetCommit after FindCoordinator): a consumer's commit waits
    # for a coordinator it may not look up until its timeout instead of failing.
    admin = _ck_admin(b, p)
    request = ConsumerGroupTopicPartitions(GROUP, [TopicPartition(TOPIC, 0, 1)])
    try:
        result = admin.alter_consumer_group_offsets([request])[GROUP].result(15)
    except KafkaException as e:
        return _code(e)
    error = result.topic_partitions[0].error
    return OK if error is None else _code(error)


def _ck_transactional(b: Secured, p: str) -> str:
    producer = Producer(b.confluent(p, **{"transactional.id": f"tx-{p}", "transaction.timeout.ms": 30000}))
    try:
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.produce(TOPIC, f"transactional {p}".encode())
        producer.commit_transaction(15)
    except KafkaException as e:
        return _code(e)
    return OK


def _ck_list_offsets(b: Secured, p: str) -> str:
    partition = TopicPartition(TOPIC, 0)
    admin = _ck_admin(b, p)
    return _future(admin, admin.list_offsets({partition: OffsetSpec.latest()})[partition])


def _ck_delete_records(b: Secured, p: str) -> str:
    partition = TopicPartition(TOPIC, 0, 0)
    admin = _ck_admin(b, p)
    return _future(admin, admin.delete_records([partition])[partition])


def _ck_describe_cluster(b: Secured, p: str) -> str:
    admin = _ck_admin(b, p)
    described = admin.describe_cluster(include_authorized_operations=True).result(15)
    operations = described.authorized_operations or []
    return ALL_CLUSTER_OPS if len(operations) == 7 else NO_CLUSTER_OPS if not operations else str(operations)


CONFLUENT: dict[str, Callable[[Secured, str], str]] = {
    "produce": _ck_produce, "fetch": _ck_fetch, "create_topic": _ck_create_topic, "delete_topic": _ck_delete_topic,
    "describe_configs": _ck_describe_configs, "alter_configs": _ck_alter_configs, "commit": _ck_commit,
    "transactional": _ck_transactional, "list_offsets": _ck_list_offsets, "delete_records": _ck_delete_records,
    # create_acls: confluent-kafka 2.16 leaves a Python exception pending after a refused
    # CreateAcls (the next call fails with SystemError); kafka-python's cells below cover it.
    "describe_cluster": _ck_describe_cluster,
}


# librdkafka's admin calls that find partition leaders through Metadata first: a topic the caller
# may not describe comes back from Metadata as TOPIC_AUTHORIZATION_FAILED without partitions,
# which the client reports as a local "no leader" error before any ListOffsets/DeleteRecords.
NO_LEADER = "_NOENT: Failed to query partition leaders: No leaders found"
# Its consumer, assigned a partition it has no leader for, never sends the Fetch and keeps waiting.
CONFLUENT_SEES = {("list_offsets", TOPIC_DENIED): NO_LEADER, ("delete_records", TOPIC_DENIED): NO_LEADER,
                  ("fetch", TOPIC_DENIED): "timed out"}


def _as_confluent_sees(operation: str, principal: str) -> str:
    """The expected outcome; for the nobody principal (no DESCRIBE on the topic), as librdkafka
    reports a topic Metadata refused."""
    expected = EXPECTED[operation][principal]
    if principal == "nobody":
        return CONFLUENT_SEES.get((operation, expected), expected)
    return expected


def test_denial_matrix_with_confluent_kafka_and_nothing_denied_leaves_a_trace(secured: Secured) -> None:
    acls_before = _acl_count(secured)
    outcomes = {}
    for principal in PRINCIPALS:
        for operation, run in CONFLUENT.items():
            offset, retention = _end_offset(secured), _retention(secured)
            outcome = run(secured, principal)
            # Free the clients now, from Python: a confluent-kafka client collected inside another
            # client's C call (a cycle found by the collector there) breaks that call.
            gc.collect()
            outcomes[(operation, principal)] = outcome
            if outcome == OK or operation == "describe_cluster":
                continue
            # Denied: the log, the configs and the ACLs are as they were.
            assert _end_offset(secured) == offset, (operation, principal)
            assert _retention(secured) == retention, (operation, principal)
    assert outcomes == {(op, p): _as_confluent_sees(op, p) for op in CONFLUENT for p in PRINCIPALS}
    for principal in PRINCIPALS:
        allowed = EXPECTED["create_topic"][principal] == OK
        assert _topic_exists(secured, f"pre-c-{principal}") == allowed
        assert _topic_exists(secured, f"pre-d-{principal}") == (not allowed)
    assert _acl_count(secured) == acls_before


# -- kafka-python ----------------------------------------------------------------------------------


def _kp_config(b: Secured, p: str) -> dict[str, Any]:
    cert = b.certs[p]
    return {"bootstrap_servers": b.bootstrap, "security_protocol": "SSL", "ssl_cafile": str(b.material.ca.pem_path),
            "ssl_certfile": str(cert.chain), "ssl_keyfile": str(cert.key), "ssl_check_hostname": False}


def _kp_error(e: Exception) -> str:
    errno = getattr(e, "errno", None)
    return ErrorCode(errno).name if isinstance(errno, int) and errno > 0 else f"{type(e).__name__}: {e}"


def _kp_produce(b: Secured, p: str) -> str:
    producer = KafkaProducer(**_kp_config(b, p), acks="all", max_block_ms=10000, retries=0)
    try:
        producer.send(TOPIC, f"kafka-python {p}".encode()).get(15)
    except KafkaTimeoutError:
        return "timed out"
    except Exception as e:
        return _kp_error(e)
    finally:
        producer.close(5)
    return OK


def _kp_create_topic(b: Secured, p: str) -> str:
    admin = KafkaAdminClient(**_kp_config(b, p))
    try:
        admin.create_topics([KPNewTopic(f"pre-k-{p}", 1, 1)])
    except Exception as e:
        return _kp_error(e)
    finally:
        admin.close()
    return OK


def _kp_create_acls(b: Secured, p: str) -> str:
    admin = KafkaAdminClient(**_kp_config(b, p))
    acl = KPACL(f"User:probe-{p}", "*", KPACLOperation.READ, KPACLPermissionType.ALLOW,
                KPResourcePattern(KPResourceType.GROUP, f"probe-kp-{p}"))
    try:
        result = admin.create_acls([acl])
    except Exception as e:  # a request-level refusal
        return _kp_error(e)
    finally:
        admin.close()
    if result["succeeded"]:
        return OK
    failed = result["failed"][0]
    error = failed[1] if isinstance(failed, tuple) else failed  # kafka-python 3 gives the error class
    return ErrorCode(error.errno).name


KAFKA_PYTHON: dict[str, Callable[[Secured, str], str]] = {
    "produce": _kp_produce, "create_topic": _kp_create_topic, "create_acls": _kp_create_acls,
}


def test_denial_matrix_with_kafka_python(secured: Secured) -> None:
    acls_before = _acl_count(secured)
    outcomes = {}
    for principal in PRINCIPALS:
        for operation, run in KAFKA_PYTHON.items():
            offset = _end_offset(secured)
            outcomes[(operation, principal)] = run(secured, principal)
            if outcomes[(operation, principal)] != OK:
                assert _end_offset(secured) == offset, (operation, principal)
    assert outcomes == {(op, p): EXPECTED[op][p] for op in KAFKA_PYTHON for p in PRINCIPALS}
    for principal in PRINCIPALS:
        assert _topic_exists(secured, f"pre-k-{principal}") == (EXPECTED["create_topic"][principal] == OK)
    # Only the super user's ACL was created.
    assert _acl_count(secured) == acls_before + sum(EXPECTED["create_acls"][p] == OK for p in PRINCIPALS)


# -- Metadata --------------------------------------------------------------------------------------


def test_metadata_refuses_named_topics_hides_them_in_a_listing_and_reports_operations(secured: Secured) -> None:
    with secured.raw("nobody") as nobody:
        named = nobody.request(3, 12, {"topics": [{"name": TOPIC, "topic_id": None}, {"name": "no-such", "topic_id": None}],
                                       "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": True})
        assert [(t.name, t.error_code) for t in named.topics] == [
            (TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED), ("no-such", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
        listing = nobody.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": True})
        assert listing.topics == []
    with secured.raw("consumer") as consumer:
        listing = consumer.request(3, 8, {"topics": None, "allow_auto_topic_creation": False,
                                          "include_cluster_authorized_operations": True,
                                          "include_topic_authorized_operations": True})
        # READ on the topic: READ and the DESCRIBE it implies; no cluster DESCRIBE: bitfield 0.
        assert [(t.name, t.topic_authorized_operations) for t in listing.topics] == [(TOPIC, (1 << 3) | (1 << 8))]
        assert listing.cluster_authorized_operations == 0
    with secured.raw("prefixed") as prefixed:
        listing = prefixed.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": True})
        topic_bits = sum(1 << op for op in (3, 4, 5, 8, 6, 7, 10, 11))
        assert {t.name for t in listing.topics} >= {TOPIC}
        assert all(t.name.startswith("pre-") and t.topic_authorized_operations == topic_bits for t in listing.topics)


def test_without_an_authorizer_the_acl_apis_say_security_is_disabled(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "plain").start()
    try:
        with RawClient(process.bootstrap) as client:
            described = client.request(29, 3, {"resource_type_filter": 1, "resource_name_filter": None,
                                               "pattern_type_filter": 1, "principal_filter": None,
                                               "host_filter": None, "operation": 1, "permission_type": 1})
            assert described.error_code == ErrorCode.SECURITY_DISABLED
            created = client.request(30, 3, {"creations": [GRANTS[0]]})
            assert [r.error_code for r in created.results] == [ErrorCode.SECURITY_DISABLED]
    finally:
        assert process.stop() == 0, process.log_tail()
