"""Cluster mode: every broker's view of the cluster, and the controller's leader elections.

`ClusterView` runs on every broker of a ZooKeeper cluster. From the store's watches it keeps
the live brokers and each partition's state (leader, leader epoch, ISR), turns the states of the
partitions assigned to this broker into roles (`ReplicaManager.become_leader/_follower`, the
equivalent of Kafka's LeaderAndIsr requests), and persists the ISR changes its leaders make with
compare-and-set. One broker at a time is also the controller (`/controller` in ZooKeeper): when
a leader's broker dies it elects a new leader from the live ISR (never outside it: unclean
leader election is off) with the next leader epoch.

Watch callbacks arrive on kazoo's thread and are handed to the event loop; all state here is
touched on the loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

from kbroker.clock import wall_clock_ms
from kbroker.metadata.store import (
    BrokerRegistration,
    MetadataConflict,
    MetadataStore,
    PartitionState,
    TopicRecord,
    Unwatch,
)
from kbroker.security.sasl_config import SaslCredentials
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.cluster.partition import Partition
    from kbroker.cluster.replica_manager import ReplicaManager
    from kbroker.cluster.topics import TopicManager

log = logging.getLogger("kbroker.controller")

NO_LEADER = -1


def initial_state(replicas: list[int], live: set[int], controller_epoch: int) -> PartitionState:
    """A new partition's first leadership: its first live replica leads, live replicas are in sync."""
    in_sync = [r for r in replicas if r in live]
    return PartitionState(in_sync[0] if in_sync else NO_LEADER, 0, in_sync or replicas[:1], controller_epoch)


def rack_alternated(racks: dict[int, str | None]) -> list[int]:
    if not any(racks.values()):
        return sorted(racks)
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker] or "", []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [column[i] for i in range(max(map(len, columns))) for column in columns if i < len(column)]


def elect_leader(replicas: list[int], state: PartitionState, live: set[int]) -> int:
    """Kafka's offline-partition election: the first replica (in preference order) that is alive and
    in the ISR; none if no ISR member lives (unclean.leader.election.enable=false)."""
    return next((r for r in replicas if r in live and r in state.isr), NO_LEADER)


