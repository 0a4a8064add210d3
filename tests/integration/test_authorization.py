"""Authorization against a real broker, with real clients: the denial matrix of
tests/authz_matrix.py through the protocol, confluent-kafka and kafka-python (the Java client
and the Apache Kafka reference run the same cells in compat_tests/test_authorization.py),
Metadata's hiding of topics, authorized-operations bitfields, and the check that nothing denied
leaves a trace.

One broker with `authorizer.class.name` set to Kafka's StandardAuthorizer and an MTLS listener:
each principal is a client certificate (`User:<CN>` by the mapping rule).
"""

from __future__ import annotations

import gc
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
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

from protocol.errors import ErrorCode
from tests.authz_matrix import (
    ALL_CLUSTER_OPS,
    AUTHORIZER,
    CLUSTER_DENIED,
    EXPECTED,
    GRANTS,
    GROUP,
    MAPPING_RULE,
    NO_CLUSTER_OPS,
    OK,
    PRINCIPALS,
    RAW,
    TOPIC,
    TOPIC_DENIED,
    Secured,
    acl_count,
    doomed_topics,
    end_offset,
    outcome_name,
    retention,
    set_up,
    topic_exists,
)
from tests.brokers import PROJECT_ROOT, BrokerProcess, free_port
from tests.rawclient import RawClient
from tests.tls_material import TlsMaterial
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("acl-broker")
    material = TlsMaterial.create(directory / "tls")
    plain, mtls = free_port(), free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},MTLS://127.0.0.1:{mtls}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL",
        **material.server_properties("required"),
        "ssl.principal.mapping.rules": MAPPING_RULE, "authorizer.class.name": AUTHORIZER,
        "super.users": "User:admin",
        "auto.create.topics.enable": "false", "num.partitions": "1", "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
    }
    process = BrokerProcess(directory / "broker", port=plain, overrides=overrides).start()
    certs = {name: material.client(name) for name in PRINCIPALS}
    broker = Secured(process, material, mtls, certs)
    try:
        set_up(broker, doomed_topics("ck"))
        yield broker
    finally:
        if process.alive:
            assert process.stop() == 0, process.log_tail()


def test_denial_matrix_through_the_protocol_and_nothing_denied_leaves_a_trace(secured: Secured) -> None:
    outcomes = {}
    for principal in PRINCIPALS:
        for operation, run in RAW.items():
            offset, kept = end_offset(secured), retention(secured)
            with secured.raw(principal) as client:
                outcomes[(operation, principal)] = outcome = run(client, principal)
            if outcome != OK and operation != "describe_cluster":
                assert (end_offset(secured), retention(secured)) == (offset, kept), (operation, principal)
    assert outcomes == {(op, p): EXPECTED[op][p] for op in RAW for p in PRINCIPALS}
    for principal in PRINCIPALS:
        allowed = EXPECTED["create_topic"][principal] == OK
        assert topic_exists(secured, f"pre-c-raw-{principal}") == allowed
        assert topic_exists(secured, f"pre-d-raw-{principal}") == (not allowed)


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
    return _future(admin, admin.delete_topics([f"pre-d-ck-{p}"], operation_timeout=10)[f"pre-d-ck-{p}"])


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
    acls_before = acl_count(secured)
    outcomes = {}
    for principal in PRINCIPALS:
        for operation, run in CONFLUENT.items():
            offset, kept = end_offset(secured), retention(secured)
            outcome = run(secured, principal)
            # Free the clients now, from Python: a confluent-kafka client collected inside another
            # client's C call (a cycle found by the collector there) breaks that call.
            gc.collect()
            outcomes[(operation, principal)] = outcome
            if outcome == OK or operation == "describe_cluster":
                continue
            # Denied: the log, the configs and the ACLs are as they were.
            assert end_offset(secured) == offset, (operation, principal)
            assert retention(secured) == kept, (operation, principal)
    assert outcomes == {(op, p): _as_confluent_sees(op, p) for op in CONFLUENT for p in PRINCIPALS}
    for principal in PRINCIPALS:
        allowed = EXPECTED["create_topic"][principal] == OK
        assert topic_exists(secured, f"pre-c-{principal}") == allowed
        assert topic_exists(secured, f"pre-d-ck-{principal}") == (not allowed)
    assert acl_count(secured) == acls_before


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
    acls_before = acl_count(secured)
    outcomes = {}
    for principal in PRINCIPALS:
        for operation, run in KAFKA_PYTHON.items():
            offset = end_offset(secured)
            outcomes[(operation, principal)] = run(secured, principal)
            if outcomes[(operation, principal)] != OK:
                assert end_offset(secured) == offset, (operation, principal)
    assert outcomes == {(op, p): EXPECTED[op][p] for op in KAFKA_PYTHON for p in PRINCIPALS}
    for principal in PRINCIPALS:
        assert topic_exists(secured, f"pre-k-{principal}") == (EXPECTED["create_topic"][principal] == OK)
    # Only the super user's ACL was created.
    assert acl_count(secured) == acls_before + sum(EXPECTED["create_acls"][p] == OK for p in PRINCIPALS)


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


