"""`kbroker bench BENCHMARK [options]`: run benchmarks, write DIR/results.json, plots and summary.md."""

from __future__ import annotations

import argparse
import base64
import importlib.util
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kbroker.bench import archive as archive_bench
from kbroker.bench import benchmarks, report
from kbroker.bench import delayed as delayed_bench
from kbroker.bench import share as share_bench
from kbroker.bench import views as views_bench
from kbroker.bench.benchmarks import MIB, BenchError, Env
from kbroker.bench.certificates import create_local_tls
from kbroker.bench.delayed_kill import KILLS
from kbroker.bench.references import KafkaServer, MockServer, kafka_reference_status
from kbroker.bench.servers import (
    ExternalServer,
    KbrokerClusterServer,
    KbrokerServer,
    Server,
    ServerError,
    new_data_dir,
)
from kbroker.bench.ui import UI, make_ui
from kbroker.bench.workers import WorkerError
from kbroker.metadata.zookeeper_process import ZooKeeperNotFound, find_zookeeper
from kbroker.ports import free_port
from kbroker.properties import parse_properties as parse_properties_file

PROJECT_CONF = Path(__file__).resolve().parents[2] / "conf"
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", type=Path, default=Path("bench-results"),
                        help="directory for results.json, summary.md and the plots (default bench-results)")
    common.add_argument("--runs", type=int, default=3, help="runs per broker, alternated (default 3)")
    common.add_argument("--bootstrap", help="measure a running broker instead of starting one "
                        "(no cold start, memory or restart benchmarks then)")
    common.add_argument("--broker-pid", type=int, help="with --bootstrap: its pid, for CPU share and --profile")
    common.add_argument("--server-config", help="server.properties for the kbroker the benchmark starts")
    common.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker property for the kbroker the benchmark starts; repeatable")
    common.add_argument("--work-dir", help="where the started brokers keep their data (default: a temp dir)")
    common.add_argument("--kafka-home", help="the Apache Kafka distribution measured as a reference (default: "
                        "KBROKER_KAFKA_HOME, else ../shared/kafka-3.9.0 beside the project)")
    common.add_argument("--no-kafka", action="store_true", help="do not measure Apache Kafka")
    common.add_argument("--quiet", action="store_true", help="no progress output")
    common.add_argument("--compare-uvloop", action="store_true",
                        help="also measure a second kbroker on uvloop's event loop (KBROKER_EVENT_LOOP=uvloop; "
                        "uvloop must be installed), alternated with the others")
    common.add_argument("--compare-env", action="append", default=[], metavar="KEY=VALUE",
                        help="also measure a second kbroker (kbroker-variant) started with this environment "
                        "variable, alternated with the others; repeatable (e.g. "
                        "KBROKER_WRITE_BEHIND_MIN_BYTES=65536 to write large appends in a writer thread)")
    common.add_argument("--compare-override", action="append", default=[], metavar="KEY=VALUE",
                        help="also measure a second kbroker (kbroker-variant) started with this broker property "
                        "on top of --override, alternated with the others; repeatable, combines with "
                        "--compare-env (e.g. metrics.listener=http://127.0.0.1:0 for the metrics' cost)")

    sub = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=help_text, description=help_text)

    produce = command("produce", "producer throughput")
    produce.add_argument("--message-size", type=int, nargs="+", default=[1024], help="bytes; several for a sweep")
    _producer_options(produce, linger_ms=5)
    produce.add_argument("--partitions", type=int, default=1)
    produce.add_argument("--producers", type=int, default=1, help="producer processes")
    produce.add_argument("--duration", type=float, default=3.0, help="seconds per run")
    produce.add_argument("--profile", action="store_true", help="one more kbroker run under py-spy "
                         "(on a cluster: of the leader broker)")
    _cluster_options(produce)
    produce.add_argument("--with-one-broker", action="store_true",
                         help="with --brokers N: first measure one kbroker's acks=1 produce of the same sizes "
                              "against the mock, in this invocation: the yardstick of the acks=all target")

    consume = command("consume", "consumer throughput, from the page cache and after a cold start")
    consume.add_argument("--mode", choices=("cache", "cold", "both"), default="both")
    consume.add_argument("--partitions", type=int, default=8)
    consume.add_argument("--message-size", type=int, default=1024)
    consume.add_argument("--mib-per-partition", type=float, default=4.0,
                         help="data per partition (the mock keeps at most 5 MiB per partition; default 4)")
    consume.add_argument("--passes", type=int, default=3, help="reads of the whole topic per page-cache run")
    consume.add_argument("--consumer-config", action="append", default=[], metavar="KEY=VALUE")

    latency = command("latency", "end-to-end latency at a fixed rate")
    latency.add_argument("--message-size", type=int, default=1024)
    _latency_options(latency)
    latency.add_argument("--partitions", type=int, default=1)
    # linger.ms=1 rather than 0: at tens of thousands of messages per second, 0 makes nearly every
    # message its own produce request, and kbroker's per-request cost then dominates (docs/performance.md).
    _producer_options(latency, linger_ms=1)
    latency.add_argument("--fetch-wait-max-ms", type=int, default=5,
                         help="consumer fetch.wait.max.ms (default 5: the mock cluster answers an empty fetch "
                              "only after this wait, data or not)")
    latency.add_argument("--consumer-config", action="append", default=[], metavar="KEY=VALUE")
    _cluster_options(latency)

    partitions = command("partitions", "producer throughput vs partition count (keyed messages)")
    partitions.add_argument("--counts", type=int, nargs="+", default=[1, 8, 64, 512])
    partitions.add_argument("--message-size", type=int, default=1024)
    partitions.add_argument("--duration", type=float, default=2.0)
    _producer_options(partitions, linger_ms=5)
    _cluster_options(partitions)

    memory = command("memory", "broker RSS vs idle partitions, and start time with them")
    memory.add_argument("--partitions", type=int, default=10_000)
    memory.add_argument("--steps", type=int, default=5, help="RSS is read after each of these steps")
    memory.add_argument("--restarts", type=int, default=3, help="timed restarts with all the partitions")
    memory.add_argument("--topic-partitions", type=int, default=1000, help="partitions per created topic")

    profiles = command("profiles", "the low-latency and high-throughput configurations side by side")
    profiles.add_argument("--names", nargs="+", default=["low-latency", "high-throughput"],
                          help="profiles: CONF_DIR/NAME.properties (broker) + NAME.client.properties")
    profiles.add_argument("--conf-dir", type=Path, default=PROJECT_CONF)
    profiles.add_argument("--message-size", type=int, default=1024)
    profiles.add_argument("--duration", type=float, default=3.0, help="seconds per produce run")
    _latency_options(profiles)

    for name, what in (("encryption", "with encryption at rest (log.encryption.key.file)"),
                       ("tls", "with the clients on an SSL listener (TLS)")):
        against_plaintext = command(name, f"produce and consume throughput {what}, as ratios to a "
                                    "plaintext kbroker in the same run")
        against_plaintext.add_argument("--message-size", type=int, default=1024)
        _producer_options(against_plaintext, linger_ms=5)
        against_plaintext.add_argument("--duration", type=float, default=3.0, help="seconds per produce run")
        against_plaintext.add_argument("--partitions", type=int, default=4, help="partitions of the consumed topic")
        against_plaintext.add_argument("--mib-per-partition", type=float, default=16.0)
        against_plaintext.add_argument("--passes", type=int, default=3,
                                       help="reads of the whole topic per consume run")

    share = command("share", "share groups (KIP-932) against the classic consumer: the same 1 KB records read "
                    "by one classic consumer and by share groups of ShareConsumers, as ratios in the same run")
    share.add_argument("--records", type=int, default=200_000, help="records preloaded per run (default 200,000)")
    share.add_argument("--message-size", type=int, default=1024)
    share.add_argument("--partitions", type=int, default=1)
    share.add_argument("--share-consumers", type=int, nargs="+", default=[1, 4],
                       help="ShareConsumers per share group, one group per count (default 1 4)")
    share.add_argument("--consumer-config", action="append", default=[], metavar="KEY=VALUE",
                       help="a librdkafka property of the classic consumer; repeatable")
    share.add_argument("--share-consumer-config", action="append", default=[], metavar="KEY=VALUE",
                       help="a librdkafka property of the share consumers; repeatable")

    views = command("views", "filtered views (kbroker alone): a view keeping every record, one keeping ~10 %% and "
                    "one keeping none, each read from start to end beside the source in the same run: read rate, "
                    "bytes over the wire and broker CPU per MB as ratios to the source's")
    views.add_argument("--records", type=int, default=400_000,
                       help="records preloaded per case, spread over the partitions (default 400,000)")
    views.add_argument("--message-size", type=int, default=1024)
    views.add_argument("--partitions", type=int, nargs="+", default=[1, 4], help="one case per count (default 1 4)")
    views.add_argument("--compression", nargs="+", default=["lz4", "none"], choices=COMPRESSIONS,
                       help="the preload's codec, one case per codec (default lz4 none)")
    views.add_argument("--views", nargs="+", default=list(views_bench.VIEWS), choices=list(views_bench.VIEWS),
                       help="the views read beside the source (default all ten none)")
    views.add_argument("--consumer-config", action="append", default=[], metavar="KEY=VALUE",
                       help="a librdkafka property of every reader; repeatable")
    views.add_argument("--profile", action="store_true",
                       help="after each case's runs, py-spy on the broker while the views all and ten are read")

    archive = command("archive", "the archive (kbroker alone): a topic read from offset 0 out of an S3-compatible "
                      "server on this machine (moto's, installed with the test extra) against the same records "
                      "read from the local log, both after a cold start")
    archive.add_argument("--records", type=int, default=400_000, help="records preloaded (default 400,000)")
    archive.add_argument("--message-size", type=int, default=1024)

    delayed = command("delayed", "delayed delivery (kbroker alone): lateness and exactly-once at volume, "
                      "memory and restart time with pending records, plain produce throughput with the "
                      "feature vs delayed.delivery.enable=false; --runs is the throughput part's runs per topic")
    _delayed_options(delayed)

    everything = command("all", "every benchmark with default sizes (a few minutes)")
    everything.add_argument("--smoke", action="store_true", help="tiny sizes and durations: checks the harness")
    everything.add_argument("--memory-partitions", type=int, default=2000)
    everything.add_argument("--no-profile", action="store_true", help="skip the py-spy run")
    everything.add_argument("--cluster-brokers", type=int, default=3,
                            help="brokers of the acks=all cluster cases (default 3; 0 skips them)")
    everything.add_argument("--min-insync-replicas", type=int, default=2,
                            help="min.insync.replicas of the cluster cases' topics (default 2)")


