"""The denial matrix of authorization: principals, operations, the outcome Kafka's KafkaApis
gives each (written out from its rules, not read from any broker's answers), and the operations
through the protocol with kbroker's raw client.

Shared by tests/integration/test_authorization.py (kbroker with confluent-kafka and
kafka-python too) and compat_tests/test_authorization.py (the same cells and the Java client,
against kbroker and the Apache Kafka reference side by side).

Each principal is a client certificate on a listener with mutual TLS (`User:<CN>` by the
mapping rule `MAPPING_RULE`); its ACLs (set up through CreateAcls by the super user):

- admin: `super.users`, no ACL;
- producer: WRITE on topic `pre-orders` (LITERAL), WRITE on transactional id `tx-producer`;
- consumer: READ on topic `pre-orders`, READ on group `orders-group`;
- prefixed: ALL on topics prefixed `pre-` (PREFIXED);
- nobody: no ACL.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from protocol.connection import ClientProtocol
from protocol.errors import ErrorCode
from protocol.record_batch import Record, encode_batch
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
#   create_topic     CreateTopics `pre-c-<client>-<principal>`: CREATE on the cluster or the topic
#   delete_topic     DeleteTopics `pre-d-<client>-<principal>`: DELETE on the topic
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
MAPPING_RULE = "RULE:^CN=([^,]*),.*$/$1/"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ACL_WAIT_S = 15.0


@dataclass
class Secured:
    process: Any  # the broker: a kbroker BrokerProcess or the Kafka reference
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


def acl_binding(resource_type: int, name: str, pattern: int, principal: str, operation: int) -> dict[str, Any]:
    return {"resource_type": resource_type, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": "*", "operation": operation, "permission_type": 3}


TOPIC_T, GROUP_T, CLUSTER_T, TXN_T = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
ALL, READ, WRITE = 2, 3, 4
GRANTS = [
    acl_binding(TOPIC_T, TOPIC, LITERAL, "User:producer", WRITE),
    acl_binding(TXN_T, "tx-producer", LITERAL, "User:producer", WRITE),
    acl_binding(TOPIC_T, TOPIC, LITERAL, "User:consumer", READ),
    acl_binding(GROUP_T, GROUP, LITERAL, "User:consumer", READ),
    acl_binding(TOPIC_T, "pre-", PREFIXED, "User:prefixed", ALL),
]


def set_up(broker: Secured, topics: Iterable[str] = ()) -> None:
    """Topics, ACLs and three records, as the super user; returns once the broker applies the ACLs."""
    with broker.raw("admin") as admin:
        names = [TOPIC, *doomed_topics("raw"), *topics]
        created = admin.request(19, 5, {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1,
                                                    "assignments": [], "configs": []} for n in names],
                                        "timeout_ms": 10000})
        assert [t.error_code for t in created.topics] == [0] * len(names)
        answer = admin.request(30, 3, {"creations": GRANTS})
        assert [r.error_code for r in answer.results] == [0] * len(GRANTS)
        _produce_raw(admin, TOPIC, [b"first", b"second", b"third"])
    # A broker may answer CreateAcls before its authorizer applies them (KRaft replays the records).
    deadline = time.monotonic() + ACL_WAIT_S
    while acl_count(broker) < len(GRANTS):
        assert time.monotonic() < deadline, "the broker did not apply the ACLs"
        time.sleep(0.05)


def doomed_topics(client: str) -> list[str]:
    """The topics each principal tries to delete through `client`."""
    return [f"pre-d-{client}-{p}" for p in PRINCIPALS]


def _produce_raw(client: RawClient, topic: str, values: list[bytes], transactional_id: str | None = None,
                 producer: tuple[int, int] | None = None) -> int:
    records = [Record(i, int(time.time() * 1000), None, v) for i, v in enumerate(values)]
    pid, epoch = producer or (-1, -1)
    batch = encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=0 if producer else -1,
                         transactional=transactional_id is not None)
    answer = client.request(0, 9, {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 10000,
                                   "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return answer.responses[0].partition_responses[0].error_code


def outcome_name(code: int) -> str:
    return OK if code == 0 else ErrorCode(code).name


def end_offset(broker: Secured) -> int:
    with broker.raw("admin") as admin:
        answer = admin.request(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        return answer.topics[0].partitions[0].offset


def topic_exists(broker: Secured, name: str) -> bool:
    with broker.raw("admin") as admin:
        answer = admin.request(3, 12, {"topics": [{"name": name, "topic_id": None}],
                                       "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})
        return answer.topics[0].error_code == 0


def retention(broker: Secured) -> str:
    with broker.raw("admin") as admin:
        answer = admin.request(32, 4, {"resources": [{"resource_type": 2, "resource_name": TOPIC,
                                                      "configuration_keys": ["retention.ms"]}],
                                       "include_synonyms": False, "include_documentation": False})
        return answer.results[0].configs[0].value


def acl_count(broker: Secured) -> int:
    with broker.raw("admin") as admin:
        answer = admin.request(29, 3, {"resource_type_filter": 1, "resource_name_filter": None,
                                       "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                       "operation": 1, "permission_type": 1})
        return sum(len(r.acls) for r in answer.resources)


# -- the operations through the protocol (kbroker's own raw client) -------------------------------


def _raw_produce(c: RawClient, p: str) -> str:
    return outcome_name(_produce_raw(c, TOPIC, [f"from {p}".encode()]))


def _raw_fetch(c: RawClient, p: str) -> str:
    answer = c.request(1, 12, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                               "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                   {"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                                    "fetch_offset": 0, "log_start_offset": -1,
                                                                    "partition_max_bytes": 1 << 20}]}],
                               "forgotten_topics_data": [], "rack_id": ""})
    part = answer.responses[0].partitions[0]
    assert part.error_code != 0 or len(part.records) > 0
    return outcome_name(part.error_code)


def _raw_create_topic(c: RawClient, p: str) -> str:
    answer = c.request(19, 5, {"topics": [{"name": f"pre-c-raw-{p}", "num_partitions": 1, "replication_factor": 1,
                                           "assignments": [], "configs": []}], "timeout_ms": 10000})
    return outcome_name(answer.topics[0].error_code)


def _raw_delete_topic(c: RawClient, p: str) -> str:
    answer = c.request(20, 5, {"topic_names": [f"pre-d-raw-{p}"], "timeout_ms": 10000})
    return outcome_name(answer.responses[0].error_code)


def _raw_describe_configs(c: RawClient, p: str) -> str:
    answer = c.request(32, 4, {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}],
                               "include_synonyms": False, "include_documentation": False})
    return outcome_name(answer.results[0].error_code)


def _raw_alter_configs(c: RawClient, p: str) -> str:
    value = str(86_400_000 + PRINCIPALS.index(p))
    answer = c.request(44, 1, {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": value}]}], "validate_only": False})
    return outcome_name(answer.responses[0].error_code)


def _raw_join_group(c: RawClient, p: str) -> str:
    answer = c.request(11, 3, {"group_id": GROUP, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                               "member_id": "", "protocol_type": "consumer",
                               "protocols": [{"name": "range", "metadata": b""}]})
    if answer.error_code == 0:  # leave again, so the next member's join is not held up
        c.request(13, 0, {"group_id": GROUP, "member_id": answer.member_id})
    return outcome_name(answer.error_code)


def _raw_commit(c: RawClient, p: str) -> str:
    answer = c.request(8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
                              "group_instance_id": None, "topics": [
                                  {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                  "committed_leader_epoch": -1,
                                                                  "committed_metadata": ""}]}]})
    return outcome_name(answer.topics[0].partitions[0].error_code)


def _raw_transactional(c: RawClient, p: str) -> str:
    txn = f"tx-{p}"
    found = _until_coordinated(lambda: c.request(10, 3, {"key": txn, "key_type": 1}))
    if found.error_code:
        return outcome_name(found.error_code)
    init = _until_coordinated(lambda: c.request(22, 1, {"transactional_id": txn, "transaction_timeout_ms": 60000}))
    if init.error_code:
        return outcome_name(init.error_code)
    added = c.request(24, 3, {"v3_and_below_transactional_id": txn, "v3_and_below_producer_id": init.producer_id,
                              "v3_and_below_producer_epoch": init.producer_epoch,
                              "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]})
    code = added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    if code:
        return outcome_name(code)
    code = _produce_raw(c, TOPIC, [b"in a transaction"], txn, (init.producer_id, init.producer_epoch))
    if code:
        return outcome_name(code)
    ended = c.request(26, 1, {"transactional_id": txn, "producer_id": init.producer_id,
                              "producer_epoch": init.producer_epoch, "committed": True})
    return outcome_name(ended.error_code)


# What a client retries: the coordinator is still loading its state, or moving.
COORDINATOR_RETRIABLE = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         ErrorCode.NOT_COORDINATOR}


def _until_coordinated(call: Callable[[], Any], timeout_s: float = 15.0) -> Any:
    """`call()`'s answer once its error is not a coordinator's passing state (as clients retry)."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = call()
        if answer.error_code not in COORDINATOR_RETRIABLE or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def _raw_list_offsets(c: RawClient, p: str) -> str:
    answer = c.request(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return outcome_name(answer.topics[0].partitions[0].error_code)


def _raw_delete_records(c: RawClient, p: str) -> str:
    answer = c.request(21, 1, {"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 0}]}],
                               "timeout_ms": 10000})
    return outcome_name(answer.topics[0].partitions[0].error_code)


def _raw_describe_cluster(c: RawClient, p: str) -> str:
    answer = c.request(60, 0, {"include_cluster_authorized_operations": True})
    assert answer.error_code == 0
    return {CLUSTER_BITS: ALL_CLUSTER_OPS, 0: NO_CLUSTER_OPS}.get(answer.cluster_authorized_operations,
                                                                   str(answer.cluster_authorized_operations))


def _raw_create_acls(c: RawClient, p: str) -> str:
    answer = c.request(30, 3, {"creations": [acl_binding(GROUP_T, f"probe-raw-{p}", LITERAL, "User:probe", READ)]})
    return outcome_name(answer.results[0].error_code) if answer.results else "no results"


RAW: dict[str, Callable[[RawClient, str], str]] = {
    "produce": _raw_produce, "fetch": _raw_fetch, "create_topic": _raw_create_topic,
    "delete_topic": _raw_delete_topic, "describe_configs": _raw_describe_configs,
    "alter_configs": _raw_alter_configs, "join_group": _raw_join_group, "commit": _raw_commit,
    "transactional": _raw_transactional, "list_offsets": _raw_list_offsets,
    "delete_records": _raw_delete_records, "describe_cluster": _raw_describe_cluster, "create_acls": _raw_create_acls,
}
