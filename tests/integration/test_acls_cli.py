"""`kbroker acls` and Kafka 3.9's own `kafka-acls.sh --bootstrap-server` against kbroker: add,
list and remove, each seen by the other tool and enforced by the broker.

The tools connect on the PLAINTEXT listener, whose principal (User:ANONYMOUS) is a super user
here, as an operator's loopback admin listener would be."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.kafka_local import kafka_home_or_skip, run_tool
from tests.brokers import BrokerProcess

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("acls-cli"), overrides={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:ANONYMOUS"}).start()
    yield process
    assert process.stop() == 0, process.log_tail()


def _kbroker(broker: BrokerProcess, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "kbroker.cli.main", "acls", "--bootstrap-server",
                             broker.bootstrap, *args], cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_kbroker_acls_add_list_remove(broker: BrokerProcess) -> None:
    added = _kbroker(broker, "--add", "--allow-principal", "User:alice", "--producer", "--topic", "orders",
                     "--transactional-id", "tx-alice", "--idempotent")
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`" in added
    listed = _kbroker(broker, "--list", "--topic", "orders")
    for operation in ("WRITE", "DESCRIBE", "CREATE"):
        assert f"(principal=User:alice, host=*, operation={operation}, permissionType=ALLOW)" in listed
    everything = _kbroker(broker, "--list")
    assert "resourceType=TRANSACTIONAL_ID, name=tx-alice" in everything
    assert "resourceType=CLUSTER, name=kafka-cluster" in everything and "IDEMPOTENT_WRITE" in everything
    _kbroker(broker, "--add", "--deny-principal", "User:mallory", "--operation", "Read", "--topic", "pay-",
             "--resource-pattern-type", "prefixed")
    assert "patternType=PREFIXED" in _kbroker(broker, "--list", "--topic", "pay-", "--resource-pattern-type", "prefixed")
    _kbroker(broker, "--remove", "--force", "--allow-principal", "User:alice", "--producer", "--topic", "orders")
    assert "User:alice" not in _kbroker(broker, "--list", "--topic", "orders")
    assert "tx-alice" in _kbroker(broker, "--list")  # only the topic's were removed


def test_kafka_acls_sh_against_kbroker(broker: BrokerProcess) -> None:
    home = kafka_home_or_skip()
    added = run_tool(home, "kafka-acls", "--bootstrap-server", broker.bootstrap, "--add", "--allow-principal",
                     "User:bob", "--consumer", "--topic", "events", "--group", "readers")
    assert added.returncode == 0, added.stderr
    # What Kafka's tool added, kbroker's lists (and the reverse below).
    listed = _kbroker(broker, "--list", "--topic", "events")
    assert "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)" in listed
    assert "(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)" in listed
    _kbroker(broker, "--add", "--allow-principal", "User:carol", "--operation", "Write", "--topic", "events")
    shown = run_tool(home, "kafka-acls", "--bootstrap-server", broker.bootstrap, "--list", "--topic", "events")
    assert shown.returncode == 0, shown.stderr
    assert "(principal=User:carol, host=*, operation=WRITE, permissionType=ALLOW)" in shown.stdout
    assert "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)" in shown.stdout
    group = run_tool(home, "kafka-acls", "--bootstrap-server", broker.bootstrap, "--list", "--group", "readers")
    assert "resourceType=GROUP, name=readers, patternType=LITERAL" in group.stdout
    removed = run_tool(home, "kafka-acls", "--bootstrap-server", broker.bootstrap, "--remove", "--force",
                       "--allow-principal", "User:bob", "--consumer", "--topic", "events", "--group", "readers")
    assert removed.returncode == 0, removed.stderr
    after = _kbroker(broker, "--list", "--topic", "events")
    assert "User:bob" not in after and "User:carol" in after