def _delayed_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--part", choices=(*delayed_bench.PARTS, "all"), default="all")
    lateness = parser.add_argument_group("lateness part")
    lateness.add_argument("--records", type=int, default=100_000, help="delayed records (default 100,000)")
    lateness.add_argument("--producers", type=int, default=4, help="producer processes of delayed records")
    lateness.add_argument("--max-delay-s", type=float, default=120.0,
                          help="delays are uniform over 0..this many seconds (default 120)")
    lateness.add_argument("--partitions", type=int, default=4)
    lateness.add_argument("--spread-s", type=float, default=30.0,
                          help="seconds over which the delayed records are sent (default 30; 0: at once)")
    lateness.add_argument("--delayed-size", type=int, default=100, help="bytes of a delayed record's value "
                          "(also of the memory part's records)")
    lateness.add_argument("--plain-rate", type=float, default=1000.0,
                          help="records/s of the plain producer on the same topic (default 1000)")
    lateness.add_argument("--plain-size", type=int, default=1024)
    lateness.add_argument("--lateness-runs", type=int, default=1,
                          help="rounds of a delayed and a control run, alternated (default 1)")
    lateness.add_argument("--consumer-config", action="append", default=[], metavar="KEY=VALUE")
    lateness.add_argument("--delayed-producer-config", action="append", default=[], metavar="KEY=VALUE",
                          help="a librdkafka property of the delayed records' producers (idempotent, "
                               "acks=all, linger.ms=5 unless given); repeatable")
    lateness.add_argument("--profile", action="store_true",
                          help="py-spy on the broker during the first delayed run")
    lateness.add_argument("--brokers", type=int, choices=(1, 3), default=1,
                          help="3: a kbroker cluster on ZooKeeper, the topic with rf=3 and "
                               "min.insync.replicas=2 (lateness part only; default 1)")
    lateness.add_argument("--kill", choices=KILLS, default="none",
                          help="kill -9 during the delayed run: the broker (then started again on its "
                               "data), or on --brokers 3 the broker leading most of the topic's partitions "
                               "(started again once new leaders serve); no control run then (default none)")
    lateness.add_argument("--kill-at-s", type=float, default=None,
                          help="seconds after the producers' release to kill (default 40%% of --max-delay-s)")
    lateness.add_argument("--outage-margin-s", type=float, default=5.0,
                          help="with --kill: a partition's outage window ends this long after it serves "
                               "again (default 5)")
    memory = parser.add_argument_group("memory part")
    memory.add_argument("--pending", type=int, default=1_000_000, help="pending records (default 1,000,000)")
    memory.add_argument("--pending-partitions", type=int, default=1)
    memory.add_argument("--pending-delay-s", type=float, default=86_400.0, help="their delay (default a day)")
    throughput = parser.add_argument_group("throughput part")
    throughput.add_argument("--message-size", type=int, default=1024)
    throughput.add_argument("--duration", type=float, default=3.0, help="seconds per produce run (default 3)")
    throughput.add_argument("--throughput-runs", type=int, default=7,
                            help="alternated runs per topic (default 7: a 5 %% difference hides in fewer)")


