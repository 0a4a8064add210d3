"""Smoke test of `kbroker bench`: every benchmark runs with tiny sizes and writes sensible JSON.

It checks the harness (processes, references, JSON, ratios), not kbroker's performance: no number
is compared with a target. Produce, latency and the partition sweep measure the session's broker
(--bootstrap); the benchmarks that restart or configure a broker start their own, and so do the
cluster cases (--brokers 3: a ZooKeeper and three brokers against the mock cluster with three).

Apache Kafka, the second reference, costs a JVM start per command, so only consume (which also
restarts it cold) and latency (a consumer group) measure it; the others run with --no-kafka.
Without the distribution (../shared/kafka-3.9.0 or KBROKER_KAFKA_HOME) those two check that the
run says why it skipped Kafka; in CI its absence fails, as in compat_tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kbroker.bench.ceiling import replicate_for
from kbroker.bench.kafka_reference import kafka_home
from tests.brokers import PROJECT_ROOT, BrokerProcess
from tests.conftest import require_zookeeper


def kafka_expected() -> bool:
    """Whether a run that asks for Apache Kafka must measure it: the distribution and a JVM are
    here. In CI they must be (its absence fails, as in compat_tests)."""
    home, reason = kafka_home()
    available = home is not None and shutil.which("java") is not None
    if not available and os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI must measure the Apache Kafka reference, but: {reason or 'no java on PATH'}")
    return available


def bench(tmp_path: Path, name: str, *args: str, broker: BrokerProcess | None = None,
          kafka: bool = False) -> dict[str, Any]:
    out = tmp_path / name
    command = [sys.executable, "-m", "kbroker.cli.main", "bench", *args, "--out", str(out), "--runs", "1",
               "--quiet", "--work-dir", str(tmp_path)]
    if not kafka:
        command.append("--no-kafka")
    if broker is not None:
        assert broker.proc is not None
        command += ["--bootstrap", broker.bootstrap, "--broker-pid", str(broker.proc.pid)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=PROJECT_ROOT)
    assert result.returncode == 0, result.stderr[-4000:]
    assert (out / "summary.md").exists()
    results = json.loads((out / "results.json").read_text())
    assert results["schema"] == "kbroker-bench/1"
    assert results["machine"]["cpus"] >= 1
    assert ("kafka" in results["skipped"]) != ("kafka" in results.get("servers", {}))
    if kafka and kafka_expected():
        assert results["servers"]["kafka"].startswith("Apache Kafka 3.9.0 ("), results["servers"]
    elif not kafka:
        assert results["skipped"]["kafka"] == "--no-kafka: the Apache Kafka reference is skipped"
    return results


def check_case(case: dict[str, Any], metrics: list[str], references: tuple[str, ...] = ("mock",)) -> None:
    """One run of kbroker and each reference, every metric measured. A produce case against a
    broker the benchmark started also has the write ceiling (checked where it is the point)."""
    ceilings = {"ceiling", "replication-ceiling"}
    assert set(case["servers"]) - ceilings == {"kbroker", *references} - ceilings
    for name, server in case["servers"].items():
        assert len(server["runs"]) == 1
        for metric in metrics:
            if name not in ceilings or metric in ("mb_per_s", "msgs_per_s"):
                assert server["median"][metric] > 0, (metric, server)
    for reference in references:
        for metric in metrics:
            assert case["ratios"][reference][metric] > 0, (reference, metric)


def references(kafka: bool) -> tuple[str, ...]:
    return ("mock", "kafka") if kafka and kafka_expected() else ("mock",)


def test_produce(tmp_path: Path, broker: BrokerProcess) -> None:
    results = bench(tmp_path, "produce", "produce", "--message-size", "100", "1024", "--duration", "0.3",
                    "--partitions", "2", broker=broker)
    assert [c["params"]["message_size"] for c in results["produce"]] == [100, 1024]
    for case in results["produce"]:
        check_case(case, ["mb_per_s", "msgs_per_s", "server_cpu", "client_cpu"])
        assert case["client_config"]["acks"] == "1"
    target = next(t for t in results["targets"] if t["name"].startswith("produce 1 KB"))
    assert target["measured"] > 0 and target["met"] in (True, False)
    if importlib.util.find_spec("matplotlib") is not None:  # the `bench` extra; CI installs `test` only
        assert results["plots"] == ["throughput-vs-message-size.png"]
        assert (tmp_path / "produce" / "throughput-vs-message-size.png").stat().st_size > 0


def test_produce_beside_the_write_ceiling(tmp_path: Path) -> None:
    """A broker the benchmark starts has a log directory: a bare write loop there is measured
    in the same alternation, and the produce result is given as a share of it."""
    results = bench(tmp_path, "ceiling", "produce", "--duration", "0.3")
    (case,) = results["produce"]
    check_case(case, ["mb_per_s", "msgs_per_s"], references=("mock", "ceiling"))
    assert case["servers"]["ceiling"]["runs"][0]["server_cpu"] is None
    target = next(t for t in results["targets"] if "write ceiling" in t["name"])
    assert target["measured"] == case["ratios"]["ceiling"]["mb_per_s"] and target["met"] in (True, False)
    half_mock = next(t for t in results["targets"] if t["name"] == "produce 1 KB, acks=1, one producer")
    assert "× the write ceiling" in half_mock["note"]  # whether 0.5× mock is within the disk's reach
    assert "kbroker/ceiling" in (tmp_path / "ceiling" / "summary.md").read_text()


def test_a_variant_started_with_another_property(tmp_path: Path) -> None:
    """--compare-override: a second kbroker with one more property (here its metrics endpoint
    on), measured in the same alternation, with its ratio to the mock."""
    results = bench(tmp_path, "variant", "produce", "--duration", "0.3",
                    "--compare-override", "metrics.listener=http://127.0.0.1:0")
    (case,) = results["produce"]
    assert case["servers"]["kbroker-variant"]["median"]["mb_per_s"] > 0
    assert case["ratios"]["kbroker-variant"]["mb_per_s"] > 0  # kbroker / the variant, in the same run
    assert "--override metrics.listener=http://127.0.0.1:0" in results["servers"]["kbroker-variant"]
    assert "--override" not in results["servers"]["kbroker"]


def test_consume_from_page_cache_and_cold(tmp_path: Path) -> None:
    results = bench(tmp_path, "consume", "consume", "--partitions", "2", "--mib-per-partition", "0.1",
                    "--passes", "2", kafka=True)
    cache, cold = results["consume"]
    assert not cache["params"]["cold"] and cold["params"]["cold"]
    servers = references(kafka=True)
    for case in (cache, cold):
        check_case(case, ["mb_per_s", "msgs_per_s", "first_message_ms"], servers)
    on_disk = ["kbroker", *(["kafka"] if "kafka" in servers else [])]  # the mock keeps its data in memory
    for server in on_disk:
        assert cold["servers"][server]["runs"][0]["restart_s"] > 0, server  # restarted with a cold page cache
        # Two passes over two partitions.
        assert cache["servers"][server]["runs"][0]["messages"] == 2 * 2 * cache["params"]["messages_per_partition"]


def test_latency(tmp_path: Path, broker: BrokerProcess) -> None:
    results = bench(tmp_path, "latency", "latency", "--rate", "400", "--latency-duration", "0.5", "--warmup",
                    "0.2", broker=broker, kafka=True)
    (case,) = results["latency"]
    servers = references(kafka=True)
    check_case(case, ["p50_ms", "p99_ms", "p999_ms", "max_ms"], servers)
    for server in ("kbroker", *servers):
        run = case["servers"][server]["runs"][0]
        assert run["samples"] > 0 and run["p50_ms"] <= run["p99_ms"] <= run["max_ms"]
        assert case["cdf"][server][-1][1] == 1.0
        # A step is 100 ms of messages at 400 msg/s: 40 of them; the largest step is the run's maximum.
        timeline = run["max_ms_per_100ms"]
        assert len(timeline) == -(-run["samples"] // 40) and max(timeline) == run["max_ms"]
    assert any(t["name"].startswith("end-to-end") for t in results["targets"])


def test_partition_sweep(tmp_path: Path, broker: BrokerProcess) -> None:
    results = bench(tmp_path, "partitions", "partitions", "--counts", "1", "3", "--duration", "0.3",
                    broker=broker)
    assert [c["params"]["partitions"] for c in results["partitions"]] == [1, 3]
    for case in results["partitions"]:
        check_case(case, ["mb_per_s", "msgs_per_s"])
        assert case["params"]["keyed"]


def test_memory(tmp_path: Path) -> None:
    results = bench(tmp_path, "memory", "memory", "--partitions", "20", "--steps", "2", "--restarts", "1",
                    "--topic-partitions", "10")
    memory = results["memory"]
    for server in ("kbroker", "mock"):
        points = memory[server]["points"]
        assert [p[0] for p in points] == [0, 10, 20]
        assert all(p[1] > 0 for p in points)
        assert memory[server]["mb_per_100_partitions"] is not None
    assert memory["kbroker"]["start_s_median"] > 0
    names = [t["name"] for t in results["targets"]]
    assert "broker RSS per 100 idle partitions" in names and "start with 10,000 partitions" in names


def test_profiles(tmp_path: Path) -> None:
    results = bench(tmp_path, "profiles", "profiles", "--rate", "300", "--duration", "0.3",
                    "--latency-duration", "0.3", "--warmup", "0.2")
    assert [p["name"] for p in results["profiles"]] == ["low-latency", "high-throughput"]
    for profile in results["profiles"]:
        check_case(profile["produce"], ["mb_per_s"])
        check_case(profile["latency"], ["p99_ms"])
    assert results["profiles"][1]["producer_config"]["compression.type"] == "lz4"


def check_cluster_case(results: dict[str, Any], case: dict[str, Any]) -> None:
    """A case measured on the 3-broker kbroker cluster against the 3-broker mock."""
    assert {"kbroker (3 brokers)", "mock (3 brokers)"} <= set(results["servers"])
    assert case["params"]["brokers"] == 3
    assert case["params"]["replication_factor"] == 3 and case["params"]["min_insync_replicas"] == 2
    assert case["producer_config" if "producer_config" in case else "client_config"]["acks"] == "all"
    run = case["servers"]["kbroker"]["runs"][0]
    assert run["leader_cpu"] > 0 and run["followers_cpu"] > 0  # the cluster's CPU, split by role
    assert run["server_cpu"] >= run["leader_cpu"]


def test_cluster_produce_acks_all(tmp_path: Path) -> None:
    """--with-one-broker: one kbroker's acks=1 first, in the same invocation, as the yardstick
    of the cluster's acks=all target."""
    require_zookeeper()
    results = bench(tmp_path, "cluster-produce", "produce", "--brokers", "3", "--acks", "all", "--duration", "0.3",
                    "--with-one-broker")
    one_broker, case = results["produce"]
    assert one_broker["client_config"]["acks"] == "1" and "brokers" not in one_broker["name"]
    check_case(one_broker, ["mb_per_s", "msgs_per_s", "server_cpu"])
    check_case(case, ["mb_per_s", "msgs_per_s", "server_cpu"])
    check_cluster_case(results, case)
    assert case["servers"]["kbroker"]["runs"][0]["errors"] == 0
    # The one broker's targets, then the cluster's against it and its share of the ceilings.
    target, ceiling, replication = (t for t in results["targets"] if "acks=all" in t["name"])
    assert target["name"] == "produce 1 KB, acks=all, 3 brokers, one producer"
    single = one_broker["servers"]["kbroker"]["median"]["mb_per_s"]
    assert target["measured"] == round(case["servers"]["kbroker"]["median"]["mb_per_s"] / single, 4)
    assert target["met"] in (True, False) and "MB/s" in target["note"]
    # Three loops at once, one in each broker's log directory, as a replicated byte is written.
    assert "3 copies at once" in ceiling["name"] and ceiling["met"] is None
    assert ceiling["measured"] == case["ratios"]["ceiling"]["mb_per_s"] > 0
    assert case["servers"]["ceiling"]["runs"][0]["mb_per_s"] > 0
    # And the bytes also fetched from the leader's file by each follower, as replication moves them.
    assert "replication ceiling" in replication["name"] and replication["met"] is None
    assert replication["measured"] == case["ratios"]["replication-ceiling"]["mb_per_s"] > 0
    assert case["servers"]["replication-ceiling"]["runs"][0]["mb_per_s"] > 0


