"""Seeing what is archived (docs/archive.md): DescribeArchive (kbroker's own API, key 10001) and
`kbroker topics --describe` on real brokers archiving to a real S3-compatible server (moto's,
as a process).

Each number is checked against what holds it: the archived bytes and segments against the .log
objects listed in the bucket (with boto3, not kbroker's store), the local bytes against the
.log files on the broker's disk and DescribeLogDirs (which, as Kafka's, reports the local size
only), the offsets against ListOffsets (-2 earliest, -4 earliest local, -5 latest tiered). Then
the errors: unknown topics and partitions, and on two brokers (ZooKeeper) partitions this broker
does not lead, and the command's N/A for a partition without a leader; authorization is in
tests/integration/test_authorization.py.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from construct import Container

from kbroker.archive.object_store import ObjectStore
from kbroker.s3_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY, S3Server
from protocol.errors import ErrorCode
from tests.archive.conftest import archiving, new_bucket_name, store_config
from tests.brokers import PROJECT_ROOT, BrokerProcess, running_cluster
from tests.rawclient import RawClient
from tests.waiting import wait_until

DESCRIBE_ARCHIVE = 10001
DESCRIBE_LOG_DIRS = 35
LIST_OFFSETS = 2
API_VERSIONS = 18
EARLIEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -4, -5

VALUE_BYTES = 10_000
SEGMENT_BYTES = 100_000  # about nine records: a few hundred records make a dozen segments
LOCAL_BYTES = 300_000
RECORDS = 150  # per partition: about 1.5 MB, 16 segments
TIERED_CONFIGS = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
                  "local.retention.bytes": str(LOCAL_BYTES), "file.delete.delay.ms": "0"}
# A partition line of `kbroker topics --describe`, as kafka-topics.sh prints it.
KAFKA_FIELDS = ["Topic", "Partition", "Leader", "Replicas", "Isr", "Elr", "LastKnownElr"]
ARCHIVE_FIELDS = ["LocalLogStartOffset", "LocalBytes", "LogStartOffset", "ArchivedBytes", "ArchivedSegments",
                  "HighestArchivedOffset"]


@pytest.fixture(scope="module")
def bucket(s3_server: S3Server) -> Iterator[str]:
    name = new_bucket_name()
    store = ObjectStore(store_config(s3_server.endpoint, name))
    store.ensure_bucket()
    yield name
    store.close()


@pytest.fixture(scope="module")
def broker(s3_server: S3Server, bucket: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("describe-archive"),
                            overrides=archiving(s3_server.endpoint, bucket)).start()
    yield process
    assert process.stop() == 0, process.log_tail()
    assert not (errors := process.unknown_field_errors()), "\n".join(errors)


# -- helpers ----------------------------------------------------------------------------------


def create(bootstrap: str, topic: str, partitions: int, configs: dict[str, str]) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: the future fails once it is collected
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(30)
    return topic


def produce(bootstrap: str, topic: str, partitions: list[int], count: int) -> None:
    """`count` incompressible records into each partition, in batches of a record or two (so
    that segments close at SEGMENT_BYTES, not at a batch's size)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 2 * VALUE_BYTES})
    rng = random.Random(topic)
    for _ in range(count):
        for partition in partitions:
            producer.produce(topic, rng.randbytes(VALUE_BYTES), partition=partition)
        producer.poll(0)
    assert producer.flush(60) == 0


def describe(bootstrap: str, topics: list[dict] | None) -> Container:
    with RawClient(bootstrap) as client:
        answer = client.request(DESCRIBE_ARCHIVE, 0, {"topics": topics})
    assert answer.error_code == 0
    return answer


def described(bootstrap: str, topic: str, partitions: list[int]) -> dict[int, Container]:
    """Each partition's answer, none of them an error."""
    [found] = describe(bootstrap, [{"name": topic, "partition_indexes": partitions}]).topics
    assert found.error_code == 0, found
    assert all(p.error_code == 0 for p in found.partitions), found.partitions
    return {p.partition_index: p for p in found.partitions}


def local_segments(broker: BrokerProcess, topic: str, partition: int) -> dict[int, int]:
    """The partition's .log files on disk: size by base offset (the file's name)."""
    return {int(f.stem): f.stat().st_size for f in (broker.log_dir / f"{topic}-{partition}").glob("*.log")}


def archived_logs(endpoint: str, bucket: str, topic: str) -> dict[int, list[int]]:
    """The sizes of the archived .log objects of each partition of `topic`, as the bucket lists them."""
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY_ID,
                      aws_secret_access_key=SECRET_ACCESS_KEY, region_name="us-east-1")
    # "<topic>.<topic id>-<partition>/<base offset>-<segment id>.log" (docs/archive.md)
    name = re.compile(re.escape(topic) + r"\.[0-9a-f]{32}-(\d+)/\d{20}-[0-9a-f]+\.log")
    sizes: dict[int, list[int]] = defaultdict(list)
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{topic}."):
            for entry in page.get("Contents", []):
                if match := name.fullmatch(entry["Key"]):
                    sizes[int(match[1])].append(entry["Size"])
    finally:
        s3.close()
    return sizes


