"""Acceptance: the metrics endpoint (metrics.listener) of a real broker, read over HTTP after
real clients produced, consumed and committed; scraped by a real Prometheus; and the start
refused for a listener it cannot serve."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from kbroker.launcher import LaunchError
from tests.brokers import BrokerProcess, free_port
from tests.conftest import create_topic
from tests.waiting import wait_until

MESSAGES = 400
VALUE_SIZE = 1000
CONSUMED = 150
OFFSETS_PARTITIONS = 3
TOPIC_PARTITIONS = 2

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def metrics_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    """A broker serving its metrics on a free port, with a small __consumer_offsets so the
    partition counts are easy to state, and groups that form at once."""
    port = free_port()
    broker = BrokerProcess(tmp_path_factory.mktemp("metrics"), overrides={
        "metrics.listener": f"http://127.0.0.1:{port}",
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        "group.initial.rebalance.delay.ms": "0",
    }).start()
    yield broker, port
    if broker.alive:
        assert broker.stop() == 0, broker.log_text()


def scrape(port: int) -> tuple[Samples, dict[str, list]]:
    """Every sample by (name, sorted labels), and the families by name, as Prometheus parses them."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.status == 200
        text = answer.read().decode()
    samples: Samples = {}
    families: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family.samples
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, families


def scrape_with(port: int, name: str) -> tuple[Samples, dict[str, list]] | None:
    """A scrape that has series `name`, or None."""
    scraped = scrape(port)
    return scraped if any(key[0] == name for key in scraped[0]) else None


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def produce(bootstrap: str, topic: str) -> list[int]:
    """MESSAGES records of VALUE_SIZE bytes, no key, uncompressed, alternating partitions;
    returns how many went to each partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "none",
                         "enable.idempotence": True})
    errors: list[object] = []
    for i in range(MESSAGES):
        producer.produce(topic, b"v" * VALUE_SIZE, partition=i % TOPIC_PARTITIONS,
                         on_delivery=lambda e, _m: e and errors.append(e))
    assert producer.flush(30) == 0
    assert errors == []
    return [MESSAGES // TOPIC_PARTITIONS] * TOPIC_PARTITIONS


def consume_and_commit(bootstrap: str, topic: str, group: str) -> tuple[Consumer, dict[int, int]]:
    """A group member that reads CONSUMED records and commits, per partition, the offset after
    the last one it read (0 where it read none). Returned open: its group stays Stable."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    next_offsets = dict.fromkeys(range(TOPIC_PARTITIONS), 0)
    read = 0

    def read_some() -> bool:
        nonlocal read
        for message in consumer.consume(CONSUMED - read, timeout=0.5):
            assert message.error() is None, message.error()
            next_offsets[message.partition()] = message.offset() + 1
            read += 1
        return read >= CONSUMED

    wait_until(read_some, 60, f"{CONSUMED} records to be consumed", interval_s=0)
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in next_offsets.items()], asynchronous=False)
    return consumer, next_offsets


