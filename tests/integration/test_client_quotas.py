"""DescribeClientQuotas and AlterClientQuotas on real brokers: every filter kind, defaults,
validate_only, Kafka's errors, persistence across a restart, and on a three-broker ZooKeeper
cluster a quota set through one broker described and enforced by another."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kbroker.client import Client
from kbroker.client.quotas import ANY, DEFAULT
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import Record, encode_batch
from tests.brokers import BrokerProcess, running_cluster
from tests.rawclient import RawClient
from tests.waiting import wait_until

ALICE = (("user", "alice"),)
ALICE_C1 = (("user", "alice"), ("client-id", "c1"))
ALICE_DEFAULT_CLIENT = (("user", "alice"), ("client-id", None))
DEFAULT_USER = (("user", None),)
DEFAULT_USER_C1 = (("user", None), ("client-id", "c1"))
C1 = (("client-id", "c1"),)
DEFAULT_CLIENT = (("client-id", None),)
ODD = (("user", "bob smith/*"), ("client-id", "app:1"))
QUOTAS = {
    ALICE: {"producer_byte_rate": 1024.0},
    ALICE_C1: {"consumer_byte_rate": 2048.0, "request_percentage": 12.5},
    ALICE_DEFAULT_CLIENT: {"producer_byte_rate": 4096.0},
    DEFAULT_USER: {"controller_mutation_rate": 10.0},
    DEFAULT_USER_C1: {"producer_byte_rate": 8192.0},
    C1: {"producer_byte_rate": 500.0},
    DEFAULT_CLIENT: {"consumer_byte_rate": 1e6},
    ODD: {"producer_byte_rate": 77.0},
}


def _set_all(client: Client) -> None:
    results = client.alter_client_quotas([(entity, dict(values)) for entity, values in QUOTAS.items()])
    assert [(r.entity, r.error_code) for r in results] == [(e, 0) for e in QUOTAS]


def _key(entity: tuple[tuple[str, str | None], ...]) -> frozenset[tuple[str, str | None]]:
    return frozenset(entity)


def _described(client: Client, components: list[tuple[str, object]], strict: bool = False) -> set[frozenset]:
    return {_key(entity) for entity in client.describe_client_quotas(components, strict)}


def _expect(*entities: tuple[tuple[str, str | None], ...]) -> set[frozenset]:
    return {_key(e) for e in entities}


def test_alter_then_describe_with_every_filter(make_broker: Callable[..., BrokerProcess]) -> None:
    broker = make_broker()
    with Client(broker.bootstrap) as client:
        _set_all(client)
        everything = client.describe_client_quotas([])
        assert {_key(e): v for e, v in everything.items()} == {_key(e): v for e, v in QUOTAS.items()}
        assert _described(client, [], strict=True) == set()
        # user filters
        assert _described(client, [("user", "alice")]) == _expect(ALICE, ALICE_C1, ALICE_DEFAULT_CLIENT)
        assert _described(client, [("user", "alice")], strict=True) == _expect(ALICE)
        assert _described(client, [("user", DEFAULT)]) == _expect(DEFAULT_USER, DEFAULT_USER_C1)
        assert _described(client, [("user", DEFAULT)], strict=True) == _expect(DEFAULT_USER)
        assert _described(client, [("user", ANY)]) == _expect(ALICE, ALICE_C1, ALICE_DEFAULT_CLIENT, DEFAULT_USER,
                                                             DEFAULT_USER_C1, ODD)
        assert _described(client, [("user", ANY)], strict=True) == _expect(ALICE, DEFAULT_USER)
        # client-id filters
        assert _described(client, [("client-id", "c1")]) == _expect(ALICE_C1, DEFAULT_USER_C1, C1)
        assert _described(client, [("client-id", "c1")], strict=True) == _expect(C1)
        assert _described(client, [("client-id", DEFAULT)]) == _expect(ALICE_DEFAULT_CLIENT, DEFAULT_CLIENT)
        assert _described(client, [("client-id", ANY)], strict=True) == _expect(C1, DEFAULT_CLIENT)
        # both
        assert _described(client, [("user", "alice"), ("client-id", "c1")]) == _expect(ALICE_C1)
        assert _described(client, [("user", "alice"), ("client-id", DEFAULT)]) == _expect(ALICE_DEFAULT_CLIENT)
        assert _described(client, [("user", ANY), ("client-id", ANY)]) == _expect(
            ALICE_C1, ALICE_DEFAULT_CLIENT, DEFAULT_USER_C1, ODD)
        assert _described(client, [("user", "bob smith/*"), ("client-id", "app:1")], strict=True) == _expect(ODD)
        assert _described(client, [("user", "nobody")]) == set()
        assert _described(client, [("ip", ANY)]) == set()

        # remove one key, then the last key of an entity: it is gone from descriptions
        results = client.alter_client_quotas([(ALICE_C1, {"consumer_byte_rate": None}), (C1, {"producer_byte_rate": None})])
        assert [r.error_code for r in results] == [0, 0]
        after = client.describe_client_quotas([("client-id", "c1")])
        assert {_key(e): v for e, v in after.items()} == {_key(ALICE_C1): {"request_percentage": 12.5},
                                                          _key(DEFAULT_USER_C1): {"producer_byte_rate": 8192.0}}


def test_validate_only_and_errors(make_broker: Callable[..., BrokerProcess]) -> None:
    broker = make_broker()
    with Client(broker.bootstrap) as client:
        [checked] = client.alter_client_quotas([(ALICE, {"producer_byte_rate": 1024})], validate_only=True)
        assert checked.error_code == 0
        assert client.describe_client_quotas([]) == {}
        cases = [
            ((), {"producer_byte_rate": 1}, "Invalid empty client quota entity"),
            ((("group", "g"),), {"producer_byte_rate": 1}, "Unhandled client quota entity type: group"),
            ((("user", ""),), {"producer_byte_rate": 1}, "Empty user not supported"),
            ((("ip", "10.0.0.1"), ("user", "u")), {"producer_byte_rate": 1},
             "Invalid quota entity combination, IP entity should not be used with user/client ID entity."),
            (ALICE, {"bogus_rate": 1}, "Invalid configuration key bogus_rate"),
            (ALICE, {"producer_byte_rate": 1.5}, "Configuration producer_byte_rate must be a LONG value"),
            (ALICE, {"producer_byte_rate": 0}, "Quota producer_byte_rate must be greater than 0"),
            (C1, {"request_percentage": -1}, "Quota request_percentage must be greater than 0"),
            # One bad op fails the whole entity: the good one is not written either.
            (C1, {"producer_byte_rate": 10, "nope": 1}, "Invalid configuration key nope"),
        ]
        results = client.alter_client_quotas([(entity, ops) for entity, ops, _ in cases])
        assert [(r.error_code, r.error_message) for r in results] == [
            (ErrorCode.INVALID_REQUEST, message) for _, _, message in cases]
        assert client.describe_client_quotas([]) == {}
        # A fractional double is fine; a whole number sent as a double is stored as a long.
        results = client.alter_client_quotas([(C1, {"request_percentage": 0.5, "producer_byte_rate": 2048.0})])
        assert results[0].error_code == 0
        assert client.describe_client_quotas([("client-id", "c1")]) == {
            C1: {"producer_byte_rate": 2048.0, "request_percentage": 0.5}}
    with RawClient(broker.bootstrap) as raw:
        def describe(components: list[dict]) -> tuple[int, str | None, object]:
            answer = raw.request(48, 1, {"components": components, "strict": False})
            return answer.error_code, answer.error_message, answer.entries

        exact = {"match_type": 0, "match": "x"}
        assert describe([{"entity_type": "user", **exact}, {"entity_type": "user", **exact}]) == (
            ErrorCode.INVALID_REQUEST, "Duplicate user filter component entity type", None)
        assert describe([{"entity_type": "", **exact}]) == (
            ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type", None)
        assert describe([{"entity_type": "topic", **exact}]) == (
            ErrorCode.UNSUPPORTED_VERSION, "Custom entity type 'topic' not supported", None)
        assert describe([{"entity_type": "ip", **exact}, {"entity_type": "user", **exact}])[0] == \
            ErrorCode.INVALID_REQUEST


def test_quotas_and_scram_credentials_share_the_user_and_survive_a_restart(
        make_broker: Callable[..., BrokerProcess]) -> None:
    broker = make_broker()
    with Client(broker.bootstrap) as client:
        _set_all(client)
        client.request(51, {"deletions": [], "upsertions": [{
            "name": "alice", "mechanism": 1, "iterations": 4096, "salt": b"salt", "salted_password": b"x" * 32}]})
        # A quota change keeps the user's credential, and a credential change its quotas.
        client.alter_client_quotas([(ALICE, {"consumer_byte_rate": 3000})])
    broker.restart()
    with Client(broker.bootstrap) as client:
        described = {_key(e): v for e, v in client.describe_client_quotas([]).items()}
        assert described[_key(ALICE)] == {"producer_byte_rate": 1024.0, "consumer_byte_rate": 3000.0}
        assert len(described) == len(QUOTAS)
        users = client.request(50, {"users": [{"name": "alice"}]})
        assert [(r.user, r.error_code, len(r.credential_infos)) for r in users.results] == [("alice", 0, 1)]


def _produce_throttle_ms(bootstrap: str, client_id: str, topic: str, partition: int, node: int) -> int:
    batch = encode_batch([Record(0, int(time.time() * 1000), None, b"v" * 50_000)])
    with Client(bootstrap, client_id=client_id) as client:
        answer = client.request(0, {"transactional_id": None, "acks": 1, "timeout_ms": 10_000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}, node=node)
    assert answer.responses[0].partition_responses[0].error_code == 0
    return answer.throttle_time_ms


def test_a_quota_set_through_one_broker_applies_on_another(tmp_path: Path, zk_connect: str) -> None:
    with running_cluster(tmp_path, zk_connect, 3) as brokers:
        with Client(brokers[0].bootstrap) as client:
            client.create_topic("quota-cluster", partitions=3, replication_factor=1)
            leaders = wait_until(lambda: {client.leader("quota-cluster", p): p for p in range(3)}
                                 if len({client.leader("quota-cluster", p) for p in range(3)}) == 3 else None,
                                 what="one partition led by each broker")
            partition = leaders[2]
            # Nothing throttles before the quota.
            assert _produce_throttle_ms(brokers[2].bootstrap, "zk-limited", "quota-cluster", partition, 2) == 0
            [result] = client.alter_client_quotas([((("client-id", "zk-limited"),), {"producer_byte_rate": 1000})])
            assert result.error_code == 0
        # Described by another broker (read from ZooKeeper) and enforced by it (its cache learns
        # of the change through the notification).
        with Client(brokers[1].bootstrap) as other:
            assert other.describe_client_quotas([("client-id", "zk-limited")]) == {
                (("client-id", "zk-limited"),): {"producer_byte_rate": 1000.0}}
        throttle = wait_until(lambda: _produce_throttle_ms(brokers[2].bootstrap, "zk-limited", "quota-cluster",
                                                           partition, 2), what="broker 2 throttling zk-limited")
        assert throttle > 0
        # Another client id is not throttled there.
        assert _produce_throttle_ms(brokers[2].bootstrap, "zk-free", "quota-cluster", partition, 2) == 0


def test_quota_apis_answer_kafkas_error_shapes(make_broker: Callable[..., BrokerProcess]) -> None:
    broker = make_broker()
    with Client(broker.bootstrap) as client, pytest.raises(KafkaError, match="Duplicate client filter component "
                                                                            "entity type"):
        client.describe_client_quotas([("client-id", "a"), ("client-id", "b")])


def test_the_cli_sets_and_shows_quotas_as_kafka_configs_does(make_broker: Callable[..., BrokerProcess]) -> None:
    import subprocess
    import sys

    from tests.brokers import PROJECT_ROOT

    broker = make_broker()

    def kbroker(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "kbroker.cli.main", *args], cwd=PROJECT_ROOT, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    bs = ["--bootstrap-server", broker.bootstrap]
    user = ["configs", *bs, "--entity-type", "users", "--entity-name", "u"]
    assert kbroker(*user, "--alter", "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048") == \
        "Completed updating config for user u.\n"
    assert kbroker("configs", *bs, "--entity-type", "clients", "--entity-default", "--alter", "--add-config",
                   "consumer_byte_rate=4096") == "Completed updating default config for clients in the cluster.\n"
    assert kbroker(*user, "--entity-type", "clients", "--entity-name", "c1", "--alter", "--add-config",
                   "request_percentage=50") == "Completed updating config for user u, client c1.\n"
    # The lines Kafka's kafka-configs.sh prints for the same entities.
    assert kbroker(*user, "--describe") == \
        "Quota configs for user-principal 'u' are consumer_byte_rate=2048.0,producer_byte_rate=1024.0\n"
    assert kbroker("configs", *bs, "--entity-type", "clients", "--describe") == \
        "Quota configs for the default client-id are consumer_byte_rate=4096.0\n"
    assert kbroker(*user, "--alter", "--delete-config", "consumer_byte_rate") == "Completed updating config for user u.\n"
    assert kbroker("client-quotas", *bs, "--describe", "--user", "u") == (
        "user=u: producer_byte_rate=1024.0\nuser=u, client-id=c1: request_percentage=50.0\n")
    assert kbroker("client-quotas", *bs, "--alter", "--client-id", "c2", "--add-config", "producer_byte_rate=10") == \
        "Altered the quotas of client-id=c2.\n"
    assert kbroker("client-quotas", *bs, "--describe", "--any-client-id", "--strict") == (
        "client-id=<default>: consumer_byte_rate=4096.0\nclient-id=c2: producer_byte_rate=10.0\n")