def test_a_cluster_variant_started_with_another_environment(tmp_path: Path) -> None:
    """--compare-env on a cluster: a second cluster, every broker of it with the variable set,
    measured in the same alternation as the first, its CPU split by role too."""
    require_zookeeper()
    results = bench(tmp_path, "cluster-variant", "produce", "--brokers", "3", "--acks", "all", "--duration", "0.3",
                    "--compare-env", "KBROKER_SENDFILE_MIN_BYTES=1")
    (case,) = results["produce"]
    variant = case["servers"]["kbroker-variant"]["runs"][0]
    assert variant["mb_per_s"] > 0 and variant["leader_cpu"] > 0 and variant["followers_cpu"] > 0
    assert case["ratios"]["kbroker-variant"]["mb_per_s"] > 0  # kbroker / the variant, in the same run
    described = results["servers"]["kbroker-variant (3 brokers)"]
    assert described.startswith("kbroker cluster") and "KBROKER_SENDFILE_MIN_BYTES=1" in described
    assert "KBROKER_SENDFILE_MIN_BYTES" not in results["servers"]["kbroker (3 brokers)"]


def test_cluster_latency_acks_all(tmp_path: Path) -> None:
    require_zookeeper()
    # A low rate: the cluster answers an acks=all request per replication round (docs/performance.md).
    results = bench(tmp_path, "cluster-latency", "latency", "--brokers", "3", "--acks", "all", "--rate", "50",
                    "--latency-duration", "0.3", "--warmup", "0.2")
    (case,) = results["latency"]
    check_case(case, ["p50_ms", "p99_ms"])
    check_cluster_case(results, case)
    for server in ("kbroker", "mock"):
        run = case["servers"][server]["runs"][0]
        assert run["samples"] > 0 and run["lost"] == 0 and run["errors"] == 0
    (target,) = results["targets"]
    assert target["name"] == "end-to-end p99 at 20% of max throughput, acks=all, 3 brokers" and target["measured"] > 0


