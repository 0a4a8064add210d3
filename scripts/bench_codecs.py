"""What parsing and building the hot messages costs, in microseconds per message: the KStruct
interpreter against the compiled codecs (protocol/struct_compiler.py), in this process, on
the messages a producer and a consumer exchange with a broker (one topic, one partition).

    .venv/bin/python scripts/bench_codecs.py --rounds 20000
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from typing import Any

from protocol.messages import fetch, produce
from protocol.primitives import KStruct, SegmentedWriter, build_context, parse_context
from protocol.struct_compiler import builder, parser

CASES: dict[str, tuple[KStruct, dict[str, Any]]] = {
    "ProduceRequest v9": (produce.REQUEST[9], {
        "transactional_id": None, "acks": -1, "timeout_ms": 30000,
        "topic_data": [{"name": "bench", "partition_data": [{"index": 0, "records": b"r" * 40000}]}]}),
    "ProduceResponse v9": (produce.RESPONSE[9], {
        "throttle_time_ms": 0, "responses": [{"name": "bench", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": 5, "log_append_time_ms": -1, "log_start_offset": 0}]}]}),
    "FetchRequest v12": (fetch.REQUEST[12], {
        "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic": "bench", "partitions": [
            {"partition": 0, "current_leader_epoch": 0, "fetch_offset": 1000, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1048576}]}]}),
    "FetchResponse v12": (fetch.RESPONSE[12], {
        "throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "bench", "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
             "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
             "records": b"x" * 100}]}]}),
}


def per_call_us(rounds: int, call: Callable[[], object]) -> float:
    started = time.perf_counter()
    for _ in range(rounds):
        call()
    return (time.perf_counter() - started) / rounds * 1e6


def timings(con: KStruct, value: dict[str, Any], rounds: int) -> list[float]:
    """Microseconds per parse and build, interpreted then compiled."""
    wire = SegmentedWriter()
    con._build(value, wire, build_context(), "")
    data = wire.getvalue()
    view, parse, build = memoryview(data), parser(con), builder(con)
    return [
        per_call_us(rounds, lambda: con._parsereport(io.BytesIO(data), parse_context(), "")),
        per_call_us(rounds, lambda: parse(view, 0, parse_context(), False)),
        per_call_us(rounds, lambda: con._build(value, SegmentedWriter(), build_context(), "")),
        per_call_us(rounds, lambda: build(value, SegmentedWriter(), build_context())),
    ]


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    arguments.add_argument("--rounds", type=int, default=20000)
    rounds = arguments.parse_args().rounds
    print("| message | parse, interpreted | parse, compiled | build, interpreted | build, compiled |")
    print("| --- | --- | --- | --- | --- |")
    for name, (con, value) in CASES.items():
        print(f"| {name} | " + " | ".join(f"{t:.1f} µs" for t in timings(con, value, rounds)) + " |")


if __name__ == "__main__":
    main()