# -- DescribeDelayed and DescribeArchive (kbroker's own APIs) ----------------------------------------

DESCRIBE_DELAYED = 10000
DESCRIBE_ARCHIVE = 10001


def test_client_quota_apis_need_cluster_describe_configs_and_alter_configs(secured: Secured) -> None:
    """Kafka's KafkaApis: DescribeClientQuotas needs DESCRIBE_CONFIGS on the cluster,
    AlterClientQuotas ALTER_CONFIGS on it (every entry answers the error); only the super user has
    either here."""
    entry = {"entity": [{"entity_type": "client-id", "entity_name": "authz-quota"}],
             "ops": [{"key": "producer_byte_rate", "value": 1e9, "remove": False}]}
    outcomes = {}
    for principal in PRINCIPALS:
        with secured.raw(principal) as client:
            described = client.request(48, 1, {"components": [], "strict": False})
            altered = client.request(49, 1, {"entries": [entry], "validate_only": True})
        outcomes[principal] = (outcome_name(described.error_code), outcome_name(altered.entries[0].error_code))
        assert [(e.entity_type, e.entity_name) for e in altered.entries[0].entity] == [("client-id", "authz-quota")]
    assert outcomes == {p: (OK, OK) if p == "admin" else (CLUSTER_DENIED, CLUSTER_DENIED) for p in PRINCIPALS}


@pytest.mark.parametrize("api_key", [DESCRIBE_DELAYED, DESCRIBE_ARCHIVE], ids=["delayed", "archive"])
def test_own_describe_apis_need_describe_on_the_topic(secured: Secured, api_key: int) -> None:
    """DescribeDelayed and DescribeArchive ask what Kafka's ListOffsets asks, DESCRIBE on the topic
    (implied by READ, WRITE and ALL): the matrix's list_offsets row, which the Kafka reference
    confirms. The APIs are not in the shared matrix, whose every cell runs against Kafka too."""
    outcomes = {}
    for principal in PRINCIPALS:
        with secured.raw(principal) as client:
            named = client.request(api_key, 0, {"topics": [{"name": TOPIC, "partition_indexes": None},
                                                           {"name": "pre-no-such", "partition_indexes": None}]})
            listing = client.request(api_key, 0, {"topics": None})
        topic, missing = named.topics
        outcomes[principal] = outcome_name(topic.error_code)
        # A topic the caller may not describe shows nothing, not even whether it exists: only the
        # super user and ALL on `pre-*` may describe the missing one.
        assert (topic.partitions != []) == (topic.error_code == 0)
        assert missing.error_code == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if principal in ("admin", "prefixed")
                                      else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        assert (TOPIC in {t.name for t in listing.topics}) == (topic.error_code == 0)
    assert outcomes == EXPECTED["list_offsets"]


