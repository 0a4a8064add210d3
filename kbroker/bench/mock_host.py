"""A process hosting librdkafka's mock cluster: `python -m kbroker.bench.mock_host BROKERS`.

confluent-kafka has no Python API for the mock cluster beyond `test.mock.num.brokers`, which
gives each client a private cluster: a producer and a consumer could not share one. librdkafka
itself exports `rd_kafka_mock_cluster_new` and friends, so this calls them through ctypes on the
librdkafka that confluent-kafka loads. The mock cluster runs in its own C thread and listens on
loopback TCP ports that any client can bootstrap from.

It runs in its own process, like kbroker, so the load generator gets the same CPU share in
both cases and the reference's memory and CPU time can be read from /proc.

Protocol on stdin/stdout, one line each way per command:
    create TOPIC PARTITIONS [REPLICATION_FACTOR]   -> ok | error ...
    delete TOPIC                                    -> ok | error ...
    (end of input)                                  -> the cluster is destroyed and the process exits
The first line printed is `bootstrap HOST:PORT[,...]`.

A replication factor above 1 only spreads replicas over the mock brokers in metadata: the mock
keeps one copy of each partition and answers a produce at once whatever its acks, so with
acks=all it is the cost of a broker that does not replicate.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys

RD_KAFKA_PRODUCER = 0


def load_librdkafka() -> ctypes.CDLL:
    """The librdkafka confluent-kafka uses: the one bundled in its wheel, else the system's."""
    import confluent_kafka

    package_dir = os.path.dirname(confluent_kafka.__file__)
    bundled = sorted(glob.glob(os.path.join(package_dir, os.pardir, "confluent_kafka.libs", "librdkafka*.so*")))
    path = bundled[0] if bundled else ctypes.util.find_library("rdkafka")
    if not path:
        raise OSError("librdkafka not found (neither in the confluent-kafka wheel nor on the system)")
    lib = ctypes.CDLL(path)
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_size_t]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_topic_delete.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_delete.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.rd_kafka_err2str.restype = ctypes.c_char_p
    lib.rd_kafka_err2str.argtypes = [ctypes.c_int]
    return lib


class MockCluster:
    def __init__(self, brokers: int = 1) -> None:
        self.lib = load_librdkafka()
        errstr = ctypes.create_string_buffer(512)
        conf = self.lib.rd_kafka_conf_new()
        # The handle only owns the cluster; it has no brokers of its own and nothing to report.
        self.lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))
        self.rk = self.lib.rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, len(errstr))
        if not self.rk:
            raise OSError(f"rd_kafka_new failed: {errstr.value.decode()}")
        self.cluster = self.lib.rd_kafka_mock_cluster_new(self.rk, brokers)
        if not self.cluster:
            self.lib.rd_kafka_destroy(self.rk)
            raise OSError("rd_kafka_mock_cluster_new failed")
        self.bootstrap = self.lib.rd_kafka_mock_cluster_bootstraps(self.cluster).decode()

    def create_topic(self, name: str, partitions: int, replication_factor: int = 1) -> None:
        self._check(self.lib.rd_kafka_mock_topic_create(self.cluster, name.encode(), partitions,
                                                        replication_factor))

    def delete_topic(self, name: str) -> None:
        self._check(self.lib.rd_kafka_mock_topic_delete(self.cluster, name.encode()))

    def _check(self, err: int) -> None:
        if err:
            raise OSError(self.lib.rd_kafka_err2str(err).decode())

    def close(self) -> None:
        self.lib.rd_kafka_mock_cluster_destroy(self.cluster)
        self.lib.rd_kafka_destroy(self.rk)


def main() -> int:
    cluster = MockCluster(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    print(f"bootstrap {cluster.bootstrap}", flush=True)
    for line in sys.stdin:
        words = line.split()
        try:
            if words[:1] == ["create"] and len(words) in (3, 4):
                cluster.create_topic(words[1], int(words[2]), int(words[3]) if len(words) == 4 else 1)
            elif words[:1] == ["delete"] and len(words) == 2:
                cluster.delete_topic(words[1])
            else:
                raise ValueError(f"unknown command {line.strip()!r}")
            print("ok", flush=True)
        except (OSError, ValueError) as e:
            print(f"error {e}", flush=True)
    cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
