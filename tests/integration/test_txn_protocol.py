"""The transaction APIs on the wire: the error codes clients act on, and nonsense that must not
disturb the coordinator."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from protocol.errors import ErrorCode
from protocol.record_batch import Record, encode_batch
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.rawclient import RawClient

PRODUCE, FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 0, 10, 22, 24, 25, 26
TXN_OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 28, 9, 65, 66
E = ErrorCode


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory):
    process = BrokerProcess(tmp_path_factory.mktemp("txn"), overrides={
        "group.initial.rebalance.delay.ms": "0", "transaction.max.timeout.ms": "60000"}).start()
    yield process
    process.kill()


def init(client: RawClient, transactional_id: str | None, timeout_ms: int = 10_000, producer_id: int = -1,
         epoch: int = -1, version: int = 4) -> Any:
    return client.request(INIT_PRODUCER_ID, version, {"transactional_id": transactional_id,
                                                      "transaction_timeout_ms": timeout_ms,
                                                      "producer_id": producer_id, "producer_epoch": epoch})


def add_partitions(client: RawClient, transactional_id: str, producer_id: int, epoch: int, topic: str,
                   partitions: list[int], version: int = 3) -> dict[int, int]:
    response = client.request(ADD_PARTITIONS, version, {
        "v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": producer_id,
        "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic, "partitions": partitions}]})
    return {r.partition_index: r.partition_error_code for r in response.results_by_topic_v3_and_below[0].results_by_partition}


def end_txn(client: RawClient, transactional_id: str, producer_id: int, epoch: int, commit: bool,
            version: int = 3) -> int:
    return client.request(END_TXN, version, {"transactional_id": transactional_id, "producer_id": producer_id,
                                             "producer_epoch": epoch, "committed": commit}).error_code


def produce(client: RawClient, transactional_id: str | None, topic: str, producer_id: int, epoch: int,
            sequence: int) -> int:
    batch = encode_batch([Record(0, int(time.time() * 1000), None, b"v")], producer_id=producer_id,
                         producer_epoch=epoch, base_sequence=sequence, transactional=transactional_id is not None)
    return client.request(PRODUCE, 9, {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 5000,
                                       "topic_data": [{"name": topic, "partition_data": [
                                           {"index": 0, "records": batch}]}]}
                          ).responses[0].partition_responses[0].error_code


def test_find_coordinator_for_transactional_ids(txn_broker: BrokerProcess) -> None:
    with RawClient(txn_broker.bootstrap) as client:
        found = client.request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["t1", ""]}).coordinators
    assert [(c.key, c.error_code) for c in found] == [("t1", E.NO_ERROR), ("", E.INVALID_REQUEST)]
    assert found[0].port == txn_broker.port


def test_init_producer_id_bumps_the_epoch_and_checks_the_timeout(txn_broker: BrokerProcess) -> None:
    with RawClient(txn_broker.bootstrap) as client:
        first = init(client, "bump")
        again = init(client, "bump")
        assert (again.producer_id, again.producer_epoch) == (first.producer_id, first.producer_epoch + 1)
        assert init(client, "bump", timeout_ms=60_001).error_code == E.INVALID_TRANSACTION_TIMEOUT
        assert init(client, "bump", timeout_ms=0).error_code == E.INVALID_TRANSACTION_TIMEOUT
        # KIP-360: only the current producer may ask for its own bump.
        stale = init(client, "bump", producer_id=first.producer_id, epoch=first.producer_epoch)
        assert stale.error_code == E.PRODUCER_FENCED
        assert init(client, "bump", producer_id=first.producer_id, epoch=first.producer_epoch,
                    version=3).error_code == E.INVALID_PRODUCER_EPOCH  # v3 clients do not know PRODUCER_FENCED
        idempotent = init(client, None)
        assert idempotent.error_code == E.NO_ERROR and idempotent.producer_id not in (-1, first.producer_id)


def test_transaction_state_machine_errors(txn_broker: BrokerProcess) -> None:
    topic = create_topic(txn_broker.bootstrap, "states", partitions=2)
    with RawClient(txn_broker.bootstrap) as client:
        ids = init(client, "states")
        pid, epoch = ids.producer_id, ids.producer_epoch
        assert end_txn(client, "states", pid, epoch, commit=True) == E.INVALID_TXN_STATE  # nothing begun
        assert add_partitions(client, "states", pid + 1, epoch, topic, [0]) == {0: E.INVALID_PRODUCER_ID_MAPPING}
        assert add_partitions(client, "states", pid, epoch + 1, topic, [0]) == {0: E.PRODUCER_FENCED}
        assert add_partitions(client, "states", pid, epoch + 1, topic, [0], version=1) == \
            {0: E.INVALID_PRODUCER_EPOCH}
        assert add_partitions(client, "states", pid, epoch, topic, [0, 7]) == \
            {0: E.OPERATION_NOT_ATTEMPTED, 7: E.UNKNOWN_TOPIC_OR_PARTITION}
        assert add_partitions(client, "states", pid, epoch, topic, [0, 1]) == {0: E.NO_ERROR, 1: E.NO_ERROR}
        assert produce(client, "states", topic, pid, epoch, 0) == E.NO_ERROR
        assert end_txn(client, "states", pid, epoch, commit=True) == E.NO_ERROR
        assert end_txn(client, "states", pid, epoch, commit=True) == E.NO_ERROR  # a retry of the same EndTxn
        assert end_txn(client, "states", pid, epoch, commit=False) == E.INVALID_TXN_STATE
        described = client.request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["states", "unknown"]})
        states = {s.transactional_id: (s.error_code, s.transaction_state) for s in described.transaction_states}
        assert states == {"states": (E.NO_ERROR, "CompleteCommit"), "unknown": (E.TRANSACTIONAL_ID_NOT_FOUND, "")}
        listed = client.request(LIST_TRANSACTIONS, 1, {"state_filters": ["CompleteCommit", "Bogus"],
                                                      "producer_id_filters": [pid], "duration_filter": -1})
        assert list(listed.unknown_state_filters) == ["Bogus"]
        assert [t.transactional_id for t in listed.transaction_states] == ["states"]


def test_transactional_offsets_are_pending_until_the_commit(txn_broker: BrokerProcess) -> None:
    topic = create_topic(txn_broker.bootstrap, "txn-offsets")
    with RawClient(txn_broker.bootstrap) as client:
        ids = init(client, "offsets")
        pid, epoch = ids.producer_id, ids.producer_epoch
        assert client.request(ADD_OFFSETS, 3, {"transactional_id": "offsets", "producer_id": pid,
                                               "producer_epoch": epoch, "group_id": "eos"}).error_code == E.NO_ERROR
        committed = client.request(TXN_OFFSET_COMMIT, 3, {
            "transactional_id": "offsets", "group_id": "eos", "producer_id": pid, "producer_epoch": epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 42,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        assert committed.topics[0].partitions[0].error_code == E.NO_ERROR

        def fetch_offset(require_stable: bool) -> tuple[int, int]:
            response = client.request(OFFSET_FETCH, 7, {"group_id": "eos", "require_stable": require_stable,
                                                        "topics": [{"name": topic, "partition_indexes": [0]}]})
            partition = response.topics[0].partitions[0]
            return partition.error_code, partition.committed_offset

        assert fetch_offset(True) == (E.UNSTABLE_OFFSET_COMMIT, -1)  # KIP-447: the transaction may still change it
        assert fetch_offset(False) == (E.NO_ERROR, -1)  # not committed yet
        assert end_txn(client, "offsets", pid, epoch, commit=True) == E.NO_ERROR
        assert fetch_offset(True) == (E.NO_ERROR, 42)


def test_random_transaction_requests_never_break_the_coordinator(txn_broker: BrokerProcess) -> None:
    """Nonsense ids, epochs and states in every transaction API: error codes come back, and a
    well-behaved transaction still commits afterwards."""
    rng = random.Random(11)
    topic = create_topic(txn_broker.bootstrap, "txn-fuzz")
    tids = ["", "f1", "f2", "x" * 300, "\u00e9"]
    codes = {e.value for e in ErrorCode}
    with RawClient(txn_broker.bootstrap) as client:
        known = init(client, "f1")
        for _ in range(300):
            tid = rng.choice(tids)
            pid = rng.choice([-1, 0, known.producer_id, 2**62])
            epoch = rng.choice([-1, 0, known.producer_epoch, 32767])
            call = rng.randrange(5)
            if call == 0:
                response = init(client, tid or None, timeout_ms=rng.choice([-1, 0, 1, 10_000, 2**31 - 1]),
                                producer_id=rng.choice([-1, pid]), epoch=rng.choice([-1, epoch]))
                assert response.error_code in codes
                if tid == "f1" and response.error_code == E.NO_ERROR:
                    known = response
            elif call == 1:
                assert set(add_partitions(client, tid, pid, epoch, rng.choice([topic, "nope"]),
                                          rng.choice([[0], [0, 0], [5], []]) or [0]).values()) <= codes
            elif call == 2:
                assert end_txn(client, tid, pid, epoch, rng.random() < 0.5) in codes
            elif call == 3:
                assert produce(client, rng.choice([tid, None]), topic, pid, epoch, rng.choice([-1, 0, 5])) in codes
            else:
                response = client.request(ADD_OFFSETS, 3, {"transactional_id": tid, "producer_id": pid,
                                                           "producer_epoch": epoch, "group_id": rng.choice(["", "g"])})
                assert response.error_code in codes
        ids = init(client, "after-fuzz")
        assert add_partitions(client, "after-fuzz", ids.producer_id, ids.producer_epoch, topic, [0]) == {0: E.NO_ERROR}
        assert produce(client, "after-fuzz", topic, ids.producer_id, ids.producer_epoch, 0) == E.NO_ERROR
        assert end_txn(client, "after-fuzz", ids.producer_id, ids.producer_epoch, commit=True) == E.NO_ERROR
