"""Filtered view topics end to end: a real broker, confluent-kafka and kafka-python clients.

A source topic holds records tagged with a header, written by producers with different codecs
and by a transactional producer whose second transaction aborts; each view must give a
consumer exactly the committed records its filter keeps, in order, at their source offsets,
and refuse what makes no sense on a read-only topic.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic, ResourceType
from prometheus_client.parser import text_string_to_metric_families

from protocol.records import HEADER_SIZE, read_header
from tests.brokers import BrokerProcess, free_port
from tests.waiting import wait_until

KBROKER = str(Path(sys.executable).parent / "kbroker")
TAGS = ("paid", "refunded", "created", "shipped")
PARTITIONS = 2
PER_PRODUCER = 3000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("views"), overrides={
        "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
        "metrics.listener": f"http://127.0.0.1:{free_port()}"}).start()
    yield process
    if process.alive:
        assert process.stop() == 0, process.log_tail()


@dataclass(frozen=True)
class Written:
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    tag: str | None
    region: str | None


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _create(bootstrap: str, name: str, partitions: int = PARTITIONS, **configs: str) -> None:
    admin = _admin(bootstrap)  # kept: a collected client ends its requests
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=configs)], operation_timeout=10)
    futures[name].result(timeout=30)


def _create_error(bootstrap: str, name: str, partitions: int = -1, **configs: str) -> KafkaError:
    admin = _admin(bootstrap)
    futures = admin.create_topics([NewTopic(name, partitions, config=configs)], operation_timeout=10)
    with pytest.raises(KafkaException) as raised:
        futures[name].result(timeout=30)
    return raised.value.args[0]


def _headers(i: int) -> tuple[str | None, str | None, list[tuple[str, bytes]]]:
    tag = TAGS[i % len(TAGS)] if i % 7 else None  # every 7th record has no tag at all
    region = ("eu", "us")[i % 2]
    headers = [("region", region.encode())]
    if tag is not None:
        headers.insert(i % 2, ("tag", tag.encode()))  # the tag is not always the first header
    return tag, region, headers


def _produce(bootstrap: str, topic: str, codec: str, start: int, count: int,
             transactional_id: str | None = None, abort: bool = False) -> list[Written]:
    config = {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5}
    if transactional_id:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    if transactional_id:
        producer.init_transactions(30)
        producer.begin_transaction()
    written: list[Written] = []

    def delivered(error: KafkaError | None, message: object, i: int, tag: str | None, region: str | None) -> None:
        assert error is None, error
        written.append(Written(message.partition(), message.offset(), message.key(), message.value(), tag, region))

    for i in range(start, start + count):
        tag, region, headers = _headers(i)
        key = None if i % 11 == 0 else f"user-{i % 13}".encode()
        producer.produce(topic, value=f"v{i}".encode() * 20, key=key, headers=headers, partition=i % PARTITIONS,
                         on_delivery=lambda e, m, i=i, t=tag, r=region: delivered(e, m, i, t, r))
        producer.poll(0)
    if transactional_id:
        producer.flush(30)
        if abort:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    assert producer.flush(30) == 0
    return [] if abort else written


@pytest.fixture(scope="module")
def source(broker: BrokerProcess) -> tuple[str, list[Written]]:
    """A source topic: plain, lz4, zstd and gzip producers, one committed transaction and one
    aborted; the aborted records are tagged like the others and must never be read."""
    name = f"orders-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, name)
    counter = itertools.count(0, PER_PRODUCER)
    written: list[Written] = []
    for codec in ("none", "lz4", "zstd", "gzip", "snappy"):
        written += _produce(broker.bootstrap, name, codec, next(counter), PER_PRODUCER)
    written += _produce(broker.bootstrap, name, "lz4", next(counter), 500, transactional_id=f"t-{name}")
    _produce(broker.bootstrap, name, "none", next(counter), 500, transactional_id=f"t-{name}", abort=True)
    written += _produce(broker.bootstrap, name, "none", next(counter), 300)  # after the aborted ones
    return name, sorted(written, key=lambda w: (w.partition, w.offset))


def _consume_all(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> list[tuple[int, int, bytes]]:
    """Every record of `topic` from the beginning (read_committed), by confluent-kafka."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: list[tuple[int, int, bytes]] = []
    done: set[int] = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + 60
    try:
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"{topic} not read to its end in 60 s: {sorted(done)} done"
            # A short poll: consume() waits its whole timeout for a last handful of records, and
            # the positions, checked after each poll, tell when the end is reached.
            for message in consumer.consume(1000, timeout=0.5):
                assert message.error() is None, message.error()
                got.append((message.partition(), message.offset(), message.value()))
            for p in range(partitions):
                position = consumer.position([TopicPartition(topic, p)])[0].offset
                if position >= ends[p]:
                    done.add(p)
    finally:
        consumer.close()
    return sorted(got)


