"""DescribeCluster: cluster id, controller and brokers, for admin clients."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from kbroker.handlers.authorize import NOT_REQUESTED, Op, Resource, cluster_allowed, operations
from protocol.errors import ErrorCode

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 1

BROKERS_ENDPOINT = 1
CONTROLLERS_ENDPOINT = 2

async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    broker = ctx.broker
    response = {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NO_ERROR,
        "error_message": None,
        "endpoint_type": BROKERS_ENDPOINT,
        "cluster_id": broker.cluster_id,
        "controller_id": broker.config.broker_id,
        "brokers": [
            {"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
            for b in broker.broker_endpoints(ctx.listener)
        ],
        "cluster_authorized_operations": _cluster_operations(ctx, request.include_cluster_authorized_operations),
    }
    if ctx.version >= 1 and request.endpoint_type != BROKERS_ENDPOINT:
        return {**response, **_endpoint_error(request.endpoint_type), "brokers": []}
    return response


def _cluster_operations(ctx: RequestContext, requested: bool) -> int:
    """Kafka: the bitfield when asked, 0 for a caller who may not describe the cluster."""
    if not requested:
        return NOT_REQUESTED
    return operations(ctx, Resource.CLUSTER, "kafka-cluster") if cluster_allowed(ctx, Op.DESCRIBE) else 0


def _endpoint_error(endpoint_type: int) -> dict[str, Any]:
    # This node is a broker: asking it for controllers is a mismatch, anything else unknown.
    if endpoint_type == CONTROLLERS_ENDPOINT:
        return {
            "error_code": ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            "error_message": "The request was sent to an endpoint of type BROKER, "
            "but we wanted an endpoint of type CONTROLLER",
        }
    return {"error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, "error_message": f"Unknown endpoint type {endpoint_type}"}
