"""Authorized-operation bitfields that Metadata, DescribeCluster and DescribeTopicPartitions report.

kbroker has no authorizer yet, so, as Kafka does without one, every operation a resource
supports is allowed. Bits are Kafka's AclOperation codes.
"""

from __future__ import annotations

import enum


class AclOperation(enum.IntEnum):
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


# What a client gets when it did not ask for authorized operations (Integer.MIN_VALUE).
NOT_REQUESTED = -2147483648

_OPS = AclOperation
CLUSTER_OPERATIONS = (_OPS.CREATE, _OPS.ALTER, _OPS.DESCRIBE, _OPS.CLUSTER_ACTION, _OPS.DESCRIBE_CONFIGS,
                      _OPS.ALTER_CONFIGS, _OPS.IDEMPOTENT_WRITE)
TOPIC_OPERATIONS = (_OPS.READ, _OPS.WRITE, _OPS.CREATE, _OPS.DELETE, _OPS.ALTER, _OPS.DESCRIBE,
                    _OPS.DESCRIBE_CONFIGS, _OPS.ALTER_CONFIGS)


def bitfield(operations: tuple[AclOperation, ...]) -> int:
    return sum(1 << op for op in operations)


def cluster_operations(requested: bool) -> int:
    return bitfield(CLUSTER_OPERATIONS) if requested else NOT_REQUESTED


def topic_operations(requested: bool) -> int:
    return bitfield(TOPIC_OPERATIONS) if requested else NOT_REQUESTED


GROUP_OPERATIONS = (_OPS.READ, _OPS.DELETE, _OPS.DESCRIBE)


def group_operations(requested: bool) -> int:
    return bitfield(GROUP_OPERATIONS) if requested else NOT_REQUESTED