def test_traffic_groups_and_partitions_show_in_the_metrics(metrics_broker: tuple[BrokerProcess, int]) -> None:
    broker, port = metrics_broker
    topic = create_topic(broker.bootstrap, "metered", partitions=TOPIC_PARTITIONS)
    per_partition = produce(broker.bootstrap, topic)
    consumer, committed = consume_and_commit(broker.bootstrap, topic, "metered-group")
    try:
        # A CreateTopics for a topic that exists: an answer carrying TOPIC_ALREADY_EXISTS.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        with pytest.raises(Exception, match="already exists"):
            admin.create_topics([NewTopic(topic, TOPIC_PARTITIONS, 1)])[topic].result(30)
        # The busy ratio needs two samples of the loop monitor (one a second).
        samples, families = wait_until(lambda: scrape_with(port, "kbroker_event_loop_busy_ratio"), 30,
                                       "the event loop's busy ratio")
    finally:
        consumer.close()

    # Messages in: exactly what was produced (idempotent: a retry would be a duplicate, not counted).
    assert value(samples, "kbroker_topic_messages_in_total", topic=topic) == MESSAGES
    # Bytes in counts whole record batches: the payload plus each batch's 61-byte header and
    # each record's few bytes of framing, under 5 % of 1000-byte values. The log holds exactly
    # those batches, so its size is the same number.
    bytes_in = value(samples, "kbroker_topic_bytes_in_total", topic=topic)
    payload = MESSAGES * VALUE_SIZE
    assert bytes_in is not None and payload <= bytes_in <= payload * 1.05
    log_sizes = [value(samples, "kbroker_log_size_bytes", topic=topic, partition=str(p))
                 for p in range(TOPIC_PARTITIONS)]
    assert sum(s or 0 for s in log_sizes) == bytes_in
    for p, count in enumerate(per_partition):
        assert value(samples, "kbroker_log_end_offset", topic=topic, partition=str(p)) == count
    # Bytes out: the consumer fetched at least what it read; no follower here.
    bytes_out = value(samples, "kbroker_topic_bytes_out_total", topic=topic)
    assert bytes_out is not None and bytes_out >= CONSUMED * VALUE_SIZE
    assert value(samples, "kbroker_topic_replication_bytes_out_total", topic=topic) == 0

    # Lag: what the group has not committed, per partition and in all.
    lags = {p: value(samples, "kbroker_consumer_group_lag", group="metered-group", topic=topic, partition=str(p))
            for p in range(TOPIC_PARTITIONS)}
    assert lags == {p: per_partition[p] - committed[p] for p in range(TOPIC_PARTITIONS)}
    assert sum(lags.values()) == MESSAGES - CONSUMED  # type: ignore[arg-type]
    assert value(samples, "kbroker_consumer_groups", protocol="classic", state="Stable") == 1

    # Requests and their errors.
    for request in ("Produce", "Fetch", "Metadata", "OffsetCommit", "JoinGroup"):
        assert (value(samples, "kbroker_requests_total", request=request) or 0) > 0, request
    assert value(samples, "kbroker_request_errors_total", request="CreateTopics", error="TOPIC_ALREADY_EXISTS") == 1
    assert value(samples, "kbroker_request_errors_total", request="Produce", error="NOT_LEADER_OR_FOLLOWER") is None
    produce_count = value(samples, "kbroker_request_total_time_seconds_count", request="Produce")
    assert produce_count == value(samples, "kbroker_requests_total", request="Produce")

    # Partitions: the topic's and __consumer_offsets', all led here, all fully replicated.
    hosted = TOPIC_PARTITIONS + OFFSETS_PARTITIONS
    assert value(samples, "kbroker_partitions") == hosted
    assert value(samples, "kbroker_leader_partitions") == hosted
    for name in ("kbroker_under_replicated_partitions", "kbroker_offline_partitions",
                 "kbroker_under_min_isr_partitions"):
        assert value(samples, name) == 0, name
    assert value(samples, "kbroker_active_controller_count") == 1
    assert (value(samples, "kbroker_connections", listener="PLAINTEXT") or 0) >= 1
    assert 0 <= (value(samples, "kbroker_event_loop_busy_ratio") or -1) <= 1

    # Every histogram: cumulative buckets never decrease and end at the count.
    histograms = [name for name, series in families.items() if any(s.name.endswith("_bucket") for s in series)]
    assert {"kbroker_request_total_time_seconds", "kbroker_request_queue_time_seconds",
            "kbroker_response_send_time_seconds", "kbroker_event_loop_lag_seconds",
            "kbroker_log_flush_time_seconds"} <= set(histograms)
    for name in histograms:
        by_labels: dict[tuple, list[tuple[float, float]]] = {}
        counts: dict[tuple, float] = {}
        for sample in families[name]:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            if sample.name.endswith("_bucket"):
                by_labels.setdefault(labels, []).append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_count"):
                counts[labels] = sample.value
        for labels, buckets in by_labels.items():
            cumulative = [count for _, count in sorted(buckets)]
            assert cumulative == sorted(cumulative), (name, labels)
            assert cumulative[-1] == counts[labels], (name, labels)


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, query) of conf/grafana/kbroker-dashboard.json, with Grafana's variables
    given values Prometheus takes."""
    dashboard = json.loads((Path(__file__).parents[2] / "conf/grafana/kbroker-dashboard.json").read_text())
    return [(panel["title"], target["expr"].replace("$__rate_interval", "1m").replace("$instance", ".*"))
            for panel in dashboard["panels"] for target in panel["targets"]]


def require_prometheus() -> str:
    """Debian's prometheus binary, or a skip where it is not installed; except in CI, whose
    scripts/test.sh installs it."""
    found = shutil.which("prometheus")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the Prometheus scrape test: scripts/test.sh installs prometheus")
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    return found


def test_prometheus_scrapes_the_endpoint(metrics_broker: tuple[BrokerProcess, int], tmp_path: Path) -> None:
    binary = require_prometheus()
    _, metrics_port = metrics_broker
    web_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: kbroker\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{metrics_port}']\n")
    log_path = tmp_path / "prometheus.log"
    with log_path.open("wb") as log_file:
        prometheus = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{web_port}"], stdout=log_file, stderr=subprocess.STDOUT)
        try:
            def scraped() -> str | None:
                if prometheus.poll() is not None:
                    raise AssertionError(f"prometheus exited:\n{log_path.read_text()[-3000:]}")
                query = urllib.parse.urlencode({"query": "kbroker_active_controller_count"})
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/api/v1/query?{query}",
                                                timeout=5) as answer:
                        result = json.load(answer)["data"]["result"]
                except OSError:
                    return None  # not listening yet
                return result[0]["value"][1] if result else None

            assert wait_until(scraped, 60, "Prometheus to have scraped kbroker", interval_s=0.5) == "1"
            # Every query of the Grafana dashboard in conf/ is one Prometheus evaluates.
            for title, expr in dashboard_queries():
                query = urllib.parse.urlencode({"query": expr})
                with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/api/v1/query?{query}", timeout=5) as answer:
                    assert json.load(answer)["status"] == "success", (title, expr)
        finally:
            prometheus.terminate()
            prometheus.wait(30)


def test_a_bad_metrics_listener_stops_the_start(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "bad", overrides={"metrics.listener": "127.0.0.1:9404"})
    with pytest.raises(LaunchError):
        broker.start()
    assert "invalid value '127.0.0.1:9404' for metrics.listener" in broker.log_text()


def test_a_taken_metrics_port_stops_the_start(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = BrokerProcess(tmp_path / "taken", overrides={"metrics.listener": f"http://127.0.0.1:{port}"})
        with pytest.raises(LaunchError):
            broker.start()
    assert f"refusing to start: metrics.listener=http://127.0.0.1:{port}" in broker.log_text()
    assert "Address already in use" in broker.log_text()
