"""The archive (docs/archive.md) against the local log: reading a topic from offset 0 when its
segments are in the object store, against reading the same records from the broker's disk after
a cold start. kbroker alone (the mock cluster and this Kafka have no archive to compare).

Each case starts an S3-compatible server on this machine (moto's, as a process: `moto[server]`,
installed with the test extra) and a kbroker that archives to it, and preloads two topics with
the same records: `local` (plain) and `tiered` (remote.storage.enable, a local window of no
segment). Once every closed segment of `tiered` is archived and gone from its disk,
each round restarts the broker with its log files evicted from the page cache (which also
empties the archive's chunk cache, rebuilt at each start) and reads both topics from offset 0
with a fresh confluent-kafka consumer each, alternating which goes first. The ratio is per
round, the archived read's rate over the local one's, then the median.
"""

from __future__ import annotations

import time
from typing import Any

from kbroker.bench.benchmarks import MB, BenchError, Env, _median, topic_name
from kbroker.bench.servers import KbrokerServer, Server, new_data_dir
from kbroker.bench.views import read_once
from kbroker.bench.workers import run_workers
from kbroker.s3_server import S3Server

BUCKET = "kbroker-bench-archive"
KEY = "bench"  # moto checks no credentials; explicit ones keep boto3 from looking for real ones
# Segments of 16 MiB, fewer for small runs (most of a read should be archived), never below two
# of the preload's batches of about 1 MB (a batch larger than segment.bytes is refused).
SEGMENT_BYTES = 16 << 20
MIN_SEGMENT_BYTES = 2 << 20
READER_CONFIG = {"fetch.queue.backoff.ms": 10}  # as the views benchmark: the broker, not the back-off


def create_bucket(endpoint: str) -> None:
    import boto3

    boto3.session.Session().client("s3", endpoint_url=endpoint, region_name="us-east-1",
                                   aws_access_key_id=KEY, aws_secret_access_key=KEY).create_bucket(Bucket=BUCKET)


def archive_overrides(endpoint: str) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true", "remote.log.storage.s3.endpoint": endpoint,
        "remote.log.storage.s3.bucket": BUCKET, "remote.log.storage.s3.access.key.id": KEY,
        "remote.log.storage.s3.secret.access.key": KEY, "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500", "log.initial.task.delay.ms": "0",
    }


def archive_case(env: Env, work_dir: str | None, records: int, message_size: int,
                 preload_config: dict[str, Any]) -> dict[str, Any]:
    label = f"archive {message_size} B {records:,} records"
    data_dir = new_data_dir(work_dir, "kbroker-archive-bench-")
    s3 = S3Server(data_dir.parent / f"{data_dir.name}-moto.log")
    try:
        s3.start()
    except RuntimeError as e:
        raise BenchError(str(e)) from None
    server: Server | None = None
    try:
        create_bucket(s3.endpoint)
        server = KbrokerServer(data_dir, overrides=archive_overrides(s3.endpoint))
        with env.ui.step(f"{label} · starting kbroker archiving to {s3.endpoint}"):
            server.start()
        local, tiered = topic_name("local"), topic_name("tiered")
        segment_bytes = max(MIN_SEGMENT_BYTES, min(SEGMENT_BYTES, records * message_size // 8))
        topic_configs = {"segment.bytes": str(segment_bytes), "file.delete.delay.ms": "0"}
        server.create_topics({local: 1}, topic_configs)
        # A local window of nothing: every archived segment leaves the disk, only the active one stays.
        server.create_topics({tiered: 1}, {**topic_configs, "remote.storage.enable": "true",
                                           "local.retention.bytes": "0"})
        with env.ui.step(f"{label} · preloading"):
            for topic in (local, tiered):
                (produced,) = run_workers([("produce", {
                    "bootstrap": server.bootstrap, "topic": topic, "partitions": 1, "message_size": message_size,
                    "duration_s": 0, "config": preload_config, "max_messages": records})])
                if produced["acked"] != records:
                    raise BenchError(f"preload of {topic}: {produced['acked']} of {records} acknowledged "
                                     f"({produced['first_error']})")
        archived_s = _wait_archived(env, label, server, tiered)
        source_mb = records * message_size / MB
        rounds = []
        for index in range(env.runs):
            order = [local, tiered] if index % 2 == 0 else [tiered, local]
            server.restart(drop_page_cache=True)
            results = {}
            for topic in order:
                name = "archived" if topic == tiered else "local"
                with env.ui.step(f"{label} · {name} cold read · run {index + 1}/{env.runs}") as step:
                    results[name] = read_once(server, topic, 1, READER_CONFIG, source_mb, records, step)
                env.ui.log(f"  {label} · {name} · run {index + 1}: {results[name]['mb_per_s']:.1f} MB/s")
            rounds.append(results)
    finally:
        if server is not None:
            server.close()
        s3.stop()
    rates = {name: [r[name]["mb_per_s"] for r in rounds] for name in ("local", "archived")}
    return {
        "name": label,
        "params": {"records": records, "message_size": message_size, "segment_bytes": segment_bytes,
                   "preload_config": preload_config, "reader_config": READER_CONFIG},
        "archived_after_s": archived_s,
        "runs": rounds,
        "median": {name: _median(values) for name, values in rates.items()},
        "ratio": _median([r["archived"]["mb_per_s"] / r["local"]["mb_per_s"] for r in rounds]),
    }


def _wait_archived(env: Env, label: str, server: Server, topic: str, timeout_s: float = 600) -> float:
    """Until the tiered topic has only its active segment on disk (every closed one archived and
    deleted locally); the seconds that took."""
    directory = server.log_dirs[0] / f"{topic}-0"
    started = time.monotonic()
    with env.ui.step(f"{label} · archiving"):
        while time.monotonic() - started < timeout_s:
            segments = sorted(directory.glob("*.log"))
            if len(segments) == 1 and int(segments[0].stem) > 0:  # all but the active one archived and gone
                return round(time.monotonic() - started, 2)
            time.sleep(0.5)
    raise BenchError(f"{topic} was not archived within {timeout_s} s")


def targets(cases: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [{"name": f"archived reads / local cold reads ({case['name']})", "goal": "≥ 0.5×",
             "measured": round(case["ratio"], 3), "unit": "×", "met": case["ratio"] >= 0.5, "note": case["name"]}
            for case in cases or []]


def summary_lines(cases: list[dict[str, Any]] | None) -> list[str]:
    lines: list[str] = []
    for case in cases or []:
        lines += [f"## {case['name']}", "",
                  "A topic read from offset 0 after a cold start: from the archive (moto's S3 server on this "
                  "machine) and from the local log; ratios per round, then the median.", "",
                  "| read | MB/s (median) | runs |", "|---|---|---|"]
        for name in ("local", "archived"):
            runs = ", ".join(f"{r[name]['mb_per_s']:.1f}" for r in case["runs"])
            lines.append(f"| {name} | {case['median'][name]:.1f} | {runs} |")
        lines += ["", f"Archived / local: **{case['ratio']:.2f}×**; archiving the preload took "
                  f"{case['archived_after_s']} s.", ""]
    return lines
