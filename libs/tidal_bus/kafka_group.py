"""A Kafka consumer-group member: Kafka's own group coordinator with Tidal's
rendezvous assignor (one process owns the same partitions of every stream),
offsets committed after the messages are handled (at-least-once), a nak
rewinds its partition after the delay.

aiokafka starts fetching a new assignment before it calls the rebalance
listener, so nothing fetched is handed on from the moment partitions are
revoked until the listener (which replays gained partitions) has returned:
a key's new events never reach the handler ahead of its replayed past."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from tidal_schemas.streams import StreamSpec

from .api import AssignmentListener, GroupSubscription, RawMessage, StartAt
from .errors import BusError
from .kafka_assignor import rendezvous_assignor
from .kafka_records import linger_for_more, raw_message, seek
from .membership import raise_if_cancelling
from .subjects import kafka_topic

if TYPE_CHECKING:
    from .kafka_backend import KafkaBackend

log = logging.getLogger(__name__)


class KafkaGroupSubscription(GroupSubscription):
    def __init__(self, backend: "KafkaBackend", spec: StreamSpec, group: str, start: StartAt,
                 on_assign: AssignmentListener | None, linger_s: float = 0.0) -> None:
        self._backend = backend
        self._linger_s = linger_s
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
        self._settled = asyncio.Event()  # clear while a rebalance is under way

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
                batch = await self._fetch()
            except KafkaError as exc:
                log.warning("kafka fetch on %s: %s; retrying", self._topic, exc)
                await asyncio.sleep(0.5)
                continue
            for tp, records in batch.items():
                for record in records:
                    if not self._settled.is_set():
                        await self._settled.wait()
                    if tp in self._rewind or tp.partition not in self._owned or self.stopping:
                        break  # a nak rewound this partition: the rest comes again after the delay
                    key = (tp.partition, record.offset)
                    self._deliveries[key] = self._deliveries.get(key, 0) + 1
                    yield raw_message(record, deliveries=self._deliveries[key],
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

    async def _fetch(self) -> dict[TopicPartition, list]:
        most = self._backend.fetch_batch
        batch = await self._consumer.getmany(timeout_ms=500, max_records=most)
        return await linger_for_more(self._consumer, batch, most, self._linger_s)

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

    def request_stop(self) -> None:
        super().request_stop()
        self._settled.set()  # a stop does not wait for a rebalance that may never finish

    async def close(self) -> None:
        await self._commit()
        await self._consumer.stop()

    async def _assigned(self, assigned: set[TopicPartition]) -> None:
        self._settled.clear()  # already cleared by the revocation; whatever led here, nothing passes until done
        try:
            owned = frozenset(tp.partition for tp in assigned)
            gained, lost = owned - self._owned, self._owned - owned
            for tp in assigned:
                # Resolve the start position now, not lazily at the first fetch, so
                # nothing published after the assignment can be skipped.
                if tp.partition in gained and await self._consumer.committed(tp) is None:
                    await seek(self._consumer, [tp], self._start)
            self._owned = owned
            if self._on_assign is not None and (gained or lost):
                await self._on_assign(self, frozenset(gained), frozenset(lost))
        finally:
            self._settled.set()
        self._joined.set()
        log.info("group on %s: owns partitions %s; group coordinator %s", self._topic, sorted(owned),
                 self._coordinator())

    def _coordinator(self) -> str:
        """The broker coordinating this group, as `node id@host:port` (the
        broker a member's failover depends on), for the log."""
        coordinator = getattr(self._consumer, "_coordinator", None)  # aiokafka keeps it private
        node = getattr(coordinator, "coordinator_id", None)
        if node is None:
            return "unknown"
        broker = self._consumer._client.cluster.broker_metadata(node)
        return f"{node}@{broker.host}:{broker.port}" if broker is not None else str(node)

    async def _revoked(self, revoked: set[TopicPartition]) -> None:
        self._settled.clear()
        await self._commit()


class _Listener(ConsumerRebalanceListener):
    def __init__(self, sub: KafkaGroupSubscription) -> None:
        self._sub = sub

    async def on_partitions_revoked(self, revoked):
        await self._sub._revoked(set(revoked))

    async def on_partitions_assigned(self, assigned):
        await self._sub._assigned(set(assigned))


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("kafka resume task failed: %s", task.exception())