def test_encryption_at_rest_against_plaintext(tmp_path: Path) -> None:
    results = bench(tmp_path, "encryption", "encryption", "--duration", "0.3", "--partitions", "1",
                    "--mib-per-partition", "0.2", "--passes", "1")
    produce, consume = results["encryption"]
    for case in (produce, consume):
        assert set(case["servers"]) - {"ceiling"} == {"kbroker", "plaintext"}
        assert case["ratios"]["plaintext"]["mb_per_s"] > 0
    assert "log.encryption.key.file" in results["servers"]["kbroker"]
    assert "encryption at rest: produce" in (tmp_path / "encryption" / "summary.md").read_text()


def test_tls_against_plaintext(tmp_path: Path) -> None:
    """The measured clients reach the TLS broker on its SSL listener only (a plaintext client
    there, or a TLS client on its PLAINTEXT port, fails the run), the plain one as usual."""
    results = bench(tmp_path, "tls", "tls", "--duration", "0.3", "--partitions", "1",
                    "--mib-per-partition", "0.2", "--passes", "1")
    produce, consume = results["tls"]
    for case in (produce, consume):
        assert set(case["servers"]) - {"ceiling"} == {"kbroker", "plaintext"}
        assert case["ratios"]["plaintext"]["mb_per_s"] > 0
        assert all(run.get("errors", 0) == 0 for run in case["servers"]["kbroker"]["runs"])
    assert "SSL listener" in results["servers"]["kbroker"]
    assert "TLS: produce" in (tmp_path / "tls" / "summary.md").read_text()


