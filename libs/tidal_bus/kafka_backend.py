"""Kafka backend (aiokafka): a topic per stream, partitioned by key.

Positions are offsets + 1, so that 0 means "nothing" on both backends.
Consumer groups use Kafka's own group coordinator; offsets are committed
after the messages are handled (commit-after-handling, at-least-once).
Producers send with acks=all; topics are created with the configured
replication (kafka_replication.py), and a read-only backend creates none.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, MessageSizeTooLargeError, UnknownTopicOrPartitionError

from tidal_clock import Clock, wall_clock
from tidal_schemas.streams import StreamSpec, partition_for

from .api import AssignmentListener, Backend, GroupSubscription, Position, RawMessage, StartAt
from .auth import BusAuth
from .errors import BusError
from .intake import EventTooLarge
from .kafka_group import KafkaGroupSubscription
from .kafka_records import LANE_HEADER, linger_for_more, noop_ack, noop_nak, position_of, raw_message, record_key, seek
from .kafka_replication import Replication, replication_for
from .kafka_topics import ensure_topic
from .membership import raise_if_cancelling
from .subjects import kafka_topic
from .trace_context import TraceContext

log = logging.getLogger(__name__)
CLUSTER_OF_ONE = 1  # the broker count a configured replication is checked against before connecting
PAST_END_WAIT_MS = 100  # a read to the end, at the reported ends: how long a fetch may take to bring the rest


def describe_brokers(brokers: list[dict]) -> str:
    """Brokers of a metadata answer as `id@host:port`, for the log."""
    return ", ".join(f"{b.get('node_id')}@{b.get('host')}:{b.get('port')}" for b in brokers) or "none"


@contextmanager
def _as_bus_errors(spec: StreamSpec, data: bytes) -> Iterator[None]:
    """The producer's errors as the bus's, whichever backend."""
    try:
        yield
    except MessageSizeTooLargeError as exc:  # the producer's or the broker's limit: retrying cannot help
        raise EventTooLarge(f"message to {spec.name}: {len(data)} bytes, refused by Kafka: {exc}") from None
    except KafkaError as exc:
        raise BusError(f"publish to {spec.name} failed: {exc}") from exc


class KafkaBackend(Backend):
    """`bootstrap`: one or more seed brokers, `h1:p1,h2:p2` (any one that
    answers is enough). `replication_factor` / `min_insync_replicas`: of
    the topics it creates; None: 3 / 2 on a cluster reporting 3 or more
    brokers, else 1 / 1. `read_only` (a command that only reads): topics
    are checked, never created or changed."""

    def __init__(self, bootstrap: str, namespace: str, *, fetch_batch: int = 256,
                 client_options: dict | None = None, group_options: dict | None = None,
                 replication_factor: int | None = None, min_insync_replicas: int | None = None,
                 read_only: bool = False, auth: BusAuth | None = None, url: str = "") -> None:
        self.bootstrap = [seed.strip() for seed in bootstrap.split(",") if seed.strip()]
        self.namespace = namespace
        replication_for(CLUSTER_OF_ONE, replication_factor, min_insync_replicas)  # a bad setting fails now
        self.replication_factor = replication_factor
        self.min_insync_replicas = min_insync_replicas
        self.replication: Replication | None = None  # chosen at connect(), from the brokers the cluster reports
        self.read_only = read_only
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
        self._creating = asyncio.Lock()
        self.clock: Clock = wall_clock  # wall seconds, as the broker stamps records with

    async def connect(self) -> None:
        try:
            self._admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, **self._options)
            await self._admin.start()
            cluster = await self._admin.describe_cluster()
            # acks=all: a write is acknowledged once min.insync.replicas replicas hold it
            self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", **self._options)
            await self._producer.start()
        except (KafkaError, OSError) as exc:
            await self.close()
            raise BusError(f"cannot connect to Kafka at {','.join(self.bootstrap)}: {exc}") from exc
        brokers = cluster.get("brokers", [])
        self.replication = replication_for(len(brokers), self.replication_factor, self.min_insync_replicas)
        log.info("kafka: connected to cluster %s through seeds %s: brokers %s, controller %s; new topics get "
                 "replication factor %d, min.insync.replicas %d%s", cluster.get("cluster_id"),
                 ",".join(self.bootstrap), describe_brokers(brokers), cluster.get("controller_id"),
                 self.replication.factor, self.replication.min_insync, " (read-only: none created)"
                 if self.read_only else "")
        if 1 < len(brokers) < 3 and self.replication_factor is None:
            log.warning("kafka: the cluster reports %d brokers (metadata names live ones only): new topics get "
                        "replication factor 1; set it (TIDAL_BUS_REPLICAS) on a cluster of 3 with one down",
                        len(brokers))

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
        async with self._creating:  # one at a time: publishes that waited go on in the order they came
            if topic not in self._known_topics:
                assert self.replication is not None, "set by connect()"
                await ensure_topic(self._admin, topic, spec, self.bootstrap, self._options, self.replication,
                                   read_only=self.read_only)
                self._known_topics.add(topic)

    async def delete_stream(self, spec: StreamSpec) -> None:
        topic = kafka_topic(self.namespace, spec)
        if self.read_only:
            raise BusError(f"topic {topic}: a read-only bus deletes nothing")
        if self._admin is not None:
            try:
                await self._admin.delete_topics([topic])
            except UnknownTopicOrPartitionError:
                pass
        self._known_topics.discard(topic)

    async def publish(self, spec: StreamSpec, cluster: str, key: str, data: bytes, msg_id: str,
                      trace: TraceContext | None = None, lane: str | None = None) -> int:
        return await (await self.send(spec, cluster, key, data, msg_id, trace, lane))

    async def send(self, spec: StreamSpec, cluster: str, key: str, data: bytes, msg_id: str,
                   trace: TraceContext | None = None, lane: str | None = None) -> Position:
        await self.ensure_stream(spec)
        if self._producer is None:
            raise BusError("Kafka backend used before connect()")
        headers = [("tidal-id", msg_id.encode()), ("tidal-cluster", cluster.encode())]
        if lane is not None:
            headers.append((LANE_HEADER, lane.encode()))
        if trace is not None:
            headers += [(name, value.encode()) for name, value in trace.headers().items()]
        topic, partition = kafka_topic(self.namespace, spec), partition_for(key, spec.partitions)
        with _as_bus_errors(spec, data):
            await self._known_partition(spec, topic, partition)
            sent = await self._producer.send(
                topic, data, key=record_key(cluster, key).encode(), partition=partition, headers=headers,
            )

        async def position() -> int:
            with _as_bus_errors(spec, data):
                return (await sent).offset + 1
        return position()

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
                        on_assign: AssignmentListener | None = None, linger_s: float = 0.0) -> GroupSubscription:
        await self.ensure_stream(spec)
        sub = KafkaGroupSubscription(self, spec, group, start, on_assign, linger_s)
        await sub.start()
        return sub

    async def read(self, spec: StreamSpec, start: StartAt, *, partitions: frozenset[int] | None = None,
                   until: dict[int, int] | None = None, follow: bool = False,
                   linger_s: float = 0.0, main_lane_only: bool = False) -> AsyncIterator[RawMessage]:
        await self.ensure_stream(spec)
        topic = kafka_topic(self.namespace, spec)
        chosen = sorted(partitions) if partitions is not None else list(range(spec.partitions))
        if not chosen:
            return
        tps = [TopicPartition(topic, p) for p in chosen]
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, **self._options)
        began_ms = self.clock() * 1000
        try:
            await consumer.start()
            consumer.assign(tps)
            await seek(consumer, tps, start)
            ends = await consumer.end_offsets(tps)
            stop = {tp.partition: (until.get(tp.partition, 0) if until is not None else ends[tp]) for tp in tps}
            # A read to the end takes a partition's reported end as a floor: the embedded
            # broker (Tansu) reports one past the first record of the last batch, short of
            # the rest of a batch of several sends. Past it, records stored before the
            # read began are read too, until one stored after it or nothing more comes.
            past_end = until is None and not follow
            at = {} if follow else {p: await position_of(consumer, tps, p) for p in stop}  # as records are read
            done = {p for p, end in stop.items() if not follow and not past_end and at[p] >= end}
            while follow or len(done) < len(tps):
                raise_if_cancelling()
                # at the ends already, only what a fetch has in hand is waited for
                at_ends = not follow and all(at[p] >= stop[p] for p in stop if p not in done)
                batch = await consumer.getmany(timeout_ms=PAST_END_WAIT_MS if at_ends else 500,
                                               max_records=self.fetch_batch)
                if follow:
                    batch = await linger_for_more(consumer, batch, self.fetch_batch, linger_s)
                if not batch and not follow:
                    # nothing more arrives: done when the consumer's positions (past any gap
                    # in the offsets) reached the ends (a list first: `await` inside all()'s
                    # generator would make it an async generator)
                    reading = [p for p in stop if p not in done]
                    positions = [await position_of(consumer, tps, p) for p in reading]
                    if all(position >= stop[p] for position, p in zip(positions, reading)):
                        return
                for tp, records in batch.items():
                    for record in records:
                        position = at[tp.partition] = record.offset + 1
                        if not follow and position > stop[tp.partition] and (
                                not past_end or record.timestamp > began_ms):
                            done.add(tp.partition)
                            consumer.pause(tp)
                            break
                        raw = raw_message(record, deliveries=1, ack=noop_ack, nak=noop_nak)
                        if raw.lane is None or not main_lane_only:  # Kafka cannot filter: left out here
                            yield raw
                        if not follow and not past_end and position >= stop[tp.partition]:
                            done.add(tp.partition)
                            consumer.pause(tp)
                            break
        except KafkaError as exc:  # the caller sees the bus's error, whichever backend
            raise BusError(f"read of {spec.name} failed: {exc}") from exc
        finally:
            await consumer.stop()
