"""What the share-group handlers share: where a share group is coordinated, topic ids."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed
from kbroker.share.share_partition import AcknowledgementBatch, AcknowledgeType
from protocol.errors import ErrorCode, KafkaError


def require_share_groups(ctx: RequestContext) -> None:
    """With group.share.enable=false the share APIs are not advertised and not served."""
    if not ctx.broker.config.get("group.share.enable"):
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "Share groups are not enabled on this broker.")


def share_request_member(ctx: RequestContext, request: Any, api: str) -> tuple[str, str]:
    """The (group, member) of a ShareFetch or ShareAcknowledge, once share groups are on, both ids
    are there and the caller may READ the group."""
    require_share_groups(ctx)
    group_id, member_id = request.group_id, request.member_id
    if not group_id or not member_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"{api} needs a group and a member id.")
    if not allowed(ctx, Op.READ, Resource.GROUP, group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return group_id, member_id


def listed_partitions(request: Any) -> list[tuple[uuid.UUID, int, Any]]:
    """(topic id, partition, acknowledgement batches) of each partition a share request names."""
    return [(t.topic_id, p.partition_index, p.acknowledgement_batches) for t in request.topics for p in t.partitions]


def require_share_coordinator(ctx: RequestContext, group_id: str) -> None:
    """A share group is coordinated where its classic or consumer namesake would be: the leader
    of its `__consumer_offsets` partition (FindCoordinator answers the same for all three)."""
    if not group_id:
        raise KafkaError(ErrorCode.INVALID_GROUP_ID, "GroupId can't be empty.")
    topic = ctx.broker.groups.topic
    if not topic.exists():
        topic.ensure()
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if topic.hosted(group_id) is None:
        raise KafkaError(ErrorCode.NOT_COORDINATOR)


def topic_name(ctx: RequestContext, topic_id: uuid.UUID) -> str | None:
    record = ctx.broker.metadata_cache.topic_by_id(topic_id)
    return record.name if record is not None else None


SharePartitionKey = tuple[uuid.UUID, int]  # (topic id, partition), as share requests name them


def resolve(ctx: RequestContext, keys: Iterable[SharePartitionKey]) -> list[tuple[str, int]]:
    """(topic name, partition) of the keys whose topic this broker knows, in order."""
    names = []
    for topic_id, index in keys:
        name = topic_name(ctx, topic_id)
        if name is not None:
            names.append((name, index))
    return names


def partition_answer(index: int) -> dict[str, Any]:
    return {"partition_index": index, "error_code": ErrorCode.NO_ERROR, "error_message": None,
            "acknowledge_error_code": ErrorCode.NO_ERROR, "acknowledge_error_message": None,
            "current_leader": {"leader_id": -1, "leader_epoch": -1}, "records": b"", "acquired_records": []}


async def acknowledge_all(ctx: RequestContext, group_id: str, member_id: str,
                          listed: Iterable[tuple[uuid.UUID, int, Any]],
                          answers: dict[SharePartitionKey, dict[str, Any]], renew_allowed: bool = False) -> None:
    """Apply the acknowledgements of each listed partition; each answer's acknowledge error,
    once the share coordinator has them (the partitions' writes run side by side).

    RENEW (KIP-1222) exists from ShareAcknowledge v2 on (`renew_allowed`): in an older request
    it is an unknown type (INVALID_REQUEST); in a group with `share.renew.acknowledge.enable`
    off, INVALID_RECORD_STATE, as Kafka answers."""
    renew_enabled = ctx.broker.share_partitions.settings_of(group_id).renew_enabled
    pending: list[tuple[dict[str, Any], Any]] = []
    for topic_id, index, batches in listed:
        if not batches:
            continue
        answer = answers.setdefault((topic_id, index), partition_answer(index))
        name = topic_name(ctx, topic_id)
        if name is None:
            answer["acknowledge_error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
            continue
        if not allowed(ctx, Op.READ, Resource.TOPIC, name):
            answer["acknowledge_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        if any(AcknowledgeType.RENEW in b.acknowledge_types for b in batches):
            if not renew_allowed:
                answer["acknowledge_error_code"] = ErrorCode.INVALID_REQUEST
                continue
            if not renew_enabled:
                answer["acknowledge_error_code"] = ErrorCode.INVALID_RECORD_STATE
                continue
        wanted = [AcknowledgementBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in batches]
        pending.append((answer, ctx.broker.share_partitions.acknowledge(group_id, member_id, name, index, wanted)))
    codes = await asyncio.gather(*(work for _, work in pending))
    for (answer, _), code in zip(pending, codes, strict=True):
        answer["acknowledge_error_code"] = code
