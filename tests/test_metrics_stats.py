"""The metrics' plumbing: fixed-bucket histograms, error counting, the throttle hook, the
listener setting, the event-loop monitor and the collector's output format."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kbroker.config import BrokerConfig, ConfigError
from kbroker.metrics.listener import MetricsListener, MetricsListenerError, parse_metrics_listener
from kbroker.metrics.loop_monitor import LoopMonitor
from kbroker.metrics.stats import BrokerStats, Histogram, error_codes
from protocol.errors import ErrorCode


def test_histogram_puts_each_value_in_the_first_bucket_that_holds_it() -> None:
    histogram = Histogram((0.1, 1.0, 10.0))
    for value in (0.05, 0.1, 0.5, 1.0, 3.0, 99.0):
        histogram.observe(value)
    assert histogram.counts == [2, 2, 1, 1]  # a value on a bound is in that bound's bucket (le)
    buckets, total = histogram.snapshot()
    assert buckets == [("0.1", 2), ("1.0", 4), ("10.0", 5), ("+Inf", 6)]
    assert total == pytest.approx(103.65)


def test_an_empty_histogram_has_zero_buckets() -> None:
    buckets, total = Histogram((1.0,)).snapshot()
    assert buckets == [("1.0", 0), ("+Inf", 0)] and total == 0.0


def test_error_codes_are_found_at_every_depth_once_each() -> None:
    body = {"throttle_time_ms": 0, "responses": [
        {"name": "a", "partition_responses": [{"index": 0, "error_code": 0},
                                              {"index": 1, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER}]},
        {"name": "b", "partition_responses": [{"index": 0, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER},
                                              {"index": 1, "error_code": ErrorCode.CORRUPT_MESSAGE}]}]}
    assert error_codes(body) == {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.CORRUPT_MESSAGE}
    assert error_codes({"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "groups": []}) == {
        ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert error_codes({"error_code": 0, "responses": [{"partitions": [{"error_code": 0}]}]}) == set()
    assert error_codes(None) == set()


def test_record_errors_counts_an_answer_once_per_code() -> None:
    stats = BrokerStats()
    failing = {"responses": [{"partitions": [{"error_code": 6}, {"error_code": 6}, {"error_code": 2}]}]}
    stats.record_errors(0, failing)
    stats.record_errors(0, failing)
    stats.record_errors(0, {"responses": [{"partitions": [{"error_code": 0}]}]})
    assert stats.api(0).errors == {6: 2, 2: 2}


def test_throttle_hook_adds_answers_and_milliseconds_per_entity() -> None:
    stats = BrokerStats()
    stats.record_throttle("user", "alice", 120)
    stats.record_throttle("user", "alice", 30)
    stats.record_throttle("client-id", "app", 5)
    assert stats.throttles == {("user", "alice"): [2, 150], ("client-id", "app"): [1, 5]}


def test_a_deleted_topic_loses_its_series() -> None:
    stats = BrokerStats()
    stats.topic("t").bytes_in += 10
    stats.forget_topic("t")
    stats.forget_topic("never-seen")
    assert stats.topics == {}


@pytest.mark.parametrize(("text", "expected"), [
    ("http://0.0.0.0:9404", MetricsListener("0.0.0.0", 9404)),
    ("http://127.0.0.1:9404/", MetricsListener("127.0.0.1", 9404)),
    ("http://:9404", MetricsListener("", 9404)),
    ("http://[::1]:9404", MetricsListener("::1", 9404)),
    ("", None),
    ("  ", None),
])
def test_metrics_listener_values(text: str, expected: MetricsListener | None) -> None:
    assert parse_metrics_listener(text) == expected


@pytest.mark.parametrize("text", ["0.0.0.0:9404", "https://0.0.0.0:9404", "http://0.0.0.0", "http://host:99999",
                                  "http://host:9404/metrics", "http://host:port", "PLAINTEXT://h:1"])
def test_bad_metrics_listener_values_are_config_errors(text: str) -> None:
    with pytest.raises(MetricsListenerError):
        parse_metrics_listener(text)
    with pytest.raises(ConfigError, match="metrics.listener"):
        BrokerConfig({"metrics.listener": text})


def test_metrics_are_off_by_default() -> None:
    assert BrokerConfig({}).get("metrics.listener") is None
    assert BrokerConfig({"metrics.listener": "http://127.0.0.1:9404"}).get("metrics.listener") == \
        MetricsListener("127.0.0.1", 9404)


def test_loop_monitor_sees_a_busy_loop_and_an_idle_one() -> None:
    async def run() -> tuple[float | None, float]:
        monitor = LoopMonitor()
        monitor.install(asyncio.get_running_loop())
        assert monitor.measures_idle
        await asyncio.sleep(0.3)  # idle: the loop waits in select()
        idle_after_sleep = monitor.idle_seconds
        end = time.monotonic() + 0.3
        while time.monotonic() < end:  # busy: a callback holds the loop
            pass
        await asyncio.sleep(0)
        monitor._samples.append((time.monotonic(), monitor.idle_seconds))  # a sample now, not in a second
        ratio = monitor.busy_ratio()
        await monitor.stop()
        return ratio, idle_after_sleep

    ratio, idle = asyncio.run(run())
    assert idle >= 0.25
    assert ratio is not None and 0.3 < ratio < 0.8  # about half the 0.6 s was spent spinning


def test_collector_output_parses_with_monotonic_buckets() -> None:
    """The families of the counters, through prometheus_client's own text format and parser."""
    from kbroker.metrics.collector import BrokerCollector

    stats = BrokerStats()
    api = stats.api(0)
    api.requests = 3
    for value in (0.0002, 0.003, 2.0):
        api.total_time.observe(value)
    stats.record_errors(0, {"responses": [{"partitions": [{"error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER}]}]})
    stats.topic("orders").bytes_in = 1234
    stats.record_throttle("user", "alice", 1500)
    collector = BrokerCollector(None, stats, LoopMonitor())  # type: ignore[arg-type]  # no broker state read
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_CountersOnly(collector))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    assert [s.value for s in families["kbroker_requests"].samples] == [3]
    errors = families["kbroker_request_errors"].samples[0]
    assert errors.labels == {"request": "Produce", "error": "NOT_LEADER_OR_FOLLOWER"} and errors.value == 1
    buckets = [s for s in families["kbroker_request_total_time_seconds"].samples if s.name.endswith("_bucket")]
    values = [s.value for s in buckets]
    assert values == sorted(values) and values[-1] == 3
    assert [s.value for s in families["kbroker_topic_bytes_in"].samples] == [1234]
    throttle = [s for s in families["kbroker_throttle_time_seconds"].samples]
    assert throttle[0].labels == {"entity_type": "user", "entity": "alice"} and throttle[0].value == 1.5


class _CountersOnly:
    """The collector's sections that read only BrokerStats."""

    def __init__(self, collector: object) -> None:
        self.collector = collector

    def collect(self):  # noqa: ANN201
        c = self.collector
        yield from c._traffic()  # type: ignore[attr-defined]
        yield from c._requests()  # type: ignore[attr-defined]
        yield from c._throttles()  # type: ignore[attr-defined]
