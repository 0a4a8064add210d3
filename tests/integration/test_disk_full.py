"""A full disk is a Kafka error, not a dropped connection, and the broker keeps serving reads.

Reproduction of what used to happen: a log dir on a small filesystem fills up; every produce to
its partitions dropped the connection (clients retried until their timeout), a clean shutdown
crashed, and the broker refused to start again until space was freed. Now produces answer
KAFKA_STORAGE_ERROR at once, reads go on, other log dirs take writes, the dir takes writes again
once space is freed, and shutdown and start work on the full disk.

The small filesystem is a real tmpfs mounted by the test (the suite runs as root); without the
rights to mount it the test skips, except in CI where it must run.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from protocol.record_batch import Record, encode_batch
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.rawclient import RawClient
from tests.waiting import wait_until

SMALL_DISK_MB = 24
RECORD = b"x" * 1000


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small-disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK_MB}m", "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the disk-full tests, but mounting a tmpfs failed: {result.stderr}")
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill_up(disk: Path, leave_bytes: int) -> Path:
    """A file taking all of `disk` but `leave_bytes`; deleting it frees the space."""
    filler = disk / "filler"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(filler, "wb") as f:
        f.write(b"\0" * max(free - leave_bytes, 0))
    return filler


def produce(client: RawClient, topic: str, partition: int = 0) -> tuple[int, float]:
    """One produce of ten 1 KB records; (error code, seconds the answer took)."""
    batch = encode_batch([Record(i, int(time.time() * 1000), None, RECORD) for i in range(10)])
    started = time.monotonic()
    answer = client.request(0, 9, {"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return answer.responses[0].partition_responses[0].error_code, time.monotonic() - started


def produce_until_full(client: RawClient, topic: str, partition: int = 0) -> int:
    """Produce until the broker says the disk is full; returns how many produces succeeded."""
    for accepted in range(100_000):
        code, took = produce(client, topic, partition)
        assert took < 1.0, f"a produce took {took:.2f} s"
        if code != 0:
            assert code == ErrorCode.KAFKA_STORAGE_ERROR, code
            return accepted
    raise AssertionError("the disk never filled up")


def fetch_count(client: RawClient, topic: str, partition: int = 0) -> tuple[int, int]:
    """(error code, high watermark) of a fetch from offset 0: the partition serves reads."""
    answer = client.request(1, 12, {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                                    "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                                        {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                         "current_leader_epoch": -1, "log_start_offset": -1}]}],
                                    "forgotten_topics_data": [], "rack_id": ""})
    result = answer.responses[0].partitions[0]
    assert result.error_code != 0 or len(result.records) > 0
    return result.error_code, result.high_watermark


def wait_until_writable(client: RawClient, topic: str, partition: int = 0, timeout_s: float = 15) -> None:
    wait_until(lambda: produce(client, topic, partition)[0] == 0, timeout_s, "the log dir to become writable again",
               interval_s=0.2)


def test_a_full_log_dir_refuses_writes_serves_reads_and_recovers(small_disk: Path, tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker", overrides={"log.dirs": str(small_disk)}).start()
    try:
        topic = create_topic(broker.bootstrap, "fills-up", 1)
        filler = fill_up(small_disk, leave_bytes=2 * 1024 * 1024)
        with RawClient(broker.bootstrap) as client:
            accepted = produce_until_full(client, topic)
            assert accepted > 0
            # Still refused at once, and reads still served.
            assert produce(client, topic) [0] == ErrorCode.KAFKA_STORAGE_ERROR
            assert fetch_count(client, topic) == (0, accepted * 10)
            filler.unlink()
            wait_until_writable(client, topic)
        # Fill it again and stop: a clean shutdown on a full disk.
        fill_up(small_disk, leave_bytes=0)
        with RawClient(broker.bootstrap) as client:
            assert produce(client, topic)[0] == ErrorCode.KAFKA_STORAGE_ERROR
            _, end = fetch_count(client, topic)
        assert broker.stop() == 0, broker.log_tail()
        # And a start on the full disk: reads served, writes refused.
        broker.start()
        with RawClient(broker.bootstrap) as client:
            assert fetch_count(client, topic) == (0, end)
            assert produce(client, topic)[0] == ErrorCode.KAFKA_STORAGE_ERROR
            (small_disk / "filler").unlink()
            wait_until_writable(client, topic)
        assert "Traceback" not in broker.log_text()
    finally:
        broker.kill()


def test_other_log_dirs_keep_taking_writes(small_disk: Path, tmp_path: Path) -> None:
    big = tmp_path / "big-disk"
    broker = BrokerProcess(tmp_path / "broker", overrides={"log.dirs": f"{big},{small_disk}"}).start()
    try:
        # New partitions go to the dir holding the fewest: the two land in different dirs.
        topic = create_topic(broker.bootstrap, "two-dirs", 2)
        on_small = next(p for p in (0, 1) if (small_disk / f"{topic}-{p}").is_dir())
        on_big = 1 - on_small
        fill_up(small_disk, leave_bytes=1024 * 1024)
        with RawClient(broker.bootstrap) as client:
            produce_until_full(client, topic, on_small)
            assert produce(client, topic, on_big)[0] == 0
            answer = client.request(35, 4, {"topics": None})
        codes = {Path(r.log_dir).resolve(): r.error_code for r in answer.results}
        assert codes == {small_disk.resolve(): ErrorCode.KAFKA_STORAGE_ERROR, big.resolve(): ErrorCode.NO_ERROR}
    finally:
        broker.kill()


def test_a_leader_whose_log_dir_fills_hands_leadership_over(small_disk: Path, tmp_path: Path, zk_connect: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.integration.test_replicated_cluster import LAG_SETTINGS, partition_info, read_all, wait_until

    brokers = []
    try:
        for i in range(3):
            overrides = {"broker.id": str(i), "zookeeper.connect": zk_connect, **LAG_SETTINGS}
            if i == 0:
                overrides["log.dirs"] = str(small_disk)  # broker 0 keeps its partitions on the small disk
            brokers.append(BrokerProcess(tmp_path / f"b{i}", overrides=overrides).start())
        servers = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": servers})
        admin.create_topics([NewTopic("full-leader", num_partitions=1, replica_assignment=[[0, 1, 2]],
                                      config={"min.insync.replicas": "2"})])["full-leader"].result(30)
        wait_until(lambda: partition_info(brokers, "full-leader")[0][0] == 0
                   and len(partition_info(brokers, "full-leader")[0][2]) == 3, what="broker 0 leading a full ISR")
        producer = Producer({"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 60000})
        acked: list[bytes] = []

        def send(count: int, tag: str) -> None:
            for i in range(count):
                producer.produce("full-leader", f"{tag}-{i}".encode() + RECORD,
                                 on_delivery=lambda err, msg: err is None and acked.append(msg.value()))
                producer.poll(0)
            assert producer.flush(60) == 0

        send(500, "before")
        fill_up(small_disk, leave_bytes=256 * 1024)
        send(3000, "after")  # broker 0 fills up while they are written
        leader, _, isr = partition_info(brokers, "full-leader")[0]
        assert leader in (1, 2) and 0 not in isr
        assert len(acked) == 3500
        found = read_all(brokers, "full-leader", 1, 3500)[0]
        assert sorted(found) == sorted(acked)  # every acknowledged message, once
        assert "leadership of 1 partition(s) moved" in brokers[0].log_text()
    finally:
        for broker in brokers:
            broker.kill()
