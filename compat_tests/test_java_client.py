"""The Java client (kafka-clients 3.9.1) against a real kbroker process and against Apache
Kafka 3.9.0 (a local process; see conftest.py).

Each test runs one scenario of compat_tests/java/KafkaHarness.java in the module's JVM and
asserts on what the client observed: exact offsets, values, headers, partitions, states and
exception types. Where the Java side alone could hide a broker mistake (what was stored,
which partition a key went to), the test also checks from Python, on the wire.

Every test runs once per target (`test_x[kbroker]`, `test_x[kafka]`) with the same
assertions; the few values that legitimately differ between the two brokers (node id, port,
cluster id, default retention, the address a Docker container sees clients from) come from
the `Target`. Where kbroker still differs from Kafka, the test is listed in conftest.py's
KBROKER_GAPS (and compat_tests/README.md, "Differences").
"""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from compat_tests.conftest import Target, create_topic
from compat_tests.harness import JavaHarness
from kbroker.partitioner import partition_for_key
from protocol.errors import ErrorCode
from protocol.record_batch import Compression, RecordBatch, decode_batches
from tests.rawclient import RawClient

FETCH, METADATA, DELETE_RECORDS = 1, 3, 21
CODECS = ["gzip", "snappy", "lz4", "zstd"]
HEADERS_SENT = [("dup", b"first"), ("dup", b"second"), ("empty", b""), ("null", None)]

pytestmark = pytest.mark.timeout(180)


# -- helpers --------------------------------------------------------------------------------------


def java_uuid(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    with RawClient(bootstrap) as client:
        response = client.request(METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    return response.topics[0].topic_id


def stored_batches(bootstrap: str, topic: str, partition: int) -> list[RecordBatch]:
    """Every batch of a partition as the broker serves it, decoded by kbroker's own codec."""
    batches: list[RecordBatch] = []
    offset = 0
    with RawClient(bootstrap) as client:
        while True:
            body = {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 50 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [
                    {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 50 << 20}]}],
            }
            part = client.request(FETCH, 12, body).responses[0].partitions[0]
            assert part.error_code == ErrorCode.NO_ERROR
            got = decode_batches(part.records or b"")
            batches += [b for b in got if b.last_offset >= offset]
            if not got or batches[-1].next_offset >= part.high_watermark:
                return batches
            offset = batches[-1].next_offset