def _cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--brokers", type=int, default=1,
                        help="N > 1: a kbroker cluster (ZooKeeper and N brokers) against the mock cluster with "
                             "N brokers, topics replicated on all N; with --bootstrap, the given brokers form "
                             "such a cluster (default 1)")
    parser.add_argument("--min-insync-replicas", type=int, default=2,
                        help="min.insync.replicas of the topics on a cluster (default 2, at most --brokers)")


def _producer_options(parser: argparse.ArgumentParser, linger_ms: float) -> None:
    parser.add_argument("--acks", default="1", choices=("0", "1", "all", "-1"))
    parser.add_argument("--linger-ms", type=float, default=linger_ms)
    parser.add_argument("--batch-size", type=int, default=1_000_000)
    parser.add_argument("--compression", default="none", choices=COMPRESSIONS)
    parser.add_argument("--producer-config", action="append", default=[], metavar="KEY=VALUE",
                        help="any other librdkafka producer property; repeatable")


def _latency_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=float, help="messages per second (default: --rate-fraction of the "
                        "maximum kbroker producer rate, measured first)")
    parser.add_argument("--rate-fraction", type=float, default=0.2)
    parser.add_argument("--latency-duration", "--duration-latency", dest="latency_duration", type=float,
                        default=5.0, help="measured seconds per latency run")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each latency run")