class ClusterView:
    def __init__(self, store: MetadataStore, broker_id: int, replicas: ReplicaManager, topics: TopicManager,
                 inter_broker_listener: str = "PLAINTEXT", inter_broker_ssl: ssl.SSLContext | None = None) -> None:
        self.store = store
        # Brokers reach each other on this listener, with TLS when it is SSL.
        self.inter_broker_listener = inter_broker_listener
        self.inter_broker_ssl = inter_broker_ssl
        self.inter_broker_sasl: SaslCredentials | None = None  # the login when that listener is SASL
        self.broker_id = broker_id
        self.replicas = replicas
        self.topics = topics
        self.brokers: dict[int, BrokerRegistration] = {}
        self.records: dict[str, TopicRecord] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.controller: int | None = None
        self.controller_epoch = 0
        self._unwatch: list[Unwatch] = []
        self._state_watches: dict[tuple[str, int], Unwatch] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # Reassignments this broker drives: partition -> (target, original replicas) (KIP-455).
        self.reassignments: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
        self.unclean_election = False  # unclean.leader.election.enable
        # (topic, partition, leads now): coordinators load or drop the internal partitions they gain or lose.
        self.on_leadership_change: Callable[[str, int, bool], None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.replicas.isr_writer = self._write_isr
        self.replicas.endpoint_of = self.endpoint_of
        self.replicas.inter_broker_ssl = self.inter_broker_ssl
        self.replicas.inter_broker_sasl = self.inter_broker_sasl
        self._unwatch.append(self.store.watch_brokers(self._hop(self._on_brokers)))
        self._unwatch.append(self.store.watch_topics(self._hop(self._on_topics)))
        self._unwatch.append(self.store.watch_controller(self._hop(self._on_controller)))

    def stop(self) -> None:
        for unwatch in [*self._unwatch, *self._state_watches.values()]:
            unwatch()
        self._unwatch.clear()
        self._state_watches.clear()

    def _hop(self, handler: Callable[..., None]) -> Callable[..., None]:
        """A watch callback that runs `handler` on the event loop (kazoo calls from its thread)."""
        loop = self._loop
        assert loop is not None

        def callback(*args: object) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._guarded, handler, *args)
        return callback

    @staticmethod
    def _guarded(handler: Callable[..., None], *args: object) -> None:
        try:
            handler(*args)
        except Exception:
            log.exception("handling a cluster change failed")

    # -- lookups ------------------------------------------------------------------------------

    def live_broker_ids(self) -> list[int]:
        return sorted(self.brokers)

    def placement_order(self) -> list[int]:
        """Live brokers in the order new replicas are placed: with racks (`broker.rack`), one
        broker of each rack in turn, so consecutive replicas land on different racks (Kafka's
        rack-alternated list); without, by id."""
        return rack_alternated({b: r.rack for b, r in self.brokers.items()})

    def endpoint_of(self, broker_id: int, listener: str | None = None) -> tuple[str, int] | None:
        """A live broker's address on `listener` (by default the inter-broker listener, which
        replication and coordinator traffic use); None when it is not alive or has no such listener."""
        registration = self.brokers.get(broker_id)
        if registration is None:
            return None
        wanted = listener or self.inter_broker_listener
        endpoint = next((e for e in registration.endpoints if e.listener == wanted), None)
        return (endpoint.host, endpoint.port) if endpoint is not None else None

    def state_of(self, topic: str, index: int) -> PartitionState | None:
        return self.states.get((topic, index))

    # -- watches ------------------------------------------------------------------------------

    def _on_brokers(self, brokers: dict[int, BrokerRegistration]) -> None:
        gone = set(self.brokers) - set(brokers)
        # Registered anew while the watch was being set again: it died and came back (Kafka's
        # "bounced" brokers). It lost what it held in memory, so it is treated as failed first.
        bounced = {b for b, r in brokers.items() if b in self.brokers and r.timestamp_ms != self.brokers[b].timestamp_ms}
        self.brokers = dict(brokers)
        if gone or bounced:
            log.info("brokers %s went away%s; live: %s", sorted(gone | bounced),
                     f" ({sorted(bounced)} already back)" if bounced else "", sorted(brokers))
        if bounced:
            self._elect_offline_leaders(failed=bounced)
        self._elect_offline_leaders()

    def _on_controller(self, controller: int | None) -> None:
        self.controller = controller
        if controller is None:
            epoch = self.store.try_become_controller(self.broker_id)
            if epoch is not None:
                self.controller, self.controller_epoch = self.broker_id, epoch
                log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        self._elect_offline_leaders()

    def _on_topics(self, names: set[str]) -> None:
        for name in set(self.records) - names:
            self._forget_topic(name)
        for name in names - set(self.records):
            record = self.store.get_topic(name)
            if record is not None:
                self._add_topic(record)

    def _add_topic(self, record: TopicRecord) -> None:
        self.records[record.name] = record
        for index in record.assignment:
            key = (record.name, index)
            if key not in self._state_watches:
                self._state_watches[key] = self.store.watch_partition_state(
                    record.name, index, self._hop(lambda state, key=key: self._on_state(key, state)))

    def _forget_topic(self, name: str) -> None:
        record = self.records.pop(name)
        for index in record.assignment:
            unwatch = self._state_watches.pop((name, index), None)
            if unwatch is not None:
                unwatch()
            self.states.pop((name, index), None)
            if self.replicas.find(name, index) is not None:
                self.replicas.stop_replica(name, index, delete=True)

    def _on_state(self, key: tuple[str, int], state: PartitionState | None) -> None:
        if state is None:
            return
        changed = key in self.states  # not the watch's first call, which follows a fresh read
        self.states[key] = state
        if changed:
            # A reassignment changes the replicas and then touches the state: re-read the assignment.
            record = self.store.get_topic(key[0])
            if record is not None:
                self._add_topic(record)  # new partitions (CreatePartitions) get their watches too
        self._apply_role(key, state)
        if key in self.reassignments:
            self._maybe_finish_reassignment(key, state)
        if state.leader == NO_LEADER or state.leader not in self.brokers:
            self._elect_offline_leaders()

    def _apply_role(self, key: tuple[str, int], state: PartitionState) -> None:
        topic, index = key
        record = self.records.get(topic)
        if record is None:
            return
        replicas = record.assignment.get(index, [])
        if self.broker_id not in replicas:
            if self.replicas.find(topic, index) is not None:  # reassigned away from this broker
                log.info("%s-%d: no longer a replica here; deleting it", topic, index)
                self.replicas.stop_replica(topic, index, delete=True)
            return
        config = self.topics.log_config(record.configs)
        current = self.replicas.find(topic, index)
        was_leader = current is not None and current.is_leader
        if state.leader == self.broker_id:
            self.replicas.become_leader(topic, index, record.topic_id, config, state.leader_epoch, replicas,
                                        state.isr, wall_clock_ms())
        else:
            self.replicas.become_follower(topic, index, record.topic_id, config, state.leader, state.leader_epoch,
                                          replicas, state.isr)
        leads = state.leader == self.broker_id
        if leads != was_leader and self.on_leadership_change is not None:
            self.on_leadership_change(topic, index, leads)

    # -- the controller's work ----------------------------------------------------------------

    def _elect_offline_leaders(self, failed: set[int] | frozenset[int] = frozenset()) -> None:
        if self.controller != self.broker_id or not self.brokers:
            return
        live = set(self.brokers) - failed
        for (topic, index), state in list(self.states.items()):
            if state.leader != NO_LEADER and state.leader in live:
                self._drop_dead_followers(topic, index, state, live)
                continue
            record = self.records.get(topic)
            if record is None:
                continue
            leader = elect_leader(record.assignment[index], state, live)
            if leader == NO_LEADER and self.unclean_election:
                # unclean.leader.election.enable: availability over consistency, as the operator chose.
                leader = next((r for r in record.assignment[index] if r in live), NO_LEADER)
                if leader != NO_LEADER:
                    log.warning("%s-%d: unclean election of broker %d (not in the ISR %s): data may be lost",
                                topic, index, leader, state.isr)
                    state = PartitionState(state.leader, state.leader_epoch, [leader], state.controller_epoch,
                                           state.version)
            if leader == NO_LEADER and state.leader == NO_LEADER:
                continue  # still offline: wait for an ISR member to come back
            # Without a live ISR member the partition goes offline and its ISR stays as it was, as in
            # Kafka, so an ISR member that returns can lead again with all acknowledged data.
            isr = [r for r in state.isr if r in live] if leader != NO_LEADER else state.isr
            new_state = PartitionState(leader, state.leader_epoch + 1, isr, self.controller_epoch)
            try:
                self.store.set_partition_state(topic, index, new_state, state.version)
            except MetadataConflict:
                continue  # the state moved on; its watch brings the new one and another look
            log.info("%s-%d: leader %d -> %d (epoch %d), ISR %s", topic, index, state.leader, leader,
                     new_state.leader_epoch, isr)

    def _drop_dead_followers(self, topic: str, index: int, state: PartitionState, live: set[int]) -> None:
        """A dead follower leaves the ISR at once (as Kafka's controller does), so acks=all
        produces need not wait replica.lag.time.max.ms for the leader to notice."""
        isr = [r for r in state.isr if r in live]
        if isr == state.isr:
            return
        try:
            self.store.set_partition_state(topic, index, PartitionState(state.leader, state.leader_epoch, isr,
                                                                        self.controller_epoch), state.version)
        except MetadataConflict:
            return
        log.info("%s-%d: ISR %s -> %s (dead brokers removed)", topic, index, state.isr, isr)

    def controlled_shutdown(self) -> list[tuple[str, int]]:
        """Before this broker stops (SIGTERM): hand each partition it leads to another in-sync
        replica and leave the ISR of those it follows, as Kafka's controlled shutdown does, so
        clients see no leaderless moment and acks=all does not wait for a stopped follower.
        Returns the partitions whose leadership moved."""
        return self.step_down()

    def step_down(self, only: set[tuple[str, int]] | None = None) -> list[tuple[str, int]]:
        """Leave the ISR of the partitions (`only` these, or all) and hand those this broker
        leads to another in-sync replica: a stopping broker's, or one whose log dir failed.
        Returns the partitions whose leadership moved."""
        moved = []
        others = set(self.brokers) - {self.broker_id}
        for (topic, index), state in list(self.states.items()):
            if only is not None and (topic, index) not in only:
                continue
            record = self.records.get(topic)
            if record is None or self.broker_id not in state.isr:
                continue
            isr = [r for r in state.isr if r != self.broker_id]
            if state.leader == self.broker_id:
                leader = next((r for r in record.assignment.get(index, []) if r in others and r in isr), NO_LEADER)
                if leader == NO_LEADER:
                    continue  # the only in-sync replica: it keeps leading until it is gone
                new_state = PartitionState(leader, state.leader_epoch + 1, isr, state.controller_epoch)
            else:
                new_state = PartitionState(state.leader, state.leader_epoch, isr, state.controller_epoch)
            try:
                self.store.set_partition_state(topic, index, new_state, state.version)
            except MetadataConflict:
                continue
            if new_state.leader != state.leader:
                moved.append((topic, index))
        return moved

    def elect(self, topic: str, index: int, unclean: bool = False) -> ErrorCode:
        """ElectLeaders for one partition: the preferred replica (the first assigned) when it is
        alive and in sync; with `unclean`, any live replica of a partition that has no leader."""
        record = self.records.get(topic)
        state = self.states.get((topic, index))
        if record is None or index not in record.assignment or state is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        live = set(self.brokers)
        replicas = record.assignment[index]
        if unclean:
            if state.leader in live:
                return ErrorCode.ELECTION_NOT_NEEDED
            leader = next((r for r in replicas if r in live), NO_LEADER)
            if leader == NO_LEADER:
                return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
            isr = [leader]
        else:
            leader = replicas[0]
            if state.leader == leader:
                return ErrorCode.ELECTION_NOT_NEEDED
            if leader not in live or leader not in state.isr:
                return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            isr = state.isr
        try:
            self.store.set_partition_state(topic, index, PartitionState(leader, state.leader_epoch + 1, isr,
                                                                        self.controller_epoch), state.version)
        except MetadataConflict:
            return ErrorCode.NOT_CONTROLLER  # the state moved meanwhile: the client retries
        log.info("%s-%d: %s election moved leadership %d -> %d", topic, index,
                 "unclean" if unclean else "preferred", state.leader, leader)
        return ErrorCode.NO_ERROR

    def rebalance_leaders(self, imbalance_percentage: int) -> int:
        """auto.leader.rebalance.enable: when more than `imbalance_percentage` % of the partitions a
        broker should lead (it is their first replica) are led elsewhere, move them back."""
        if self.controller != self.broker_id:
            return 0
        preferred: dict[int, list[tuple[str, int]]] = {}
        for topic, index in self.states:
            record = self.records.get(topic)
            if record is not None and record.assignment.get(index):
                preferred.setdefault(record.assignment[index][0], []).append((topic, index))
        moved = 0
        for broker, partitions in preferred.items():
            elsewhere = [p for p in partitions if self.states[p].leader != broker]
            if broker in self.brokers and len(elsewhere) * 100 > imbalance_percentage * len(partitions):
                moved += sum(self.elect(*p) == ErrorCode.NO_ERROR for p in elsewhere)
        return moved

    # -- reassignment ---------------------------------------------------------------------------

    def reassign(self, topic: str, index: int, target: list[int] | None) -> ErrorCode:
        """AlterPartitionReassignments for one partition (None cancels). Phase one: the
        assignment becomes target + current replicas, so the new ones start following and catch
        up; phase two (`_maybe_finish_reassignment`) drops the old ones once every target
        replica is in sync, moving leadership into the target if needed. Nothing is removed
        before its replacement has the data."""
        key = (topic, index)
        record = self.records.get(topic)
        state = self.states.get(key)
        if record is None or index not in record.assignment or state is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if target is None:
            return ErrorCode.NO_ERROR if self.reassignments.pop(key, None) is not None \
                else ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
        if not target or len(set(target)) != len(target) or any(r not in self.brokers for r in target):
            return ErrorCode.INVALID_REPLICATION_ASSIGNMENT
        current = record.assignment[index]
        if target == current:
            return ErrorCode.NO_ERROR
        self.reassignments[key] = (list(target), list(current))
        self.store.add_partitions(topic, {index: [*target, *(r for r in current if r not in target)]})
        self._touch_state(key, state)
        log.info("%s-%d: reassigning %s -> %s", topic, index, current, target)
        return ErrorCode.NO_ERROR

    def announce_topic_change(self, topic: str) -> None:
        """Make every broker re-read `topic`'s assignment (e.g. after CreatePartitions), by
        rewriting its first partition's state unchanged: topic watches only see names."""
        state = self.store.get_partition_state(topic, 0)
        if state is not None:
            self._touch_state((topic, 0), state)

    def _touch_state(self, key: tuple[str, int], state: PartitionState) -> None:
        """Rewrite the state unchanged, so every broker's watch fires and re-reads the assignment."""
        # On a conflict it changed anyway, and the watches fire for that change.
        with contextlib.suppress(MetadataConflict):
            self.store.set_partition_state(*key, PartitionState(state.leader, state.leader_epoch, state.isr,
                                                                state.controller_epoch), state.version)

    def _maybe_finish_reassignment(self, key: tuple[str, int], state: PartitionState) -> None:
        target, _ = self.reassignments[key]
        if not set(target) <= set(state.isr):
            return  # still catching up
        leader = state.leader if state.leader in target else next(r for r in target if r in state.isr)
        isr = [r for r in state.isr if r in target]
        self.store.add_partitions(key[0], {key[1]: list(target)})
        try:
            self.store.set_partition_state(*key, PartitionState(leader, state.leader_epoch + 1, isr,
                                                                state.controller_epoch), state.version)
        except MetadataConflict:
            return  # re-checked when the newer state arrives
        del self.reassignments[key]
        log.info("%s-%d: reassignment to %s complete, leader %d", key[0], key[1], target, leader)

    def leads_any(self, partitions: list[tuple[str, int]]) -> bool:
        return any((s := self.states.get(p)) is not None and s.leader == self.broker_id for p in partitions)

    # -- ISR changes by this broker's leaders ---------------------------------------------------

    def _write_isr(self, partition: Partition, isr: list[int]) -> bool:
        key = (partition.topic, partition.index)
        state = self.states.get(key)
        if state is None or state.leader != self.broker_id or state.leader_epoch != partition.leader_epoch:
            return False
        new_state = PartitionState(state.leader, state.leader_epoch, list(isr), state.controller_epoch)
        try:
            version = self.store.set_partition_state(partition.topic, partition.index, new_state, state.version)
        except MetadataConflict:
            return False
        self.states[key] = PartitionState(new_state.leader, new_state.leader_epoch, new_state.isr,
                                          new_state.controller_epoch, version)
        log.info("%s: ISR is now %s", partition.name, isr)
        return True
