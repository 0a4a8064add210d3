"""The share coordinator (KIP-932): where share-partition state is kept, in `__share_group_state`.

A share partition's leader reads its state when it starts (ReadShareGroupState), creates it
when there is none (InitializeShareGroupState) and writes it before it answers an
acknowledgement (WriteShareGroupState). The state of (group, topic id, partition) lives in the
partition of `__share_group_state` that its key "group:topicId:partition" hashes to, and the
leader of that partition answers for it, as Kafka's ShareCoordinatorService does.

The topic holds Kafka's records (share_state_records.py): a ShareSnapshot with the whole state,
then ShareUpdates laid over it, a new snapshot after
`share.coordinator.snapshot.update.records.per.snapshot` updates. Replaying a partition's log
rebuilds its states (`ShareStateShard`, Kafka's ShareCoordinatorShard). A write is answered once
its record is on every in-sync replica (at least `min.insync.replicas`), so a new leader of the
partition has every state a share-partition leader was told was written.

Epochs fence what is stale: a read records the share-partition leader's epoch, after which a
write from an older leader fails with FENCED_LEADER_EPOCH; InitializeShareGroupState sets the
state epoch, after which a write of an older one fails with FENCED_STATE_EPOCH.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from kbroker.clock import WallClock, wall_clock_ms
from kbroker.coordinator.offsets_topic import InternalTopic
from kbroker.coordinator.share_state_records import (
    SNAPSHOT,
    UPDATE,
    PersistedBatch,
    ShareSnapshot,
    ShareStateKey,
    ShareUpdate,
    coordinator_key,
    decode_key,
    decode_snapshot,
    decode_update,
    encode_key,
    encode_snapshot,
    encode_update,
)
from protocol.errors import ErrorCode, KafkaError
from protocol.primitives import ProtocolError

log = logging.getLogger("kbroker.share_coordinator")

TOPIC = "__share_group_state"
UNINITIALIZED_START_OFFSET = -1
DEFAULT_STATE_EPOCH = 0
NO_EPOCH = -1


@dataclass(frozen=True, slots=True)
class ShareState:
    """One share partition's persisted state (Kafka's ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[PersistedBatch, ...] = ()
    create_timestamp: int = -1
    write_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class StateRead:
    """ReadShareGroupState's answer for one share partition: start offset -1 when it has none."""

    error: int
    state_epoch: int = DEFAULT_STATE_EPOCH
    start_offset: int = UNINITIALIZED_START_OFFSET
    batches: tuple[PersistedBatch, ...] = ()


@dataclass(frozen=True, slots=True)
class StateSummary:
    """What DescribeShareGroupOffsets reports of one share partition (Kafka's
    ReadShareGroupStateSummary): start offset -1 when it has no state; `delivered` counts the
    records at or past the start offset that are done with (acknowledged or archived), which
    the lag leaves out."""

    error: int
    state_epoch: int = DEFAULT_STATE_EPOCH
    start_offset: int = UNINITIALIZED_START_OFFSET
    leader_epoch: int = NO_EPOCH
    delivered: int = 0


# Kafka's RecordState codes of the records a share group is done with.
_DONE_STATES = frozenset({2, 4})  # ACKNOWLEDGED, ARCHIVED


def summarize(read: StateRead, leader_epoch: int = NO_EPOCH) -> StateSummary:
    """The summary of a state read (its batches counted, not returned)."""
    if read.error != ErrorCode.NO_ERROR:
        return StateSummary(read.error)
    delivered = sum(b.last_offset - max(b.first_offset, read.start_offset) + 1 for b in read.batches
                    if b.delivery_state in _DONE_STATES and b.last_offset >= read.start_offset)
    return StateSummary(ErrorCode.NO_ERROR, read.state_epoch, read.start_offset, leader_epoch, delivered)


Entry = tuple[bytes, bytes | None]  # a record's key and value (None: a tombstone)


# -- merging state batches (Kafka's PersisterStateBatchCombiner) -------------------------------------------


def combine_batches(current: Sequence[PersistedBatch], newer: Sequence[PersistedBatch],
                    start_offset: int) -> tuple[PersistedBatch, ...]:
    """`newer` laid over `current` (a newer batch wins where they overlap, and among `newer` the
    later one), nothing below `start_offset`, adjacent batches of one state and count joined."""
    covered: list[PersistedBatch] = []
    for batch in newer:
        covered = [*_subtract(covered, [batch]), batch]
    covered.sort(key=lambda b: b.first_offset)
    kept = _subtract(sorted(current, key=lambda b: b.first_offset), covered)
    merged = sorted([*kept, *covered], key=lambda b: b.first_offset)
    return tuple(_join(_clip(b, start_offset) for b in merged))


