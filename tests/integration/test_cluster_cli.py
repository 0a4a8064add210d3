"""`kbroker cluster start --brokers 3` / `kbroker cluster stop`, and brokers on ZooKeeper.

Real processes throughout: the console script starts ZooKeeper and three brokers; the test
looks at ZooKeeper with kazoo and at the brokers with confluent-kafka's admin client.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from kbroker.metadata.zk_layout import parse_kafka_uuid
from tests.brokers import free_port
from tests.conftest import require_zookeeper

KBROKER = str(Path(sys.executable).parent / "kbroker")


def kbroker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KBROKER, *args], capture_output=True, text=True, timeout=timeout)


def process_alive(pid: int) -> bool:
    """Running, and not a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_three_broker_cluster_shares_its_topics_through_zookeeper(tmp_path: Path) -> None:
    require_zookeeper()
    data_dir = tmp_path / "cluster"
    state_path = data_dir / "cluster.json"
    started = kbroker("cluster", "start", "--brokers", "3", "--data-dir", str(data_dir), "--base-port", "0")
    try:
        assert started.returncode == 0, started.stderr
        state = json.loads(state_path.read_text())
        bootstrap = re.search(r"^bootstrap servers: (\S+)$", started.stdout, re.MULTILINE)
        assert bootstrap is not None, started.stdout
        assert bootstrap.group(1) == state["bootstrap_servers"]
        ports = {b["broker_id"]: b["port"] for b in state["brokers"]}
        assert sorted(ports) == [1, 2, 3]
        pids = [state["zookeeper"]["pid"], *(b["pid"] for b in state["brokers"])]
        assert all(process_alive(pid) for pid in pids)

        again = kbroker("cluster", "start", "--brokers", "3", "--data-dir", str(data_dir), "--base-port", "0")
        assert again.returncode == 1 and "is running" in again.stderr, again.stderr

        zk = KazooClient(state["zookeeper_connect"])
        zk.start(timeout=10)
        try:
            assert sorted(zk.get_children("/brokers/ids")) == ["1", "2", "3"]
            for broker_id, port in ports.items():
                data, stat = zk.get(f"/brokers/ids/{broker_id}")
                assert stat.ephemeralOwner != 0
                assert json.loads(data)["endpoints"] == [f"PLAINTEXT://127.0.0.1:{port}"]
            # One cluster id, from ZooKeeper, in every broker's meta.properties.
            cluster_id = json.loads(zk.get("/cluster/id")[0])["id"]
            for broker in state["brokers"]:
                meta = (Path(broker["directory"]) / "logs" / "meta.properties").read_text()
                assert f"cluster.id={cluster_id}\n" in meta

            # Created through broker 2, spread over the live brokers ...
            name = f"cluster-{uuid.uuid4().hex[:8]}"
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports[2]}"})
            admin.create_topics([NewTopic(name, 2, 1, config={"retention.ms": "60000"})])[name].result(timeout=30)
            topic = json.loads(zk.get(f"/brokers/topics/{name}")[0])
            assert topic["version"] == 3
            assert sorted(topic["partitions"]) == ["0", "1"]
            placed = [replicas for replicas in topic["partitions"].values()]
            assert all(len(r) == 1 for r in placed) and len({r[0] for r in placed}) == 2
            assert {r[0] for r in placed} <= {1, 2, 3}
            assert json.loads(zk.get(f"/config/topics/{name}")[0]) == {"version": 1, "config": {"retention.ms": "60000"}}

            # ... and every broker knows it, with the same id, through the store.
            for port in ports.values():
                described = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(name, timeout=15)
                assert name in described.topics, port
                assert len(described.topics[name].partitions) == 2
            assert parse_kafka_uuid(topic["topic_id"]).bytes == _topic_id(ports[3], name)
        finally:
            zk.stop()
            zk.close()

        # A fourth broker that took broker 1's id by mistake is turned away, broker 1 untouched.
        duplicate = kbroker("start", "--override", "broker.id=1", "--override", f"log.dirs={tmp_path / 'dup'}",
                            "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
                            "--override", f"zookeeper.connect={state['zookeeper_connect']}", timeout=60)
        assert duplicate.returncode == 1
        assert "error: broker.id 1 is registered by another live broker" in duplicate.stderr
        assert process_alive(state["brokers"][0]["pid"])

        stopped = kbroker("cluster", "stop", "--data-dir", str(data_dir))
        assert stopped.returncode == 0, stopped.stderr
        assert [pid for pid in pids if process_alive(pid)] == []
        assert not state_path.exists()
        for broker in state["brokers"]:  # a clean shutdown: flushed and checkpointed
            assert (Path(broker["directory"]) / "logs" / ".kafka_cleanshutdown").exists()
    finally:
        if state_path.exists():
            kbroker("cluster", "stop", "--data-dir", str(data_dir))


def _topic_id(port: int, name: str) -> bytes:
    """The topic id a broker reports in Metadata (kbroker's own client speaks v12)."""
    from kbroker.client import Client

    client = Client(f"127.0.0.1:{port}")
    try:
        return client.metadata([name]).topics[name].topic_id.bytes
    finally:
        client.close()


def test_a_broker_that_cannot_reach_zookeeper_says_so(tmp_path: Path) -> None:
    nobody = free_port()
    result = kbroker("start", "--override", f"log.dirs={tmp_path / 'logs'}", "--override",
                     f"listeners=PLAINTEXT://127.0.0.1:{free_port()}", "--override",
                     f"zookeeper.connect=127.0.0.1:{nobody}", "--override", "zookeeper.connection.timeout.ms=1000",
                     timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == \
        f"error: could not connect to ZooKeeper at 127.0.0.1:{nobody} within 1 s"
