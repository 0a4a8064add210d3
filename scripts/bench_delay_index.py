"""What a million pending delayed records cost: memory per record, snapshot size, restart time.

Builds N pending records (due times spread over 40 days) by feeding real pending batches to a
DelayIndex, as a leader's appends or a log load would; then writes a snapshot, loads it the way
a restart does, and reports:

- bytes per pending record of the index and its timing wheel (tracemalloc, a separate build);
- the time to feed the batches, to write the snapshot, and to load it (read + the wheel);
- the time to hand out every record once they are all due.

    PYTHONPATH=$PWD .venv/bin/python scripts/bench_delay_index.py --records 1000000
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

from kbroker.delay.delay_index import DelayIndex
from kbroker.delay.delay_snapshot import load_index, write_snapshot
from kbroker.delay.pending_batches import encode_pending_batch
from protocol.record_batch import Record

NOW = 1_700_000_000_000
FORTY_DAYS_MS = 40 * 86_400_000
BATCH = 100
MEMORY_BUDGET_BYTES = 100


def pending_batches(count: int) -> list[tuple[int, bytes]]:
    """(base offset, pending batch) of BATCH records of 100-byte values, dues spread over 40 days."""
    batches = []
    for base in range(0, count, BATCH):
        size = min(BATCH, count - base)
        records = [Record(i, NOW, b"key-%d" % (base + i), b"v" * 100) for i in range(size)]
        dues = [NOW + 1 + ((base + i) * 7919) % FORTY_DAYS_MS for i in range(size)]
        batches.append((base, encode_pending_batch(records, dues)))
    return batches


def build(batches: list[tuple[int, bytes]]) -> DelayIndex:
    index = DelayIndex("bench", 0, clock=lambda: NOW)
    for base, batch in batches:
        index.on_batch(base, batch)
    return index


def bytes_per_record(batches: list[tuple[int, bytes]], count: int) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        index = build(batches)
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert index.pending_count == count
    return used / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    count = args.records
    batches = pending_batches(count)
    report: dict[str, float | int] = {"records": count}

    started = time.perf_counter()
    index = build(batches)
    report["feed_batches_s"] = round(time.perf_counter() - started, 3)

    with tempfile.TemporaryDirectory() as directory:
        started = time.perf_counter()
        path = write_snapshot(Path(directory), index.state())
        report["snapshot_write_s"] = round(time.perf_counter() - started, 3)
        report["snapshot_bytes"] = path.stat().st_size
        del index
        gc.collect()

        started = time.perf_counter()
        loaded = load_index(Path(directory), "bench", 0, log_end_offset=count, clock=lambda: NOW)
        report["snapshot_load_s"] = round(time.perf_counter() - started, 3)
    assert loaded.pending_count == count

    started = time.perf_counter()
    handed_out = 0
    while due := loaded.collect_due(NOW + FORTY_DAYS_MS + 1, limit=10_000):
        handed_out += len(due)
    report["collect_all_due_s"] = round(time.perf_counter() - started, 3)
    assert handed_out == count
    del loaded
    gc.collect()

    report["bytes_per_pending_record"] = round(bytes_per_record(batches, count), 1)
    print(json.dumps(report, indent=2))
    if report["bytes_per_pending_record"] > MEMORY_BUDGET_BYTES:
        raise SystemExit(f"over the budget of {MEMORY_BUDGET_BYTES} bytes a pending record")


if __name__ == "__main__":
    main()