def _subtract(batches: Sequence[PersistedBatch], cover: Sequence[PersistedBatch]) -> list[PersistedBatch]:
    """The parts of `batches` (sorted) outside every batch of `cover` (sorted, disjoint)."""
    out: list[PersistedBatch] = []
    for batch in batches:
        first = batch.first_offset
        for hole in cover:
            if hole.last_offset < first or hole.first_offset > batch.last_offset:
                continue
            if hole.first_offset > first:
                out.append(replace(batch, first_offset=first, last_offset=hole.first_offset - 1))
            first = max(first, hole.last_offset + 1)
            if first > batch.last_offset:
                break
        if first <= batch.last_offset:
            out.append(replace(batch, first_offset=first))
    return out


def _clip(batch: PersistedBatch, start_offset: int) -> PersistedBatch | None:
    if start_offset < 0 or batch.first_offset >= start_offset:
        return batch
    if batch.last_offset < start_offset:
        return None
    return replace(batch, first_offset=start_offset)


def _join(batches: Iterable[PersistedBatch | None]) -> list[PersistedBatch]:
    out: list[PersistedBatch] = []
    for batch in batches:
        if batch is None:
            continue
        last = out[-1] if out else None
        if (last is not None and last.last_offset + 1 == batch.first_offset
                and last.delivery_state == batch.delivery_state and last.delivery_count == batch.delivery_count):
            out[-1] = replace(last, last_offset=batch.last_offset)
        else:
            out.append(batch)
    return out


# -- the states of one partition of __share_group_state ------------------------------------------


