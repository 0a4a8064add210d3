"""`kbroker transactions` against a real broker: listing and describing transactions of a
confluent-kafka producer, and finding and aborting a hanging transaction that pins the LSO."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kbroker.client import Client
from protocol.errors import ErrorCode
from protocol.record_batch import Record, encode_batch
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.integration.test_transactions import read_all
from tests.rawclient import RawClient

KBROKER = str(Path(sys.executable).parent / "kbroker")


def txn_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([KBROKER, "transactions", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def rows(bootstrap: str, *args: str) -> list[dict[str, str]]:
    """The command's table (tab-separated, padded cells, as Kafka prints) as dicts by column."""
    result = txn_cli(bootstrap, *args)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert all(line[-1] == "" for line in lines)  # every cell is followed by a tab
    header = [cell.strip() for cell in lines[0][:-1]]
    return [dict(zip(header, (cell.strip() for cell in line[:-1]), strict=True)) for line in lines[1:]]


def test_list_describe_and_describe_producers_of_an_open_transaction(make_broker: Callable[..., BrokerProcess]
                                                                     ) -> None:
    broker = make_broker()
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, "cli-txn", partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "cli-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=1)
    assert producer.flush(30) == 0

    [listed] = rows(bootstrap, "list")
    assert listed["TransactionalId"] == "cli-tx" and listed["TransactionState"] == "Ongoing"
    assert listed["Coordinator"] == "0"
    [described] = rows(bootstrap, "describe", "--transactional-id", "cli-tx")
    assert described["ProducerId"] == listed["ProducerId"]
    assert described["TopicPartitions"] == f"{topic}-1"
    assert int(described["TransactionDurationMs"]) >= 0 and described["TransactionTimeoutMs"] == "60000"
    [state] = rows(bootstrap, "describe-producers", "--topic", topic, "--partition", "1")
    assert (state["ProducerId"], state["CurrentTransactionStartOffset"], state["LastSequence"]) == \
        (listed["ProducerId"], "0", "0")
    assert rows(bootstrap, "describe-producers", "--topic", topic, "--partition", "0") == []

    producer.commit_transaction(30)
    [done] = rows(bootstrap, "describe", "--transactional-id", "cli-tx")
    # As Kafka: a completed transaction keeps its start time until the next InitProducerId.
    assert (done["TransactionState"], done["CurrentTransactionStartTimeMs"], done["TopicPartitions"]) == \
        ("CompleteCommit", described["CurrentTransactionStartTimeMs"], "")
    [state] = rows(bootstrap, "describe-producers", "--topic", topic, "--partition", "1")
    assert state["CurrentTransactionStartOffset"] == "None"
    missing = txn_cli(bootstrap, "describe", "--transactional-id", "nobody")
    assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr


def write_hanging_transaction(bootstrap: str, topic: str) -> int:
    """A transactional batch no coordinator knows about: what partition verification prevents."""
    with RawClient(bootstrap) as client:
        ids = client.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 0,
                                     "producer_id": -1, "producer_epoch": -1})
        batch = encode_batch([Record(0, int(time.time() * 1000), None, b"stuck")], producer_id=ids.producer_id,
                             producer_epoch=ids.producer_epoch, base_sequence=0, transactional=True)
        result = client.request(0, 9, {"transactional_id": "ghost", "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}).responses[0].partition_responses[0]
    assert result.error_code == ErrorCode.NO_ERROR
    return ids.producer_id


def test_partition_verification_refuses_a_write_outside_the_transaction(make_broker: Callable[..., BrokerProcess]
                                                                       ) -> None:
    broker = make_broker()
    topic = create_topic(broker.bootstrap, "verified")
    with pytest.raises(AssertionError):
        write_hanging_transaction(broker.bootstrap, topic)
    with Client(broker.bootstrap) as client:
        assert client.describe_producers(topic, 0) == []  # nothing was written


def test_a_hanging_transaction_is_found_and_aborted(make_broker: Callable[..., BrokerProcess]) -> None:
    broker = make_broker(**{"transaction.partition.verification.enable": "false"})
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, "hanging")
    producer_id = write_hanging_transaction(bootstrap, topic)
    after = Producer({"bootstrap.servers": bootstrap})
    after.produce(topic, b"committed")
    assert after.flush(30) == 0
    assert read_all(bootstrap, topic, "read_committed", 0, timeout_s=5) == []  # the LSO is stuck at 0

    [hanging] = rows(bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert (hanging["Topic"], hanging["Partition"], hanging["ProducerId"], hanging["StartOffset"]) == \
        (topic, "0", str(producer_id), "0")
    assert txn_cli(bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "1").returncode == 1
    aborted = txn_cli(bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert aborted.returncode == 0, aborted.stderr
    assert read_all(bootstrap, topic, "read_committed", 1) == ["committed"]
    assert rows(bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0") == []
