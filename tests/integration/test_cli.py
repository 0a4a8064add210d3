"""The `kbroker` client tools, run as the console script against a real broker process.

Every check that can be is cross-checked with another client: confluent-kafka (librdkafka)
writes what console-consumer prints and reads what the tools changed; kcat reads what
console-producer wrote.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource

from kbroker.client import Client
from kbroker.partitioner import partition_for_key
from protocol.records import read_header
from tests.brokers import BrokerProcess, free_port

KBROKER = str(Path(sys.executable).parent / "kbroker")
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
_names = itertools.count()

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")


# -- helpers ----------------------------------------------------------------------------------


def kbroker(*args: str, input: bytes | str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    data = input.encode() if isinstance(input, str) else input
    return subprocess.run([KBROKER, *args], input=data, capture_output=True, timeout=timeout)


def ok(*args: str, input: bytes | str | None = None) -> str:
    result = kbroker(*args, input=input)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def fails(*args: str, input: bytes | str | None = None) -> str:
    """The command's one stderr line, after checking it failed as a tool should."""
    result = kbroker(*args, input=input)
    stderr = result.stderr.decode()
    assert result.returncode == 1, (result.returncode, stderr)
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


def unique(prefix: str) -> str:
    return f"cli-{prefix}-{next(_names)}"


def kcat_read(bootstrap: str, topic: str, fmt: str, nulls: bool = False) -> list[str]:
    """The topic's records formatted by kcat; with `nulls`, null (and also empty) keys and values show NULL."""
    result = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", *(["-Z"] if nulls else []),
         "-f", fmt],
        capture_output=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode().splitlines()


def confluent_produce(bootstrap: str, topic: str, messages: list[dict], codec: str = "none") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20})
    errors: list[object] = []
    for message in messages:
        producer.produce(topic, on_delivery=lambda e, _m: errors.append(e) if e else None, **message)
    assert producer.flush(30) == 0
    assert errors == []


def fetch_batches(bootstrap: str, topic: str, partition: int = 0) -> list:
    """The batch headers stored in a partition, read with the project's own client."""
    with Client(bootstrap) as client:
        meta = client.wait_for_topic(topic)
        response = client.fetch(client.leader(topic, partition), {(topic, partition): 0},
                                topic_ids={topic: meta.topic_id}, max_wait_ms=0)
    records = bytes(response.responses[0].partitions[0].records or b"")
    headers, pos = [], 0
    while pos < len(records):
        header = read_header(records, pos)
        headers.append(header)
        pos += header.size
    return headers


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    resource = ConfigResource("TOPIC", topic)
    client = admin(bootstrap)  # referenced until the result is in: a dropped client cancels it
    entries = client.describe_configs([resource])[resource].result(timeout=30)
    return {name: entry.value for name, entry in entries.items()}


def partition_count(bootstrap: str, topic: str) -> int:
    return len(admin(bootstrap).list_topics(topic, timeout=30).topics[topic].partitions)


# -- topics -----------------------------------------------------------------------------------

TOPIC_LINE = re.compile(
    r"Topic: (?P<name>\S+)\tTopicId: (?P<id>[A-Za-z0-9_-]{22})\tPartitionCount: (?P<count>\d+)\t"
    r"ReplicationFactor: (?P<rf>\d+)\tConfigs: (?P<configs>.*)"
)
PARTITION_LINE = re.compile(r"\tTopic: (\S+)\tPartition: (\d+)\tLeader: (\d+)\tReplicas: ([\d,]+)\tIsr: ([\d,]+)"
                            r"\tElr: (?:[\d,]*)\tLastKnownElr: (?:[\d,]*)")


