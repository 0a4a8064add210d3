"""The controller of a ZooKeeper cluster: every broker's part, and the elected one's elections.

`Controller` runs on every broker of a ZooKeeper cluster, as Kafka's KafkaController does (active
on the broker that holds `/controller`). From the store's watches it keeps
the live brokers and each partition's state (leader, leader epoch, ISR), turns the states of the
partitions assigned to this broker into roles (`ReplicaManager.become_leader/_follower`, the
equivalent of Kafka's LeaderAndIsr requests), and persists the ISR changes its leaders make with
compare-and-set. One broker at a time is also the controller (`/controller` in ZooKeeper): when
a leader's broker dies it elects a new leader from the live ISR (never outside it: unclean
leader election is off) with the next leader epoch.

What it learns goes into the broker's `MetadataCache`, the one copy request paths read. Watch
callbacks arrive on the store's thread (kazoo's), which also does the reads a change needs (a
new topic's record, a topic's assignment after a state change, the controller election), so the
event loop does not wait for ZooKeeper on every change; the results are handed to the loop, where
all state here is touched. Only setting the watches of new partitions reads on the loop: each
watch's first value, then the topic's record once more (`_read_topic_again`). Writes made for
requests (elections, reassignments) and ISR changes go through the broker's `StoreWriter`, off
the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

from kbroker.clock import wall_clock_ms
from kbroker.cluster.metadata_cache import MetadataCache
from kbroker.cluster.store_writer import StoreWriter
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
# How soon a topic's record is read again after that read failed (ZooKeeper's connection lost).
READ_AGAIN_RETRY_S = 1.0


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


class Controller:
    def __init__(self, store: MetadataStore, broker_id: int, replicas: ReplicaManager, topics: TopicManager,
                 cache: MetadataCache, writer: StoreWriter, inter_broker_listener: str = "PLAINTEXT",
                 inter_broker_ssl: ssl.SSLContext | None = None) -> None:
        self.store = store
        # Brokers reach each other on this listener, with TLS when it is SSL.
        self.inter_broker_listener = inter_broker_listener
        self.inter_broker_ssl = inter_broker_ssl
        self.inter_broker_sasl: SaslCredentials | None = None  # the login when that listener is SASL
        self.broker_id = broker_id
        self.replicas = replicas
        self.topics = topics
        self.cache = cache
        self.writer = writer
        self.controller_epoch = 0
        self._unwatch: list[Unwatch] = []
        self._state_watches: dict[tuple[str, int], Unwatch] = {}
        # Topics this broker created that no topics listing has shown yet: an older listing
        # (read before the creation) must not make them disappear from the cache.
        self._unconfirmed: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        # Reassignments this broker drives: partition -> (target, original replicas) (KIP-455).
        self.reassignments: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
        self.unclean_election = False  # unclean.leader.election.enable
        # (topic, partition, leads now): coordinators load or drop the internal partitions they gain or lose.
        self.on_leadership_change: Callable[[str, int, bool], None] | None = None

    @property
    def brokers(self) -> dict[int, BrokerRegistration]:
        return self.cache.brokers

    @property
    def controller(self) -> int | None:
        return self.cache.controller_id

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.replicas.isr_writer = self.write_isr
        self.replicas.endpoint_of = self.endpoint_of
        self.replicas.inter_broker_ssl = self.inter_broker_ssl
        self.replicas.inter_broker_sasl = self.inter_broker_sasl
        self._unwatch.append(self.store.watch_brokers(self._hop(self._on_brokers)))
        self._unwatch.append(self.store.watch_topics(self._read_new_topics(self._hop(self._on_topics))))
        self._unwatch.append(self.store.watch_controller(self._claim_vacant_controller(self._hop(self._on_controller))))

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
        return self.cache.live_broker_ids()

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
        return self.cache.state_of(topic, index)

    # -- reads on the store's thread, before the loop sees a change ------------------------------

    def _read_new_topics(self, deliver: Callable[..., None]) -> Callable[[set[str]], None]:
        """A topics watch that reads the records of the names it has not seen yet (on the
        store's thread) and delivers (names, records)."""
        seen: set[str] = set()

        def on_topics(names: set[str]) -> None:
            seen.intersection_update(names)
            # Also the names the cache lacks (one dict lookup each, safe from this thread): a
            # topic this broker deleted and another re-created before a listing showed the gap.
            unknown = (names - seen) | {n for n in names if n not in self.cache.topics}
            records = [r for r in (self.store.get_topic(n) for n in sorted(unknown)) if r is not None]
            seen.update(r.name for r in records)
            deliver(set(names), records)
        return on_topics

    def _claim_vacant_controller(self, deliver: Callable[..., None]) -> Callable[[int | None], None]:
        """A controller watch that runs for the role when it is vacant (on the store's thread)
        and delivers (controller, epoch won or None)."""
        def on_controller(controller: int | None) -> None:
            epoch = self.store.try_become_controller(self.broker_id) if controller is None else None
            deliver(controller, epoch)
        return on_controller

    def _read_assignment_on_change(self, topic: str, deliver: Callable[..., None]) -> Callable[..., None]:
        """A partition-state watch that, after its first call, re-reads the topic's record (a
        reassignment or CreatePartitions changes it and then touches a state) on the store's
        thread, and delivers (state, record or None). The first call reads no record: the one
        the watch was set from is read again once it is set (`_read_topic_again`)."""
        first = True

        def on_state(state: PartitionState | None) -> None:
            nonlocal first
            record = None if first or state is None else self.store.get_topic(topic)
            first = False
            deliver(state, record)
        return on_state

    # -- watches ------------------------------------------------------------------------------

    def _on_brokers(self, brokers: dict[int, BrokerRegistration]) -> None:
        known = self.cache.brokers
        gone = set(known) - set(brokers)
        # Registered anew while the watch was being set again: it died and came back (Kafka's
        # "bounced" brokers). It lost what it held in memory, so it is treated as failed first.
        bounced = {b for b, r in brokers.items() if b in known and r.timestamp_ms != known[b].timestamp_ms}
        self.cache.set_brokers(brokers)
        if gone or bounced:
            log.info("brokers %s went away%s; live: %s", sorted(gone | bounced),
                     f" ({sorted(bounced)} already back)" if bounced else "", sorted(brokers))
        if bounced:
            self._elect_offline_leaders(failed=bounced)
        self._elect_offline_leaders()

    def _on_controller(self, controller: int | None, won_epoch: int | None) -> None:
        self.cache.controller_id = controller
        if won_epoch is not None:
            self.cache.controller_id, self.controller_epoch = self.broker_id, won_epoch
            log.info("broker %d is the controller (epoch %d)", self.broker_id, won_epoch)
        self._elect_offline_leaders()

    def note_created(self, name: str) -> None:
        """This broker has just created `name` (and put it in the cache)."""
        self._unconfirmed.add(name)

    def note_deleted(self, name: str) -> None:
        """This broker has just deleted `name` (and removed it from the cache)."""
        self._unconfirmed.discard(name)

    def _on_topics(self, names: set[str], records: list[TopicRecord]) -> None:
        self._unconfirmed -= names
        watched = {topic for topic, _ in self._state_watches}
        for name in (watched | set(self.cache.topics)) - names - self._unconfirmed:
            self._forget_topic(name)
        for record in records:
            known = self.cache.topic(record.name)
            # This broker may have put a newer record of the same topic already (its own
            # CreatePartitions); the watch only says the topic exists.
            if known is None or known.topic_id != record.topic_id:
                self.cache.put_topic(record)
            self._watch_states(self.cache.topic(record.name) or record)

    def _take_record(self, record: TopicRecord) -> None:
        """A record of a topic this broker knows, read after its assignment may have changed: the
        cache takes it unless it holds a newer version, and new partitions get their watches."""
        known = self.cache.topic(record.name)
        if known is None or known.topic_id != record.topic_id:
            return  # deleted, or deleted and created again: the topics watch brings that
        self.cache.put_topic(record)
        self._watch_states(self.cache.topic(record.name) or record)

    def _watch_states(self, record: TopicRecord) -> None:
        """Watch the state of each partition of `record` not watched yet, and then read the
        topic again if there were any. A view has no states of its own: its source's are its."""
        if record.name in self.cache.views:
            return
        new = [index for index in sorted(record.assignment) if (record.name, index) not in self._state_watches]
        for index in new:
            key = (record.name, index)
            deliver = self._hop(lambda state, topic_record, key=key: self._on_state(key, state, topic_record))
            self._state_watches[key] = self.store.watch_partition_state(
                record.name, index, self._read_assignment_on_change(record.name, deliver))
        if new:
            self._read_topic_again(record.name)

    def _read_topic_again(self, name: str) -> None:
        """Read a topic's record once its new partition-state watches are set. The record they
        were set from was read earlier; a change of the assignment made in between
        (CreatePartitions, a reassignment, by any broker) touched a state before it was watched,
        and a watch reports such a touch as its first value, which re-reads nothing. Without this
        read the broker would never learn of those partitions, even as their replica. Any later
        change fires a watch that is now set."""
        try:
            record = self.store.get_topic(name)
        except Exception:
            # No watch would report what this read was for: it is tried until it succeeds.
            log.warning("reading topic %s failed; trying again in %g s", name, READ_AGAIN_RETRY_S, exc_info=True)
            self._read_topic_later(name)
            return
        if record is not None:
            self._take_record(record)

    def _read_topic_later(self, name: str) -> None:
        def read_if_still_watched() -> None:
            if any(topic == name for topic, _ in self._state_watches):  # not deleted, not stopped
                self._guarded(self._read_topic_again, name)

        assert self._loop is not None
        self._loop.call_later(READ_AGAIN_RETRY_S, read_if_still_watched)

    def _forget_topic(self, name: str) -> None:
        record = self.cache.remove_topic(name)
        for key in [k for k in self._state_watches if k[0] == name]:
            self._state_watches.pop(key)()
        indexes = set(record.assignment) if record is not None else set()
        indexes |= {p.index for p in self.replicas.partitions_of(name)}
        for index in sorted(indexes):
            if self.replicas.find(name, index) is not None:
                self.replicas.stop_replica(name, index, delete=True)

    def _on_state(self, key: tuple[str, int], state: PartitionState | None, record: TopicRecord | None) -> None:
        if state is None or key[0] not in self.cache.topics:
            return
        if not self.cache.put_state(*key, state):
            return  # older than what this broker wrote itself: the newer one was applied already
        if record is not None:
            self._take_record(record)  # new partitions (CreatePartitions) get their watches too
        self._apply_role(key, state)
        if key in self.reassignments:
            self._maybe_finish_reassignment(key, state)
        if state.leader == NO_LEADER or state.leader not in self.brokers:
            self._elect_offline_leaders()

    def _apply_role(self, key: tuple[str, int], state: PartitionState) -> None:
        topic, index = key
        record = self.cache.topic(topic)
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
        for (topic, index), state in list(self.cache.states.items()):
            if state.leader != NO_LEADER and state.leader in live:
                self._drop_dead_followers(topic, index, state, live)
                continue
            record = self.cache.topic(topic)
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

    async def controlled_shutdown(self) -> list[tuple[str, int]]:
        """Before this broker stops (SIGTERM): hand each partition it leads to another in-sync
        replica and leave the ISR of those it follows, as Kafka's controlled shutdown does, so
        clients see no leaderless moment and acks=all does not wait for a stopped follower.
        Returns the partitions whose leadership moved."""
        return await self.step_down()

    async def step_down(self, only: set[tuple[str, int]] | None = None) -> list[tuple[str, int]]:
        """Leave the ISR of the partitions (`only` these, or all) and hand those this broker
        leads to another in-sync replica: a stopping broker's, or one whose log dir failed.
        Returns the partitions whose leadership moved."""
        changes = self._step_down_changes(only)
        led = {key for key, _, _ in changes if (known := self.cache.state_of(*key)) and known.leader == self.broker_id}
        written = await self.writer.run(self._write_states, changes)
        return [key for key, _, _ in written if key in led]  # those it follows keep their leader

    def _step_down_changes(self, only: set[tuple[str, int]] | None
                           ) -> list[tuple[tuple[str, int], PartitionState, int]]:
        changes = []
        others = set(self.brokers) - {self.broker_id}
        for (topic, index), state in list(self.cache.states.items()):
            if only is not None and (topic, index) not in only:
                continue
            record = self.cache.topic(topic)
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
            changes.append(((topic, index), new_state, state.version))
        return changes

    def _write_states(self, changes: list[tuple[tuple[str, int], PartitionState, int]]
                      ) -> list[tuple[tuple[str, int], PartitionState, int]]:
        """Compare-and-set each state (on the writer's thread); returns those written, with
        their new versions. A conflict means the state moved on: its watch brings it."""
        written = []
        for key, state, expected in changes:
            try:
                version = self.store.set_partition_state(*key, state, expected)
            except MetadataConflict:
                continue
            written.append((key, state, version))
        return written

    async def elect(self, topic: str, index: int, unclean: bool = False) -> ErrorCode:
        """ElectLeaders for one partition: the preferred replica (the first assigned) when it is
        alive and in sync; with `unclean`, any live replica of a partition that has no leader."""
        record = self.cache.topic(topic)
        state = self.cache.state_of(topic, index)
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
        new_state = PartitionState(leader, state.leader_epoch + 1, isr, self.controller_epoch)
        try:
            version = await self.writer.run(self.store.set_partition_state, topic, index, new_state, state.version)
        except MetadataConflict:
            return ErrorCode.NOT_CONTROLLER  # the state moved meanwhile: the client retries
        self.cache.put_state(topic, index, dataclasses.replace(new_state, version=version))
        log.info("%s-%d: %s election moved leadership %d -> %d", topic, index,
                 "unclean" if unclean else "preferred", state.leader, leader)
        self._apply_role((topic, index), self.cache.states[(topic, index)])
        return ErrorCode.NO_ERROR

    async def rebalance_leaders(self, imbalance_percentage: int) -> int:
        """auto.leader.rebalance.enable: when more than `imbalance_percentage` % of the partitions a
        broker should lead (it is their first replica) are led elsewhere, move them back."""
        if self.controller != self.broker_id:
            return 0
        preferred: dict[int, list[tuple[str, int]]] = {}
        for topic, index in list(self.cache.states):
            record = self.cache.topic(topic)
            if record is not None and record.assignment.get(index):
                preferred.setdefault(record.assignment[index][0], []).append((topic, index))
        moved = 0
        for broker, partitions in preferred.items():
            elsewhere = [p for p in partitions if (s := self.cache.states.get(p)) is not None and s.leader != broker]
            if broker in self.brokers and len(elsewhere) * 100 > imbalance_percentage * len(partitions):
                for p in elsewhere:
                    moved += await self.elect(*p) == ErrorCode.NO_ERROR
        return moved

    # -- reassignment ---------------------------------------------------------------------------

    async def reassign(self, topic: str, index: int, target: list[int] | None) -> ErrorCode:
        """AlterPartitionReassignments for one partition (None cancels). Phase one: the
        assignment becomes target + current replicas, so the new ones start following and catch
        up; phase two (`_maybe_finish_reassignment`) drops the old ones once every target
        replica is in sync, moving leadership into the target if needed. Nothing is removed
        before its replacement has the data."""
        key = (topic, index)
        record = self.cache.topic(topic)
        state = self.cache.state_of(topic, index)
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
        replicas = [*target, *(r for r in current if r not in target)]
        await self.writer.run(self._assign_and_touch, key, replicas, state)
        self._put_assignment(key, replicas)
        log.info("%s-%d: reassigning %s -> %s", topic, index, current, target)
        return ErrorCode.NO_ERROR

    def _assign_and_touch(self, key: tuple[str, int], replicas: list[int], state: PartitionState) -> None:
        """On the writer's thread: the partition's new replicas, then its state rewritten
        unchanged so every broker's watch re-reads the assignment."""
        self.store.add_partitions(key[0], {key[1]: replicas})
        self.touch_state(key, state)

    def _put_assignment(self, key: tuple[str, int], replicas: list[int]) -> None:
        record = self.cache.topic(key[0])
        if record is not None:
            self.cache.put_topic(dataclasses.replace(record, assignment={**record.assignment, key[1]: list(replicas)}))

    def touch_state(self, key: tuple[str, int], state: PartitionState) -> None:
        """Rewrite the state unchanged, so every broker's watch fires and re-reads the assignment
        (topic watches only see names)."""
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
        self._put_assignment(key, target)
        try:
            self.store.set_partition_state(*key, PartitionState(leader, state.leader_epoch + 1, isr,
                                                                state.controller_epoch), state.version)
        except MetadataConflict:
            return  # re-checked when the newer state arrives
        del self.reassignments[key]
        log.info("%s-%d: reassignment to %s complete, leader %d", key[0], key[1], target, leader)

    def leads_any(self, partitions: list[tuple[str, int]]) -> bool:
        return any((s := self.cache.state_of(*p)) is not None and s.leader == self.broker_id for p in partitions)

    # -- ISR changes by this broker's leaders ---------------------------------------------------

    async def write_isr(self, partition: Partition, isr: list[int]) -> list[int] | None:
        """Persist a leader's new ISR (compare-and-set, on the writer's thread); the ISR now in
        force, or None when the state moved on (a new epoch or controller change, which its
        watch brings) or the write failed."""
        key = (partition.topic, partition.index)
        state = self.cache.state_of(*key)
        if state is None or state.leader != self.broker_id or state.leader_epoch != partition.leader_epoch:
            return None
        new_state = PartitionState(state.leader, state.leader_epoch, list(isr), state.controller_epoch)
        try:
            version = await self.writer.run(self.store.set_partition_state, *key, new_state, state.version)
        except MetadataConflict:
            return None
        if not self.cache.put_state(*key, dataclasses.replace(new_state, version=version)):
            return None  # a newer state came through the watch meanwhile, and was applied
        log.info("%s: ISR is now %s", partition.name, isr)
        return list(isr)