def log_dir_sizes(bootstrap: str, topic: str, partitions: list[int]) -> dict[int, int]:
    with RawClient(bootstrap) as client:
        answer = client.request(DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": topic, "partitions": partitions}]})
    assert answer.error_code == 0
    return {p.partition_index: p.partition_size for d in answer.results for t in d.topics for p in t.partitions}


def list_offset(bootstrap: str, topic: str, partition: int, timestamp: int) -> int:
    with RawClient(bootstrap) as client:
        answer = client.request(LIST_OFFSETS, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                            "timestamp": timestamp}]}]})
    found = answer.topics[0].partitions[0]
    assert found.error_code == 0
    return found.offset


def settled(broker: BrokerProcess, topic: str, partition: int) -> bool:
    """Nothing more to archive or delete locally, as nothing more is produced: every closed
    segment archived (the active one never is), and the local window within its bound (local
    retention deletes the oldest segment while the rest is at least local.retention.bytes)."""
    segments = local_segments(broker, topic, partition)
    active, oldest = max(segments), min(segments)
    highest = described(broker.bootstrap, topic, [partition])[partition].highest_archived_offset
    return highest == active - 1 and sum(segments.values()) - segments[oldest] < LOCAL_BYTES


def topics_describe(bootstrap: str, topic: str) -> dict[int, dict[str, str]]:
    """The partition lines of `kbroker topics --describe --topic <topic>`, as field -> value."""
    result = subprocess.run([sys.executable, "-m", "kbroker.cli.main", "topics", "--bootstrap-server", bootstrap,
                             "--describe", "--topic", topic], cwd=PROJECT_ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    lines = [line.removeprefix("\t").split("\t") for line in result.stdout.splitlines() if line.startswith("\t")]
    parsed = [dict(field.split(": ", 1) for field in line) for line in lines]
    for fields in parsed:
        assert list(fields) in (KAFKA_FIELDS, KAFKA_FIELDS + ARCHIVE_FIELDS), fields
    return {int(fields["Partition"]): fields for fields in parsed}


def printed(p: Container) -> dict[str, str]:
    """What `kbroker topics --describe` prints of a DescribeArchive answer."""
    values = [p.local_log_start_offset, p.local_size, p.log_start_offset, p.archived_size, p.archived_segment_count,
              p.highest_archived_offset]
    return dict(zip(ARCHIVE_FIELDS, map(str, values), strict=True))


# -- one broker -------------------------------------------------------------------------------


def test_sizes_are_what_the_bucket_and_the_disk_hold(broker: BrokerProcess, s3_server: S3Server,
                                                     bucket: str) -> None:
    bs = broker.bootstrap
    tiered = create(bs, "describe-tiered", 2, TIERED_CONFIGS)
    plain = create(bs, "describe-plain", 1, {"segment.bytes": str(SEGMENT_BYTES)})
    produce(bs, tiered, [0, 1], RECORDS)
    produce(bs, plain, [0], RECORDS // 5)
    for partition in (0, 1):
        wait_until(lambda p=partition: settled(broker, tiered, p), 180, f"{tiered}-{partition} archived and trimmed")

    answers = described(bs, tiered, [0, 1])
    objects = archived_logs(s3_server.endpoint, bucket, tiered)
    on_disk = log_dir_sizes(bs, tiered, [0, 1])
    for partition, p in answers.items():
        segments = local_segments(broker, tiered, partition)
        assert p.archived_size == sum(objects[partition]) > 0
        assert p.archived_segment_count == len(objects[partition]) >= RECORDS * VALUE_BYTES // SEGMENT_BYTES - 4
        assert p.local_size == on_disk[partition] == sum(segments.values())
        assert p.local_size < LOCAL_BYTES + 2 * SEGMENT_BYTES  # the window, not the whole partition
        assert p.local_log_start_offset == min(segments) == list_offset(bs, tiered, partition, EARLIEST_LOCAL)
        assert p.log_start_offset == 0 == list_offset(bs, tiered, partition, EARLIEST)
        assert p.highest_archived_offset == list_offset(bs, tiered, partition, LATEST_TIERED)
        assert 0 < p.local_log_start_offset <= p.highest_archived_offset + 1  # no offset in neither

    [p] = described(bs, plain, [0]).values()
    assert (p.archived_size, p.archived_segment_count, p.highest_archived_offset) == (0, 0, -1)
    assert (p.log_start_offset, p.local_log_start_offset) == (0, 0)
    assert p.local_size == log_dir_sizes(bs, plain, [0])[0] == sum(local_segments(broker, plain, 0).values())

    # The command prints the same, on the partition lines of the tiered topic only.
    lines = topics_describe(bs, tiered)
    assert {i: {k: v for k, v in fields.items() if k in ARCHIVE_FIELDS} for i, fields in lines.items()} == \
        {i: printed(p) for i, p in answers.items()}
    assert list(topics_describe(bs, plain)[0]) == KAFKA_FIELDS

    # After a restart: the log start from its checkpoint, what is archived from the metadata store.
    broker.restart()
    assert {i: printed(p) for i, p in described(bs, tiered, [0, 1]).items()} == \
        {i: printed(p) for i, p in answers.items()}


def test_unknown_topics_and_partitions(broker: BrokerProcess) -> None:
    topic = create(broker.bootstrap, "describe-unknown", 2, TIERED_CONFIGS)
    answer = describe(broker.bootstrap, [{"name": "describe-no-such-topic", "partition_indexes": None},
                                         {"name": topic, "partition_indexes": [1, 7]}])
    missing, known = answer.topics
    assert (missing.error_code, missing.partitions) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
    assert "does not exist" in missing.error_message
    assert known.error_code == 0
    assert [(p.partition_index, p.error_code) for p in known.partitions] == \
        [(1, 0), (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    # Nothing produced yet: nothing local, nothing archived.
    empty = known.partitions[0]
    assert (empty.local_size, empty.archived_size, empty.highest_archived_offset) == (0, 0, -1)
    # Every topic: the partitions led here, of which this one's.
    listing = {t.name: [p.partition_index for p in t.partitions] for t in describe(broker.bootstrap, None).topics}
    assert listing[topic] == [0, 1]


def test_not_advertised_in_api_versions_yet_served(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        versions = client.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert DESCRIBE_ARCHIVE not in {entry.api_key for entry in versions.api_keys}
        assert client.request(DESCRIBE_ARCHIVE, 0, {"topics": []}).error_code == 0


# -- two brokers: each partition from its own leader ------------------------------------------


@pytest.fixture
def two_brokers(tmp_path: Path, zk_connect: str, s3_server: S3Server, bucket: str
                ) -> Iterator[list[BrokerProcess]]:
    with running_cluster(tmp_path, zk_connect, 2, archiving(s3_server.endpoint, bucket)) as brokers:
        yield brokers


def test_each_partition_is_described_by_its_leader(two_brokers: list[BrokerProcess], s3_server: S3Server,
                                                   bucket: str) -> None:
    first, second = two_brokers
    admin = AdminClient({"bootstrap.servers": f"{first.bootstrap},{second.bootstrap}"})
    # One tiered partition on each broker (no followers), and a plain one broker 1 follows.
    topics = [NewTopic("spread-tiered", num_partitions=2, replica_assignment=[[0], [1]], config=TIERED_CONFIGS),
              NewTopic("followed", num_partitions=1, replica_assignment=[[0, 1]])]
    for future in admin.create_topics(topics).values():
        future.result(30)
    produce(first.bootstrap, "spread-tiered", [0, 1], RECORDS // 3)
    for partition, leader in ((0, first), (1, second)):
        wait_until(lambda p=partition, b=leader: settled(b, "spread-tiered", p), 180,
                   f"spread-tiered-{partition} archived on broker {partition}")

    # Through the first broker only: the second broker's partition is asked of it.
    lines = topics_describe(first.bootstrap, "spread-tiered")
    objects = archived_logs(s3_server.endpoint, bucket, "spread-tiered")
    for partition, leader in ((0, first), (1, second)):
        fields = lines[partition]
        assert fields["Leader"] == str(partition)
        assert fields["ArchivedBytes"] == str(sum(objects[partition])) != "0"
        assert fields["ArchivedSegments"] == str(len(objects[partition]))
        assert fields["LocalBytes"] == str(sum(local_segments(leader, "spread-tiered", partition).values()))

    # Broker 0 does not host spread-tiered-1; broker 1 follows followed-0: neither is theirs to describe.
    def codes(broker: BrokerProcess) -> list[list[tuple[int, int]]]:
        answer = describe(broker.bootstrap, [{"name": "spread-tiered", "partition_indexes": [0, 1]},
                                             {"name": "followed", "partition_indexes": [0]}])
        return [[(p.partition_index, p.error_code) for p in t.partitions] for t in answer.topics]

    not_led = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert codes(first) == [[(0, 0), (1, not_led)], [(0, 0)]]
    wait_until(lambda: codes(second) == [[(0, not_led), (1, 0)], [(0, not_led)]], 30, "broker 1 following")
    # A full listing names only the partitions the broker leads.
    listing = {t.name: [p.partition_index for p in t.partitions] for t in describe(second.bootstrap, None).topics}
    assert listing["spread-tiered"] == [1] and "followed" not in listing

    # A partition without a leader has nobody to ask: N/A, and the others' numbers all the same.
    second.stop()
    wait_until(lambda: topics_describe(first.bootstrap, "spread-tiered")[1]["Leader"] == "none", 60,
               "spread-tiered-1 without a leader")
    lines = topics_describe(first.bootstrap, "spread-tiered")
    assert [lines[1][field] for field in ARCHIVE_FIELDS] == ["N/A"] * len(ARCHIVE_FIELDS)
    assert lines[0]["ArchivedBytes"] == str(sum(objects[0]))