def test_topics_create_describe_list_delete(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = unique("lifecycle")
    out = ok("topics", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "3",
             "--replication-factor", "1", "--config", "retention.ms=86400000", "--config", "cleanup.policy=compact")
    assert out == f"Created topic {topic}.\n"
    assert partition_count(bs, topic) == 3
    configs = topic_configs(bs, topic)
    assert configs["retention.ms"] == "86400000" and configs["cleanup.policy"] == "compact"

    lines = ok("topics", "--bootstrap-server", bs, "--describe", "--topic", topic).splitlines()
    head = TOPIC_LINE.fullmatch(lines[0])
    assert head is not None, lines[0]
    assert (head["name"], head["count"], head["rf"]) == (topic, "3", "1")
    assert head["configs"] == "cleanup.policy=compact,retention.ms=86400000"
    broker_id = str(admin(bs).list_topics(topic, timeout=30).topics[topic].partitions[0].leader)
    assert [PARTITION_LINE.fullmatch(line).groups() for line in lines[1:]] == [
        (topic, str(p), broker_id, broker_id, broker_id) for p in range(3)]

    assert topic in ok("topics", "--bootstrap-server", bs, "--list").splitlines()
    assert ok("topics", "--bootstrap-server", bs, "--delete", "--topic", topic) == ""
    assert topic not in ok("topics", "--bootstrap-server", bs, "--list").splitlines()
    assert topic not in admin(bs).list_topics(timeout=30).topics


def test_topic_id_is_printed_as_kafka_prints_it(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic()
    head = TOPIC_LINE.fullmatch(ok("topics", "--bootstrap-server", broker.bootstrap, "--describe",
                                   "--topic", topic).splitlines()[0])
    client = admin(broker.bootstrap)
    description = client.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
    # Kafka prints ids in URL-safe base64; librdkafka's str() uses the standard alphabet.
    assert head["id"] == str(description.topic_id).replace("+", "-").replace("/", "_")


def test_create_uses_broker_defaults_and_existing_topic_fails(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = unique("defaults")
    ok("topics", "--bootstrap-server", bs, "--create", "--topic", topic)
    assert partition_count(bs, topic) == 1  # num.partitions
    line = fails("topics", "--bootstrap-server", bs, "--create", "--topic", topic)
    assert line.startswith("error: TOPIC_ALREADY_EXISTS:") and topic in line
    assert ok("topics", "--bootstrap-server", bs, "--create", "--topic", topic, "--if-not-exists") == ""


def test_create_rejects_bad_settings(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    line = fails("topics", "--bootstrap-server", bs, "--create", "--topic", unique("rf"), "--replication-factor", "3")
    assert line.startswith("error: INVALID_REPLICATION_FACTOR")
    line = fails("topics", "--bootstrap-server", bs, "--create", "--topic", unique("cfg"),
                 "--config", "retention.ms=soon")
    assert line.startswith("error: INVALID_CONFIG")
    assert fails("topics", "--bootstrap-server", bs, "--create") == "error: --create needs --topic"


def test_delete_missing_topic_fails_unless_if_exists(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    line = fails("topics", "--bootstrap-server", bs, "--delete", "--topic", "no-such-topic")
    assert line.startswith("error: UNKNOWN_TOPIC_OR_PARTITION") and "no-such-topic" in line
    assert ok("topics", "--bootstrap-server", bs, "--delete", "--topic", "no-such-topic", "--if-exists") == ""


def test_describe_all_and_by_pattern(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    prefix = unique("pattern")
    names = [f"{prefix}.a", f"{prefix}.b"]
    for name in names:
        ok("topics", "--bootstrap-server", bs, "--create", "--topic", name, "--partitions", "2")
    described = {m["name"] for m in map(TOPIC_LINE.fullmatch, ok(
        "topics", "--bootstrap-server", bs, "--describe").splitlines()) if m}
    assert set(names) <= described
    by_pattern = ok("topics", "--bootstrap-server", bs, "--describe", "--topic", f"{prefix}\\..*")
    assert [m["name"] for m in map(TOPIC_LINE.fullmatch, by_pattern.splitlines()) if m] == names
    assert by_pattern.count("\tPartition: ") == 4
    assert ok("topics", "--bootstrap-server", bs, "--list", "--topic", f"{prefix}.*").splitlines() == names
    # Only the partition lines, and none of them: every partition has its full ISR.
    assert ok("topics", "--bootstrap-server", bs, "--describe", "--topic", names[0],
              "--under-replicated-partitions") == ""
    ok("topics", "--bootstrap-server", bs, "--delete", "--topic", f"{prefix}\\..*")
    assert not set(names) & set(admin(bs).list_topics(timeout=30).topics)


def test_alter_partitions(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    topic = new_topic(partitions=2)
    ok("topics", "--bootstrap-server", bs, "--alter", "--topic", topic, "--partitions", "5")
    lines = ok("topics", "--bootstrap-server", bs, "--describe", "--topic", topic).splitlines()
    assert TOPIC_LINE.fullmatch(lines[0])["count"] == "5"
    assert [PARTITION_LINE.fullmatch(line).group(2) for line in lines[1:]] == ["0", "1", "2", "3", "4"]
    assert partition_count(bs, topic) == 5
    # New partitions take data.
    confluent_produce(bs, topic, [{"value": b"x", "partition": 4}])
    line = fails("topics", "--bootstrap-server", bs, "--alter", "--topic", topic, "--partitions", "3")
    assert "INVALID_PARTITIONS" in line
    assert fails("topics", "--bootstrap-server", bs, "--alter", "--topic", topic).startswith(
        "error: --alter needs --partitions")


def test_describe_unknown_topic(broker: BrokerProcess) -> None:
    line = fails("topics", "--bootstrap-server", broker.bootstrap, "--describe", "--topic", "missing-topic")
    assert line == "error: UNKNOWN_TOPIC_OR_PARTITION: Topic 'missing-topic' does not exist as expected"


# -- configs ----------------------------------------------------------------------------------


def test_configs_alter_and_describe_topic(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    topic = new_topic()
    base = ["configs", "--bootstrap-server", bs, "--entity-type", "topics", "--entity-name", topic]
    assert ok(*base, "--describe") == f"Dynamic configs for topic {topic} are:\n"

    out = ok(*base, "--alter", "--add-config", "retention.ms=3600000,cleanup.policy=[compact,delete]")
    assert out == f"Completed updating config for topic {topic}.\n"
    configs = topic_configs(bs, topic)
    assert configs["retention.ms"] == "3600000" and configs["cleanup.policy"] == "compact,delete"

    lines = ok(*base, "--describe").splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert lines[1].startswith("  cleanup.policy=compact,delete sensitive=false synonyms={"
                               "DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=")
    assert lines[2].startswith("  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000")
    assert len(lines) == 3

    ok(*base, "--alter", "--delete-config", "retention.ms", "--add-config", "segment.bytes=1048576")
    configs = topic_configs(bs, topic)
    assert configs["retention.ms"] != "3600000" and configs["segment.bytes"] == "1048576"
    names = [line.split("=", 1)[0].strip() for line in ok(*base, "--describe").splitlines()[1:]]
    assert names == ["cleanup.policy", "segment.bytes"]

    assert "only once" in fails(*base, "--alter", "--append-config", "cleanup.policy=delete",
                                "--subtract-config", "cleanup.policy=compact")
    ok(*base, "--alter", "--subtract-config", "cleanup.policy=compact")
    assert topic_configs(bs, topic)["cleanup.policy"] == "delete"


def test_configs_describe_all_and_shorthand(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    topic = new_topic(configs={"max.message.bytes": "2000000"})
    lines = ok("configs", "--bootstrap-server", bs, "--topic", topic, "--describe", "--all").splitlines()
    assert lines[0] == f"All configs for topic {topic} are:"
    entries = dict(line.strip().split(" ", 1)[0].split("=", 1) for line in lines[1:])
    assert entries == topic_configs(bs, topic)
    assert entries["max.message.bytes"] == "2000000"
    assert entries["retention.ms"] == "1209600000"  # two weeks, the broker default
    # As Kafka: log.retention.hours alone is no synonym of retention.ms (only log.retention.ms and weaker).
    assert [line for line in lines if line.startswith("  retention.ms=")][0].endswith("sensitive=false synonyms={}")


def test_configs_errors(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    topic = new_topic()
    base = ["configs", "--bootstrap-server", bs, "--entity-type", "topics"]
    assert fails(*base, "--entity-name", topic, "--alter", "--delete-config", "no.such.config") == (
        "error: INVALID_CONFIG: Invalid config(s): no.such.config")
    assert "INVALID_CONFIG" in fails(*base, "--entity-name", topic, "--alter", "--add-config", "retention.ms=x")
    assert "INVALID_CONFIG" in fails(*base, "--entity-name", topic, "--alter", "--add-config", "bogus.key=1")
    assert "key=value" in fails(*base, "--entity-name", topic, "--alter", "--add-config", "retention.ms")
    assert "UNKNOWN_TOPIC_OR_PARTITION" in fails(*base, "--entity-name", "missing-topic", "--describe")
    assert fails(*base, "--alter", "--add-config", "a=b") == "error: --alter needs --entity-name or --entity-default"
    assert "only valid with --entity-type brokers" in fails(*base, "--entity-default", "--describe")


def test_configs_brokers(make_broker) -> None:
    broker = make_broker()
    bs = broker.bootstrap
    base = ["configs", "--bootstrap-server", bs, "--entity-type", "brokers"]
    lines = ok(*base, "--entity-name", "0", "--describe", "--all").splitlines()
    assert lines[0] == "All configs for broker 0 are:"
    assert "  broker.id=0 sensitive=false synonyms={DEFAULT_CONFIG:broker.id=0}" in lines

    assert ok(*base, "--entity-default", "--alter", "--add-config", "log.retention.ms=7200000") == (
        "Completed updating default config for brokers in the cluster.\n")
    lines = ok(*base, "--entity-default", "--describe").splitlines()
    assert lines[0] == "Default configs for brokers in the cluster are:"
    assert lines[1].startswith("  log.retention.ms=7200000 sensitive=false")

    assert ok(*base, "--entity-name", "0", "--alter", "--add-config", "log.retention.ms=3600000") == (
        "Completed updating config for broker 0.\n")
    lines = ok(*base, "--entity-name", "0", "--describe").splitlines()
    assert lines[0] == "Dynamic configs for broker 0 are:"
    assert lines[1].startswith("  log.retention.ms=3600000 sensitive=false synonyms={"
                               "DYNAMIC_BROKER_CONFIG:log.retention.ms=3600000")
    # New topics take the broker's dynamic default.
    ok("topics", "--bootstrap-server", bs, "--create", "--topic", "t")
    assert topic_configs(bs, "t")["retention.ms"] == "3600000"

    # Without an entity name: every broker, then the cluster default.
    headings = [line for line in ok(*base, "--describe").splitlines() if not line.startswith("  ")]
    assert headings == ["Dynamic configs for broker 0 are:", "Default configs for brokers in the cluster are:"]
    ok("configs", "--bootstrap-server", bs, "--broker-defaults", "--alter", "--delete-config", "log.retention.ms")
    assert ok(*base, "--entity-default", "--describe") == "Default configs for brokers in the cluster are:\n"
    assert "broker id" in fails(*base, "--entity-name", "zero", "--describe")


# -- console-producer -------------------------------------------------------------------------


def test_producer_keys_and_headers_read_by_kcat(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    topic = new_topic()
    lines = "h1:v1,h2:v2|k1=first\nx:y,x:z|k2=second\nh3:|=third with = sign\nonly-key-sep:x|k4=\n"
    ok("console-producer", "--bootstrap-server", bs, "--topic", topic,
       "--property", "parse.key=true", "--property", "key.separator==",
       "--property", "parse.headers=true", "--property", "headers.delimiter=|",
       input=lines)
    assert kcat_read(bs, topic, "%o|%h|%k|%s\n") == [
        "0|h1=v1,h2=v2|k1|first",
        "1|x=y,x=z|k2|second",
        "2|h3=||third with = sign",
        "3|only-key-sep=x|k4|",
    ]


def test_producer_header_separators_null_marker_and_ignore_error(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    topic = new_topic()
    ok("console-producer", "--bootstrap-server", bs, "--topic", topic,
       "--property", "parse.key=true", "--property", "key.separator=::",
       "--property", "parse.headers=true", "--property", "headers.delimiter=;",
       "--property", "headers.separator=&", "--property", "headers.key.separator==",
       "--property", "null.marker=NULL", "--property", "ignore.error=true",
       input="a=1&b=NULL;NULL::v1\nNULL;key::NULL\nno separators at all\n")
    assert kcat_read(bs, topic, "%h|%k|%s\n", nulls=True) == [
        "a=1,b=NULL|NULL|v1", "|key|NULL", "|NULL|no separators at all"]


def test_producer_missing_key_separator_is_an_error(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic()
    line = fails("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                 "--property", "parse.key=true", input="k\tv\nno tab here\n")
    assert line == "error: No key separator found on line number 2: 'no tab here'"


def test_producer_partitions_keys_like_java_and_librdkafka(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    ours, theirs = new_topic(partitions=7), new_topic(partitions=7)
    keys = [f"user-{i}" for i in range(200)] + ["", "ü-ñicode", "k" * 40]
    ok("console-producer", "--bootstrap-server", bs, "--topic", ours, "--property", "parse.key=true",
       input="".join(f"{k}\tv\n" for k in keys))
    # librdkafka's murmur2_random is Java's default partitioner for non-empty keys.
    producer = Producer({"bootstrap.servers": bs, "partitioner": "murmur2_random"})
    for key in keys:
        producer.produce(theirs, b"v", key=key.encode())
    assert producer.flush(30) == 0
    placed = {}
    for line in kcat_read(bs, ours, "%p %k\n"):
        partition, _, key = line.partition(" ")
        placed[key] = int(partition)
    assert placed == {k: partition_for_key(k.encode(), 7) for k in keys}
    rdkafka = dict((k, int(p)) for p, _, k in (line.partition(" ") for line in kcat_read(bs, theirs, "%p %k\n")))
    assert {k: p for k, p in placed.items() if k} == {k: p for k, p in rdkafka.items() if k}


@pytest.mark.parametrize("codec", CODECS)
def test_producer_compression(broker: BrokerProcess, new_topic, codec: str) -> None:
    topic = new_topic()
    values = [f"{i:05d}-" + "x" * 100 for i in range(300)]
    ok("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--compression-codec", codec,
       input="\n".join(values))  # no newline after the last line: it is still a record
    assert kcat_read(broker.bootstrap, topic, "%s\n") == values
    assert {h.compression for h in fetch_batches(broker.bootstrap, topic)} == {CODECS.index(codec)}


def test_producer_compression_codec_without_value_is_gzip(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic()
    ok("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--compression-codec",
       input="a\nb\n")
    assert [h.compression for h in fetch_batches(broker.bootstrap, topic)] == [1]


def test_producer_batches_and_sync(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    batched, sync = new_topic(), new_topic()
    lines = "".join(f"line {i}\n" for i in range(2000))
    ok("console-producer", "--bootstrap-server", bs, "--topic", batched, "--batch-size", "4096", input=lines)
    batches = fetch_batches(bs, batched)
    assert 2 < len(batches) < 100 and sum(h.record_count for h in batches) == 2000
    assert kcat_read(bs, batched, "%s\n") == lines.splitlines()
    ok("console-producer", "--bootstrap-server", bs, "--topic", sync, "--sync", input="a\nb\nc\n")
    assert [h.record_count for h in fetch_batches(bs, sync)] == [1, 1, 1]


def test_producer_partition_option_and_unkeyed_records(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    topic = new_topic(partitions=3)
    ok("console-producer", "--bootstrap-server", bs, "--topic", topic, "--partition", "2",
       "--property", "parse.key=true", input="a\t1\nb\t2\nc\t3\n")
    ok("console-producer", "--bootstrap-server", bs, "--topic", topic, input="x\ny\n")
    lines = kcat_read(bs, topic, "%p %k %s\n", nulls=True)
    assert [line for line in lines if " NULL " not in line] == ["2 a 1", "2 b 2", "2 c 3"]
    unkeyed = sorted(line.split(" ") for line in lines if " NULL " in line)
    assert [value for _, _, value in unkeyed] == ["x", "y"]
    assert unkeyed[0][0] == unkeyed[1][0], "unkeyed records of one batch stick to one partition"
    line = fails("console-producer", "--bootstrap-server", bs, "--topic", topic, "--partition", "3", input="z\n")
    assert line.startswith("error: UNKNOWN_TOPIC_OR_PARTITION") and "partition 3" in line


def test_producer_acks(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    topic = new_topic()
    for acks in ("1", "all", "0"):
        ok("console-producer", "--bootstrap-server", bs, "--topic", topic, "--request-required-acks", acks,
           input=f"acks={acks}\n")
    # acks=0 gives no confirmation: wait for the record by consuming until it arrives.
    out = ok("console-consumer", "--bootstrap-server", bs, "--topic", topic, "--from-beginning",
             "--max-messages", "3", "--timeout-ms", "20000")
    assert out.splitlines() == ["acks=1", "acks=all", "acks=0"]


def test_producer_auto_creates_topics_like_kafka(broker: BrokerProcess) -> None:
    topic = unique("auto")
    ok("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic, input="hello\n")
    assert kcat_read(broker.bootstrap, topic, "%s\n") == ["hello"]


def test_producer_unknown_topic_without_auto_creation(make_broker) -> None:
    broker = make_broker(**{"auto.create.topics.enable": "false"})
    line = fails("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", "nope", input="x\n")
    assert line == "error: UNKNOWN_TOPIC_OR_PARTITION: Topic 'nope' does not exist"


def test_producer_sends_each_line_while_stdin_stays_open(broker: BrokerProcess, new_topic) -> None:
    """Interactive use: a line is sent after the linger time without waiting for end of input."""
    bs = broker.bootstrap
    topic = new_topic()
    producer = subprocess.Popen(
        [KBROKER, "console-producer", "--bootstrap-server", bs, "--topic", topic, "--timeout", "50"],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert producer.stdin is not None
        producer.stdin.write(b"first\n")
        producer.stdin.flush()
        out = ok("console-consumer", "--bootstrap-server", bs, "--topic", topic, "--from-beginning",
                 "--max-messages", "1", "--timeout-ms", "20000")
        assert out == "first\n"
    finally:
        producer.stdin.close()
        assert producer.wait(30) == 0, producer.stderr.read().decode()


# -- console-consumer -------------------------------------------------------------------------


def test_consumer_prints_kcat_data_with_keys(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    topic = new_topic(partitions=3)
    produce = subprocess.run(["kcat", "-P", "-b", bs, "-t", topic, "-K:"],
                             input=b"web:GET /\ndb:slow query\nweb:POST /login\n", capture_output=True, timeout=60)
    assert produce.returncode == 0, produce.stderr.decode()
    result = kbroker("console-consumer", "--bootstrap-server", bs, "--topic", topic, "--from-beginning",
                     "--property", "print.key=true", "--timeout-ms", "1000")
    assert result.returncode == 0
    assert sorted(result.stdout.decode().splitlines()) == ["db\tslow query", "web\tGET /", "web\tPOST /login"]
    assert result.stdout.decode().index("GET /") < result.stdout.decode().index("POST /login")
    assert result.stderr.decode() == "Processed a total of 3 messages\n"


def test_consumer_formatter_properties(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    topic = new_topic(partitions=2)
    confluent_produce(bs, topic, [
        {"value": b"v0", "key": b"k0", "partition": 1, "timestamp": 1700000000000,
         "headers": [("h1", b"a"), ("h2", None)]},
        {"value": None, "key": None, "partition": 1, "timestamp": 1700000000001},
    ])
    props = ["--property", "print.timestamp=true", "--property", "print.partition=true",
             "--property", "print.offset=true", "--property", "print.headers=true", "--property", "print.key=true"]
    out = ok("console-consumer", "--bootstrap-server", bs, "--topic", topic, "--from-beginning",
             "--max-messages", "2", *props)
    assert out.splitlines() == [
        "CreateTime:1700000000000\tPartition:1\tOffset:0\th1:a,h2:null\tk0\tv0",
        "CreateTime:1700000000001\tPartition:1\tOffset:1\tNO_HEADERS\tnull\tnull",
    ]
    out = ok("console-consumer", "--bootstrap-server", bs, "--topic", topic, "--from-beginning",
             "--max-messages", "2", *props, "--property", "key.separator= | ", "--property", "line.separator=;\n",
             "--property", "headers.separator=+", "--property", "headers.key.separator==",
             "--property", "null.literal=<nil>", "--property", "print.value=false")
    assert out == ("CreateTime:1700000000000 | Partition:1 | Offset:0 | h1=a+h2=<nil> | k0;\n"
                   "CreateTime:1700000000001 | Partition:1 | Offset:1 | NO_HEADERS | <nil>;\n")


def test_consumer_log_append_time(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic(configs={"message.timestamp.type": "LogAppendTime"})
    confluent_produce(broker.bootstrap, topic, [{"value": b"v", "timestamp": 1000}])
    out = ok("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--from-beginning",
             "--max-messages", "1", "--property", "print.timestamp=true")
    kind, _, rest = out.partition(":")
    assert kind == "LogAppendTime" and int(rest.split("\t")[0]) > 1000


@pytest.mark.parametrize("codec", CODECS)
def test_consumer_reads_compressed_batches(broker: BrokerProcess, new_topic, codec: str) -> None:
    topic = new_topic()
    values = [f"value-{i}".encode() * 20 for i in range(500)]
    confluent_produce(broker.bootstrap, topic, [{"value": v, "partition": 0} for v in values], codec)
    out = ok("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--from-beginning",
             "--max-messages", "500")
    assert out.encode().splitlines() == values


def test_consumer_partition_and_offset(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    topic = new_topic(partitions=2)
    confluent_produce(bs, topic, [{"value": f"p{p}-{i}".encode(), "partition": p} for p in (0, 1) for i in range(5)])
    base = ["console-consumer", "--bootstrap-server", bs, "--topic", topic, "--timeout-ms", "500"]
    assert ok(*base, "--partition", "1", "--offset", "3").splitlines() == ["p1-3", "p1-4"]
    assert ok(*base, "--partition", "0", "--offset", "earliest", "--max-messages", "2").splitlines() == [
        "p0-0", "p0-1"]
    assert ok(*base, "--partition", "0", "--from-beginning").splitlines() == [f"p0-{i}" for i in range(5)]
    assert ok(*base, "--partition", "0", "--offset", "latest") == ""
    assert ok(*base) == ""  # the latest offsets: nothing new
    # Beyond the end: reset to the latest offset, as auto.offset.reset=latest does.
    assert ok(*base, "--partition", "0", "--offset", "99") == ""
    all_values = ok(*base, "--from-beginning").splitlines()
    assert sorted(all_values) == sorted(f"p{p}-{i}" for p in (0, 1) for i in range(5))


def test_consumer_waits_for_new_records(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    topic = new_topic()
    confluent_produce(bs, topic, [{"value": b"old"}])
    # Start at the end offset, fixed up front, so no record can slip past before it starts.
    consumer = subprocess.Popen(
        [KBROKER, "console-consumer", "--bootstrap-server", bs, "--topic", topic, "--partition", "0",
         "--offset", "1", "--max-messages", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    confluent_produce(bs, topic, [{"value": b"new1"}, {"value": b"new2"}, {"value": b"new3"}])
    out, err = consumer.communicate(timeout=30)
    assert consumer.returncode == 0, err.decode()
    assert out == b"new1\nnew2\n"
    assert err == b"Processed a total of 2 messages\n"


def test_consumer_option_and_topic_errors(broker: BrokerProcess, new_topic) -> None:
    bs = broker.bootstrap
    topic = new_topic()
    base = ["console-consumer", "--bootstrap-server", bs]
    assert fails(*base, "--topic", "missing-topic", "--timeout-ms", "100") == (
        "error: UNKNOWN_TOPIC_OR_PARTITION: Topic 'missing-topic' does not exist")
    assert "partition 4" in fails(*base, "--topic", topic, "--partition", "4")
    assert fails(*base, "--topic", topic, "--offset", "1") == (
        "error: the partition is required when offset is specified")
    assert "cannot be specified together" in fails(*base, "--topic", topic, "--partition", "0", "--offset", "1",
                                                   "--from-beginning")
    assert "invalid --offset" in fails(*base, "--topic", topic, "--partition", "0", "--offset", "-5")


def test_consumer_output_closed_early(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic()
    confluent_produce(broker.bootstrap, topic, [{"value": b"x" * 1000} for _ in range(3000)])
    result = subprocess.run(
        f"{KBROKER} console-consumer --bootstrap-server {broker.bootstrap} --topic {topic} --from-beginning "
        f"| head -n 1", shell=True, capture_output=True, timeout=60)
    assert result.stdout == b"x" * 1000 + b"\n"
    assert b"Traceback" not in result.stderr


# -- unreachable brokers ----------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    ["topics", "--list"],
    ["topics", "--create", "--topic", "t"],
    ["configs", "--entity-type", "topics", "--entity-name", "t", "--describe"],
    ["console-producer", "--topic", "t"],
    ["console-consumer", "--topic", "t"],
])
def test_unreachable_broker(command: list[str]) -> None:
    port = free_port()
    line = fails(*command, "--bootstrap-server", f"127.0.0.1:{port}", input="x\n")
    assert line == f"error: cannot connect to broker 127.0.0.1:{port}: Connection refused"


def test_bad_bootstrap_address() -> None:
    assert "invalid bootstrap address" in fails("topics", "--list", "--bootstrap-server", "localhost")


def test_broker_stopping_mid_command(make_broker) -> None:
    broker = make_broker()
    ok("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", "t")
    confluent_produce(broker.bootstrap, "t", [{"value": b"first"}])
    consumer = subprocess.Popen(
        [KBROKER, "console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", "t", "--from-beginning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert consumer.stdout is not None
    assert consumer.stdout.readline() == b"first\n"  # it is in its fetch loop now
    broker.kill()
    _, err = consumer.communicate(timeout=60)
    assert consumer.returncode == 1
    assert err.decode().startswith("error: ") and len(err.decode().splitlines()) == 1
    assert "Traceback" not in err.decode()


def test_keyed_messages_per_partition_round_trip(broker: BrokerProcess, new_topic) -> None:
    """console-producer to console-consumer: every record comes back, in order within its key."""
    bs = broker.bootstrap
    topic = new_topic(partitions=4)
    lines = [f"key{i % 13}:{i}" for i in range(1000)]
    ok("console-producer", "--bootstrap-server", bs, "--topic", topic, "--property", "parse.key=true",
       "--property", "key.separator=:", input="\n".join(lines) + "\n")
    out = ok("console-consumer", "--bootstrap-server", bs, "--topic", topic, "--from-beginning",
             "--property", "print.key=true", "--property", "key.separator=:", "--property", "print.partition=true",
             "--max-messages", "1000")
    by_key: dict[str, list[int]] = defaultdict(list)
    for line in out.splitlines():
        _, partition, key, value = line.split(":")  # Partition:P:key:value
        assert int(partition) == partition_for_key(key.encode(), 4)
        by_key[key].append(int(value))
    assert sorted(v for values in by_key.values() for v in values) == list(range(1000))
    assert all(values == sorted(values) for values in by_key.values())
