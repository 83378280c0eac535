"""Kafka backend (aiokafka): a topic per stream, partitioned by key.

Positions are offsets + 1, so that 0 means "nothing" on both backends.
Consumer groups use Kafka's own group coordinator; offsets are committed
after the messages are handled (commit-after-handling, at-least-once).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timezone

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    KafkaError, MessageSizeTooLargeError, TopicAlreadyExistsError, UnknownTopicOrPartitionError,
)

from tidal_schemas.streams import StreamSpec, partition_for

from .api import AssignmentListener, Backend, GroupSubscription, RawMessage, StartAt
from .auth import BusAuth
from .errors import BusError
from .intake import EventTooLarge
from .kafka_assignor import rendezvous_assignor
from .membership import raise_if_cancelling
from .subjects import kafka_topic

log = logging.getLogger(__name__)


class KafkaBackend(Backend):
    def __init__(self, bootstrap: str, namespace: str, *, fetch_batch: int = 256,
                 client_options: dict | None = None, group_options: dict | None = None,
                 auth: BusAuth | None = None, url: str = "") -> None:
        self.bootstrap = bootstrap
        self.namespace = namespace
        self.fetch_batch = fetch_batch
        # SASL and TLS (from TIDAL_BUS_… or the URL's user:password) go to every
        # client this backend makes: producer, admin, group and reader consumers.
        self.auth = auth if auth is not None else BusAuth.from_env()
        self._options = {**self.auth.kafka_options(url or f"kafka://{bootstrap}"), **(client_options or {})}
        self._group_options = group_options or {}
        self.member_id = uuid.uuid4().hex[:12]  # one per process: aligns partitions across streams
        self._producer: AIOKafkaProducer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._known_topics: set[str] = set()

    async def connect(self) -> None:
        try:
            self._admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, **self._options)
            await self._admin.start()
            self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", **self._options)
            await self._producer.start()
        except (KafkaError, OSError) as exc:
            await self.close()
            raise BusError(f"cannot connect to Kafka at {self.bootstrap}: {exc}") from exc

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
        if self._admin is not None:
            await self._admin.close()
            self._admin = None

    @property
    def connected(self) -> bool:
        return self._producer is not None

    async def ensure_stream(self, spec: StreamSpec) -> None:
        topic = kafka_topic(self.namespace, spec)
        if topic in self._known_topics:
            return
        if self._admin is None:
            raise BusError("Kafka backend used before connect()")
        new = NewTopic(
            topic,
            num_partitions=spec.partitions,
            replication_factor=1,
            topic_configs=topic_configs(spec),
        )
        if await self._create_topic(new) == TopicAlreadyExistsError.errno:
            await self._repair_partitions(topic, spec, new)
        self._known_topics.add(topic)

    async def _create_topic(self, new: NewTopic) -> int:
        """The topic's error code: aiokafka answers per-topic errors in the response."""
        assert self._admin is not None
        try:
            response = await self._admin.create_topics([new])
        except TopicAlreadyExistsError:
            return TopicAlreadyExistsError.errno
        codes = [error[1] for error in getattr(response, "topic_errors", ())]
        bad = [code for code in codes if code not in (0, TopicAlreadyExistsError.errno)]
        if bad:
            raise BusError(f"cannot create topic {new.name}: Kafka error code {bad[0]}")
        return codes[0] if codes else 0

    async def _repair_partitions(self, topic: str, spec: StreamSpec, new: NewTopic) -> None:
        """A topic that exists with another partition count was made by the
        broker's auto-creation (any client's metadata request for a missing topic
        creates it with the broker's default, e.g. after a memory-storage broker
        restarts): keys would land on partitions that do not exist. An empty one
        is re-created right; one holding records is an operator's decision."""
        assert self._admin is not None
        (described,) = await self._admin.describe_topics([topic])
        count = len(described.get("partitions", ()))
        if count == spec.partitions:
            return
        if await self._holds_records(topic, count):
            raise BusError(f"topic {topic} has {count} partitions, the stream {spec.name} needs {spec.partitions}, "
                           f"and it holds records: move them and delete the topic (disable the broker's "
                           f"auto.create.topics.enable so it cannot happen again)")
        log.warning("topic %s was auto-created with %d partitions; re-creating it with %d",
                    topic, count, spec.partitions)
        try:
            await self._admin.delete_topics([topic])
        except UnknownTopicOrPartitionError:
            pass
        await self._create_topic(new)  # already there: another process repaired it first

    async def _holds_records(self, topic: str, count: int) -> bool:
        tps = [TopicPartition(topic, p) for p in range(count)]
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, **self._options)
        await consumer.start()
        try:
            return any((await consumer.end_offsets(tps)).values())
        finally:
            await consumer.stop()

    async def delete_stream(self, spec: StreamSpec) -> None:
        topic = kafka_topic(self.namespace, spec)
        if self._admin is not None:
            try:
                await self._admin.delete_topics([topic])
            except UnknownTopicOrPartitionError:
                pass
        self._known_topics.discard(topic)

    async def publish(self, spec: StreamSpec, cluster: str, key: str, data: bytes, msg_id: str) -> int:
        await self.ensure_stream(spec)
        if self._producer is None:
            raise BusError("Kafka backend used before connect()")
        headers = [("tidal-id", msg_id.encode()), ("tidal-cluster", cluster.encode())]
        topic, partition = kafka_topic(self.namespace, spec), partition_for(key, spec.partitions)
        try:
            await self._known_partition(spec, topic, partition)
            meta = await self._producer.send_and_wait(
                topic, data, key=record_key(cluster, key).encode(), partition=partition, headers=headers,
            )
        except MessageSizeTooLargeError as exc:  # the producer's or the broker's limit: retrying cannot help
            raise EventTooLarge(f"message to {spec.name}: {len(data)} bytes, refused by Kafka: {exc}") from None
        except KafkaError as exc:
            raise BusError(f"publish to {spec.name} failed: {exc}") from exc
        return meta.offset + 1

    async def _known_partition(self, spec: StreamSpec, topic: str, partition: int) -> None:
        """The producer's metadata is refreshed only every few minutes: after a
        broker restart (or a topic re-created) it can still hold the topic with
        no partitions, and aiokafka would refuse every send to it until then."""
        assert self._producer is not None
        if partition in await self._producer.partitions_for(topic):
            return
        await self._producer.client.force_metadata_update()
        if partition in await self._producer.partitions_for(topic):
            return
        self._known_topics.discard(topic)
        await self.ensure_stream(spec)  # repairs an auto-created topic, or says why it cannot
        await self._producer.client.force_metadata_update()
        if partition not in await self._producer.partitions_for(topic):
            raise BusError(f"partition {partition} of {topic} is not known to the broker")

    async def subscribe(self, spec: StreamSpec, group: str, start: StartAt, *,
                        on_assign: AssignmentListener | None = None) -> GroupSubscription:
        await self.ensure_stream(spec)
        sub = _KafkaGroupSubscription(self, spec, group, start, on_assign)
        await sub.start()
        return sub

    async def read(self, spec: StreamSpec, start: StartAt, *, partitions: frozenset[int] | None = None,
                   until: dict[int, int] | None = None, follow: bool = False) -> AsyncIterator[RawMessage]:
        await self.ensure_stream(spec)
        topic = kafka_topic(self.namespace, spec)
        chosen = sorted(partitions) if partitions is not None else list(range(spec.partitions))
        if not chosen:
            return
        tps = [TopicPartition(topic, p) for p in chosen]
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, **self._options)
        try:
            await consumer.start()
            consumer.assign(tps)
            await _seek(consumer, tps, start)
            ends = await consumer.end_offsets(tps)
            stop = {tp.partition: (until.get(tp.partition, 0) if until is not None else ends[tp]) for tp in tps}
            done = {p for p, end in stop.items() if not follow and await _position(consumer, tps, p) >= end}
            while follow or len(done) < len(tps):
                raise_if_cancelling()
                batch = await consumer.getmany(timeout_ms=500, max_records=self.fetch_batch)
                if not batch and not follow:
                    # nothing more arrives before the recorded ends: they were reached
                    # (a list first: `await` inside all()'s generator would make it an async generator)
                    positions = [await _position(consumer, tps, p) for p in stop]
                    if all(position >= stop[p] for position, p in zip(positions, stop)):
                        return
                for tp, records in batch.items():
                    for record in records:
                        position = record.offset + 1
                        if not follow and position > stop[tp.partition]:
                            done.add(tp.partition)
                            break
                        yield _raw(record, deliveries=1, ack=_noop_ack, nak=_noop_nak)
                        if not follow and position >= stop[tp.partition]:
                            done.add(tp.partition)
                            break
        except KafkaError as exc:  # the caller sees the bus's error, whichever backend
            raise BusError(f"read of {spec.name} failed: {exc}") from exc
        finally:
            await consumer.stop()


