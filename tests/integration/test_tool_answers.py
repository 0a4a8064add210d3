"""Answers whose exact shape or text Kafka's own tools print (kafka-leader-election.sh,
kafka-topics.sh, kafka-configs.sh): checked on the wire here, and side by side with Apache
Kafka in compat_tests/test_kafka_tools.py."""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode
from tests.brokers import BrokerProcess
from tests.rawclient import RawClient

DESCRIBE_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS, ELECT_LEADERS = 32, 37, 44, 43
TOPIC, BROKER_LOGGER, SET = 2, 8, 0
PREFERRED = 0


def test_electing_every_partition_answers_only_for_those_that_needed_it(broker: BrokerProcess, new_topic) -> None:
    """KRaft's controller leaves out ELECTION_NOT_NEEDED when asked for all partitions (the topic
    entries stay), so kafka-leader-election.sh --all-topic-partitions prints nothing on a balanced
    cluster; a partition asked for by name still gets ELECTION_NOT_NEEDED."""
    topic = new_topic(partitions=2)
    with RawClient(broker.bootstrap) as client:
        everything = client.request(ELECT_LEADERS, 2, {"election_type": PREFERRED, "topic_partitions": None,
                                                       "timeout_ms": 10000})
        named = client.request(ELECT_LEADERS, 2, {"election_type": PREFERRED, "timeout_ms": 10000,
                                                  "topic_partitions": [{"topic": topic, "partitions": [1]}]})
    assert everything.error_code == ErrorCode.NO_ERROR
    by_topic = {r.topic: list(r.partition_result) for r in everything.replica_election_results}
    assert by_topic[topic] == []
    assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
            for r in named.replica_election_results] == [(topic, [(1, ErrorCode.ELECTION_NOT_NEEDED)])]


def test_electing_what_does_not_exist_says_so(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic()
    body = {"election_type": PREFERRED, "timeout_ms": 10000, "topic_partitions": [
        {"topic": "no-such-topic", "partitions": [0]}, {"topic": topic, "partitions": [5]}]}
    with RawClient(broker.bootstrap) as client:
        answer = client.request(ELECT_LEADERS, 2, body)
    assert [(p.partition_id, p.error_code, p.error_message) for r in answer.replica_election_results
            for p in r.partition_result] == [
        (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as no-such-topic"),
        (5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-5")]


def test_create_partitions_refusals_say_what_kafka_says(broker: BrokerProcess, new_topic) -> None:
    topic = new_topic(partitions=3)
    body = {"topics": [{"name": topic, "count": 2, "assignments": None}], "timeout_ms": 10000,
            "validate_only": False}
    same = {**body, "topics": [{"name": topic, "count": 3, "assignments": None}]}
    with RawClient(broker.bootstrap) as client:
        shrink = client.request(CREATE_PARTITIONS, 3, body).results[0]
        unchanged = client.request(CREATE_PARTITIONS, 3, same).results[0]
    assert (shrink.error_code, shrink.error_message) == (
        ErrorCode.INVALID_PARTITIONS, f"The topic {topic} currently has 3 partition(s); 2 would not be an increase.")
    assert (unchanged.error_code, unchanged.error_message) == (
        ErrorCode.INVALID_PARTITIONS, "Topic already has 3 partition(s).")


@pytest.mark.parametrize("level", ["LOUD", "warn", "OFF"])
def test_an_unknown_log_level_is_refused_with_the_valid_ones(broker: BrokerProcess, level: str) -> None:
    """Kafka takes only its six level names, in upper case."""
    body = {"resources": [{"resource_type": BROKER_LOGGER, "resource_name": "0", "configs": [
        {"name": "root", "config_operation": SET, "value": level}]}], "validate_only": False}
    with RawClient(broker.bootstrap) as client:
        answer = client.request(INCREMENTAL_ALTER_CONFIGS, 1, body).responses[0]
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.INVALID_CONFIG, f"Cannot set the log level of root to {level} as it is not a supported log level. "
                                  "Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN")


def test_describing_the_configs_of_a_missing_topic_answers_the_code_alone(broker: BrokerProcess) -> None:
    """Kafka leaves the message at its default, "" (not null, which clients would replace by the
    code's own text)."""
    body = {"resources": [{"resource_type": TOPIC, "resource_name": "no-such-topic", "configuration_keys": None}],
            "include_synonyms": True, "include_documentation": False}
    with RawClient(broker.bootstrap) as client:
        result = client.request(DESCRIBE_CONFIGS, 4, body).results[0]
    assert (result.error_code, result.error_message, list(result.configs)) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "", [])
