"""What kbroker's own describe APIs (DescribeDelayed, DescribeArchive) share: a request naming
topics (null: every topic the caller may describe that has partitions led here) and their
partition indexes (null: all), answered topic by topic and partition by partition.

A topic needs DESCRIBE, as ListOffsets and Metadata ask; a full listing leaves out the topics the
caller may not describe, as Metadata does, and names only the partitions led here. Each API
gives the answer of one partition that exists; a KafkaError it raises (NOT_LEADER_OR_FOLLOWER,
...) becomes that partition's error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed_names
from protocol.errors import ErrorCode, KafkaError

# (topic, partition index) -> the partition's fields besides its index and error.
PartitionAnswer = Callable[[str, int], Awaitable[dict[str, Any]]]


async def describe_topics(ctx: RequestContext, topics: list[Any] | None, answer: PartitionAnswer
                          ) -> list[dict[str, Any]]:
    """The `topics` entries of the response to a request naming `topics`."""
    wanted = _led_here(ctx) if topics is None else [(t.name, t.partition_indexes) for t in topics]
    describable = allowed_names(ctx, Op.DESCRIBE, Resource.TOPIC, (name for name, _ in wanted))
    pacer = Pacer()
    return [await _topic(ctx, pacer, name, indexes, name in describable, answer) for name, indexes in wanted]


def _led_here(ctx: RequestContext) -> list[tuple[str, list[int] | None]]:
    """Every topic the caller may describe that has partitions led here, with those partitions."""
    led: dict[str, list[int]] = {}
    for partition in ctx.broker.replicas.partitions():
        if partition.is_leader:
            led.setdefault(partition.topic, []).append(partition.index)
    names = allowed_names(ctx, Op.DESCRIBE, Resource.TOPIC, led)
    return [(name, sorted(led[name])) for name in sorted(names)]


async def _topic(ctx: RequestContext, pacer: Pacer, name: str, indexes: list[int] | None, describable: bool,
                 answer: PartitionAnswer) -> dict[str, Any]:
    # Authorization first: a topic the caller may not describe must not show whether it exists.
    if not describable:
        return _topic_error(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
    record = ctx.broker.metadata_cache.topic(name)
    if record is None:
        return _topic_error(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
    partitions = []
    for index in sorted(record.assignment) if indexes is None else indexes:
        partitions.append(await _partition(name, index, index in record.assignment, answer))
        await pacer.tick()  # each partition's answer may cost a scan of its state
    return {"name": name, "error_code": ErrorCode.NO_ERROR, "error_message": None, "partitions": partitions}


def _topic_error(name: str, code: int, message: str | None) -> dict[str, Any]:
    return {"name": name, "error_code": code, "error_message": message, "partitions": []}


async def _partition(topic: str, index: int, exists: bool, answer: PartitionAnswer) -> dict[str, Any]:
    if not exists:
        return {"partition_index": index, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "error_message": f"Partition {index} of topic '{topic}' does not exist."}
    try:
        fields = await answer(topic, index)
    except KafkaError as e:
        return {"partition_index": index, "error_code": e.code, "error_message": e.message}
    return {"partition_index": index, "error_code": ErrorCode.NO_ERROR, "error_message": None, **fields}
