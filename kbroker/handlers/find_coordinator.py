"""FindCoordinator: which broker coordinates a group, a transactional id or (v6+, key type 2) a
share partition's state: the leader of the key's partition of `__consumer_offsets`,
`__transaction_state` or `__share_group_state`."""

from __future__ import annotations

from typing import Any

from kbroker.coordinator.share_state_records import parse_coordinator_key
from kbroker.handlers import Pacer, RequestContext
from kbroker.handlers.authorize import Op, Resource, allowed, cluster_allowed
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.find_coordinator import Coordinator, FindCoordinatorResponse

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6  # v6 adds share keys ("group:topicId:partition"), for share-partition leaders

GROUP, TRANSACTION, SHARE = 0, 1, 2


async def handle(ctx: RequestContext, request: Any) -> FindCoordinatorResponse:
    key_type = request.key_type if ctx.version >= 1 else GROUP
    if ctx.version >= 4:
        coordinators = await Pacer().map(request.coordinator_keys, lambda key: _find(ctx, key, key_type))
        return {"throttle_time_ms": 0, "coordinators": coordinators}
    found = _find(ctx, request.key, key_type)
    # Before v4 the one coordinator's fields are the answer's own.
    return {"throttle_time_ms": 0, "error_code": found["error_code"], "error_message": found["error_message"],
            "node_id": found["node_id"], "host": found["host"], "port": found["port"]}


def _find(ctx: RequestContext, key: str, key_type: int) -> Coordinator:
    try:
        node = _coordinator(ctx, key, key_type)
    except KafkaError as e:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": e.code, "error_message": e.message}
    return {"key": key, **node, "error_code": ErrorCode.NO_ERROR, "error_message": None}


def _coordinator(ctx: RequestContext, key: str, key_type: int) -> Coordinator:
    if key_type not in (GROUP, TRANSACTION, SHARE) or (key_type == SHARE and ctx.version < 6):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown coordinator type {key_type}")
    if key_type == SHARE:
        _check_share_key(ctx, key)
    if key_type == GROUP and not allowed(ctx, Op.DESCRIBE, Resource.GROUP, key):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    if key_type == TRANSACTION and not allowed(ctx, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, key):
        raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Transactional Id authorization failed.")
    if key_type == TRANSACTION and not key:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "empty transactional id")
    topic = {GROUP: ctx.broker.groups.topic, TRANSACTION: ctx.broker.transactions.topic,
             SHARE: ctx.broker.share_coordinator.topic}[key_type]
    topic.ensure()
    cluster = ctx.broker.cluster
    if cluster is not None:
        # The coordinator is whichever broker leads the key's partition of the internal topic.
        state = cluster.state_of(topic.name, topic.partition_of(key))
        address = cluster.endpoint_of(state.leader, ctx.listener) if state is not None and state.leader >= 0 else None
        if state is None or address is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return {"node_id": state.leader, "host": address[0], "port": address[1]}
    if topic.hosted(key) is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    endpoint = ctx.broker.local_endpoint(ctx.listener)
    if endpoint is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return {"node_id": endpoint.broker_id, "host": endpoint.host, "port": endpoint.port}


def _check_share_key(ctx: RequestContext, key: str) -> None:
    """Kafka's rules for a share coordinator's key: brokers ask (CLUSTER_ACTION), and the key is
    "group:topicId:partition"."""
    if not cluster_allowed(ctx, Op.CLUSTER_ACTION):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    try:
        parse_coordinator_key(key)
    except ValueError as e:
        raise KafkaError(ErrorCode.INVALID_REQUEST, str(e)) from None