class ShareStateShard:
    """The share-partition states one partition of `__share_group_state` holds, rebuilt by
    replaying its records; it plans the record each request writes (the caller appends it, then
    replays it here)."""

    def __init__(self, updates_per_snapshot: int = 500) -> None:
        self.updates_per_snapshot = updates_per_snapshot
        self.states: dict[ShareStateKey, ShareState] = {}
        self.leader_epochs: dict[ShareStateKey, int] = {}
        self._updates_since_snapshot: dict[ShareStateKey, int] = {}

    # -- replay ------------------------------------------------------------------------------------

    def replay(self, key_bytes: bytes, value_bytes: bytes | None) -> None:
        record_type, key = decode_key(key_bytes)
        if value_bytes is None:  # a tombstone: the state was deleted
            self.states.pop(key, None)
            self.leader_epochs.pop(key, None)
            self._updates_since_snapshot.pop(key, None)
            return
        if record_type == SNAPSHOT:
            snapshot = decode_snapshot(value_bytes)
            self.states[key] = ShareState(snapshot.snapshot_epoch, snapshot.state_epoch, snapshot.leader_epoch,
                                          snapshot.start_offset, snapshot.batches, snapshot.create_timestamp,
                                          snapshot.write_timestamp)
            self._updates_since_snapshot[key] = 0
            self._raise_leader_epoch(key, snapshot.leader_epoch)
            return
        update = decode_update(value_bytes)
        self._raise_leader_epoch(key, update.leader_epoch)
        current = self.states.get(key)
        if current is None:  # an update without its snapshot (pruned): it is all there is
            self.states[key] = ShareState(update.snapshot_epoch, DEFAULT_STATE_EPOCH, update.leader_epoch,
                                          update.start_offset, combine_batches((), update.batches, update.start_offset))
        else:
            start = current.start_offset if update.start_offset == -1 else update.start_offset
            leader_epoch = current.leader_epoch if update.leader_epoch == -1 else update.leader_epoch
            self.states[key] = replace(current, leader_epoch=leader_epoch, start_offset=start,
                                       batches=combine_batches(current.batches, update.batches, start))
        self._updates_since_snapshot[key] = self._updates_since_snapshot.get(key, 0) + 1

    def _raise_leader_epoch(self, key: ShareStateKey, epoch: int) -> None:
        if epoch > self.leader_epochs.get(key, NO_EPOCH):
            self.leader_epochs[key] = epoch

    # -- requests ----------------------------------------------------------------------------------

    def read(self, key: ShareStateKey, leader_epoch: int, now_ms: int) -> tuple[StateRead, Entry | None]:
        """The state and, when the reader's leader epoch is new, the record that remembers it
        (fencing the older leaders' writes from now on)."""
        known = self.leader_epochs.get(key)
        if known is not None and leader_epoch != NO_EPOCH and known > leader_epoch:
            return StateRead(ErrorCode.FENCED_LEADER_EPOCH), None
        state = self.states.get(key)
        answer = StateRead(ErrorCode.NO_ERROR) if state is None else \
            StateRead(ErrorCode.NO_ERROR, state.state_epoch, state.start_offset, state.batches)
        if leader_epoch == NO_EPOCH or known == leader_epoch:
            return answer, None
        record = self._record(key, answer.state_epoch, leader_epoch, answer.start_offset, (), now_ms)
        return answer, record

    def write(self, key: ShareStateKey, state_epoch: int, leader_epoch: int, start_offset: int,
              batches: Sequence[PersistedBatch], now_ms: int) -> tuple[int, Entry | None]:
        """An error code, or the record that writes the state."""
        if leader_epoch != NO_EPOCH and self.leader_epochs.get(key, NO_EPOCH) > leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, None
        state = self.states.get(key)
        if state_epoch != NO_EPOCH and state is not None and state.state_epoch > state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH, None
        return ErrorCode.NO_ERROR, self._record(key, state_epoch, leader_epoch, start_offset, batches, now_ms)

    def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int,
                   now_ms: int) -> tuple[int, Entry | None]:
        """A new state at `start_offset` with nothing in flight (a fresh share partition, or an
        administrator's reset): always a snapshot, with the state epoch it brings."""
        state = self.states.get(key)
        if state is not None and state.state_epoch > state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH, None
        snapshot_epoch = state.snapshot_epoch + 1 if state is not None else 0
        leader_epoch = self.leader_epochs.get(key, NO_EPOCH)
        value = ShareSnapshot(snapshot_epoch, state_epoch, leader_epoch, start_offset, now_ms, now_ms)
        return ErrorCode.NO_ERROR, (encode_key(SNAPSHOT, key), encode_snapshot(value))

    def summary(self, key: ShareStateKey) -> StateSummary:
        """The state as it is, without recording any reader (no fencing)."""
        state = self.states.get(key)
        if state is None:
            return StateSummary(ErrorCode.NO_ERROR)
        read = StateRead(ErrorCode.NO_ERROR, state.state_epoch, state.start_offset, state.batches)
        return summarize(read, state.leader_epoch)

    def delete(self, key: ShareStateKey) -> Entry | None:
        """The tombstone that forgets the state (None when there is none to forget)."""
        if key not in self.states:
            return None
        return encode_key(SNAPSHOT, key), None

    def _record(self, key: ShareStateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                batches: Sequence[PersistedBatch], now_ms: int) -> Entry:
        """A snapshot when the key has none yet, its state epoch rises or enough updates were
        written since the last one; else an update."""
        state = self.states.get(key)
        if (state is None or self._updates_since_snapshot.get(key, 0) >= self.updates_per_snapshot
                or state_epoch > state.state_epoch):
            base = state or ShareState(-1, DEFAULT_STATE_EPOCH, NO_EPOCH, start_offset)
            start = base.start_offset if start_offset == -1 else start_offset
            value = ShareSnapshot(base.snapshot_epoch + 1, base.state_epoch if state_epoch == NO_EPOCH else state_epoch,
                                  base.leader_epoch if leader_epoch == NO_EPOCH else leader_epoch, start,
                                  now_ms if state is None else base.create_timestamp, now_ms,
                                  combine_batches(base.batches, batches, start))
            return encode_key(SNAPSHOT, key), encode_snapshot(value)
        start = state.start_offset if start_offset == -1 else start_offset
        update = ShareUpdate(state.snapshot_epoch, leader_epoch, start_offset,
                             combine_batches((), batches, start))
        return encode_key(UPDATE, key), encode_update(update)


# -- the service ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShareCoordinatorConfig:
    updates_per_snapshot: int = 500  # share.coordinator.snapshot.update.records.per.snapshot
    write_timeout_ms: int = 5000  # share.coordinator.write.timeout.ms


