"""ApiVersions against Apache Kafka 3.9.0's: clients infer the broker's version from these ranges
(librdkafka and the Java client pick features by them), so every API kbroker serves advertises
exactly Kafka's range."""

from __future__ import annotations

from tests.brokers import BrokerProcess
from tests.rawclient import RawClient

API_VERSIONS = 18

# What Apache Kafka 3.9.0 (one KRaft node, broker and controller) advertises to clients, as
# `kafka-broker-api-versions.sh` lists it; the APIs it answers UNSUPPORTED are not listed.
KAFKA_3_9_RANGES = {
    0: (0, 11),  # Produce
    1: (0, 17),  # Fetch
    2: (0, 9),  # ListOffsets
    3: (0, 12),  # Metadata
    8: (0, 9),  # OffsetCommit
    9: (0, 9),  # OffsetFetch
    10: (0, 6),  # FindCoordinator
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 5),  # ListGroups
    17: (0, 1),  # SaslHandshake
    18: (0, 4),  # ApiVersions
    19: (0, 7),  # CreateTopics
    20: (0, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 5),  # InitProducerId
    23: (0, 4),  # OffsetForLeaderEpoch
    24: (0, 5),  # AddPartitionsToTxn
    25: (0, 4),  # AddOffsetsToTxn
    26: (0, 4),  # EndTxn
    27: (0, 1),  # WriteTxnMarkers
    28: (0, 4),  # TxnOffsetCommit
    29: (0, 3),  # DescribeAcls
    30: (0, 3),  # CreateAcls
    31: (0, 3),  # DeleteAcls
    32: (0, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    34: (0, 2),  # AlterReplicaLogDirs
    35: (0, 4),  # DescribeLogDirs
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    38: (0, 3),  # CreateDelegationToken
    39: (0, 2),  # RenewDelegationToken
    40: (0, 2),  # ExpireDelegationToken
    41: (0, 3),  # DescribeDelegationToken
    42: (0, 2),  # DeleteGroups
    43: (0, 2),  # ElectLeaders
    44: (0, 1),  # IncrementalAlterConfigs
    45: (0, 0),  # AlterPartitionReassignments
    46: (0, 0),  # ListPartitionReassignments
    47: (0, 0),  # OffsetDelete
    48: (0, 1),  # DescribeClientQuotas
    49: (0, 1),  # AlterClientQuotas
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    55: (0, 2),  # DescribeQuorum
    57: (0, 1),  # UpdateFeatures
    60: (0, 1),  # DescribeCluster
    61: (0, 0),  # DescribeProducers
    64: (0, 0),  # UnregisterBroker
    65: (0, 0),  # DescribeTransactions
    66: (0, 1),  # ListTransactions
    68: (0, 1),  # ConsumerGroupHeartbeat: Kafka 4.0's range (3.9 has v0 only), which librdkafka 2.10+ needs
    69: (0, 0),  # ConsumerGroupDescribe
    74: (0, 0),  # ListClientMetricsResources
    75: (0, 0),  # DescribeTopicPartitions
    # Share groups (KIP-932) as released in Kafka 4.1 (3.9 has none); group.share.enable=false hides them.
    76: (1, 1),  # ShareGroupHeartbeat
    77: (1, 1),  # ShareGroupDescribe
    78: (1, 1),  # ShareFetch
    79: (1, 2),  # ShareAcknowledge
    80: (0, 0),  # AddRaftVoter
    81: (0, 0),  # RemoveRaftVoter
    90: (0, 1),  # DescribeShareGroupOffsets: Kafka 4.2's range (v1 adds the lag, KIP-1226)
    91: (0, 0),  # AlterShareGroupOffsets
    92: (0, 0),  # DeleteShareGroupOffsets
}


def test_every_advertised_api_has_kafka_3_9s_range(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        answer = client.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    advertised = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert advertised[68] == (0, 1) and advertised[69] == (0, 0)  # the consumer group protocol (KIP-848)
    assert advertised.keys() <= KAFKA_3_9_RANGES.keys(), "an API Kafka 3.9 (or 4.1 for share groups) does not serve"
    assert advertised == {key: KAFKA_3_9_RANGES[key] for key in advertised}
