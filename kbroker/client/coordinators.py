"""`CoordinatorClient`: finding the broker that coordinates a group or a transactional id
(FindCoordinator), and asking again while that coordinator is loading, moving or not yet there."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from kbroker.client.cluster import ClusterClient
from kbroker.client.errors import check, error_for
from protocol.errors import ErrorCode, KafkaError

FIND_COORDINATOR = 10
GROUP_KEY = 0  # FindCoordinator key type of a group
TRANSACTION_KEY = 1  # ... and of a transactional id
COORDINATOR_RETRIABLE = frozenset({
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
_T = TypeVar("_T")


@dataclass(frozen=True)
class Coordinator:
    node_id: int
    host: str
    port: int


class CoordinatorClient(ClusterClient):
    """Requests that go to a group's or a transactional id's coordinator."""

    def find_coordinator(self, group_id: str) -> Coordinator:
        """The broker coordinating `group_id`, asked again while it is still being set up."""
        return self._retry_coordinator(lambda: self._find_coordinator(group_id))

    def _find_coordinator(self, key: str, key_type: int = GROUP_KEY) -> Coordinator:
        version = self.version(FIND_COORDINATOR)
        if version >= 4:
            body = {"key_type": key_type, "coordinator_keys": [key]}
            result = self.request(FIND_COORDINATOR, body, version).coordinators[0]
        else:
            result = self.request(FIND_COORDINATOR, {"key": key, "key_type": key_type}, version)
        what = "group" if key_type == GROUP_KEY else "transactional id"
        check(result.error_code, result.error_message, f"coordinator of {what} {key}")
        return Coordinator(result.node_id, result.host, result.port)

    def _retry_coordinator(self, call: Callable[[], _T]) -> _T:
        """`call`, repeated while the coordinator is loading, moving or not yet available."""
        deadline = time.monotonic() + self.timeout
        backoff = 0.05
        while True:
            try:
                return call()
            except KafkaError as e:
                if e.code not in COORDINATOR_RETRIABLE or time.monotonic() + backoff > deadline:
                    raise
            time.sleep(backoff)  # retry backoff, as Kafka's admin client has: the broker pushes nothing
            backoff = min(backoff * 2, 1.0)


def raise_retriable(codes: Iterable[int]) -> None:
    """Coordinator errors become exceptions, so `CoordinatorClient._retry_coordinator` asks again."""
    for code in codes:
        if code in COORDINATOR_RETRIABLE:
            raise error_for(code)