def test_share_groups_against_the_classic_consumer(tmp_path: Path) -> None:
    """The same records read by a classic consumer and by share groups of one and two
    ShareConsumers, each record exactly once (the benchmark fails otherwise)."""
    results = bench(tmp_path, "share", "share", "--records", "3000", "--share-consumers", "1", "2")
    (case,) = results["share"]
    assert list(case["modes"]) == ["classic", "share x1", "share x2"]
    for mode, summary in case["modes"].items():
        (run,) = summary["runs"]
        assert run["messages"] == 3000, mode
        assert summary["median"]["msgs_per_s"] > 0 and summary["median"]["mb_per_s"] > 0
    for mode in ("share x1", "share x2"):
        assert case["ratios"][mode]["msgs_per_s"] > 0
        run = case["modes"][mode]["runs"][0]
        assert run["redelivered"] == 0 and sum(run["per_consumer"]) == 3000
    assert [t["name"] for t in results["targets"]] == ["share x1 consumption of 1024 B records",
                                                       "share x2 consumption of 1024 B records"]
    assert "| share x2 |" in (tmp_path / "share" / "summary.md").read_text()


def test_filtered_views_against_their_source(tmp_path: Path) -> None:
    """The source and its views read from start to end: each reader received exactly the records
    its filter keeps (the benchmark fails otherwise) and reached the end by its position, and
    every ratio to the source is computed (none compared with its target)."""
    results = bench(tmp_path, "views", "views", "--records", "3000", "--partitions", "2",
                    "--compression", "lz4")
    (case,) = results["views"]
    assert case["params"]["records"] == 3000 and case["params"]["compression"] == "lz4"
    assert case["params"]["source_log_mb"] > 0
    assert list(case["readers"]) == ["source", "all", "ten", "none", "all-new"]
    assert case["expected"]["source"] == case["expected"]["all"] == case["expected"]["all-new"] == 3000
    assert 150 < case["expected"]["ten"] < 450 and case["expected"]["none"] == 0  # one tag of ten
    for name, summary in case["readers"].items():
        (run,) = summary["runs"]
        assert run["records"] == case["expected"][name], name
        assert run["mb_per_s"] > 0 and run["wire_bytes"] > 0 and run["server_cpu_ms_per_mb"] >= 0, (name, run)
    wire = {name: s["median"]["wire_bytes"] for name, s in case["readers"].items()}
    assert wire["all"] > wire["ten"] > wire["none"]
    for name in ("all", "ten", "none", "all-new"):
        ratios = case["ratios"][name]
        assert ratios["rate"] > 0 and ratios["wire"] > 0 and ratios["log_to_wire"] > 0, (name, ratios)
        assert ratios["filter_cpu_ms_per_mb"] is not None
    targets = {t["name"]: t for t in results["targets"]}
    wire_target = targets["filtered view keeping ~10 %: source bytes / view bytes over the wire (lz4, p=2)"]
    assert wire_target["measured"] == case["ratios"]["ten"]["wire"] and wire_target["met"] in (True, False)
    for reader, which in (("all", "made before the records"), ("all-new", "made over existing records")):
        rate_target = targets[f"view matching everything, {which}: read rate / the source's (lz4, p=2)"]
        assert rate_target["measured"] == case["ratios"][reader]["rate"] and rate_target["met"] in (True, False)
    assert "| ten (`tag = 't3'`) |" in (tmp_path / "views" / "summary.md").read_text()