class ShareCoordinator:
    """The states of the `__share_group_state` partitions this broker leads, and the three
    state RPCs over them (Kafka's ShareCoordinatorService)."""

    def __init__(self, topic: InternalTopic, config: ShareCoordinatorConfig,
                 clock: WallClock = wall_clock_ms) -> None:
        self.topic = topic
        self.config = config
        self.clock = clock
        self.shards: dict[int, ShareStateShard] = {}

    # -- leadership --------------------------------------------------------------------------------

    def load(self, only: int | None = None) -> None:
        """Replay the partitions this broker leads (or `only`, just taken over)."""
        if not self.topic.exists():
            return
        fresh: dict[int, ShareStateShard] = {}
        for partition, batch in self.topic.batches(only):
            shard = fresh.setdefault(partition.index, ShareStateShard(self.config.updates_per_snapshot))
            if batch.is_control:
                continue
            for record in batch.records:
                if record.key is None:
                    continue
                try:
                    shard.replay(record.key, record.value)
                except (ProtocolError, ValueError) as e:
                    log.warning("skipping an unreadable record at offset %d of %s: %s",
                                record.offset, partition.name, e)
        for partition in self.topic.replicas.partitions_of(TOPIC):
            if partition.is_leader and (only is None or partition.index == only):
                self.shards[partition.index] = fresh.get(partition.index) or \
                    ShareStateShard(self.config.updates_per_snapshot)
        log.info("loaded the share-partition states of %d partition(s) of %s", len(self.shards), TOPIC)

    def unload(self, index: int) -> None:
        """Another broker leads partition `index` of `__share_group_state` now."""
        self.shards.pop(index, None)

    def partition_of(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        return self.topic.partition_of(coordinator_key(group_id, topic_id, partition))

    # -- the state RPCs ------------------------------------------------------------------------------

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> StateRead:
        key, shard = self._shard_of(group_id, topic_id, partition)
        if shard is None:
            return StateRead(ErrorCode.NOT_COORDINATOR)
        answer, record = shard.read(key, leader_epoch, self.clock())
        if record is not None:
            code = await self._append(key, shard, record)
            if code != ErrorCode.NO_ERROR:
                return StateRead(code)
        return answer

    async def write(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                    leader_epoch: int, start_offset: int, batches: Sequence[PersistedBatch]) -> int:
        key, shard = self._shard_of(group_id, topic_id, partition)
        if shard is None:
            return ErrorCode.NOT_COORDINATOR
        code, record = shard.write(key, state_epoch, leader_epoch, start_offset, batches, self.clock())
        if record is None:
            return code
        return await self._append(key, shard, record)

    async def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                         start_offset: int) -> int:
        key, shard = self._shard_of(group_id, topic_id, partition)
        if shard is None:
            return ErrorCode.NOT_COORDINATOR
        code, record = shard.initialize(key, state_epoch, start_offset, self.clock())
        if record is None:
            return code
        return await self._append(key, shard, record)

    async def summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> StateSummary:
        key, shard = self._shard_of(group_id, topic_id, partition)
        if shard is None:
            return StateSummary(ErrorCode.NOT_COORDINATOR)
        return shard.summary(key)

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        """Forget a share partition's state (DeleteShareGroupState): a tombstone, replicated."""
        key, shard = self._shard_of(group_id, topic_id, partition)
        if shard is None:
            return ErrorCode.NOT_COORDINATOR
        record = shard.delete(key)
        if record is None:
            return ErrorCode.NO_ERROR
        return await self._append(key, shard, record)

    def _shard_of(self, group_id: str, topic_id: uuid.UUID,
                  partition: int) -> tuple[ShareStateKey, ShareStateShard | None]:
        key = ShareStateKey(group_id, topic_id, partition)
        hosted = self.topic.hosted(coordinator_key(group_id, topic_id, partition))
        if hosted is None:
            return key, None
        if hosted.index not in self.shards:
            # Led without a leadership change to load it on (the topic just created here): replay it now.
            self.load(hosted.index)
        return key, self.shards.get(hosted.index)

    async def _append(self, key: ShareStateKey, shard: ShareStateShard, record: Entry) -> int:
        """Append the record, apply it, and answer once every in-sync replica has it."""
        text_key = coordinator_key(key.group_id, key.topic_id, key.partition)
        try:
            self.topic.write(text_key, [record], self.clock())
        except KafkaError as e:
            return ErrorCode.NOT_COORDINATOR if e.code == ErrorCode.NOT_LEADER_OR_FOLLOWER else e.code
        shard.replay(*record)
        return await self.topic.wait_replicated(text_key, self.config.write_timeout_ms / 1000)