async def _position(consumer: AIOKafkaConsumer, tps: list[TopicPartition], partition: int) -> int:
    tp = next(tp for tp in tps if tp.partition == partition)
    return await consumer.position(tp)


def topic_configs(spec: StreamSpec) -> dict[str, str]:
    """Retention of a topic: by age (and size), or compacted for a state
    stream (the last record of every key is kept, whatever its age)."""
    if spec.keep_last_per_key:
        return {"cleanup.policy": "compact", "retention.ms": "-1", "retention.bytes": "-1"}
    return {"retention.ms": str(int(spec.max_age_s * 1000)),
            "retention.bytes": str(spec.max_bytes if spec.max_bytes is not None else -1)}


def record_key(cluster: str, key: str) -> str:
    """The Kafka record key: the cluster and the event key, as a NATS subject
    carries both, so compaction keeps one record per key *per cluster* (two
    clusters on one bus may have a tenant of the same name)."""
    return f"{cluster}/{key}"


def event_key(record_key_text: str) -> str:
    """The event key back from a record key (cluster names hold no '/')."""
    return record_key_text.partition("/")[2] if "/" in record_key_text else record_key_text


async def _noop_ack() -> None:
    return None


async def _noop_nak(delay: float) -> None:
    return None


def _raw(record, *, deliveries: int, ack, nak, highwater: int | None = None) -> RawMessage:
    text = (record.key or b"").decode(errors="replace")
    return RawMessage(
        data=record.value or b"",
        key=event_key(text),
        cluster=text.partition("/")[0] if "/" in text else None,
        partition=record.partition,
        position=record.offset + 1,
        deliveries=deliveries,
        ack=ack,
        nak=nak,
        pending=None if highwater is None else max(highwater - record.offset - 1, 0),
        stored_at=None if record.timestamp is None else datetime.fromtimestamp(record.timestamp / 1000, timezone.utc),
    )