def test_archived_reads_against_local_ones(tmp_path: Path) -> None:
    """A tiered topic read from offset 0 out of moto's S3 server, and a plain one from the disk,
    both after a cold restart: each read received every record (the benchmark fails otherwise)."""
    results = bench(tmp_path, "archive", "archive", "--records", "3000")
    (case,) = results["archive"]
    (run,) = case["runs"]
    assert run["local"]["records"] == run["archived"]["records"] == 3000
    assert case["median"]["local"] > 0 and case["median"]["archived"] > 0 and case["ratio"] > 0
    (target,) = [t for t in results["targets"] if t["name"].startswith("archived reads / local cold reads")]
    assert target["measured"] == round(case["ratio"], 3) and target["met"] in (True, False)
    assert "Archived / local:" in (tmp_path / "archive" / "summary.md").read_text()


def test_share_check_finds_missing_and_doubled_records() -> None:
    from array import array

    from kbroker.bench.benchmarks import BenchError
    from kbroker.bench.share import check_each_once

    def received(*offsets: int) -> dict[str, Any]:
        return {"offsets": {0: array("q", offsets).tobytes()}}

    check_each_once([received(0, 2), received(1)], partitions=1, per_partition=3)
    with pytest.raises(BenchError, match="1 missing, 0 received twice"):
        check_each_once([received(0, 2)], partitions=1, per_partition=3)
    with pytest.raises(BenchError, match="0 missing, 1 received twice"):
        check_each_once([received(0, 1, 2), received(1)], partitions=1, per_partition=3)


