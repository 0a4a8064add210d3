"""Moving a partition between the log dirs of one broker (AlterReplicaLogDirs), with real broker
processes: the protocol and its errors, a move under load, a kill -9 in the middle of a move, and
Kafka's own kafka-reassign-partitions.sh and kafka-log-dirs.sh."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

from protocol.errors import ErrorCode
from protocol.record_batch import Record, decode_batches, encode_batch
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.rawclient import RawClient
from tests.waiting import wait_until

ALTER_REPLICA_LOG_DIRS = 34
DESCRIBE_LOG_DIRS = 35
THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"


def start_broker(tmp_path: Path, dirs: int = 2, **overrides: str) -> tuple[BrokerProcess, list[Path]]:
    log_dirs = [tmp_path / f"dir{i}" for i in range(dirs)]
    settings = {"log.dirs": ",".join(str(d) for d in log_dirs), **overrides}
    return BrokerProcess(tmp_path / "broker", overrides=settings).start(), log_dirs

def alter(client: RawClient, path: str, topic: str, partitions: list[int], version: int = 2) -> dict[int, int]:
    answer = client.request(ALTER_REPLICA_LOG_DIRS, version, {"dirs": [
        {"path": path, "topics": [{"name": topic, "partitions": partitions}]}]})
    return {p.partition_index: p.error_code for t in answer.results for p in t.partitions}


def replicas(client: RawClient, topic: str, partition: int) -> dict[tuple[str, bool], tuple[int, int]]:
    """(log dir, is future) -> (size, offset lag) of the partition's replicas; dirs in error are left out."""
    answer = client.request(DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": topic, "partitions": [partition]}]})
    found = {}
    for result in answer.results:
        for t in result.topics:
            for p in t.partitions:
                found[(result.log_dir, p.is_future_key)] = (p.partition_size, p.offset_lag)
    return found


def dir_errors(client: RawClient) -> dict[str, int]:
    answer = client.request(DESCRIBE_LOG_DIRS, 4, {"topics": None})
    return {result.log_dir: result.error_code for result in answer.results}


def moved_to(client: RawClient, topic: str, partition: int, log_dir: Path) -> bool:
    return set(replicas(client, topic, partition)) == {(str(log_dir.resolve()), False)}


def produce(client: RawClient, topic: str, partition: int, values: list[bytes]) -> int:
    batch = encode_batch([Record(i, int(time.time() * 1000), None, value) for i, value in enumerate(values)])
    answer = client.request(0, 9, {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    result = answer.responses[0].partition_responses[0]
    assert result.error_code == 0, result
    return result.base_offset


def fetch_bytes(client: RawClient, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20) -> bytes:
    answer = client.request(1, 12, {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": 0,
                                    "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                                        {"partition": partition, "fetch_offset": offset,
                                         "partition_max_bytes": max_bytes, "current_leader_epoch": -1,
                                         "log_start_offset": -1}]}],
                                    "forgotten_topics_data": [], "rack_id": ""})
    result = answer.responses[0].partitions[0]
    assert result.error_code == 0, result
    return bytes(result.records or b"")


def read_log(client: RawClient, topic: str, partition: int) -> tuple[bytes, list[bytes]]:
    """Every batch of the partition, as the bytes the broker sends, and the record values."""
    raw, values, offset = b"", [], 0
    while True:
        data = fetch_bytes(client, topic, partition, offset)
        batches = decode_batches(data)
        if not batches:
            return raw, values
        raw += data[:sum(b.size for b in batches)]  # whole batches: a slice may end inside one
        values += [r.value for b in batches for r in b.records]
        offset = batches[-1].next_offset


