"""The console's chart series from scrapes of metrics endpoints: totals summed over label sets
and brokers, rates between scrapes, latency quantiles from histogram buckets."""

from __future__ import annotations

import pytest

from kbroker.console.metrics_history import (
    BYTES_IN,
    BYTES_OUT,
    REQUEST_TIME,
    Histogram,
    MetricsHistory,
    Scrape,
    parse_totals,
    quantile_between,
)


def exposition(bytes_in: dict[str, float], bytes_out: float, produce_buckets: dict[str, float]) -> str:
    lines = [f"# TYPE {BYTES_IN}_total counter"]
    lines += [f'{BYTES_IN}_total{{topic="{t}"}} {v}' for t, v in bytes_in.items()]
    lines += [f"# TYPE {BYTES_OUT}_total counter", f'{BYTES_OUT}_total{{topic="a"}} {bytes_out}']
    lines += [f"# TYPE {REQUEST_TIME} histogram"]
    lines += [f'{REQUEST_TIME}_bucket{{request="Produce",le="{le}"}} {v}' for le, v in produce_buckets.items()]
    count = produce_buckets["+Inf"]
    lines += [f'{REQUEST_TIME}_count{{request="Produce"}} {count}', f'{REQUEST_TIME}_sum{{request="Produce"}} 1.0',
              f'{REQUEST_TIME}_bucket{{request="Metadata",le="+Inf"}} 99', f'{REQUEST_TIME}_count{{request="Metadata"}} 99',
              f'{REQUEST_TIME}_sum{{request="Metadata"}} 1.0']
    return "\n".join(lines) + "\n"


def test_totals_are_summed_over_topics_and_endpoints() -> None:
    scrape = parse_totals(exposition({"a": 100, "b": 50}, 70, {"0.001": 1, "+Inf": 2}), 0.0)
    parse_totals(exposition({"a": 10}, 5, {"0.001": 3, "+Inf": 3}), 0.0, scrape)
    assert (scrape.bytes_in, scrape.bytes_out) == (160, 75)
    assert scrape.requests["Produce"].buckets == {0.001: 4, float("inf"): 5}
    assert scrape.requests["Produce"].count == 5
    assert "Metadata" not in scrape.requests  # only the charted APIs are kept


def test_quantile_is_interpolated_inside_its_bucket_between_two_scrapes() -> None:
    before = Histogram({0.001: 10, 0.01: 10, 0.1: 10, float("inf"): 10}, 10)
    # 100 requests since: 50 under 1 ms, 40 in (1, 10] ms, 10 in (10, 100] ms.
    after = Histogram({0.001: 60, 0.01: 100, 0.1: 110, float("inf"): 110}, 110)
    assert quantile_between(before, after, 0.5) == pytest.approx(0.001)
    assert quantile_between(before, after, 0.7) == pytest.approx(0.001 + 0.009 * (20 / 40))
    assert quantile_between(before, after, 0.99) == pytest.approx(0.01 + 0.09 * (9 / 10))
    assert quantile_between(after, after, 0.99) is None  # no request between them


def test_quantile_beyond_the_last_bucket_is_that_bucket_bound() -> None:
    after = Histogram({0.5: 1, float("inf"): 100}, 100)
    assert quantile_between(Histogram(), after, 0.99) == 0.5


def test_series_gives_rates_per_interval_and_hides_counter_resets() -> None:
    history = MetricsHistory([])
    history.scrapes.extend([Scrape(10.0, 0, 0), Scrape(12.0, 2000, 500), Scrape(13.0, 100, 0)])
    series = history.series(wall_now_ms=1_000_000, monotonic_now=13.0)
    assert series["bytes_in_per_s"] == [1000.0, 0.0]  # the broker restarted before the third scrape
    assert series["bytes_out_per_s"] == [250.0, 0.0]
    assert series["times_ms"] == [999_000, 1_000_000]
    assert series["latency_ms"]["Produce"] == [None, None]


def test_an_unreachable_endpoint_is_reported_not_raised() -> None:
    history = MetricsHistory(["http://127.0.0.1:9/metrics"])  # the discard port: nothing listens
    history.scrape(1.0)
    assert "http://127.0.0.1:9/metrics" in history.errors
    assert len(history.scrapes) == 1


def test_the_poller_reports_an_unreachable_cluster_and_keeps_serving() -> None:
    from kbroker.console.server import ClusterPoller
    from kbroker.ports import free_port

    poller = ClusterPoller(f"127.0.0.1:{free_port()}", [], refresh_s=1.0)  # nothing listens there
    poller.poll_once()
    state = poller.state()
    assert state["snapshot"] is None
    assert state["error"] is not None and state["error"].startswith("cannot read the cluster")