def _pairs(items: list[str], option: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BenchError(f"invalid {option} {item!r}: expected KEY=VALUE")
        pairs[key.strip()] = value
    return pairs


class Session:
    """The brokers of one `kbroker bench` invocation, started when first needed and always stopped."""

    def __init__(self, args: argparse.Namespace, ui: UI) -> None:
        self.args = args
        self.ui = ui
        self.started: list[Server] = []
        self.data_dirs: list[Path] = []
        self.notes: list[str] = []
        self.skipped: dict[str, str] = {}
        self._env: Env | None = None
        self._mocks: dict[int, MockServer] = {}
        self._kafka: KafkaServer | None = None
        self._kafka_home: Path | None = None
        if args.no_kafka:
            self.skipped["kafka"] = "--no-kafka: the Apache Kafka reference is skipped"
        else:
            self._kafka_home, reason = kafka_reference_status(args.kafka_home)
            if self._kafka_home is None:
                self.skipped["kafka"] = reason
                ui.log(f"note: {reason}")

    def mock(self, brokers: int = 1) -> MockServer:
        """The mock cluster with `brokers` brokers, one per count for the whole session."""
        if brokers not in self._mocks:
            self._mocks[brokers] = MockServer(brokers)
            self.started.append(self._mocks[brokers])
        return self._mocks[brokers]

    def kafka(self) -> list[Server]:
        """Apache Kafka, started once for the session when first needed; [] when it is skipped."""
        if self._kafka_home is None:
            return []
        if self._kafka is None:
            data_dir = new_data_dir(self.args.work_dir, "kafka-bench-")
            self.data_dirs.append(data_dir)
            self._kafka = KafkaServer(self._kafka_home, data_dir)
            self.started.append(self._kafka)
            with self.ui.step("starting Apache Kafka"):
                self._kafka.start()
        return [self._kafka]

    def kbroker(self, config_file: str | None = None, overrides: dict[str, str] | None = None,
                brokers: int = 1, min_insync_replicas: int = 2, port: int | None = None) -> Server:
        """A started kbroker: one broker, or with `brokers` > 1 a cluster on its own ZooKeeper."""
        if brokers < 1:
            raise BenchError("--brokers must be at least 1")
        if self.args.bootstrap:
            return ExternalServer(self.args.bootstrap, self.args.broker_pid, brokers,
                                  min(min_insync_replicas, brokers) if brokers > 1 else 1)
        overrides = overrides if overrides is not None else _pairs(self.args.override, "--override")
        if brokers > 1:
            return self._start_local("kbroker-bench-", lambda data_dir: KbrokerClusterServer(
                data_dir, brokers, min_insync_replicas, config_file, overrides))
        return self._start_local("kbroker-bench-", lambda data_dir: KbrokerServer(
            data_dir, port=port, config_file=config_file, overrides=overrides))

    def _start_local(self, prefix: str, make: Callable[[Path], Server]) -> Server:
        """A server of this machine made with a fresh data directory, started; stopped with the session."""
        data_dir = new_data_dir(self.args.work_dir, prefix)
        self.data_dirs.append(data_dir)
        server = make(data_dir)
        self.started.append(server)
        with self.ui.step(f"starting {server.label}"):
            server.start()
        return server

    def _uvloop_kbroker(self) -> list[Server]:
        """kbroker again, on uvloop's event loop: the same settings, measured beside the default."""
        if importlib.util.find_spec("uvloop") is None:
            raise BenchError("--compare-uvloop: uvloop is not installed (pip install uvloop)")
        return [self._start_local("kbroker-uvloop-bench-", lambda data_dir: KbrokerServer(
            data_dir, config_file=self.args.server_config, overrides=_pairs(self.args.override, "--override"),
            name="kbroker-uvloop", env={"KBROKER_EVENT_LOOP": "uvloop"}))]

    def _variant_kbrokers(self, brokers: int, min_insync_replicas: int) -> list[Server]:
        """The second kbrokers asked for: on uvloop (one broker), and with --compare-env's
        environment and --compare-override's properties (a cluster too, of `brokers`)."""
        variants = self._uvloop_kbroker() if getattr(self.args, "compare_uvloop", False) and brokers == 1 else []
        env = _pairs(getattr(self.args, "compare_env", []), "--compare-env")
        extra = _pairs(getattr(self.args, "compare_override", []), "--compare-override")
        if not env and not extra:
            return variants
        overrides = {**_pairs(self.args.override, "--override"), **extra}
        if brokers > 1:
            variants.append(self._start_local("kbroker-variant-bench-", lambda data_dir: KbrokerClusterServer(
                data_dir, brokers, min_insync_replicas, self.args.server_config, overrides, name="kbroker-variant",
                env=env, described_overrides=extra)))
        else:
            variants.append(self._start_local("kbroker-variant-bench-", lambda data_dir: KbrokerServer(
                data_dir, config_file=self.args.server_config, overrides=overrides, name="kbroker-variant", env=env,
                described_overrides=extra)))
        return variants

    def env(self, kbroker: Server | None = None) -> Env:
        """kbroker and the references; a given kbroker gets an Env of its own.

        The session's default kbroker has the benchmark's --brokers (1 unless given), and its
        references the mock cluster with as many brokers and, for one broker, Apache Kafka (a
        single node). A given kbroker (a profile's, a cluster's) is measured against the mock only."""
        if kbroker is None and self._env is not None:
            return self._env
        if kbroker is None:
            brokers = getattr(self.args, "brokers", 1)
            min_insync_replicas = getattr(self.args, "min_insync_replicas", 2)
            kbroker = self.kbroker(self.args.server_config, brokers=brokers, min_insync_replicas=min_insync_replicas)
            if brokers > 1 and self._kafka_home is not None:
                self.skipped["kafka"] = "one Kafka node is no reference for a cluster: measured against the mock only"
            kafka = self.kafka() if brokers == 1 else []
            variants = self._variant_kbrokers(brokers, min_insync_replicas)
            self._env = Env([kbroker, *variants, self.mock(brokers), *kafka], self.ui, self.args.runs, self.args.out,
                            self.args.work_dir, self.notes)
            return self._env
        return Env([kbroker, self.mock(kbroker.brokers)], self.ui, self.args.runs, self.args.out,
                   self.args.work_dir, self.notes)

    def close(self, keep_data: bool = False) -> None:
        """Stop every started server; their data directories go unless `keep_data` (after a
        failure: the brokers' logs, broker.log in each, say what went wrong)."""
        for server in reversed(self.started):
            try:
                server.close()
            except (ServerError, OSError) as e:
                self.ui.log(f"warning: stopping {server.label}: {e}")
        for directory in self.data_dirs:
            if keep_data:
                print(f"broker data and logs kept in {directory}", file=sys.stderr)
            else:
                shutil.rmtree(directory, ignore_errors=True)


# -- benchmarks -------------------------------------------------------------------------------------------


def bench_produce(session: Session, args: argparse.Namespace) -> dict[str, Any]:
    config = _producer_config(args)
    cases = _one_broker_yardstick(session, args, config) if args.with_one_broker else []
    env = session.env()
    cases += [benchmarks.produce_case(env, size, config, args.partitions, args.producers, args.duration,
                                      profile=args.profile and index == 0)
              for index, size in enumerate(args.message_size)]
    return {"produce": cases}


def _one_broker_yardstick(session: Session, args: argparse.Namespace, config: dict[str, Any]) -> list[dict[str, Any]]:
    """One kbroker's acks=1 cases (against the one-broker mock), measured before a cluster's and
    stopped before it starts: what the acks=all target compares with, from the same invocation."""
    if args.brokers < 2 or args.bootstrap:
        raise BenchError("--with-one-broker goes with --brokers N (N > 1) on a cluster the benchmark starts")
    single = session.kbroker(args.server_config, brokers=1)
    try:
        env = session.env(single)
        return [benchmarks.produce_case(env, size, {**config, "acks": "1"}, args.partitions, args.producers,
                                        args.duration)
                for size in args.message_size]
    finally:
        single.close()


def bench_consume(session: Session, args: argparse.Namespace) -> dict[str, Any]:
    env = session.env()
    modes = {"cache": [False], "cold": [True], "both": [False, True]}[args.mode]
    if args.bootstrap and True in modes:
        session.notes.append("cold-start consume skipped: a --bootstrap broker is not restarted by the benchmark")
        modes = [m for m in modes if not m]
    per_partition = int(args.mib_per_partition * MIB)
    if per_partition > benchmarks.MOCK_PARTITION_BYTES:
        session.notes.append("more than 5 MiB per partition: the mock cluster drops the oldest batches, so it "
                             "serves less data than kbroker (the throughputs stay comparable, not the totals)")
    preload = {"acks": "1", "linger.ms": 50, "batch.size": 1_000_000}
    consumer = _pairs(args.consumer_config, "--consumer-config")
    return {"consume": [benchmarks.consume_case(env, cold, args.partitions, args.message_size, per_partition,
                                                args.passes, consumer, preload) for cold in modes]}


def bench_latency(session: Session, args: argparse.Namespace) -> dict[str, Any]:
    env = session.env()
    producer = _producer_config(args)
    rate = args.rate or args.rate_fraction * benchmarks.probe_max_rate(
        env, args.message_size, {**producer, "linger.ms": 5}, 2.0)
    consumer = {"fetch.wait.max.ms": args.fetch_wait_max_ms, **_pairs(args.consumer_config, "--consumer-config")}
    return {"latency": [benchmarks.latency_case(env, rate, args.message_size, args.latency_duration, args.warmup,
                                                args.partitions, producer, consumer)]}


def bench_partitions(session: Session, args: argparse.Namespace) -> dict[str, Any]:
    env = session.env()
    config = _producer_config(args)
    return {"partitions": [benchmarks.produce_case(env, args.message_size, config, count, 1, args.duration,
                                                   keyed=True, label=f"produce keyed {args.message_size} B p={count}")
                           for count in args.counts]}


def bench_memory(session: Session, args: argparse.Namespace) -> dict[str, Any]:
    if args.bootstrap:
        session.notes.append("memory benchmark skipped: it needs a broker of its own (no --bootstrap)")
        return {}
    env = Env([], session.ui, 1, args.out, args.work_dir, session.notes)
    return {"memory": benchmarks.memory_bench(env, args.partitions, args.steps, args.restarts,
                                              args.topic_partitions, args.server_config,
                                              _pairs(args.override, "--override"))}


def bench_profiles(session: Session, args: argparse.Namespace) -> dict[str, Any]:
    if args.bootstrap:
        session.notes.append("profiles skipped: each profile needs a broker started with its configuration")
        return {}
    rate = args.rate
    results = []
    for name in args.names:
        server_file = args.conf_dir / f"{name}.properties"
        client = parse_properties_file((args.conf_dir / f"{name}.client.properties").read_text())
        producer = {k.removeprefix("producer."): v for k, v in client.items() if k.startswith("producer.")}
        consumer = {k.removeprefix("consumer."): v for k, v in client.items() if k.startswith("consumer.")}
        env = session.env(session.kbroker(str(server_file), {}))
        if rate is None:
            # One rate for every profile, so their latencies are comparable.
            rate = args.rate_fraction * benchmarks.probe_max_rate(env, args.message_size,
                                                                  {"acks": "1", "linger.ms": 5}, 2.0)
        produce = benchmarks.produce_case(env, args.message_size, producer, 1, 1, args.duration,
                                          label=f"{name}: produce {args.message_size} B")
        latency = benchmarks.latency_case(env, rate, args.message_size, args.latency_duration, args.warmup, 1,
                                          producer, consumer, label=f"{name}: latency at {rate:,.0f} msg/s")
        env.kbroker.close()
        results.append({"name": name, "server_config": str(server_file), "producer_config": producer,
                        "consumer_config": consumer, "produce": produce, "latency": latency})
    return {"profiles": results}


def bench_encryption(session: Session, args: argparse.Namespace) -> dict[str, Any]:
    """Two kbrokers with the same settings, one encrypting at rest with a fresh key: their
    produce and page-cache consume throughputs alternate, and "kbroker/plaintext" is the ratio."""
    if args.bootstrap:
        session.notes.append("encryption skipped: it starts an encrypting and a plaintext broker of its own")
        return {}
    key_dir = new_data_dir(args.work_dir, "kbroker-bench-keys-")
    session.data_dirs.append(key_dir)
    key_file = key_dir / "log-encryption.keys"
    key_file.write_text(f"1:{base64.b64encode(os.urandom(32)).decode()}\n")
    key_file.chmod(0o600)
    overrides = _pairs(args.override, "--override")
    encrypted = session.kbroker(args.server_config, {**overrides, "log.encryption.key.file": str(key_file)})
    encrypted.description += " with log.encryption.key.file (AES-256-GCM)"
    return {"encryption": _against_plaintext(session, args, encrypted, "encryption at rest")}


def bench_tls(session: Session, args: argparse.Namespace) -> dict[str, Any]:
    """Two kbrokers with the same settings, one serving the benchmark's clients on an SSL
    listener (TLS with server authentication, a throwaway CA): their produce and page-cache
    consume throughputs alternate, and "kbroker/plaintext" is the ratio."""
    if args.bootstrap:
        session.notes.append("tls skipped: it starts a TLS and a plaintext broker of its own")
        return {}
    cert_dir = new_data_dir(args.work_dir, "kbroker-bench-tls-")
    session.data_dirs.append(cert_dir)
    tls = create_local_tls(cert_dir)
    overrides = _pairs(args.override, "--override")
    port, tls_port = free_port(), free_port()
    secured = session.kbroker(args.server_config, {
        **overrides, "listeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{tls_port}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls.key_store)}, port=port)
    # Topics are made over the PLAINTEXT listener; the measured clients use the SSL one.
    secured.client_address = f"127.0.0.1:{tls_port}"
    secured.client_settings = {"security.protocol": "SSL", "ssl.ca.location": str(tls.ca)}
    secured.description += " with its clients on an SSL listener (TLS, server authentication)"
    return {"tls": _against_plaintext(session, args, secured, "TLS")}


def _against_plaintext(session: Session, args: argparse.Namespace, treated: Server, what: str) -> list[dict[str, Any]]:
    """Produce and page-cache consume on `treated` and on a plain kbroker with the same settings,
    alternated, so each ratio comes from one run."""
    plaintext = session.kbroker(args.server_config, _pairs(args.override, "--override"))
    plaintext.name = "plaintext"  # the reference the treated broker's ratios are taken against
    plaintext.description += f" without {what}"
    env = Env([treated, plaintext], session.ui, args.runs, args.out, args.work_dir, session.notes)
    config = _producer_config(args)
    produce = benchmarks.produce_case(env, args.message_size, config, 1, 1, args.duration,
                                      label=f"{what}: produce {args.message_size} B acks={args.acks} "
                                            f"{args.compression}")
    preload = {"acks": "1", "linger.ms": 50, "batch.size": 1_000_000}
    consume = benchmarks.consume_case(env, False, args.partitions, args.message_size,
                                      int(args.mib_per_partition * MIB), args.passes, {}, preload)
    consume["name"] = f"{what}: {consume['name']}"
    for server in (treated, plaintext):  # idle brokers would share the machine with later benchmarks
        server.close()
    return [produce, consume]


def bench_share(session: Session, args: argparse.Namespace) -> dict[str, Any]:
    """kbroker alone (neither the mock cluster nor Kafka 3.9 serves share groups): the share
    consumers' throughput as ratios to the classic consumer's on the same records."""
    if args.records < 1 or args.partitions < 1 or min(args.share_consumers) < 1:
        raise BenchError("--records, --partitions and --share-consumers must be at least 1")
    if args.benchmark == "share":
        session.skipped.setdefault("kafka", "share groups are measured on kbroker alone, against its classic "
                                   "consumer")
    server = session.kbroker(args.server_config)
    env = Env([server], session.ui, args.runs, args.out, args.work_dir, session.notes)
    preload = {"acks": "1", "linger.ms": 50, "batch.size": 1_000_000}
    try:
        return {"share": [share_bench.share_case(
            env, args.partitions, args.message_size, args.records, args.share_consumers,
            _pairs(args.consumer_config, "--consumer-config"),
            _pairs(args.share_consumer_config, "--share-consumer-config"), preload)]}
    finally:
        server.close()  # an idle broker would share the machine with later benchmarks


def bench_delayed(session: Session, args: argparse.Namespace) -> dict[str, Any]:
    """kbroker alone (neither Kafka nor the mock cluster delays records): docs/delayed-and-retry.md's
    acceptance points, each part on brokers of its own."""
    if args.bootstrap:
        session.notes.append("delayed skipped: it starts, restarts and kills brokers of its own")
        return {}
    session.skipped.setdefault("kafka", "delayed delivery is measured on kbroker alone: Kafka has none")
    env = Env([], session.ui, args.runs, args.out, args.work_dir, session.notes)

    def start_broker() -> Server:  # --brokers 3: a cluster whose topics have rf=3, min.insync.replicas=2
        return session.kbroker(args.server_config, brokers=args.brokers)

    clients = (_pairs(args.consumer_config, "--consumer-config"),
               _pairs(args.delayed_producer_config, "--delayed-producer-config"))
    return {"delayed": delayed_bench.run(env, start_broker, args, *clients)}


def bench_views(session: Session, args: argparse.Namespace) -> dict[str, Any]:
    """kbroker alone (neither the mock cluster nor Kafka has views): each view's reads as ratios
    to its source's, one case per codec and partition count."""
    if args.records < 1 or min(args.partitions) < 1:
        raise BenchError("--records and --partitions must be at least 1")
    if args.benchmark == "views":
        session.skipped.setdefault("kafka", "filtered views are measured on kbroker alone, against their source")
    server = session.kbroker(args.server_config)
    env = Env([server], session.ui, args.runs, args.out, args.work_dir, session.notes)
    # As the consume benchmark's preload: batches of about a megabyte.
    preload = {"acks": "1", "linger.ms": 50, "batch.size": 1_000_000}
    consumer = _pairs(args.consumer_config, "--consumer-config")
    try:
        return {"views": [views_bench.views_case(env, partitions, args.records, args.message_size, compression,
                                                 args.views, consumer, preload, args.profile)
                          for compression in args.compression for partitions in args.partitions]}
    finally:
        server.close()  # an idle broker would share the machine with later benchmarks


def bench_archive(session: Session, args: argparse.Namespace) -> dict[str, Any]:
    """kbroker alone, on a broker of its own that archives to an S3 server the case starts."""
    if args.records < 1:
        raise BenchError("--records must be at least 1")
    if args.bootstrap:
        raise BenchError("the archive benchmark starts its own broker and S3 server: no --bootstrap")
    if importlib.util.find_spec("moto") is None:
        session.skipped["archive"] = "moto is not installed (pip install 'moto[server]', or the test extra)"
        return {}
    if args.benchmark == "archive":
        session.skipped.setdefault("kafka", "the archive is measured on kbroker alone, against its local log")
    env = Env([], session.ui, args.runs, args.out, args.work_dir, session.notes)
    # Uncompressed: the log (and the archive) hold a kilobyte per record, as the records are.
    preload = {"acks": "1", "linger.ms": 50, "batch.size": 1_000_000, "compression.type": "none"}
    return {"archive": [archive_bench.archive_case(env, args.work_dir, args.records, args.message_size, preload)]}


def bench_all(session: Session, args: argparse.Namespace) -> dict[str, Any]:
    smoke = args.smoke
    sizes = [1024, 4096] if smoke else [100, 1024, 10_240]
    duration = 0.5 if smoke else 2.0
    env = session.env()
    base = benchmarks.producer_config("1", 5, 1_000_000, "none")
    produce = [benchmarks.produce_case(env, size, base, 1, 1, duration,
                                       profile=size == 1024 and not args.no_profile and not smoke)
               for size in sizes]
    if not smoke:
        produce.append(benchmarks.produce_case(env, 1024, {**base, "acks": "all"}, 1, 1, duration))
        produce.append(benchmarks.produce_case(env, 1024, {**base, "compression.type": "lz4"}, 1, 1, duration))
    results: dict[str, Any] = {"produce": produce}
    consume = argparse.Namespace(**{**vars(args), "mode": "both", "partitions": 2 if smoke else 8,
                                    "message_size": 1024, "mib_per_partition": 0.25 if smoke else 4.0,
                                    "passes": 1 if smoke else 3, "consumer_config": []})
    results.update(bench_consume(session, consume))
    one_kb = next(c for c in produce if c["params"]["message_size"] == 1024)
    rate = 0.2 * one_kb["servers"]["kbroker"]["median"]["msgs_per_s"]
    latency = argparse.Namespace(**{**vars(args), "rate": rate, "message_size": 1024,
                                    "latency_duration": 0.5 if smoke else 4.0, "warmup": 0.3 if smoke else 1.0,
                                    "partitions": 1, "acks": "1", "linger_ms": 1, "batch_size": 1_000_000,
                                    "compression": "none", "producer_config": [], "fetch_wait_max_ms": 5,
                                    "consumer_config": []})
    results.update(bench_latency(session, latency))
    if args.cluster_brokers > 1:
        cluster = _cluster_cases(session, args, base, duration, latency)
        results["produce"] += cluster.get("produce", [])
        results["latency"] += cluster.get("latency", [])
    sweep = argparse.Namespace(**{**vars(args), "counts": [1, 4] if smoke else [1, 8, 64, 512], "message_size": 1024,
                                  "duration": duration, "acks": "1", "linger_ms": 5, "batch_size": 1_000_000,
                                  "compression": "none", "producer_config": []})
    results.update(bench_partitions(session, sweep))
    memory = argparse.Namespace(**{**vars(args), "partitions": 20 if smoke else args.memory_partitions,
                                   "steps": 2 if smoke else 4, "restarts": 1, "topic_partitions": 1000})
    results.update(bench_memory(session, memory))
    profiles = argparse.Namespace(**{**vars(args), "names": ["low-latency", "high-throughput"],
                                     "conf_dir": PROJECT_CONF, "message_size": 1024, "duration": duration,
                                     "rate": rate, "latency_duration": 0.5 if smoke else 4.0,
                                     "warmup": 0.3 if smoke else 1.0})
    results.update(bench_profiles(session, profiles))
    encryption = argparse.Namespace(**{**vars(args), "message_size": 1024, "acks": "1", "linger_ms": 5,
                                       "batch_size": 1_000_000, "compression": "none", "producer_config": [],
                                       "duration": duration, "partitions": 2 if smoke else 4,
                                       "mib_per_partition": 0.25 if smoke else 16.0, "passes": 1 if smoke else 3})
    results.update(bench_encryption(session, encryption))
    results.update(bench_tls(session, encryption))
    share = argparse.Namespace(**{**vars(args), "records": 2000 if smoke else 100_000, "message_size": 1024,
                                  "partitions": 1, "share_consumers": [1, 4], "consumer_config": [],
                                  "share_consumer_config": []})
    results.update(bench_share(session, share))
    # Short: the one-partition lz4 case that answers the acceptance targets.
    views = argparse.Namespace(**{**vars(args), "records": 2000 if smoke else 100_000, "message_size": 1024,
                                  "partitions": [1], "compression": ["lz4"], "views": ["all", "ten"],
                                  "consumer_config": [], "profile": False})
    results.update(bench_views(session, views))
    archive = argparse.Namespace(**{**vars(args), "records": 2000 if smoke else 100_000, "message_size": 1024})
    results.update(bench_archive(session, archive))
    return results


def _cluster_cases(session: Session, args: argparse.Namespace, base: dict[str, Any], duration: float,
                   latency: argparse.Namespace) -> dict[str, Any]:
    """Issue 7's replicated cases: 1 KB acks=all on a kbroker cluster against the mock cluster with
    as many brokers, and the latency at 20 % of that cluster's acks=all maximum. The cluster is
    stopped afterwards so that its idle brokers do not share the machine with later benchmarks."""
    if args.bootstrap:
        session.notes.append("cluster cases skipped: with --bootstrap, run produce/latency --brokers N instead")
        return {}
    try:
        find_zookeeper()
    except ZooKeeperNotFound as e:
        session.skipped["cluster"] = f"no cluster cases: {e}"
        session.ui.log(f"note: {session.skipped['cluster']}")
        return {}
    cluster = session.kbroker(args.server_config, brokers=args.cluster_brokers,
                              min_insync_replicas=args.min_insync_replicas)
    try:
        env = session.env(cluster)
        produce = benchmarks.produce_case(env, 1024, {**base, "acks": "all"}, 1, 1, duration)
        rate = 0.2 * produce["servers"]["kbroker"]["median"]["msgs_per_s"]
        producer = benchmarks.producer_config("all", latency.linger_ms, latency.batch_size, latency.compression)
        consumer = {"fetch.wait.max.ms": latency.fetch_wait_max_ms}
        latency_case = benchmarks.latency_case(env, rate, 1024, latency.latency_duration, latency.warmup, 1,
                                               producer, consumer)
    finally:
        cluster.close()
    return {"produce": [produce], "latency": [latency_case]}


BENCHMARKS: dict[str, Callable[[Session, argparse.Namespace], dict[str, Any]]] = {
    "produce": bench_produce, "consume": bench_consume, "latency": bench_latency,
    "partitions": bench_partitions, "memory": bench_memory, "profiles": bench_profiles,
    "encryption": bench_encryption, "tls": bench_tls, "share": bench_share, "delayed": bench_delayed,
    "views": bench_views, "archive": bench_archive,
    "all": bench_all,
}


def _producer_config(args: argparse.Namespace) -> dict[str, Any]:
    return benchmarks.producer_config(args.acks, args.linger_ms, args.batch_size, args.compression,
                                      _pairs(args.producer_config, "--producer-config"))


def run(args: argparse.Namespace) -> int:
    if args.runs < 1:
        print("error: --runs must be at least 1", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)  # py-spy writes its samples there during the run
    ui = make_ui(args.quiet)
    session = Session(args, ui)
    started = time.time()
    results: dict[str, Any] = {
        "schema": report.SCHEMA,
        "command": "kbroker bench " + " ".join(sys.argv[sys.argv.index("bench") + 1:] if "bench" in sys.argv else []),
        "benchmark": args.benchmark, "runs": args.runs, "machine": report.machine(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
    }
    from confluent_kafka import KafkaException

    failed = True
    try:
        results.update(BENCHMARKS[args.benchmark](session, args))
        failed = False
    except (BenchError, WorkerError, ServerError, KafkaException) as e:
        ui.close()
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        # One description per kind of server, kbroker first: "kbroker", "mock", and for cluster
        # cases "kbroker (3 brokers)", "mock (3 brokers)".
        servers = {}
        if args.bootstrap:
            given = ExternalServer(args.bootstrap, brokers=getattr(args, "brokers", 1))
            servers[given.label] = given.description
        for server in sorted(session.started, key=lambda s: (s.name != "kbroker", s.brokers)):
            servers.setdefault(server.label, server.description)
        if not servers:
            servers = results.get("memory", {}).get("servers", {})
        session.close(keep_data=failed)
    ui.close()
    results.update({
        "duration_s": round(time.time() - started, 1), "servers": servers, "skipped": session.skipped,
        "notes": session.notes,
    })
    results["targets"] = report.targets(results) + views_bench.targets(results.get("views")) \
        + archive_bench.targets(results.get("archive"))
    args.out.mkdir(parents=True, exist_ok=True)
    results["plots"] = report.plot(results, args.out)
    if not report.can_plot():
        results["notes"].append("no plots: matplotlib is not installed (pip install 'kbroker[bench]')")
    path = report.write(results, args.out)
    lines = report.summary_lines(results)
    # The views' tables go before the targets (or the notes), as the other benchmarks' do.
    at = next((i for i, line in enumerate(lines) if line == "## targets" or line.startswith("- note:")), len(lines))
    lines[at:at] = views_bench.summary_lines(results.get("views")) + archive_bench.summary_lines(results.get("archive"))
    summary = "\n".join(lines) + "\n"
    (args.out / "summary.md").write_text(summary)
    if not args.quiet:
        print(summary)
    print(f"results: {path}")
    return 0
