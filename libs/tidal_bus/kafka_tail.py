"""Reading one partition of a Kafka topic backwards from its end, a window
at a time: what a lookup of one key's latest event does on a broker without
a key index (NATS has one: keyed_read.py).

A key lives in one partition (`partition_for`), so the lookup reads that
partition only, from its end back: `windows()` yields the records at
positions end−N+1..end, then the N·2 before them, and so on (N doubling up
to `widest`), each window in log order. The caller stops when it has what
it wants; at most the windows it asked for are fetched, whatever the
partition's length. `records` counts the records the broker handed over.

    tail = PartitionTail(bus, "placement.decision", 0, cluster="prod")
    async for window in tail.windows(scan_limit=10_000):
        for raw, event in reversed(window.reads): ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from tidal_schemas import Envelope, SchemaError
from tidal_schemas.streams import stream

from .api import RawMessage, StartAt
from .bus import Bus
from .errors import BusError
from .intake import accept
from .subjects import kafka_topic

Read = tuple[RawMessage, Envelope[Any] | SchemaError]
FIRST_WINDOW = 16
WIDEST_WINDOW = 4096


def on_kafka(bus: Bus) -> bool:
    """Whether `bus` is on Kafka (its partitions can be read back from their ends)."""
    from .kafka_backend import KafkaBackend

    return isinstance(bus.backend, KafkaBackend)


@dataclass
class Window:
    """The records of positions low..high (the last window: to the end), in
    log order; `at_start`: low is the first position the partition holds."""

    low: int
    high: int
    reads: list[Read]
    at_start: bool


def window_spans(first: int, last: int, narrowest: int = FIRST_WINDOW,
                 widest: int = WIDEST_WINDOW) -> Iterator[tuple[int, int]]:
    """The (low, high) position spans that cover first..last from its end
    back: `narrowest` positions, then twice as many before them, … at most
    `widest` each. Pure: `list(window_spans(1, 100, 16))` is
    [(85, 100), (53, 84), (1, 52)]."""
    high, width = last, narrowest
    while high >= first:
        low = max(first, high - width + 1)
        yield low, high
        high, width = low - 1, min(width * 2, widest)


class PartitionTail:
    """One partition of `stream_name` on a Kafka bus, read from its end back;
    only `cluster`'s records are yielded, every record is counted."""

    def __init__(self, bus: Bus, stream_name: str, partition: int, *, cluster: str,
                 narrowest: int = FIRST_WINDOW, widest: int = WIDEST_WINDOW) -> None:
        if not on_kafka(bus):
            raise BusError(f"{type(bus.backend).__name__}: a partition tail reads Kafka only")
        self.backend, self.spec = bus.backend, stream(stream_name)
        self.partition, self.cluster = partition, cluster
        self.narrowest, self.widest = narrowest, widest
        self.records = 0  # records the broker handed over, every cluster's

    async def _offsets(self, ask):
        """`ask(consumer, tp)` answered by a consumer of no group, assigned nothing."""
        backend = self.backend
        await backend.ensure_stream(self.spec)
        tp = TopicPartition(kafka_topic(backend.namespace, self.spec), self.partition)
        consumer = AIOKafkaConsumer(bootstrap_servers=backend.bootstrap, enable_auto_commit=False,
                                    **backend._options)
        try:
            await consumer.start()
            return await ask(consumer, tp)
        except KafkaError as exc:
            raise BusError(f"offsets of {self.spec.name} partition {self.partition}: {exc}") from exc
        finally:
            await consumer.stop()

    async def bounds(self) -> tuple[int, int]:
        """(first, last) position the partition holds now (last < first:
        empty). The last may fall short of a batch written last (the
        embedded broker reports one past its first record): `windows()`
        reads its newest window to the true end."""
        async def ask(consumer, tp):
            begins, ends = await consumer.beginning_offsets([tp]), await consumer.end_offsets([tp])
            return begins[tp] + 1, ends[tp]  # positions are offsets + 1
        return await self._offsets(ask)

    async def position_at(self, when: datetime) -> int | None:
        """The position of the first record stamped at or after `when` (the
        broker's time index), None when there is none."""
        async def ask(consumer, tp):
            hit = (await consumer.offsets_for_times({tp: int(when.timestamp() * 1000)})).get(tp)
            # none at or after that time (the embedded broker answers offset 0 with timestamp -1)
            return None if hit is None or hit.offset < 0 or hit.timestamp < 0 else hit.offset + 1
        return await self._offsets(ask)

    async def windows(self, scan_limit: int = 0, last: int | None = None) -> AsyncIterator[Window]:
        """The partition's records, a window at a time from its end (or from
        position `last`) back (see the module docstring); with `scan_limit`,
        windows of at most that many positions in all."""
        first, end = await self.bounds()
        to_end = last is None  # the newest window is read to the true end, past the reported one
        end, looked = max(end if last is None else last, first), 0
        for low, high in window_spans(first, end, self.narrowest, self.widest):
            if scan_limit:
                if looked >= scan_limit:
                    return
                low = max(low, high - (scan_limit - looked) + 1)
            looked += high - low + 1
            reads = [read async for read in self._span(low, None if to_end and high == end else high)]
            yield Window(low, high, reads, low == first)

    async def _span(self, low: int, high: int | None) -> AsyncIterator[Read]:
        until = None if high is None else {self.partition: high}
        async for raw in self.backend.read(self.spec, StartAt.at_sequence(low),
                                           partitions=frozenset({self.partition}), until=until):
            self.records += 1
            if raw.cluster != self.cluster:
                continue
            try:
                yield raw, accept(raw.data, self.spec.name, key=raw.key, cluster=raw.cluster, lane=raw.lane)
            except SchemaError as exc:  # oversized, undecodable, forged: the reason, as Bus.read says it
                yield raw, exc