def test_delayed_delivery(tmp_path: Path) -> None:
    """Delayed delivery's acceptance benchmark with tiny sizes. Its correctness numbers mean
    something even so: every record delivered once, on its partition, never early, in due order."""
    results = bench(tmp_path, "delayed", "delayed", "--records", "2000", "--max-delay-s", "3",
                    "--spread-s", "1", "--pending", "20000", "--duration", "0.3", "--throughput-runs", "1")
    delayed = results["delayed"]
    (run,) = delayed["lateness"]["runs"]["delayed"]
    assert run["produced"] == 2000 and run["delivered"] == run["produced"], run
    assert run["missing"] == run["duplicates"] == run["wrong_partition"] == 0, run
    assert run["early"] == 0 and run["order_violations"] == 0, run
    assert run["order_checked"] > 1000  # the order was checked on the deliveries, not on nothing
    assert not run["consumer_timed_out"] and len(run["end_check"]["sentinels"]) == 4  # read to its end
    late = run["lateness_ms"]
    assert 0 <= late["p50"] <= late["p99"] <= late["max"]
    (control,) = delayed["lateness"]["runs"]["control"]
    assert "delivered" not in control and control["plain"]["acked"] > 0
    assert delayed["lateness"]["plain_vs_control"]["ratios"]["msgs_per_s"] > 0

    memory = delayed["memory"]
    assert memory["records"] == 20_000
    for name, pending in (("delayed", 20_000), ("control", 0)):
        restarts = memory[name]["restarts"]
        assert [r["how"] for r in restarts] == ["kill -9", "clean stop"]
        assert all(r["extras"]["ok"] and r["answer_s"] >= r["ready_s"] > 0 for r in restarts), restarts
        assert restarts[1]["pending_at_stop"] == memory[name]["final_check"]["pending_at_stop"] == pending
    assert memory["delayed"]["growth"]["rss"] > 0

    for case in (delayed["throughput"], memory["throughput_with_pending"]):
        assert set(case["servers"]) == {"kbroker", "disabled"}
        assert case["ratios"]["disabled"]["msgs_per_s"] > 0 and case["ratios"]["disabled"]["cpu_ms_per_mb"] > 0
    names = [t["name"] for t in results["targets"]]
    assert "delayed records delivered exactly once" in names
    assert "records still pending after the restarts" in names
    assert next(t for t in results["targets"] if t["name"].startswith("delayed records delivered"))["met"]
    assert "## delayed: 2,000 records" in (tmp_path / "delayed" / "summary.md").read_text()