def test_alter_replica_log_dirs_and_describe_log_dirs(tmp_path: Path) -> None:
    broker, (dir0, dir1, dir2) = start_broker(tmp_path, dirs=3, **{
        THROTTLE: "200000", "log.flush.offset.checkpoint.interval.ms": "200"})
    try:
        topic = create_topic(broker.bootstrap, "moving", 2)  # partition 0 in dir0, 1 in dir1
        with RawClient(broker.bootstrap) as client:
            for _ in range(10):
                produce(client, topic, 0, [b"v" * 10_000] * 10)  # 1 MB: five seconds at 200 KB/s
            before = read_log(client, topic, 0)
            for version in (0, 1, 2):
                assert alter(client, "/no/such/dir", topic, [0], version) == {0: ErrorCode.LOG_DIR_NOT_FOUND}
                assert alter(client, str(dir1.resolve()), "no-such-topic", [0], version) == {
                    0: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            assert alter(client, str(dir1.resolve()), topic, [7]) == {7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            assert alter(client, str(dir0.resolve()), topic, [0]) == {0: ErrorCode.NO_ERROR}  # already there
            assert set(replicas(client, topic, 0)) == {(str(dir0.resolve()), False)}

            assert alter(client, str(dir2.resolve()), topic, [0]) == {0: ErrorCode.NO_ERROR}
            # While it copies: the current replica, and the future one with its lag behind it.
            during = replicas(client, topic, 0)
            assert set(during) == {(str(dir0.resolve()), False), (str(dir2.resolve()), True)}
            assert during[(str(dir2.resolve()), True)][1] > 0
            assert alter(client, str(dir2.resolve()), topic, [0]) == {0: ErrorCode.NO_ERROR}  # on its way already
            wait_until(lambda: moved_to(client, topic, 0, dir2), what="the move to finish")
            assert read_log(client, topic, 0) == before
            assert not (dir0 / f"{topic}-0").exists() and (dir2 / f"{topic}-0").is_dir()

            # dir1 fails (its disk is gone): it answers KAFKA_STORAGE_ERROR as a destination and
            # as the dir of the partition to move away.
            shutil.rmtree(dir1)
            dir1.write_text("not a directory any more")
            wait_until(lambda: dir_errors(client)[str(dir1.resolve())] == ErrorCode.KAFKA_STORAGE_ERROR,
                       what="dir1 to go offline")
            assert alter(client, str(dir1.resolve()), topic, [0]) == {0: ErrorCode.KAFKA_STORAGE_ERROR}
            assert alter(client, str(dir0.resolve()), topic, [1]) == {1: ErrorCode.KAFKA_STORAGE_ERROR}
    finally:
        broker.kill()


def test_a_move_under_load_loses_nothing(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer

    # The copy is paced at 8 MB/s, the producer writes about 4 MB/s: the copy catches up.
    broker, (dir0, dir1) = start_broker(tmp_path, **{THROTTLE: "8000000"})
    try:
        topic = create_topic(broker.bootstrap, "busy", 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 2})
        acked: list[bytes] = []
        stop = threading.Event()

        def write() -> None:
            i = 0
            while not stop.is_set():
                producer.produce(topic, f"m{i:07d}-".encode() + b"x" * 1000, partition=0,
                                 on_delivery=lambda err, msg: err is None and acked.append(msg.value()))
                producer.poll(0)
                i += 1
                if i % 200 == 0:
                    time.sleep(0.05)
            assert producer.flush(30) == 0

        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic])
        consumed: list[bytes] = []
        writer = threading.Thread(target=write)
        writer.start()
        try:
            with RawClient(broker.bootstrap) as client:
                wait_until(lambda: len(acked) > 8000, what="8 MB written")  # two seconds of copying
                prefix_end = len(acked)
                assert alter(client, str(dir1.resolve()), topic, [0]) == {0: ErrorCode.NO_ERROR}
                deadline = time.monotonic() + 60
                while not moved_to(client, topic, 0, dir1):
                    assert time.monotonic() < deadline, "the move did not finish"
                    consumed += [m.value() for m in consumer.consume(500, 0.1) if m.error() is None]
                written_after = len(acked)
                wait_until(lambda: len(acked) > written_after + 2000, what="writes after the move")
        finally:
            stop.set()
            writer.join()
        while len(consumed) < len(acked):
            batch = [m.value() for m in consumer.consume(500, 5) if m.error() is None]
            assert batch, f"consumed {len(consumed)} of {len(acked)}"
            consumed += batch
        consumer.close()
        assert consumed == acked  # every acknowledged record, once, in order, byte for byte
        assert prefix_end < written_after
        with RawClient(broker.bootstrap) as client:
            _, values = read_log(client, topic, 0)
        assert values == acked
        assert "Traceback" not in broker.log_text()
    finally:
        broker.kill()


