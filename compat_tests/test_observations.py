"""One deterministic script, observed on kbroker and on Apache Kafka, compared.

`record_observation` runs the `observe` scenario of KafkaHarness.java (produce, read, provoke
errors, form a two-member group, run transactions) plus a few raw requests from Python, and
keeps only what any correct broker must answer identically: offsets, order, error names,
assignments, generations and what each isolation level sees — no ids, clocks or topic names.

- `test_observation_matches_expected[kbroker|kafka]` checks each broker's observation
  against `EXPECTED`, the values Kafka's protocol and client documentation imply (so the
  recording runs on every machine, with the Kafka reference or not);
- `test_both_brokers_observe_the_same` records both and compares them with each other, so the
  expectations themselves are checked against Kafka.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from compat_tests.conftest import Target, create_topic
from compat_tests.harness import JavaHarness
from protocol.errors import ErrorCode
from protocol.record_batch import Record, encode_batch
from tests.rawclient import RawClient

pytestmark = pytest.mark.timeout(240)

PRODUCE, FETCH, LIST_OFFSETS = 0, 1, 2

# What Kafka's semantics say the script observes. Offsets are per partition, from 0, in send order.
EXPECTED: dict[str, Any] = {
    # Records sent to partitions 0, 1, 0, 0, 1, 2, 3, 0: each gets its partition's next offset.
    "produced": [[0, 0], [1, 0], [0, 1], [0, 2], [1, 1], [2, 0], [3, 0], [0, 3]],
    # Within a partition a consumer reads in offset order.
    "consumed": {
        "0": [[0, "v0"], [1, "v2"], [2, "v3"], [3, "v7"]],
        "1": [[0, "v1"], [1, "v4"]],
        "2": [[0, "v5"]],
        "3": [[0, "v6"]],
    },
    "errors": {
        # The producer waits max.block.ms for metadata to show the partition, then gives up.
        "produce_to_missing_partition": "TimeoutException",
        # auto.offset.reset=none: a position past the log end is reported, with the offset.
        "fetch_past_end": {"error": "OffsetOutOfRangeException", "partitions": {"0": 100}},
        "create_existing_topic": "TopicExistsException",
        "delete_records_past_end": "OffsetOutOfRangeException",
        # A second producer's initTransactions bumps the epoch: the first one is fenced.
        "zombie_commit": "ProducerFencedException",
    },
    "group": {
        # Each join round is a new generation; the range assignor splits 4 partitions 2 + 2.
        "alone": {"partitions": [0, 1, 2, 3], "generation": 1},
        "together": {"assignments": ["[0, 1]", "[2, 3]"], "generations": [2, 2]},
        "after_leave": {"partitions": [0, 1, 2, 3], "generation": 3},
    },
    "transactions": {
        # c0 c1 at 0-1, commit marker 2, a0 at 3, abort marker 4, open0 at 5 (still open):
        # the last stable offset stops before the open transaction, the high watermark after it.
        "latest_while_open": {"READ_UNCOMMITTED": 6, "READ_COMMITTED": 5},
        "read_committed_while_open": [[0, "c0"], [1, "c1"]],
        "read_uncommitted_while_open": [[0, "c0"], [1, "c1"], [3, "a0"], [5, "open0"]],
        # Then open0 commits (marker 6); "zombie" at 7 is aborted (marker 8) when the fresh
        # producer initialises, which writes "fresh" at 9 and commits (marker 10).
        "read_committed": [[0, "c0"], [1, "c1"], [5, "open0"], [9, "fresh"]],
        "read_uncommitted": [[0, "c0"], [1, "c1"], [3, "a0"], [5, "open0"], [7, "zombie"], [9, "fresh"]],
    },
    # Raw requests: the error code each partition answer carries.
    "wire_errors": {
        "produce_missing_partition": "UNKNOWN_TOPIC_OR_PARTITION",
        "produce_acks_2": "INVALID_REQUIRED_ACKS",
        "fetch_past_end": "OFFSET_OUT_OF_RANGE",
        "fetch_missing_partition": "UNKNOWN_TOPIC_OR_PARTITION",
        "list_offsets_missing_partition": "UNKNOWN_TOPIC_OR_PARTITION",
    },
}


def wire_errors(bootstrap: str, topic: str) -> dict[str, str]:
    """Error names from raw Produce v9, Fetch v12 and ListOffsets v7 requests."""

    def name(code: int) -> str:
        return ErrorCode(code).name

    def produce(partition: int, acks: int) -> str:
        batch = encode_batch([Record(0, int(time.time() * 1000), None, b"raw")])
        response = client.request(PRODUCE, 9, {"acks": acks, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
        return name(response.responses[0].partition_responses[0].error_code)

    def fetch(partition: int, offset: int) -> str:
        response = client.request(FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]})
        return name(response.responses[0].partitions[0].error_code)

    def list_offsets(partition: int) -> str:
        response = client.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]})
        return name(response.topics[0].partitions[0].error_code)

    with RawClient(bootstrap) as client:
        return {
            "produce_missing_partition": produce(7, -1),
            "produce_acks_2": produce(0, 2),
            "fetch_past_end": fetch(0, 100),
            "fetch_missing_partition": fetch(7, 0),
            "list_offsets_missing_partition": list_offsets(7),
        }


def record_observation(java: JavaHarness, target: Target) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:8]
    topic = create_topic(target.bootstrap, f"observe-{suffix}", partitions=4)
    txn_topic = create_topic(target.bootstrap, f"observe-txn-{suffix}")
    observed = java.run("observe", bootstrap=target.bootstrap, topic=topic, txn_topic=txn_topic,
                        group=f"observe-group-{suffix}", txid=f"observe-txn-{suffix}")
    # After the Java script: the raw produce writes nothing it could see (missing partition, bad acks).
    observed["wire_errors"] = wire_errors(target.bootstrap, topic)
    return observed


def differences(left: Any, right: Any, path: str = "") -> list[str]:
    """Where two observations differ, as `path: left != right` lines."""
    if isinstance(left, dict) and isinstance(right, dict):
        lines = []
        for key in sorted(left.keys() | right.keys()):
            lines += differences(left.get(key, "<missing>"), right.get(key, "<missing>"), f"{path}/{key}")
        return lines
    return [] if left == right else [f"{path or '/'}: {json.dumps(left)} != {json.dumps(right)}"]


def test_differences_names_each_path() -> None:
    assert differences({"a": 1, "b": {"c": [1]}}, {"a": 1, "b": {"c": [2]}, "d": 0}) == [
        "/b/c: [1] != [2]", '/d: "<missing>" != 0']
    assert differences(EXPECTED, json.loads(json.dumps(EXPECTED))) == []


def test_observation_matches_expected(java: JavaHarness, target: Target) -> None:
    observed = record_observation(java, target)
    assert differences(observed, EXPECTED) == [], f"{target.name} observed (left) vs expected (right)"


def test_both_brokers_observe_the_same(java: JavaHarness, kafka_target: Target, kbroker_target: Target) -> None:
    # kafka_target first: without the reference the test skips before a kbroker is started for it.
    on_kafka = record_observation(java, kafka_target)
    on_kbroker = record_observation(java, kbroker_target)
    assert differences(on_kbroker, on_kafka) == [], "kbroker (left) vs Apache Kafka (right)"