def _expected(written: list[Written], keep: object) -> list[tuple[int, int, bytes]]:
    return [(w.partition, w.offset, w.value) for w in written if keep(w)]


@pytest.mark.parametrize("flt, keep", [
    ("tag in ('paid', 'refunded')", lambda w: w.tag in ("paid", "refunded")),
    ("tag = 'shipped' and header('region') = 'eu'", lambda w: w.tag == "shipped" and w.region == "eu"),
    ("not tag exists", lambda w: w.tag is None),
    ("key startswith 'user-1'", lambda w: w.key is not None and w.key.startswith(b"user-1")),
    ("tag = 'nothing-has-this'", lambda w: False),
    ("header('region') in ('eu', 'us')", lambda w: True),
])
def test_a_view_gives_exactly_the_matching_committed_records(broker: BrokerProcess, source: tuple[str, list[Written]],
                                                             flt: str, keep: object) -> None:
    name, written = source
    view = f"view-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, view, -1, **{"view.source.topic": name, "view.filter": flt})
    assert _consume_all(broker.bootstrap, view) == _expected(written, keep)
    # Read again: batches kept whole or emptied are now answered from remembered verdicts.
    assert _consume_all(broker.bootstrap, view) == _expected(written, keep)


def _view_metrics(broker: BrokerProcess, view: str) -> dict[tuple[str, str], float]:
    """The view's batch and record counters by (sample name, outcome), and the verdict gauge."""
    port = broker.overrides["metrics.listener"].rsplit(":", 1)[1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("view") == view or sample.name in ("kbroker_view_verdicts",
                                                                    "kbroker_view_batches_indexed_total"):
                found[(sample.name, sample.labels.get("outcome", ""))] = sample.value
    return found


def test_a_view_read_again_decodes_only_the_batches_it_rebuilds(broker: BrokerProcess,
                                                                source: tuple[str, list[Written]]) -> None:
    """The second read sends the same records and counts the same batch outcomes; the broker
    remembers a verdict for every batch kept whole or emptied, and none for rebuilt ones."""
    name, written = source
    view = f"view-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, view, -1, **{"view.source.topic": name, "view.filter": "tag = 'paid'"})
    remembered_before = _view_metrics(broker, view)[("kbroker_view_verdicts", "")]
    expected = _expected(written, lambda w: w.tag == "paid")
    assert _consume_all(broker.bootstrap, view) == expected
    first = _view_metrics(broker, view)
    batches = {o: first[("kbroker_view_batches_total", o)] for o in ("whole", "rebuilt", "emptied")}
    assert batches["rebuilt"] > 0 and batches["emptied"] > 0, batches  # the source has both kinds
    remembered = first[("kbroker_view_verdicts", "")] - remembered_before
    # Whole batches include the source's control batches (transaction markers), never remembered.
    assert batches["emptied"] <= remembered <= batches["emptied"] + batches["whole"]
    assert _consume_all(broker.bootstrap, view) == expected
    again = _view_metrics(broker, view)
    for outcome in ("whole", "rebuilt", "emptied"):
        assert again[("kbroker_view_batches_total", outcome)] == 2 * batches[outcome]
    assert again[("kbroker_view_verdicts", "")] == first[("kbroker_view_verdicts", "")]


def test_a_view_that_exists_as_records_arrive_knows_them_before_its_first_read(broker: BrokerProcess) -> None:
    """Batches appended to a source with views are filtered as they come: before any read, the
    broker knows the verdict of every batch; the view's first read learns none and gives exactly
    the records."""
    name = f"live-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, name)
    view = f"view-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, view, -1, **{"view.source.topic": name, "view.filter": "header('region') exists"})
    before = _view_metrics(broker, view)
    written = _produce(broker.bootstrap, name, "lz4", 0, 2000)
    batches = _batches_in(broker, name)  # every record has a region: each batch is kept whole

    def learnt(metrics: dict[tuple[str, str], float], sample: str) -> float:
        return metrics[(sample, "")] - before[(sample, "")]

    def all_indexed() -> dict[tuple[str, str], float] | None:
        metrics = _view_metrics(broker, view)
        done = learnt(metrics, "kbroker_view_verdicts") == learnt(metrics, "kbroker_view_batches_indexed_total") \
            == batches
        return metrics if done else None

    indexed = wait_until(all_indexed, 60, "every appended batch indexed")
    assert ("kbroker_view_records_total", "kept") not in indexed  # no read yet
    assert _consume_all(broker.bootstrap, view) == _expected(sorted(written, key=lambda w: (w.partition, w.offset)),
                                                             lambda w: True)
    read = _view_metrics(broker, view)
    assert read[("kbroker_view_batches_total", "whole")] == batches
    assert read[("kbroker_view_verdicts", "")] == indexed[("kbroker_view_verdicts", "")]  # none learnt by the read


def _batches_in(broker: BrokerProcess, topic: str) -> int:
    """The record batches in the topic's log files."""
    count = 0
    for path in broker.log_dir.glob(f"{topic}-*/*.log"):
        data = path.read_bytes()
        position = 0
        while position + HEADER_SIZE <= len(data):
            position += read_header(data, position).size
            count += 1
    return count


def test_kafka_python_reads_a_view_and_a_group_resumes_after_a_restart(
        broker: BrokerProcess, source: tuple[str, list[Written]]) -> None:
    from kafka import KafkaConsumer

    name, written = source
    view = f"paid-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, view, -1, **{"view.source.topic": name, "view.filter": "tag = 'paid'"})
    expected = _expected(written, lambda w: w.tag == "paid")
    group = f"g-{uuid.uuid4().hex}"

    def read(limit: int) -> list[tuple[int, int, bytes]]:
        consumer = KafkaConsumer(view, bootstrap_servers=broker.bootstrap, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 isolation_level="read_committed", consumer_timeout_ms=5000)
        got: list[tuple[int, int, bytes]] = []
        for message in consumer:
            got.append((message.partition, message.offset, message.value))
            if len(got) == limit:
                break
        consumer.commit()
        consumer.close()
        return got

    first = read(len(expected) // 3)
    rest = read(len(expected))
    assert len(first) == len(expected) // 3
    assert sorted(first + rest) == expected
    assert not set(first) & set(rest)  # resumed exactly where the group's commit left off
    # The second consumer read to the end and committed its position: the gap markers carried
    # it past the last records, which do not match, so the group's lag is 0.
    described = _kbroker("consumer-groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group)
    lags = [line.split()[5] for line in described.stdout.splitlines() if line.startswith(group)]
    assert lags == ["0"] * PARTITIONS, described.stdout + described.stderr


def test_a_view_answers_with_its_sources_offsets_and_partitions(broker: BrokerProcess,
                                                               source: tuple[str, list[Written]]) -> None:
    name, written = source
    view = f"view-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, view, -1, **{"view.source.topic": name, "view.filter": "tag = 'paid'"})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        metadata = consumer.list_topics(view, timeout=10).topics[view]
        assert sorted(metadata.partitions) == list(range(PARTITIONS))
        for p in range(PARTITIONS):
            assert consumer.get_watermark_offsets(TopicPartition(view, p), timeout=10) == \
                consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10)
            middle = [w for w in written if w.partition == p][len(written) // 4]
            # offsets_for_times: the source's timestamps and offsets.
            in_view = consumer.offsets_for_times([TopicPartition(view, p, middle.offset)], timeout=10)
            in_source = consumer.offsets_for_times([TopicPartition(name, p, middle.offset)], timeout=10)
            assert in_view[0].offset == in_source[0].offset
    finally:
        consumer.close()


def test_bad_views_are_refused_with_clear_errors(broker: BrokerProcess, source: tuple[str, list[Written]]) -> None:
    name, _ = source
    bad_filter = _create_error(broker.bootstrap, "bad-filter", **{"view.source.topic": name,
                                                                    "view.filter": "tag in ('paid'"})
    assert bad_filter.code() == KafkaError.INVALID_CONFIG
    assert "position" in bad_filter.str()
    missing = _create_error(broker.bootstrap, "of-missing", **{"view.source.topic": "no-such-topic",
                                                                 "view.filter": "tag = 'paid'"})
    assert missing.code() == KafkaError.INVALID_CONFIG and "does not exist" in missing.str()
    view = f"view-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, view, -1, **{"view.source.topic": name, "view.filter": "tag = 'paid'"})
    of_view = _create_error(broker.bootstrap, "of-view", **{"view.source.topic": view, "view.filter": "tag = 'x'"})
    assert of_view.code() == KafkaError.INVALID_CONFIG and "itself a view" in of_view.str()
    with_log_config = _create_error(broker.bootstrap, "with-retention", **{
        "view.source.topic": name, "view.filter": "tag = 'x'", "retention.ms": "1000"})
    assert with_log_config.code() == KafkaError.INVALID_CONFIG
    wrong_count = _create_error(broker.bootstrap, "wrong-count", PARTITIONS + 1,
                                **{"view.source.topic": name, "view.filter": "tag = 'x'"})
    assert wrong_count.code() == KafkaError.INVALID_PARTITIONS
    filter_alone = _create_error(broker.bootstrap, "filter-alone", **{"view.filter": "tag = 'x'"})
    assert filter_alone.code() == KafkaError.INVALID_CONFIG


def test_writes_to_a_view_are_refused_and_the_source_is_untouched(
        broker: BrokerProcess, source: tuple[str, list[Written]]) -> None:
    name, written = source
    view = f"view-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, view, -1, **{"view.source.topic": name, "view.filter": "tag = 'paid'"})
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.send.max.retries": 0})
    producer.produce(view, b"x", partition=0, on_delivery=lambda e, m: errors.append(e))
    producer.flush(30)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_EXCEPTION]  # INVALID_TOPIC_EXCEPTION
    admin = _admin(broker.bootstrap)
    deleted = admin.delete_records([TopicPartition(view, 0, 10)], operation_timeout=10)
    with pytest.raises(KafkaException) as raised:
        next(iter(deleted.values())).result(timeout=30)
    assert raised.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    grown = admin.create_partitions([NewPartitions(view, PARTITIONS + 1)])
    with pytest.raises(KafkaException):
        grown[view].result(timeout=30)
    resource = ConfigResource(ResourceType.TOPIC, view, set_config={
        "view.source.topic": name, "view.filter": "tag = 'paid'", "retention.ms": "1000"})
    with pytest.raises(KafkaException) as raised:
        admin.alter_configs([resource])[resource].result(timeout=30)
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG
    deleting = admin.delete_topics([name], operation_timeout=10)
    with pytest.raises(KafkaException) as raised:
        deleting[name].result(timeout=30)
    assert raised.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert _consume_all(broker.bootstrap, name) == _expected(written, lambda w: True)


def test_a_views_filter_can_change(broker: BrokerProcess, source: tuple[str, list[Written]]) -> None:
    name, written = source
    view = f"view-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, view, -1, **{"view.source.topic": name, "view.filter": "tag = 'paid'"})
    # Read first, so the broker remembers the old filter's verdicts: the new one must not use them.
    assert _consume_all(broker.bootstrap, view) == _expected(written, lambda w: w.tag == "paid")
    resource = ConfigResource(ResourceType.TOPIC, view, set_config={
        "view.source.topic": name, "view.filter": "tag = 'created'"})
    admin = _admin(broker.bootstrap)
    admin.alter_configs([resource])[resource].result(timeout=30)
    assert _consume_all(broker.bootstrap, view) == _expected(written, lambda w: w.tag == "created")
    moved = ConfigResource(ResourceType.TOPIC, view, set_config={
        "view.source.topic": "elsewhere", "view.filter": "tag = 'created'"})
    with pytest.raises(KafkaException) as raised:
        admin.alter_configs([moved])[moved].result(timeout=30)
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG


def _kbroker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([KBROKER, *args], capture_output=True, text=True, timeout=60)


def test_the_cli_creates_describes_and_force_deletes_views(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    source, paid = f"orders-{uuid.uuid4().hex[:8]}", f"paid-{uuid.uuid4().hex[:8]}"
    assert _kbroker("topics", "--bootstrap-server", bs, "--create", "--topic", source, "--partitions", "3"
                    ).returncode == 0
    created = _kbroker("topics", "--bootstrap-server", bs, "--create", "--topic", paid,
                       "--config", f"view.source.topic={source}",
                       "--config", "view.filter=tag in ('paid', 'refunded')")
    assert created.returncode == 0, created.stderr
    described = _kbroker("topics", "--bootstrap-server", bs, "--describe", "--topic", paid)
    assert "PartitionCount: 3" in described.stdout and f"view.source.topic={source}" in described.stdout
    bad = _kbroker("topics", "--bootstrap-server", bs, "--create", "--topic", "bad-view",
                   "--config", f"view.source.topic={source}", "--config", "view.filter=tag = paid")
    assert bad.returncode != 0 and "position 6" in bad.stderr, bad.stderr
    refused = _kbroker("topics", "--bootstrap-server", bs, "--delete", "--topic", source)
    assert refused.returncode != 0 and paid in refused.stderr, refused.stderr
    forced = _kbroker("topics", "--bootstrap-server", bs, "--delete", "--topic", source, "--force")
    assert forced.returncode == 0, forced.stderr
    listed = _kbroker("topics", "--bootstrap-server", bs, "--list").stdout.split()
    assert source not in listed and paid not in listed


def test_views_survive_a_restart_and_kcat_reads_them(make_broker: Callable[..., BrokerProcess]) -> None:
    process = make_broker()
    _create(process.bootstrap, "src")
    written = _produce(process.bootstrap, "src", "zstd", 0, 400)
    _create(process.bootstrap, "refunds", -1, **{"view.source.topic": "src", "view.filter": "tag = 'refunded'"})
    assert process.stop() == 0
    process.start()
    expected = _expected(written, lambda w: w.tag == "refunded")
    assert _consume_all(process.bootstrap, "refunds") == expected
    if shutil.which("kcat") is None:
        return
    out = subprocess.run(["kcat", "-C", "-b", process.bootstrap, "-t", "refunds", "-e", "-f", "%p %o\\n"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(tuple(map(int, line.split())) for line in out.stdout.split("\n") if line) == \
        [(p, o) for p, o, _ in expected]