@pytest.mark.parametrize("principal", ["consumer", "nobody"])
def test_the_delayed_command_over_mutual_tls(secured: Secured, tmp_path: Path, principal: str) -> None:
    cert = secured.certs[principal]
    properties = tmp_path / "client.properties"
    properties.write_text(f"security.protocol=SSL\nssl.ca.location={secured.material.ca.pem_path}\n"
                          f"ssl.certificate.location={cert.chain}\nssl.key.location={cert.key}\n")
    result = subprocess.run([sys.executable, "-m", "kbroker.cli.main", "delayed", "--bootstrap-server",
                             secured.bootstrap, "--command-config", str(properties), "--describe", "--topic", TOPIC,
                             "--all"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    if EXPECTED["list_offsets"][principal] == OK:
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[1].split() == [TOPIC, "0", "0", "0", "0", "0", "-"]
    else:
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert result.stderr.startswith(f"error: {TOPIC_DENIED}: "), result.stderr


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


def test_share_group_apis_need_read_on_the_group(secured: Secured) -> None:
    heartbeat = {"group_id": "shares", "member_id": "m", "member_epoch": 0, "rack_id": None,
                 "subscribed_topic_names": [TOPIC]}
    fetch = {"group_id": "shares", "member_id": "m", "share_session_epoch": 0, "max_wait_ms": 0, "min_bytes": 1,
             "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10, "topics": [], "forgotten_topics_data": []}
    acknowledge = {"group_id": "shares", "member_id": "m", "share_session_epoch": 1, "topics": []}
    with secured.raw("nobody") as nobody:
        assert nobody.request(76, 1, heartbeat).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert nobody.request(78, 1, fetch).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert nobody.request(79, 1, acknowledge).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        described = nobody.request(77, 1, {"group_ids": ["shares"], "include_authorized_operations": False})
        assert described.groups[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    with secured.raw("admin") as admin:
        answers = []
        # The first asks may find the group coordinator still starting.
        wait_until(lambda: answers.append(admin.request(76, 1, heartbeat))
                   or answers[-1].error_code != ErrorCode.COORDINATOR_NOT_AVAILABLE, 30, "the coordinator")
        assert (answers[-1].error_code, answers[-1].member_epoch) == (0, 1)


def test_a_view_needs_read_on_its_source_to_be_created_or_changed(secured: Secured) -> None:
    """A view shows its source's records to whoever may read the view, so making one (or changing
    its filter) needs READ on the source: `prefixed` may create any `pre-*` topic but not read
    `secret-views`, so it may not make a `pre-*` view of it."""
    source, view = "secret-views", "pre-view-of-secret"

    def create(client: RawClient, name: str, validate_only: bool) -> int:
        answer = client.request(19, 5, {"topics": [{"name": name, "num_partitions": -1, "replication_factor": -1,
                                                    "assignments": [], "configs": [
                                                        {"name": "view.source.topic", "value": source},
                                                        {"name": "view.filter", "value": "tag = 'x'"}]}],
                                        "timeout_ms": 10000, "validate_only": validate_only})
        return answer.topics[0].error_code

    with secured.raw("admin") as admin:
        admin.request(19, 5, {"topics": [{"name": source, "num_partitions": 1, "replication_factor": 1,
                                          "assignments": [], "configs": []}], "timeout_ms": 10000,
                              "validate_only": False})
        assert create(admin, view, validate_only=False) in (ErrorCode.NO_ERROR, ErrorCode.TOPIC_ALREADY_EXISTS)
    outcomes = {}
    for principal in PRINCIPALS:
        with secured.raw(principal) as client:
            created = create(client, "pre-another-view", validate_only=True)
            altered = client.request(44, 1, {"resources": [{"resource_type": 2, "resource_name": view, "configs": [
                {"name": "view.filter", "config_operation": 0, "value": "tag = 'y'"}]}], "validate_only": True})
        outcomes[principal] = (outcome_name(created), outcome_name(altered.responses[0].error_code))
    assert outcomes == {"admin": (OK, OK), "producer": (TOPIC_DENIED, TOPIC_DENIED),
                        "consumer": (TOPIC_DENIED, TOPIC_DENIED), "prefixed": (TOPIC_DENIED, TOPIC_DENIED),
                        "nobody": (TOPIC_DENIED, TOPIC_DENIED)}
