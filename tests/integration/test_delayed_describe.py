"""DescribeDelayed (kbroker's own API, key 10000) against a real broker, through the protocol:
what a partition leader holds for delayed delivery after confluent-kafka produced delayed
records, errors for unknown topics and partitions, held records of an open transaction, and
that the API stays out of ApiVersions and closes the connection on a malformed request.

The counts are checked against the log itself: the pending bytes are the sizes of the pending
records' values in the pending batches a raw Fetch returns, the next due time the earliest
`kbroker.deliver.at` (or timestamp plus `kbroker.delay.ms`) produced.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from construct import Container

from kbroker.delay.pending_batches import DELAYED_CONTROL_TYPE
from protocol.connection import ClientProtocol
from protocol.errors import ErrorCode
from protocol.record_batch import decode_batches, decode_control_key
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.integration.test_delayed_delivery import DELAY, DELIVER_AT, _now_ms, _produce
from tests.rawclient import RawClient
from tests.waiting import wait_until

DESCRIBE_DELAYED = 10000
API_VERSIONS = 18
FETCH = 1
NO_DUE_TIME = -1
MINUTE_MS = 60_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("delayed-describe"), overrides={
        "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_tail()
    assert not (errors := process.unknown_field_errors()), "\n".join(errors)


def describe(bootstrap: str, topics: list[dict] | None) -> Container:
    with RawClient(bootstrap) as client:
        return client.request(DESCRIBE_DELAYED, 0, {"topics": topics})


def partitions_of(answer: Container, topic: str) -> dict[int, Container]:
    [found] = [t for t in answer.topics if t.name == topic]
    assert found.error_code == 0, found
    return {p.partition_index: p for p in found.partitions}


def pending_value_bytes(bootstrap: str, topic: str, partition: int) -> int:
    """The sizes of the pending records' values in the partition's log, read with a raw Fetch."""
    with RawClient(bootstrap) as client:
        answer = client.request(FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                        "fetch_offset": 0, "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}]})
    fetched = answer.responses[0].partitions[0]
    assert fetched.error_code == 0
    return sum(len(record.value) for batch in decode_batches(bytes(fetched.records)) if batch.is_control
               for record in batch.records if decode_control_key(record.key).type == DELAYED_CONTROL_TYPE)


def test_counts_bytes_and_next_due_of_each_partition(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, "describe-counts", partitions=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    now = _now_ms()
    at = [now + 3 * MINUTE_MS, now + 2 * MINUTE_MS, now + 4 * MINUTE_MS]
    for i, due in enumerate(at):
        _produce(producer, topic, b"at-%d" % i + b"x" * 100 * i, [(DELIVER_AT, b"%d" % due)], partition=0)
    assert producer.flush(15) == 0
    _produce(producer, topic, b"later", [(DELAY, b"%d" % (5 * MINUTE_MS))], partition=1, timestamp=now)
    assert producer.flush(15) == 0
    _produce(producer, topic, b"at once", partition=1)  # a batch of its own: not delayed
    assert producer.flush(15) == 0

    described = partitions_of(describe(broker.bootstrap, [{"name": topic, "partition_indexes": None}]), topic)
    assert sorted(described) == [0, 1, 2]
    zero, one, two = described[0], described[1], described[2]
    assert all(p.error_code == 0 for p in described.values())
    assert (zero.pending_count, zero.held_count, zero.next_due_ms) == (3, 0, min(at))
    assert zero.pending_bytes == pending_value_bytes(broker.bootstrap, topic, 0) > 300
    assert (one.pending_count, one.held_count, one.next_due_ms) == (1, 0, now + 5 * MINUTE_MS)
    assert one.pending_bytes == pending_value_bytes(broker.bootstrap, topic, 1) > 0
    assert (two.pending_count, two.pending_bytes, two.held_count, two.next_due_ms) == (0, 0, 0, NO_DUE_TIME)

    # Partitions named: only those, in the order asked; null topics: every topic led here.
    named = partitions_of(describe(broker.bootstrap, [{"name": topic, "partition_indexes": [2, 0]}]), topic)
    assert list(named) == [2, 0] and named[0] == zero
    everything = describe(broker.bootstrap, None)
    assert everything.error_code == 0
    assert partitions_of(everything, topic) == described


def test_an_open_transaction_holds_its_records_until_it_commits(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, "describe-held")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "describe-held"})
    producer.init_transactions(30)
    producer.begin_transaction()
    now = _now_ms()
    for offset_ms in (7 * MINUTE_MS, 6 * MINUTE_MS):
        _produce(producer, topic, b"held", [(DELIVER_AT, b"%d" % (now + offset_ms))])
    assert producer.flush(30) == 0

    def state() -> tuple[int, int, int]:
        p = partitions_of(describe(broker.bootstrap, [{"name": topic, "partition_indexes": [0]}]), topic)[0]
        return p.pending_count, p.held_count, p.next_due_ms

    assert state() == (2, 2, NO_DUE_TIME)  # no due time until the commit
    producer.commit_transaction(30)
    # The coordinator writes the COMMIT marker after answering EndTxn.
    wait_until(lambda: state() == (2, 0, now + 6 * MINUTE_MS), 30, "the committed records scheduled")


def test_unknown_topics_and_partitions(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, "describe-unknown", partitions=2)
    answer = describe(broker.bootstrap, [{"name": "no-such-topic", "partition_indexes": None},
                                         {"name": topic, "partition_indexes": [1, 7]}])
    missing, known = answer.topics
    assert (missing.name, missing.error_code, missing.partitions) == \
        ("no-such-topic", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
    assert "does not exist" in missing.error_message
    assert known.error_code == 0
    assert [(p.partition_index, p.error_code) for p in known.partitions] == \
        [(1, 0), (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


def test_not_advertised_in_api_versions_yet_served(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        versions = client.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert versions.error_code == 0
        keys = {entry.api_key for entry in versions.api_keys}
        assert DESCRIBE_DELAYED not in keys and max(keys) < DESCRIBE_DELAYED
        assert client.request(DESCRIBE_DELAYED, 0, {"topics": []}).error_code == 0


def _closed_after(bootstrap: str, frame: bytes) -> bool:
    with RawClient(bootstrap) as client:
        client.send_raw(frame)
        return client.read_frame() is None


def test_a_malformed_or_unknown_version_request_gets_a_clean_close(broker: BrokerProcess) -> None:
    _, data = ClientProtocol("bad").encode_request(DESCRIBE_DELAYED, 0, {"topics": [
        {"name": "describe-malformed", "partition_indexes": [0, 1, 2]}]})
    frame = data[4:]  # without its size prefix
    assert _closed_after(broker.bootstrap, frame[:-6])  # cut inside the partition indexes
    assert _closed_after(broker.bootstrap, frame[:-1] + b"\x7f\xff")  # more tagged fields than bytes
    unknown_version = frame[:2] + b"\x00\x01" + frame[4:]
    assert _closed_after(broker.bootstrap, unknown_version)
    # The broker goes on serving.
    assert describe(broker.bootstrap, []).error_code == 0
