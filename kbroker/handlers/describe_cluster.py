"""DescribeCluster: cluster id, controller and brokers, for admin clients."""

from __future__ import annotations

from typing import Any

from kbroker.handlers import RequestContext
from protocol.errors import ErrorCode

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 1

BROKERS_ENDPOINT = 1
CONTROLLERS_ENDPOINT = 2
# Operations a cluster resource supports; without an authorizer every one is allowed.
CLUSTER_OPERATIONS = (5, 7, 8, 9, 10, 11, 12)  # CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE/ALTER_CONFIGS IDEMPOTENT_WRITE
OPERATIONS_NOT_REQUESTED = -2147483648


def authorized_operations(operations: tuple[int, ...]) -> int:
    return sum(1 << op for op in operations)


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
            for b in broker.broker_endpoints()
        ],
        "cluster_authorized_operations": (
            authorized_operations(CLUSTER_OPERATIONS)
            if request.include_cluster_authorized_operations
            else OPERATIONS_NOT_REQUESTED
        ),
    }
    if ctx.version >= 1 and request.endpoint_type != BROKERS_ENDPOINT:
        return {**response, **_endpoint_error(request.endpoint_type), "brokers": []}
    return response


def _endpoint_error(endpoint_type: int) -> dict[str, Any]:
    # This node is a broker: asking it for controllers is a mismatch, anything else unknown.
    if endpoint_type == CONTROLLERS_ENDPOINT:
        return {
            "error_code": ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            "error_message": "The request was sent to an endpoint of type BROKER, "
            "but we wanted an endpoint of type CONTROLLER",
        }
    return {"error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, "error_message": f"Unknown endpoint type {endpoint_type}"}