def test_delayed_checks_find_what_went_wrong() -> None:
    """The delayed benchmark's accounting: a record missing, one twice, one on another partition,
    one early and one delivered after a later-due record while it was pending."""
    from array import array

    from kbroker.bench.delayed import delivery_stats, order_violations

    # (delivery offset, due, pending offset): the second was pending (offset 1) when the first,
    # due later, was delivered at 10; the third was appended (at 11) after that delivery.
    assert order_violations([(10, 500, 5), (12, 400, 1), (13, 450, 11)]) == 1
    assert order_violations([(10, 400, 1), (12, 500, 5), (14, 450, 13)]) == 0

    def q(*values: int) -> bytes:
        return array("q", values).tobytes()

    # ids 0..3 produced, acknowledged at 100; 0 twice, 1 on partition 1 though sent to 0, 2 early, 3 missing.
    consumed = {"ids": q(0, 0, 1, 2), "sent_partition": q(0, 0, 0, 0), "partition": q(0, 0, 1, 0),
                "due_ms": q(1000, 1000, 1000, 1000),
                "received_us": q(1_001_000, 1_002_000, 1_003_000, 999_000),
                "pending_offset": q(0, 0, 1, 2), "offset": q(10, 11, 12, 13), "plain_latency_us": q(),
                "timed_out": False}
    producers = [{"first_id": 0, "count": 4, "acked_ms": q(100, 100, 100, 100), "failed": q()}]
    stats = delivery_stats(consumed, producers, partitions=2)
    assert (stats["produced"], stats["delivered"], stats["missing"]) == (4, 3, 1)
    assert (stats["duplicates"], stats["duplicate_deliveries"]) == (1, 1)
    assert (stats["wrong_partition"], stats["early"]) == (1, 1)


def check_through_a_kill(results: dict[str, Any], how: str, records: int) -> dict[str, Any]:
    """A lateness run with a kill: every record acknowledged and delivered once, on its partition,
    never early, in due order; the kill came while records were still being produced."""
    lateness = results["delayed"]["lateness"]
    assert lateness["runs"]["control"] == []  # no control run with a kill
    (run,) = lateness["runs"]["delayed"]
    assert run["produced"] == records and run["failed_to_produce"] == 0, run
    assert run["delivered"] == run["produced"] and not run["consumer_timed_out"], run
    assert run["missing"] == run["duplicates"] == run["wrong_partition"] == 0, run
    assert run["early"] == 0 and run["order_violations"] == 0, run
    assert len(run["end_check"]["sentinels"]) == 4  # read to the sentinels, not to a guess
    outage = run["outage"]
    assert outage["how"] == how and outage["kill_ms"] > outage["released_ms"]
    assert outage["acked_after_kill"] > 0, outage  # the producers went on through the kill
    assert set(outage["serving_after_kill_s"]) == {"0", "1", "2", "3"}
    assert outage["inside"] > 0 and outage["outside"] > 0 and outage["inside"] + outage["outside"] == records
    met = {t["name"]: t["met"] for t in results["targets"]}
    assert met["delayed records delivered exactly once"]
    assert met["delayed records acknowledged through the kill"]
    assert "lateness p99 of records due in the outage window" in met
    return outage


def test_delayed_delivery_through_a_broker_kill(tmp_path: Path) -> None:
    """kill -9 of the broker 2.4 s in (40 % of the 6 s max delay), while the producers still send
    (over 4 s) and deliveries are under way; it is started again on its data at once."""
    results = bench(tmp_path, "delayed-kill", "delayed", "--part", "lateness", "--kill", "broker",
                    "--records", "2000", "--max-delay-s", "6", "--spread-s", "4")
    outage = check_through_a_kill(results, "broker", 2000)
    assert outage["led"] == [0, 1, 2, 3] and outage["ready_s"] > 0