def test_a_kill_in_the_middle_of_a_move_loses_nothing(tmp_path: Path) -> None:
    broker, (dir0, dir1) = start_broker(tmp_path, **{THROTTLE: "300000"})
    try:
        topic = create_topic(broker.bootstrap, "killed", 1)
        with RawClient(broker.bootstrap) as client:
            for i in range(30):
                produce(client, topic, 0, [f"{i}-{j}".encode() * 1000 for j in range(10)])  # ~2 MB
            before = read_log(client, topic, 0)
            assert alter(client, str(dir1.resolve()), topic, [0]) == {0: ErrorCode.NO_ERROR}
            future = (str(dir1.resolve()), True)
            wait_until(lambda: replicas(client, topic, 0).get(future, (0, 0))[0] > 300_000, what="part of a copy")
            assert replicas(client, topic, 0)[future][1] > 0
        broker.kill()
        assert [p.name for p in dir1.iterdir() if p.name.endswith("-future")]
        del broker.overrides[THROTTLE]
        broker.start()
        with RawClient(broker.bootstrap) as client:
            assert read_log(client, topic, 0) == before  # served from the current log meanwhile
            wait_until(lambda: moved_to(client, topic, 0, dir1), what="the resumed move to finish")
            assert read_log(client, topic, 0) == before
            produce(client, topic, 0, [b"after"])
            assert read_log(client, topic, 0)[1] == [*before[1], b"after"]
        assert "resuming the move" in broker.log_text()
    finally:
        broker.kill()


def test_kafka_reassign_partitions_and_log_dirs_tools(tmp_path: Path) -> None:
    from compat_tests.kafka_local import kafka_home_or_skip, run_tool

    home = kafka_home_or_skip()
    broker, (dir0, dir1) = start_broker(tmp_path)
    try:
        topic = create_topic(broker.bootstrap, "tools", 1)
        with RawClient(broker.bootstrap) as client:
            for _ in range(20):
                produce(client, topic, 0, [b"t" * 10_000] * 10)
            before = read_log(client, topic, 0)
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": [0], "log_dirs": [str(dir1.resolve())]}]}))
        args = ("--bootstrap-server", broker.bootstrap, "--reassignment-json-file", str(plan))
        execute = run_tool(home, "kafka-reassign-partitions", *args, "--execute",
                           "--replica-alter-log-dirs-throttle", "500000")
        assert execute.returncode == 0, execute.stdout + execute.stderr
        assert f"Successfully started moving log directory to {dir1.resolve()} for replica {topic}-0" in execute.stdout

        def verified() -> bool:
            result = run_tool(home, "kafka-reassign-partitions", *args, "--verify")
            assert result.returncode == 0, result.stdout + result.stderr
            return f"Reassignment of replica {topic}-0-0 completed successfully" in result.stdout

        wait_until(verified, timeout_s=60, what="--verify to report the move done")
        described = run_tool(home, "kafka-log-dirs", "--bootstrap-server", broker.bootstrap, "--describe",
                             "--topic-list", topic)
        assert described.returncode == 0, described.stderr
        report = json.loads(described.stdout.strip().splitlines()[-1])
        dirs = {d["logDir"]: d["partitions"] for d in report["brokers"][0]["logDirs"]}
        assert [p["partition"] for p in dirs[str(dir1.resolve())]] == [f"{topic}-0"]
        assert not dirs[str(dir0.resolve())]
        assert dirs[str(dir1.resolve())][0]["isFuture"] is False
        with RawClient(broker.bootstrap) as client:
            assert read_log(client, topic, 0) == before
    finally:
        broker.kill()
