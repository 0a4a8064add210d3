"""The web console in a real headless browser (Debian's Chromium, driven by Playwright) over a
real broker: a topic produced here shows with its offsets, a group's lag shows and falls after
the group consumes more, and the charts show the broker's own metrics.

With KBROKER_CONSOLE_SCREENSHOTS=DIR the screenshots are written there too (docs/console/
holds the ones the docs show).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kbroker.ports import free_port
from tests.brokers import BrokerProcess
from tests.conftest import create_topic

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Chromium's own background traffic finds no network here: it would retry it, many at a time.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 30_000


def _require_browser() -> None:
    missing = [] if os.path.exists(CHROMIUM) else [f"Chromium ({CHROMIUM})"]
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install 'kbroker[test]')")
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the console test; missing: {', '.join(missing)}")
        pytest.skip(f"missing: {', '.join(missing)}")


@pytest.fixture
def console(make_broker: Callable[..., BrokerProcess], tmp_path: Path) -> Iterator[tuple[str, BrokerProcess]]:
    """A broker with its metrics endpoint on, and `kbroker console` over it: (page URL, broker)."""
    _require_browser()
    metrics_port = free_port()
    broker = make_broker(**{"metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    with open(tmp_path / "console.err", "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "kbroker.cli.main", "console", "--bootstrap-server", broker.bootstrap,
             "--listen", "127.0.0.1:0", "--refresh-s", "0.5",
             "--metrics-url", f"http://127.0.0.1:{metrics_port}/metrics"],
            stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            assert process.stdout is not None
            line = process.stdout.readline()  # "kbroker console on http://HOST:PORT/", once it listens
            assert line.startswith("kbroker console on "), line + (tmp_path / "console.err").read_text()
            yield line.split()[-1], broker
        finally:
            process.terminate()
            process.wait(timeout=15)


def _produce(bootstrap: str, topic: str, count: int, size: int = 1000) -> dict[int, int]:
    """Send `count` records spread over the partitions; the log end offset of each partition."""
    from confluent_kafka import Producer

    ends: dict[int, int] = {}

    def delivered(error: object, message: object) -> None:
        assert error is None, error
        ends[message.partition()] = max(ends.get(message.partition(), 0), message.offset() + 1)  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"%06d" % i + b"x" * (size - 6), on_delivery=delivered)
    assert producer.flush(30) == 0
    return ends


def _consume_and_commit(bootstrap: str, topic: str, group: str, count: int) -> dict[int, int]:
    """Read `count` more records as `group`, commit after them and leave the group; the offsets
    committed, by partition (a partition it has read nothing of yet has none)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = 0
    while got < count:
        message = consumer.poll(10)
        assert message is not None, f"no record after {got} of {count}"
        assert message.error() is None, message.error()
        got += 1
    # Every partition read: its offset was stored as each record was returned.
    consumer.commit(asynchronous=False)
    partitions = consumer.committed([TopicPartition(topic, p) for p in range(2)], timeout=10)
    consumer.close()
    return {tp.partition: tp.offset for tp in partitions if tp.offset >= 0}


def _text_becomes(page: object, selector: str, expected: str) -> None:
    """Wait until the element's text is `expected` (the page redraws every refresh)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(  # type: ignore[attr-defined]
            "([selector, expected]) => document.querySelector(selector)?.textContent === expected",
            arg=[selector, expected], timeout=WAIT_MS)
    except PlaywrightTimeout:
        shown = page.eval_on_selector(selector, "e => e.textContent")  # type: ignore[attr-defined]
        state = page.evaluate("() => fetch('/api/state').then(r => r.text())")  # type: ignore[attr-defined]
        raise AssertionError(f"{selector} shows {shown!r}, not {expected!r}; the console's state: {state}") from None


def test_console_shows_topics_groups_lag_and_charts(console: tuple[str, BrokerProcess], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    url, broker = console
    topic = create_topic(broker.bootstrap, f"console-{uuid.uuid4().hex[:8]}", partitions=2)
    group = f"console-group-{uuid.uuid4().hex[:8]}"
    ends = _produce(broker.bootstrap, topic, 300)
    committed = _consume_and_commit(broker.bootstrap, topic, group, 100)

    shots = [tmp_path]
    if os.environ.get("KBROKER_CONSOLE_SCREENSHOTS"):
        shots.append(Path(os.environ["KBROKER_CONSOLE_SCREENSHOTS"]))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(url)
            page.wait_for_selector(f'[data-topic="{topic}"]', timeout=WAIT_MS)
            _text_becomes(page, f'[data-topic-messages="{topic}"]', "300")
            # Lag as Kafka's tools count it: over the partitions with a committed offset.
            _text_becomes(page, f'[data-group-lag="{group}"]', str(sum(ends[p] - o for p, o in committed.items())))
            # Bytes in and produce latency reach the charts (the page draws /api/state's series).
            page.wait_for_function(
                "() => fetch('/api/state').then(r => r.json()).then(s => s.metrics.bytes_in_per_s.some(v => v > 0)"
                " && s.metrics.latency_ms.Produce.some(v => v !== null))",
                timeout=WAIT_MS)
            for directory in shots:
                page.screenshot(path=str(directory / "console-lag.png"), full_page=True)

            committed = _consume_and_commit(broker.bootstrap, topic, group, 150)
            assert sum(committed.values()) == 250, committed
            _text_becomes(page, f'[data-group-lag="{group}"]', str(sum(ends[p] - o for p, o in committed.items())))
            for p, offset in committed.items():
                _text_becomes(page, f'[data-lag="{group}/{topic}-{p}"]', str(ends[p] - offset))
            for directory in shots:
                page.screenshot(path=str(directory / "console-after-consuming.png"), full_page=True)
        finally:
            browser.close()
    assert (tmp_path / "console-after-consuming.png").stat().st_size > 10_000