def test_delayed_delivery_through_a_leader_kill(tmp_path: Path) -> None:
    """Three brokers, rf=3: kill -9 of the broker leading most of the topic's partitions while the
    producers still send; new leaders take over (a 6 s ZooKeeper session instead of 18 s keeps the
    election short) and the killed broker comes back into every ISR."""
    require_zookeeper()
    results = bench(tmp_path, "delayed-kill-leader", "delayed", "--part", "lateness", "--kill", "leader",
                    "--brokers", "3", "--records", "2000", "--max-delay-s", "12", "--spread-s", "6",
                    "--override", "zookeeper.session.timeout.ms=6000")
    outage = check_through_a_kill(results, "leader", 2000)
    assert outage["victim"] in (1, 2, 3) and len(outage["led"]) >= 2  # most of the 4 partitions
    assert outage["rejoined_after_kill_s"] > min(outage["serving_after_kill_s"].values())


def test_outage_window_split() -> None:
    """In a partition's window: received after the kill and due before the window's end (a record
    due before the kill but not received by then included); everything else is outside."""
    from array import array

    from kbroker.bench.delayed import outage_stats

    def q(*values: int) -> bytes:
        return array("q", values).tobytes()

    # Kill at 10,000 ms; partition 0 serves again at 12,000 (window end 13,000 with a 1 s margin),
    # partition 1 at 39,000. Ids: 0 received before the kill; 1 due before it, received after
    # (caught); 2 due in the window; 3 due after it; 4 on partition 1, due in its longer window;
    # 2 again, a duplicate (only the first delivery counts).
    consumed = {"ids": q(0, 1, 2, 3, 4, 2), "partition": q(0, 0, 0, 0, 1, 0),
                "sent_partition": q(0, 0, 0, 0, 1, 0),
                "due_ms": q(9_000, 9_900, 11_000, 14_000, 30_000, 11_000),
                "received_us": q(9_001_000, 12_100_000, 12_200_000, 14_002_000, 30_001_000, 12_300_000),
                "pending_offset": q(0, 1, 2, 3, 0, 2), "offset": q(5, 6, 7, 8, 9, 10)}
    producers = [{"first_id": 0, "count": 5, "acked_ms": q(100, 100, 100, 10_500, 100), "failed": q()}]
    stats = outage_stats(consumed, producers, {0: (10_000, 13_000), 1: (10_000, 40_000)})
    assert (stats["inside"], stats["caught_by_kill"], stats["outside"]) == (3, 1, 2)
    assert (stats["before_kill"], stats["after_window"]) == (1, 1)
    assert stats["lateness_before_kill_ms"]["max"] == 1.0 and stats["lateness_after_window_ms"]["max"] == 2.0
    assert stats["lateness_outside_ms"]["max"] == 2.0 and stats["lateness_inside_ms"]["max"] == 2200.0
    assert stats["acked_after_kill"] == 1
    assert stats["window_after_kill_s"] == {0: 3.0, 1: 30.0}


@pytest.mark.parametrize("fetched", [True, False], ids=["fetched", "pushed"])
def test_the_replication_ceiling_moves_whole_chunks_and_leaves_no_files(tmp_path: Path, fetched: bool) -> None:
    directories = [tmp_path / f"broker-{i}" for i in range(3)]
    for directory in directories:
        directory.mkdir()
    chunk = 64 * 1024
    per_copy, elapsed = replicate_for(directories, chunk, 0.3, fetched=fetched)
    assert per_copy >= chunk and per_copy % chunk == 0 and elapsed >= 0.3
    assert [list(d.iterdir()) for d in directories] == [[], [], []]