def confluent_produce(bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes | None, int]]) -> None:
    """(partition, key, value, timestamp) each, in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors: list[object] = []
    for partition, key, value, ts in records:
        producer.produce(topic, value, key=key, partition=partition, timestamp=ts,
                         on_delivery=lambda e, _m: e and errors.append(e))
    assert producer.flush(30) == 0
    assert errors == []


def simple(records: list[dict[str, Any]]) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(r["partition"], r["offset"], r["key"], r["value"]) for r in records]


def expected_headers(index: int) -> list[list[Any]]:
    return [["index", str(index).encode()]] + [[k, v] for k, v in HEADERS_SENT]


def error_types(result: dict[str, Any]) -> dict[str, str | None]:
    """The outcome of each call a scenario reported as null (success) or {"error", "message"}."""
    return {k: (v or {}).get("error") for k, v in result.items() if v is None or (isinstance(v, dict) and "message" in v)}


# -- AdminClient ----------------------------------------------------------------------------------


def test_describe_cluster(java: JavaHarness, target: Target) -> None:
    result = java.run("describe_cluster", bootstrap=target.bootstrap)
    # The cluster id is the one in the broker's meta.properties (or the container's CLUSTER_ID).
    node = {"id": target.node_id, "host": "127.0.0.1", "port": target.port, "rack": None}
    assert result == {"cluster_id": target.cluster_id, "controller": node, "nodes": [node]}


def test_create_topics_and_describe_by_name_and_by_id(java: JavaHarness, target: Target) -> None:
    prefix = f"java-admin-{uuid.uuid4().hex[:8]}"
    result = java.run("admin_topics", bootstrap=target.bootstrap, prefix=prefix)
    many, defaults = f"{prefix}-many", f"{prefix}-defaults"

    created = result["created"]
    assert (created[many]["partitions"], created[many]["replication_factor"]) == (3, 1)
    assert (created[defaults]["partitions"], created[defaults]["replication_factor"]) == (1, 1)  # broker defaults
    # CreateTopics v5+ returns the topic's configs: overrides as dynamic topic configs, the rest as defaults.
    many_configs = {k: (v["value"], v["source"]) for k, v in created[many]["configs"].items()}
    assert many_configs == {"retention.ms": ("3600000", "DYNAMIC_TOPIC_CONFIG"),
                            "max.message.bytes": ("2000000", "DYNAMIC_TOPIC_CONFIG"),
                            "cleanup.policy": ("delete", "DEFAULT_CONFIG")}
    assert created[defaults]["configs"]["retention.ms"]["value"] == str(target.retention_hours * 3_600_000)

    assert error_types(result) == {
        "duplicate": "TopicExistsException",
        "invalid_name": "InvalidTopicException",
        "zero_partitions": "InvalidPartitionsException",
        "too_many_replicas": "InvalidReplicationFactorException",
        "bad_config": "InvalidConfigurationException",
        "validate_only": None,
        "unknown_name": "UnknownTopicOrPartitionException",
        "unknown_id": "UnknownTopicIdException",
        "delete": None,
    }
    assert result["listed"] == [defaults, many], "validateOnly created nothing"
    assert result["listed_after_delete"] == [many]

    # The ids the client got from CreateTopics are the broker's (checked on the wire from Python).
    assert created[many]["topic_id"] == java_uuid(topic_id(target.bootstrap, many))
    # Internal topics appear once used (by earlier tests on the same broker), and nothing else.
    assert set(result["listed_internal_extra"]) <= {"__consumer_offsets", "__transaction_state"}

    def partitions(count: int) -> list[dict[str, Any]]:
        node = target.node_id
        return [{"partition": i, "leader": node, "replicas": [node], "isr": [node]} for i in range(count)]

    expected = {
        many: {"name": many, "topic_id": created[many]["topic_id"], "internal": False, "partitions": partitions(3)},
        defaults: {"name": defaults, "topic_id": created[defaults]["topic_id"], "internal": False,
                   "partitions": partitions(1)},
    }
    # By name: DescribeTopicPartitions, one partition per response (the client follows the cursor).
    assert result["by_name"] == expected
    # By id: Metadata v12 with topic ids.
    assert result["by_id"] == {d["topic_id"]: d for d in expected.values()}


def test_list_offsets_every_spec_and_isolation_level(java: JavaHarness, target: Target) -> None:
    topic = create_topic(target.bootstrap, f"java-offsets-{uuid.uuid4().hex[:8]}")
    base = int(time.time() * 1000) - 60_000
    # The scenario writes r0..r4 with timestamps base + 10, 30, 20, 50, 40.
    result = java.run("list_offsets", bootstrap=target.bootstrap, topic=topic, base=base)

    def at(offset: int, delta: int | None) -> dict[str, Any]:
        return {"offset": offset, "timestamp": base + delta if delta is not None else -1, "leader_epoch": 0}

    expected = {
        "earliest": at(0, None),
        "latest": at(5, None),
        "max_timestamp": at(3, 50),
        "ts+0": at(0, 10),
        "ts+10": at(0, 10),
        "ts+25": at(1, 30),  # the first record at or after the time, not the closest
        "ts+50": at(3, 50),
        "ts+51": {"offset": -1, "timestamp": -1, "leader_epoch": None},
    }
    # Without transactions the last stable offset is the high watermark: both levels agree.
    assert result["READ_UNCOMMITTED"] == expected
    assert result["READ_COMMITTED"] == expected
    # As against Kafka: the admin client waits for metadata that never lists the partition.
    assert result["missing_partition"]["error"] == "TimeoutException"


def test_delete_records(java: JavaHarness, target: Target) -> None:
    topic = create_topic(target.bootstrap, f"java-delete-{uuid.uuid4().hex[:8]}")
    now = int(time.time() * 1000)
    confluent_produce(target.bootstrap, topic, [(0, None, b"v%d" % i, now + i) for i in range(10)])
    result = java.run("delete_records", bootstrap=target.bootstrap, topic=topic)

    assert result["delete_4"] == {"low_watermark": 4}
    assert result["earliest"] == {"offset": 4, "timestamp": -1, "leader_epoch": 0}
    # A timestamp lookup starts at the log start offset, not at the first record still on disk.
    assert result["ts_0"] == {"offset": 4, "timestamp": now + 4, "leader_epoch": 0}
    assert [(r["offset"], r["value"]) for r in result["beginning_records"]] == [(i, b"v%d" % i) for i in range(4, 10)]
    assert result["delete_2_below_start"] == {"low_watermark": 4}, "deleting below the start changes nothing"
    assert result["delete_past_end"]["error"] == "OffsetOutOfRangeException"
    assert result["delete_to_hw"] == {"low_watermark": 10}, "beforeOffset(-1) means the high watermark"
    assert result["earliest_after_all"]["offset"] == 10
    assert result["latest_after_all"]["offset"] == 10
    assert result["missing_partition"]["error"] == "TimeoutException"


def run_configs(java: JavaHarness, target: Target) -> dict[str, Any]:
    topic = create_topic(target.bootstrap, f"java-configs-{uuid.uuid4().hex[:8]}", configs={"retention.ms": "3600000"})
    return java.run("configs", bootstrap=target.bootstrap, topic=topic, broker=target.node_id)


def without_synonyms(configs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: {k: v for k, v in entry.items() if k != "synonyms"} for name, entry in configs.items()}


def test_describe_and_incremental_alter_configs(java: JavaHarness, target: Target) -> None:
    result = run_configs(java, target)

    def entry(value: str, source: str, read_only: bool = False) -> dict[str, Any]:
        return {"value": value, "source": source, "read_only": read_only, "sensitive": False,
                "default": source == "DEFAULT_CONFIG"}

    retention_default = str(target.retention_hours * 3_600_000)
    initial = without_synonyms(result["initial"])
    assert initial["retention.ms"] == entry("3600000", "DYNAMIC_TOPIC_CONFIG")
    assert initial["cleanup.policy"] == entry("delete", "DEFAULT_CONFIG")
    assert initial["segment.bytes"] == entry("1073741824", "DEFAULT_CONFIG")
    assert initial["segment.ms"] == entry("604800000", "DEFAULT_CONFIG")
    assert initial["max.message.bytes"] == entry("1048588", "DEFAULT_CONFIG")

    broker = result["broker"]
    assert (broker["broker.id"]["value"], broker["broker.id"]["read_only"]) == (str(target.node_id), True)
    assert broker["log.retention.hours"]["value"] == str(target.retention_hours)

    assert result["alter_1"] is None
    after = without_synonyms(result["after_1"])
    assert after["retention.ms"] == entry("60000", "DYNAMIC_TOPIC_CONFIG")
    assert after["cleanup.policy"] == entry("delete,compact", "DYNAMIC_TOPIC_CONFIG")

    assert result["alter_2"] is None
    after = without_synonyms(result["after_2"])
    assert after["retention.ms"] == entry(retention_default, "DEFAULT_CONFIG")
    assert after["cleanup.policy"] == entry("compact", "DYNAMIC_TOPIC_CONFIG")

    assert result["validate_only"] is None
    assert result["after_validate_only"]["segment.ms"]["source"] == "DEFAULT_CONFIG", "validateOnly changed nothing"

    assert error_types(result) == {
        "alter_1": None, "alter_2": None, "validate_only": None,
        "append_to_number": "InvalidConfigurationException",
        "unknown_name": "InvalidConfigurationException",
        "bad_value": "InvalidConfigurationException",
        "describe_missing": "UnknownTopicOrPartitionException",
        "alter_missing": "UnknownTopicOrPartitionException",
    }


def test_describe_configs_synonyms(java: JavaHarness, target: Target) -> None:
    """describeConfigs(includeSynonyms): Kafka lists a topic config's broker synonyms from its
    primary one (log.retention.ms for retention.ms, log.roll.ms for segment.ms) on, in
    precedence order; with the primary set nowhere, none (ConfigHelper.configSynonyms)."""
    result = run_configs(java, target)

    def synonyms(configs: dict[str, dict[str, Any]]) -> dict[str, list[list[str]]]:
        return {name: entry["synonyms"] for name, entry in configs.items()}

    cleanup_default = ["log.cleanup.policy", "delete", "DEFAULT_CONFIG"]
    segment_bytes_default = ["log.segment.bytes", "1073741824", "DEFAULT_CONFIG"]
    max_message_default = ["message.max.bytes", "1048588", "DEFAULT_CONFIG"]
    assert synonyms(result["initial"]) == {
        "retention.ms": [["retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG"]],
        "cleanup.policy": [cleanup_default],
        "segment.bytes": [segment_bytes_default],
        "segment.ms": [],
        "max.message.bytes": [max_message_default],
    }
    assert synonyms(result["after_1"]) == {
        "retention.ms": [["retention.ms", "60000", "DYNAMIC_TOPIC_CONFIG"]],
        "cleanup.policy": [["cleanup.policy", "delete,compact", "DYNAMIC_TOPIC_CONFIG"], cleanup_default],
        "segment.bytes": [segment_bytes_default],
        "segment.ms": [],
        "max.message.bytes": [max_message_default],
    }
    assert synonyms(result["after_2"])["retention.ms"] == []
    assert result["broker"]["log.retention.hours"]["synonyms"] == [
        ["log.retention.hours", str(target.retention_hours), "DEFAULT_CONFIG"]]


def test_consumer_group_admin(java: JavaHarness, target: Target) -> None:
    topic = create_topic(target.bootstrap, f"java-groups-{uuid.uuid4().hex[:8]}", partitions=2)
    now = int(time.time() * 1000)
    confluent_produce(target.bootstrap, topic, [(0, None, b"a", now)] * 3 + [(1, None, b"b", now)] * 2)
    group = f"java-admin-group-{uuid.uuid4().hex[:8]}"
    result = java.run("groups_admin", bootstrap=target.bootstrap, topic=topic, group=group, records=5)

    assert result["consumed"] == 5
    assert result["generation"] == 1
    listing = {"group_id": group, "simple": False, "type": "CLASSIC"}
    assert result["listed_active"] == [{**listing, "state": "STABLE"}]
    assert result["listed_stable_filter"] == [{**listing, "state": "STABLE"}]
    assert result["listed_empty_filter"] == []
    described = result["described_active"]
    target.check_client_host(described["members"][0]["host"])
    member = {"member_id": result["member_id"], "instance_id": None, "client_id": "harness-member",
              "host": described["members"][0]["host"], "assignment": [f"{topic}:0", f"{topic}:1"]}
    node = target.node_id
    assert described == {"group_id": group, "simple": False, "state": "STABLE", "assignor": "range",
                         "coordinator": node, "type": "CLASSIC", "members": [member]}
    # commitSync() after the explicit commit of offset 1 for partition 0: the positions win.
    offsets = {f"{topic}:0": {"offset": 3, "metadata": ""}, f"{topic}:1": {"offset": 2, "metadata": ""}}
    assert result["offsets_active"] == offsets
    assert result["delete_active"]["error"] == "GroupNotEmptyException"

    assert result["listed_closed"] == [{**listing, "state": "EMPTY"}]
    assert result["described_closed"] == {"group_id": group, "simple": False, "state": "EMPTY", "assignor": "",
                                          "coordinator": node, "type": "CLASSIC", "members": []}
    assert result["offsets_closed"] == offsets
    # Kafka 3.9 describes an unknown group as Dead (no protocol type, so "simple"), without an error.
    assert result["described_unknown"] == {"group_id": f"{group}-unknown", "simple": True, "state": "DEAD",
                                           "assignor": "", "coordinator": node, "type": "CLASSIC", "members": []}
    assert result["offsets_unknown"] == {}
    assert result["delete_closed"] is None
    assert result["listed_deleted"] == []
    assert result["offsets_deleted"] == {}


# -- KafkaProducer --------------------------------------------------------------------------------


def check_stored(bootstrap: str, topic: str, partitions: int, sent: list[dict[str, Any]], count: int,
                 codec: Compression) -> list[RecordBatch]:
    """The broker stored what the Java producer sent: keyed by murmur2, headers intact, the codec
    asked for, and idempotent batches (a producer id, sequences from 0 without gaps)."""
    by_partition: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for i, meta in enumerate(sent):
        assert meta["partition"] == partition_for_key(b"key-%d" % i, partitions), f"record {i}"
        by_partition[meta["partition"]].append(i)
    for p, indexes in by_partition.items():
        assert [sent[i]["offset"] for i in indexes] == list(range(len(indexes))), f"partition {p} offsets"
    assert sum(len(v) for v in by_partition.values()) == count

    all_batches = []
    producer_ids = set()
    for p, indexes in by_partition.items():
        batches = stored_batches(bootstrap, topic, p)
        all_batches += batches
        records = [r for b in batches for r in b.records]
        assert [(r.offset, r.key, r.value) for r in records] == [
            (n, b"key-%d" % i, b"value-%d-" % i + b"x" * 200) for n, i in enumerate(indexes)]
        assert [r.headers for r in records] == [[("index", str(i).encode()), *HEADERS_SENT] for i in indexes]
        assert [r.timestamp for r in records] == [sent[i]["timestamp"] for i in indexes]
        expected_sequence = 0
        for batch in batches:
            assert batch.compression == codec
            assert batch.base_sequence == expected_sequence, f"partition {p}: sequences without gaps"
            expected_sequence += len(batch.records)
            producer_ids.add((batch.producer_id, batch.producer_epoch))
    (producer_id, epoch), = producer_ids  # one idempotent producer wrote every batch
    assert producer_id >= 0 and epoch == 0
    return all_batches


def test_default_producer_is_idempotent_and_keeps_headers(java: JavaHarness, target: Target) -> None:
    topic = create_topic(target.bootstrap, f"java-produce-{uuid.uuid4().hex[:8]}", partitions=3)
    result = java.run("produce", bootstrap=target.bootstrap, topic=topic, count=12)
    sent = result["sent"]
    assert [(m["key_size"], m["value_size"]) for m in sent] == [
        (len(b"key-%d" % i), len(b"value-%d-" % i) + 200) for i in range(12)]
    check_stored(target.bootstrap, topic, 3, sent, 12, Compression.NONE)


@pytest.mark.parametrize("codec", CODECS)
def test_compression_codecs_round_trip(java: JavaHarness, target: Target, codec: str) -> None:
    topic = create_topic(target.bootstrap, f"java-codec-{codec}-{uuid.uuid4().hex[:8]}", partitions=3)
    count = 30
    result = java.run("produce", bootstrap=target.bootstrap, topic=topic, count=count, compression=codec,
                      linger_ms=50)
    sent = result["sent"]
    batches = check_stored(target.bootstrap, topic, 3, sent, count, Compression[codec.upper()])
    assert any(len(b.records) > 1 for b in batches), "some batch holds several records"

    # And the Java consumer decompresses what the broker serves back.
    consumed = java.run("consume_all", bootstrap=target.bootstrap, topic=topic)
    got = {(r["partition"], r["offset"]): r for r in consumed["records"]}
    assert len(got) == count
    for i, meta in enumerate(sent):
        record = got[(meta["partition"], meta["offset"])]
        assert (record["key"], record["value"]) == (b"key-%d" % i, b"value-%d-" % i + b"x" * 200)
        assert record["headers"] == expected_headers(i)
        assert (record["timestamp"], record["timestamp_type"]) == (meta["timestamp"], "CREATE_TIME")


# -- KafkaConsumer --------------------------------------------------------------------------------


def binary_value(i: int) -> bytes:
    return bytes((i + j) % 256 for j in range(256))


def test_spark_style_assign_seek_poll(java: JavaHarness, target: Target) -> None:
    topic = create_topic(target.bootstrap, f"java-spark-{uuid.uuid4().hex[:8]}", partitions=2)
    base = int(time.time() * 1000) - 60_000
    p0 = [(0, None if i == 5 else b"k%d" % i, binary_value(i), base + i * 1000) for i in range(10)]
    p1 = [(1, b"q%d" % i, None if i == 3 else b"p1-%d" % i, base + i) for i in range(4)]
    confluent_produce(target.bootstrap, topic, p0 + p1)
    with RawClient(target.bootstrap) as client:
        deleted = client.request(DELETE_RECORDS, 2, {"topics": [{"name": topic, "partitions": [
            {"partition_index": 1, "offset": 1}]}], "timeout_ms": 5000})
    assert deleted.topics[0].partitions[0].low_watermark == 1

    result = java.run("spark_read", bootstrap=target.bootstrap, topic=topic,
                      group=f"spark-kafka-source-{uuid.uuid4()}", p0_ts=base + 4500)
    assert result["beginning"] == {"0": 0, "1": 1}
    assert result["end"] == {"0": 10, "1": 4}
    assert result["position_beginning"] == {"0": 0, "1": 1}
    assert result["position_end"] == {"0": 10, "1": 4}
    assert result["offsets_for_times"] == {"0": {"offset": 5, "timestamp": base + 5000}, "1": None}

    assert simple(result["p0_3_to_8"]) == [(0, i, p0[i][1], p0[i][2]) for i in range(3, 8)]
    assert [r["timestamp"] for r in result["p0_3_to_8"]] == [base + i * 1000 for i in range(3, 8)]
    assert simple(result["p1_1_to_4"]) == [(1, i, p1[i][1], p1[i][2]) for i in range(1, 4)]
    assert result["p1_1_to_4"][-1]["value"] is None, "a null value stays null through ByteArrayDeserializer"

    assert result["at_end"] == {"records": [], "position": 10}, "the log end itself is a valid position"
    assert result["past_end"] == {"error": "OffsetOutOfRangeException", "partitions": {"0": 11}, "records": []}
    assert result["below_start"] == {"error": "OffsetOutOfRangeException", "partitions": {"1": 0}, "records": []}


def test_subscribe_commit_sync_and_committed(java: JavaHarness, target: Target) -> None:
    topic = create_topic(target.bootstrap, f"java-commit-{uuid.uuid4().hex[:8]}", partitions=2)
    now = int(time.time() * 1000)
    confluent_produce(target.bootstrap, topic,
                      [(0, None, b"a%d" % i, now) for i in range(4)] + [(1, None, b"b%d" % i, now) for i in range(2)])
    group = f"java-commit-group-{uuid.uuid4().hex[:8]}"
    result = java.run("group_commit", bootstrap=target.bootstrap, topic=topic, group=group, records=6,
                      second_records=3)
    p0, p1 = f"{topic}:0", f"{topic}:1"

    assert result["committed_before"] == {p0: None, p1: None}
    first = sorted((r["partition"], r["offset"], r["value"]) for r in result["first_records"])
    assert first == [(0, i, b"a%d" % i) for i in range(4)] + [(1, i, b"b%d" % i) for i in range(2)]
    assert result["first_assignment"] == [p0, p1]
    assert result["first_group"] == {"group_id": group, "generation": 1, "member_id_set": True, "instance_id": None}
    assert result["committed_all"] == {p0: {"offset": 4, "metadata": ""}, p1: {"offset": 2, "metadata": ""}}
    assert result["committed_rewound"] == {p0: {"offset": 1, "metadata": "replay-from-1"},
                                           p1: {"offset": 2, "metadata": ""}}
    # The next member of the group resumes at the committed offsets.
    assert [(r["partition"], r["offset"]) for r in result["second_records"]] == [(0, 1), (0, 2), (0, 3)]
    assert result["committed_second"] == {p0: {"offset": 4, "metadata": ""}, p1: {"offset": 2, "metadata": ""}}
    assert result["committed_standalone"] == {p0: {"offset": 4, "metadata": ""},
                                              p1: {"offset": 1, "metadata": "standalone"}}


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_isolation_levels_without_transactions(java: JavaHarness, target: Target, isolation: str) -> None:
    topic = create_topic(target.bootstrap, f"java-iso-{isolation}-{uuid.uuid4().hex[:8]}", partitions=2)
    now = int(time.time() * 1000)
    records = [(i % 2, b"k%d" % i, b"v%d" % i, now + i) for i in range(7)]
    confluent_produce(target.bootstrap, topic, records)
    result = java.run("consume_all", bootstrap=target.bootstrap, topic=topic, isolation=isolation)
    # With no transactions, the last stable offset is the high watermark: both levels read everything.
    assert result["end"] == {"0": 4, "1": 3}
    assert result["positions"] == {"0": 4, "1": 3}
    got = sorted(simple(result["records"]))
    assert got == sorted((p, i // 2, k, v) for i, (p, k, v, _) in enumerate(records))


def test_repeated_polls_deliver_each_round_once(java: JavaHarness, target: Target) -> None:
    """One consumer polls while records arrive on changing partitions (the pattern fetch sessions
    optimise: incremental fetches when granted, full fetches otherwise)."""
    topic = create_topic(target.bootstrap, f"java-rounds-{uuid.uuid4().hex[:8]}", partitions=3)
    rounds = 12
    result = java.run("fetch_rounds", bootstrap=target.bootstrap, topic=topic, rounds=rounds, partitions=3)
    next_offset = {0: 0, 1: 0, 2: 0}
    for round_, delivered in enumerate(result["rounds"]):
        slot = round_ % 4
        targets = [0, 1, 2] if slot == 3 else [slot]
        expected = []
        for p in targets:
            expected += [(p, next_offset[p], f"r{round_}-p{p}-0"), (p, next_offset[p] + 1, f"r{round_}-p{p}-1")]
            next_offset[p] += 2
        got = sorted((r["partition"], r["offset"], r["value"]) for r in delivered)
        assert got == sorted(expected), f"round {round_}"
    assert len(result["rounds"]) == rounds
    assert result["extra"] == []


# -- Transactions ---------------------------------------------------------------------------------


def test_transactions_commit_and_abort(java: JavaHarness, target: Target) -> None:
    topic = create_topic(target.bootstrap, f"java-txn-{uuid.uuid4().hex[:8]}")
    result = java.run("txn_commit_abort", bootstrap=target.bootstrap, topic=topic,
                      txid=f"java-txn-{uuid.uuid4().hex[:8]}")
    # Offsets: committed-0..2 at 0-2, commit marker 3, aborted-0..1 at 4-5, abort marker 6,
    # committed-3 at 7, commit marker 8, then "pending" at 9 in a still-open transaction.
    open_ = result["latest_while_open"]
    assert (open_["READ_UNCOMMITTED"]["offset"], open_["READ_COMMITTED"]["offset"]) == (10, 9)
    while_open = result["read_committed_while_open"]
    assert [(r["offset"], r["value"]) for r in while_open["records"]] == [
        (0, b"committed-0"), (1, b"committed-1"), (2, b"committed-2"), (7, b"committed-3")]
    assert while_open["end"] == {"0": 9}, "read_committed ends at the last stable offset"

    committed = result["read_committed"]
    assert [(r["offset"], r["value"]) for r in committed["records"]] == [
        (0, b"committed-0"), (1, b"committed-1"), (2, b"committed-2"), (7, b"committed-3"), (9, b"pending")]
    assert committed["end"] == {"0": 11}
    uncommitted = result["read_uncommitted"]
    assert [(r["offset"], r["value"]) for r in uncommitted["records"]] == [
        (0, b"committed-0"), (1, b"committed-1"), (2, b"committed-2"), (4, b"aborted-0"), (5, b"aborted-1"),
        (7, b"committed-3"), (9, b"pending")]
    assert uncommitted["end"] == {"0": 11}


def test_transactions_send_offsets_to_transaction(java: JavaHarness, target: Target) -> None:
    suffix = uuid.uuid4().hex[:8]
    source = create_topic(target.bootstrap, f"java-txn-in-{suffix}")
    sink = create_topic(target.bootstrap, f"java-txn-out-{suffix}")
    now = int(time.time() * 1000)
    confluent_produce(target.bootstrap, source, [(0, None, b"word%d" % i, now) for i in range(4)])
    result = java.run("txn_offsets", bootstrap=target.bootstrap, input=source, output=sink,
                      group=f"java-txn-group-{suffix}", txid=f"java-txn-{suffix}", records=4)
    assert result["offsets_after_commit"] == {f"{source}:0": {"offset": 4, "metadata": "txn"}}
    assert result["offsets_after_abort"] == {f"{source}:0": {"offset": 4, "metadata": "txn"}}, "abort drops offsets"
    output = result["output"]
    assert [(r["offset"], r["value"]) for r in output["records"]] == [(i, b"WORD%d" % i) for i in range(4)]


def test_transactions_fence_a_zombie_producer(java: JavaHarness, target: Target) -> None:
    topic = create_topic(target.bootstrap, f"java-fence-{uuid.uuid4().hex[:8]}")
    result = java.run("txn_fencing", bootstrap=target.bootstrap, topic=topic,
                      txid=f"java-fence-{uuid.uuid4().hex[:8]}")
    assert result["zombie_commit"] == "ProducerFencedException"
    assert [r["value"] for r in result["read_committed"]["records"]] == [b"fresh"]