async def _seek(consumer: AIOKafkaConsumer, tps: list[TopicPartition], start: StartAt) -> None:
    if start.kind == "earliest":
        await consumer.seek_to_beginning(*tps)
    elif start.kind == "latest":
        await consumer.seek_to_end(*tps)
    elif start.kind == "after":
        last = dict(start.positions)  # positions are offset + 1: the next offset to read
        for tp in tps:
            if tp.partition in last:
                consumer.seek(tp, last[tp.partition])
            else:
                await consumer.seek_to_beginning(tp)
    elif start.kind == "sequence":
        assert start.sequence is not None
        for tp in tps:
            consumer.seek(tp, max(start.sequence - 1, 0))
    else:
        assert start.time is not None
        found = await consumer.offsets_for_times({tp: int(start.time.timestamp() * 1000) for tp in tps})
        for tp in tps:
            hit = found.get(tp)
            # no record at or after that time (Tansu answers offset 0 with timestamp -1)
            if hit is None or hit.offset < 0 or hit.timestamp < 0:
                await consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, found[tp].offset)


class _KafkaGroupSubscription(GroupSubscription):
    def __init__(self, backend: KafkaBackend, spec: StreamSpec, group: str, start: StartAt,
                 on_assign: AssignmentListener | None) -> None:
        self._backend = backend
        self._spec = spec
        self._topic = kafka_topic(backend.namespace, spec)
        self._start = start
        self._on_assign = on_assign
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=backend.bootstrap,
            group_id=f"{backend.namespace}.{group}",
            enable_auto_commit=False,
            auto_offset_reset="latest" if start.kind == "latest" else "earliest",
            partition_assignment_strategy=(rendezvous_assignor(backend.member_id),),
            **backend._options,
            **backend._group_options,
        )
        self._owned: frozenset[int] = frozenset()
        self._acked: dict[TopicPartition, int] = {}
        self._handled: dict[TopicPartition, int] = {}  # next offset to handle, as far as this member knows
        self._deliveries: dict[tuple[int, int], int] = {}
        self._rewind: dict[TopicPartition, int] = {}
        self._joined = asyncio.Event()

    async def start(self, join_timeout_s: float = 60.0) -> None:
        """Join the group and return once this member has its first assignment."""
        await self._consumer.start()
        self._consumer.subscribe(topics=[self._topic], listener=_Listener(self))
        try:
            await asyncio.wait_for(self._joined.wait(), join_timeout_s)
        except asyncio.TimeoutError:
            await self._consumer.stop()
            raise BusError(f"no partition assignment for {self._topic} within {join_timeout_s}s") from None

    def owned(self) -> frozenset[int]:
        return self._owned

    async def committed(self, partition: int) -> int:
        offset = await self._consumer.committed(TopicPartition(self._topic, partition))
        return offset or 0

    async def lag(self) -> dict[int, int]:
        tps = sorted((tp for tp in self._consumer.assignment() if tp.partition in self._owned),
                     key=lambda tp: tp.partition)
        if not tps:
            return {}
        ends = await self._consumer.end_offsets(tps)
        lags: dict[int, int] = {}
        for tp in tps:
            done = max(self._handled.get(tp, 0), await self._consumer.committed(tp) or 0)
            lags[tp.partition] = max(ends[tp] - done, 0)
        return lags

    async def messages(self) -> AsyncIterator[RawMessage]:
        while not self.stopping:
            raise_if_cancelling()
            await self._commit()
            try:
                batch = await self._consumer.getmany(timeout_ms=500, max_records=self._backend.fetch_batch)
            except KafkaError as exc:
                log.warning("kafka fetch on %s: %s; retrying", self._topic, exc)
                await asyncio.sleep(0.5)
                continue
            for tp, records in batch.items():
                for record in records:
                    if tp in self._rewind or tp.partition not in self._owned or self.stopping:
                        break  # a nak rewound this partition: the rest comes again after the delay
                    key = (tp.partition, record.offset)
                    self._deliveries[key] = self._deliveries.get(key, 0) + 1
                    yield _raw(record, deliveries=self._deliveries[key],
                               ack=self._acker(tp, record.offset), nak=self._naker(tp, record.offset),
                               highwater=self._consumer.highwater(tp))

    def _acker(self, tp: TopicPartition, offset: int):
        async def ack() -> None:
            self._acked[tp] = max(self._acked.get(tp, -1), offset)
            self._handled[tp] = max(self._handled.get(tp, 0), offset + 1)
            self._deliveries.pop((tp.partition, offset), None)
        return ack

    def _naker(self, tp: TopicPartition, offset: int):
        async def nak(delay: float) -> None:
            self._rewind[tp] = offset
            self._consumer.pause(tp)

            async def resume() -> None:
                await asyncio.sleep(delay)
                if tp in self._consumer.assignment():
                    self._consumer.seek(tp, offset)
                    self._consumer.resume(tp)
                self._rewind.pop(tp, None)

            asyncio.get_running_loop().create_task(resume()).add_done_callback(_log_failure)
        return nak

    async def _commit(self) -> None:
        if not self._acked:
            return
        offsets = {tp: off + 1 for tp, off in self._acked.items() if tp.partition in self._owned}
        self._acked.clear()
        if offsets:
            try:
                await self._consumer.commit(offsets)
            except KafkaError as exc:  # rebalance in progress: messages come again, handlers dedupe
                log.warning("kafka commit on %s failed: %s", self._topic, exc)

    async def close(self) -> None:
        await self._commit()
        await self._consumer.stop()

    async def _assigned(self, assigned: set[TopicPartition]) -> None:
        owned = frozenset(tp.partition for tp in assigned)
        gained, lost = owned - self._owned, self._owned - owned
        for tp in assigned:
            # Resolve the start position now, not lazily at the first fetch, so
            # nothing published after the assignment can be skipped.
            if tp.partition in gained and await self._consumer.committed(tp) is None:
                await _seek(self._consumer, [tp], self._start)
        self._owned = owned
        if self._on_assign is not None and (gained or lost):
            await self._on_assign(self, frozenset(gained), frozenset(lost))
        self._joined.set()
        log.info("group on %s: owns partitions %s", self._topic, sorted(owned))

    async def _revoked(self, revoked: set[TopicPartition]) -> None:
        await self._commit()


class _Listener(ConsumerRebalanceListener):
    def __init__(self, sub: _KafkaGroupSubscription) -> None:
        self._sub = sub

    async def on_partitions_revoked(self, revoked):
        await self._sub._revoked(set(revoked))

    async def on_partitions_assigned(self, assigned):
        await self._sub._assigned(set(assigned))


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("kafka resume task failed: %s", task.exception())
