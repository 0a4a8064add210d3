"""request_percentage quotas on a real broker: a client whose requests take more of the
broker's time than its quota allows is told (throttle_time_ms) and held back (its connection
muted), while another client id is not; the throttling shows in the metrics."""

from __future__ import annotations

import time
from collections.abc import Callable

from kbroker.client import Client
from kbroker.ports import free_port
from tests.brokers import BrokerProcess
from tests.conftest import create_topic
from tests.integration.test_metrics import scrape, value
from tests.rawclient import RawClient

METADATA = 3
RUN_S = 3.0


def _metadata_loop(bootstrap: str, client_id: str) -> tuple[int, list[int]]:
    """Metadata of every topic, one after another for RUN_S: (answers, their throttle times)."""
    throttles = []
    with RawClient(bootstrap, timeout=30, client_id=client_id) as client:
        deadline = time.monotonic() + RUN_S
        while time.monotonic() < deadline:
            response = client.request(METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})
            throttles.append(response.throttle_time_ms)
    return len(throttles), throttles


def test_a_client_over_its_request_percentage_is_throttled(make_broker: Callable[..., BrokerProcess]) -> None:
    metrics_port = free_port()
    broker = make_broker(**{"quota.window.num": "2", "quota.window.size.seconds": "1",
                            "metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    for i in range(20):  # Metadata of 200 partitions: a request of a millisecond or more
        create_topic(broker.bootstrap, f"request-quota-{i:02d}", partitions=10)
    with Client(broker.bootstrap) as client:
        [result] = client.alter_client_quotas([((("client-id", "busy"),), {"request_percentage": 1.0})])
        assert result.error_code == 0, result

    free_count, free_throttles = _metadata_loop(broker.bootstrap, "free")
    busy_count, busy_throttles = _metadata_loop(broker.bootstrap, "busy")
    print(f"free: {free_count} answers, busy (1 %): {busy_count} answers, "
          f"{sum(1 for t in busy_throttles if t)} throttled, max {max(busy_throttles)} ms")
    assert not any(free_throttles)
    assert max(busy_throttles) > 0
    assert max(busy_throttles) <= 1000  # at most one quota window
    assert busy_count < free_count / 2, (busy_count, free_count)  # muted, not only told
    samples, _ = scrape(metrics_port)
    assert (value(samples, "kbroker_throttled_requests_total", entity_type="client-id", entity="busy") or 0) > 0
    assert value(samples, "kbroker_throttled_requests_total", entity_type="client-id", entity="free") is None
