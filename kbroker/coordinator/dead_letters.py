"""Dead letters of share groups (KIP-1191): a record a share group archives because a consumer
REJECTed it or because it reached the delivery-count limit is written to the group's dead-letter
topic (group config `errors.deadletterqueue.topic.name`).

As Kafka's ShareGroupDLQStateManager:

- the topic must opt in (topic config `errors.deadletterqueue.group.enable=true`), its name must
  not start with `__` and must start with the broker's `errors.deadletterqueue.topic.name.prefix`
  (`dlq.`; empty: any name); a missing one is created (with the opt-in) only when the broker's
  `errors.deadletterqueue.auto.create.topics.enable` is true. Otherwise the dead letters are
  dropped with a warning: the records stay archived either way.
- a dead letter carries headers naming where it came from: `__dlq.errors.topic`,
  `__dlq.errors.partition`, `__dlq.errors.offset`, `__dlq.errors.group`,
  `__dlq.errors.delivery.count` and `__dlq.errors.message` (why, Kafka's text). With the group's
  `errors.deadletterqueue.copy.record.enable` it also carries the archived record's key and value
  (and, beyond Kafka, its own headers, before the `__dlq.errors.*` ones).
- it goes to partition (source partition mod the dead-letter topic's partition count) and its
  timestamp is the time of writing (log retention counts from then).

Writing never holds up ShareAcknowledge or ShareFetch: `archived` only queues the event, and one
task reads the records from the log and appends them (through the ReplicaManager when this broker
leads the dead-letter partition, else as a Produce to its leader), retrying a failed write five
times with a growing pause. It is not atomic with the archiving: a broker that stops with dead
letters queued does not write them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from kbroker.clock import wall_clock_ms
from kbroker.cluster.broker_client import BrokerUnavailable
from kbroker.cluster.group_configs import DLQ_COPY_RECORD, DLQ_TOPIC_NAME, GroupConfigs
from kbroker.cluster.metadata_cache import MetadataCache
from kbroker.cluster.partition_writer import ClientFactory, PartitionWriter, RemoteLeader
from kbroker.cluster.replica_manager import ReplicaManager
from kbroker.cluster.topics import TopicManager, TopicSpec
from kbroker.share.share_partition import Archived, ArchiveReason
from kbroker.tasks import cancel_and_wait
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import Record, decode_batches, encode_batch

log = logging.getLogger("kbroker.dead_letters")

DLQ_TOPIC_ENABLE = "errors.deadletterqueue.group.enable"  # the topic config that opts a topic in
HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"
# Kafka's ShareGroupDLQ causes.
MESSAGES = {ArchiveReason.REJECTED: "Offset rejected by client.",
            ArchiveReason.DELIVERY_COUNT_LIMIT: "Offset delivery count exceeded the threshold."}
MAX_ATTEMPTS = 5
FIRST_BACKOFF_S = 0.1
READ_MAX_BYTES = 1 << 20  # Kafka's DLQ_MAX_FETCH_BYTES per read


@dataclass(frozen=True)
class DeadLetterJob:
    group: str
    topic: str
    partition: int
    archived: tuple[Archived, ...]


@dataclass(frozen=True)
class DeadLetterSettings:
    auto_create: bool = False  # errors.deadletterqueue.auto.create.topics.enable
    topic_prefix: str = "dlq."  # errors.deadletterqueue.topic.name.prefix


class DeadLetterRefused(Exception):
    """The group's dead-letter topic cannot take records (Kafka's ConfigException)."""


class DeadLetters:
    def __init__(self, replicas: ReplicaManager, cache: MetadataCache, group_configs: GroupConfigs,
                 topics: TopicManager, settings: Callable[[], DeadLetterSettings],
                 remote_leader: RemoteLeader | None = None, client_factory: ClientFactory | None = None) -> None:
        self.replicas = replicas
        self.cache = cache
        self.group_configs = group_configs
        self.topics = topics
        self.settings = settings
        self.writer = PartitionWriter(replicas, remote_leader, client_factory)
        self._queue: asyncio.Queue[DeadLetterJob] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.written = 0  # dead letters appended, for tests and metrics

    # -- the archive listener (SharePartitionManager's on_archived) -------------------------------

    def archived(self, group: str, topic: str, partition: int, archived: list[Archived]) -> None:
        """Queue the dead letters of one settlement; returns at once."""
        if not self.group_configs.value(group, DLQ_TOPIC_NAME):
            return
        self._queue.put_nowait(DeadLetterJob(group, topic, partition, tuple(archived)))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="dead-letters")

    async def idle(self) -> None:
        """Wait until every queued dead letter was written or given up (tests)."""
        await self._queue.join()

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        await self.writer.close()

    # -- writing ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            job = await self._queue.get()
            try:
                await self._write_with_retries(job)
            except Exception:
                log.exception("writing dead letters of group %s failed", job.group)
            finally:
                self._queue.task_done()

    async def _write_with_retries(self, job: DeadLetterJob) -> None:
        backoff_s = FIRST_BACKOFF_S
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                await self._write(job)
                return
            except DeadLetterRefused as e:
                log.warning("dropping %d dead letter(s) of group %s from %s-%d: %s", len(job.archived), job.group,
                            job.topic, job.partition, e)
                return
            except (KafkaError, BrokerUnavailable) as e:
                if attempt == MAX_ATTEMPTS:
                    log.warning("giving up %d dead letter(s) of group %s from %s-%d after %d attempts: %s",
                                len(job.archived), job.group, job.topic, job.partition, attempt, e)
                    return
            await asyncio.sleep(backoff_s)
            backoff_s *= 2

    async def _write(self, job: DeadLetterJob) -> None:
        topic = await self._dead_letter_topic(job.group)
        record = self.cache.topic(topic)
        if record is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"dead-letter topic {topic} is not known yet")
        partition = job.partition % len(record.assignment)
        await self.writer.append(topic, partition, self._batch(job))
        self.written += len(job.archived)

    async def _dead_letter_topic(self, group: str) -> str:
        """The group's dead-letter topic after Kafka's checks (validateDlqTopic), created if
        missing and the broker allows it."""
        topic = self.group_configs.value(group, DLQ_TOPIC_NAME)
        if not topic:
            raise DeadLetterRefused(f"Configured DLQ topic name in share group: {group} is empty.")
        if topic.startswith("__"):
            raise DeadLetterRefused(f"Configured DLQ topic name in share group: {group} cannot start with __, "
                                    f"topic: {topic}.")
        settings = self.settings()
        record = self.cache.topic(topic)
        if record is not None and record.configs.get(DLQ_TOPIC_ENABLE, "false").strip().lower() != "true":
            raise DeadLetterRefused(f"DLQ is not enabled on configured DLQ topic for share group: {group}, "
                                    f"topic: {topic}.")
        if record is None and not settings.auto_create:
            raise DeadLetterRefused(f"DLQ topic does not exist and auto create is disabled on cluster for share "
                                    f"group: {group}, topic: {topic}.")
        if settings.topic_prefix and not topic.startswith(settings.topic_prefix):
            raise DeadLetterRefused(f"Configured DLQ topic name does not comply with the DLQ topic prefix in share "
                                    f"group: {group}, topic: {topic}, prefix: {settings.topic_prefix}.")
        if record is None:
            try:
                await self.topics.create_paced(TopicSpec(topic, configs={DLQ_TOPIC_ENABLE: "true",
                                                                         "message.timestamp.type": "CreateTime"}))
                log.info("created dead-letter topic %s for share group %s", topic, group)
            except KafkaError as e:
                if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
        return topic

    def _batch(self, job: DeadLetterJob) -> bytes:
        """One batch of the job's dead letters, timestamped now."""
        copy = self.group_configs.value(job.group, DLQ_COPY_RECORD).lower() == "true"
        originals = self._originals(job) if copy else {}
        now = wall_clock_ms()
        letters = []
        for index, archived in enumerate(job.archived):
            original = originals.get(archived.offset)
            headers: list[tuple[str, bytes | None]] = list(original.headers) if original is not None else []
            headers += [
                (HEADER_TOPIC, job.topic.encode()),
                (HEADER_PARTITION, str(job.partition).encode()),
                (HEADER_OFFSET, str(archived.offset).encode()),
                (HEADER_GROUP, job.group.encode()),
                (HEADER_DELIVERY_COUNT, str(archived.delivery_count).encode()),
                (HEADER_MESSAGE, MESSAGES[archived.reason].encode()),
            ]
            letters.append(Record(index, now, original.key if original is not None else None,
                                  original.value if original is not None else None, headers))
        return encode_batch(letters, base_timestamp=now)

    def _originals(self, job: DeadLetterJob) -> dict[int, Record]:
        """The archived records as the log holds them (the share partition is on this broker,
        which leads their topic partition); a record no longer in the log is left out."""
        wanted = {a.offset for a in job.archived}
        found: dict[int, Record] = {}
        partition = self.replicas.find(job.topic, job.partition)
        if partition is None:
            return found
        offset, last = min(wanted), max(wanted)
        while offset <= last:
            read = partition.read_log(offset, READ_MAX_BYTES)
            if read is None:
                break
            batches = decode_batches(read.read_bytes())
            if not batches:
                break
            for batch in batches:
                for record in batch.records:
                    if record.offset in wanted:
                        found[record.offset] = record
            offset = max(offset + 1, batches[-1].next_offset)
        return found
