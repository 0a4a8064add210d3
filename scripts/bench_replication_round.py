"""How long one acks=all replication round takes: 1 KB produces with one request in flight
(linger.ms=0, max.in.flight=1) to a fresh 3-broker cluster that has a consumer group's
`__consumer_offsets`, as p50/p90/p99. Given several checkouts (e.g. a git worktree of an
older commit), their clusters are measured alternately in one run, so the ratios hold on a
noisy machine.

    .venv/bin/python scripts/bench_replication_round.py . ../kbroker-old --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.client import Client

TOPIC = "round"


def kbroker(checkout: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    subprocess.run([sys.executable, "-m", "kbroker.cli.main", *args], cwd=checkout, env=env, check=True,
                   capture_output=True)


def wait_for_full_isr(bootstrap: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with Client(bootstrap) as client:
            partitions = client.metadata([TOPIC], refresh=True).topic(TOPIC).partitions.values()
            if partitions and all(len(p.isr) == 3 and p.leader >= 0 for p in partitions):
                return
        time.sleep(0.1)
    raise TimeoutError("the ISR did not fill")


def measure(bootstrap: str, messages: int) -> dict[str, float]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": "round"})  # creates __consumer_offsets
    group.subscribe([TOPIC])
    group.poll(3)
    group.close()
    wait_for_full_isr(bootstrap)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "max.in.flight": 1,
                         "enable.idempotence": False})
    payload = b"x" * 1024
    latencies = []
    for i in range(messages + 50):  # the first 50 warm up
        started, done = time.perf_counter(), []
        producer.produce(TOPIC, payload, on_delivery=lambda error, _m, done=done: done.append(error))
        while not done:
            producer.poll(0.0005)
        if done[0] is not None:
            raise RuntimeError(done[0])
        if i >= 50:
            latencies.append((time.perf_counter() - started) * 1000)
    latencies.sort()
    return {f"p{q}": round(latencies[int(q / 100 * (len(latencies) - 1))], 2) for q in (50, 90, 99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkouts", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--messages", type=int, default=600)
    args = parser.parse_args()
    base = random.randrange(21000, 40000, 1000)  # ports of a stopped cluster may linger in TIME_WAIT
    results: dict[str, list[dict[str, float]]] = {str(c): [] for c in args.checkouts}
    for round_ in range(args.rounds):
        for i, checkout in enumerate(args.checkouts):
            port = base + 100 * round_ + 10 * i
            with tempfile.TemporaryDirectory(prefix="round-") as data:
                kbroker(checkout.resolve(), "cluster", "start", "--brokers", "3", "--data-dir", data,
                        "--base-port", str(port))
                try:
                    result = measure(",".join(f"127.0.0.1:{port + b}" for b in range(3)), args.messages)
                finally:
                    kbroker(checkout.resolve(), "cluster", "stop", "--data-dir", data)
            results[str(checkout)].append(result)
            print(checkout, result, flush=True)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
