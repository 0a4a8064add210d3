"""The controller mutation quota (`controller_mutation_rate`, KIP-599) of CreateTopics,
CreatePartitions and DeleteTopics, applied as Kafka's KafkaApis and ZkAdminManager do: the
request takes its client's quota (strict from the version that knows THROTTLING_QUOTA_EXCEEDED,
permissive before), each topic's partitions are charged once the topic is valid and before it is
written (validate-only requests charge nothing), and the answer carries the throttle time, mutes
the connection for it and reports it to the metrics. While no such quota was ever set, `quota_for`
reads one flag and answers None."""

from __future__ import annotations

from kbroker.cluster.client_quotas import MutationQuota
from kbroker.cluster.topics import Charge
from kbroker.handlers import RequestContext


def quota_for(ctx: RequestContext, strict_since: int) -> MutationQuota | None:
    """The request's quota (Kafka's newQuotaFor); None when no mutation quota is enforced."""
    manager = ctx.broker.quotas.mutations
    if not manager.enabled:
        return None
    return manager.new_quota(ctx.principal, ctx.header.client_id or "", ctx.version >= strict_since)


def charger(ctx: RequestContext, quota: MutationQuota | None) -> Charge | None:
    """What the topic operations call with the partitions they are about to create or delete."""
    if quota is None:
        return None
    clock = ctx.broker.quotas.now_ms

    def charge(partitions: int) -> None:
        quota.record(partitions, clock())

    return charge


def throttle(ctx: RequestContext, quota: MutationQuota | None) -> int:
    """The answer's throttle_time_ms (Kafka's sendResponseMaybeThrottleWithControllerQuota): the
    quota's throttle time now; when above 0 the connection is muted for it and it is reported."""
    if quota is None:
        return 0
    throttle_ms = quota.throttle_time_ms(ctx.broker.quotas.now_ms())
    if throttle_ms > 0:
        ctx.throttle_ms = max(ctx.throttle_ms, throttle_ms)
        ctx.broker.stats.record_throttle(*quota.entity, throttle_ms)
    return throttle_ms
