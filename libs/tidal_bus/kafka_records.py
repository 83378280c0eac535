"""Kafka records as the bus sees them: the record key (cluster and event
key), a record as a `RawMessage`, seeking a consumer to a `StartAt`, and
a short batch lingering for more (the group member's and the reader's)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from aiokafka import AIOKafkaConsumer, TopicPartition

from .api import RawMessage, StartAt
from .trace_context import carried


LANE_HEADER = "tidal-lane"  # the stream's side lane a record was sent in (StreamSpec.side_lane); absent: the main lane


def record_key(cluster: str, key: str) -> str:
    """The Kafka record key: the cluster and the event key, as a NATS subject
    carries both, so compaction keeps one record per key *per cluster* (two
    clusters on one bus may have a tenant of the same name)."""
    return f"{cluster}/{key}"


def event_key(record_key_text: str) -> str:
    """The event key back from a record key (cluster names hold no '/')."""
    return record_key_text.partition("/")[2] if "/" in record_key_text else record_key_text


async def noop_ack() -> None:
    return None


async def noop_nak(delay: float) -> None:
    return None


def raw_message(record, *, deliveries: int, ack, nak, highwater: int | None = None) -> RawMessage:
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
        trace=carried(record.headers) if record.headers else None,
        lane=_lane(record.headers),
    )


def _lane(headers) -> str | None:
    for name, value in headers or ():
        if name == LANE_HEADER:
            return value.decode(errors="replace")
    return None


async def seek(consumer: AIOKafkaConsumer, tps: list[TopicPartition], start: StartAt) -> None:
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


async def position_of(consumer: AIOKafkaConsumer, tps: list[TopicPartition], partition: int) -> int:
    tp = next(tp for tp in tps if tp.partition == partition)
    return await consumer.position(tp)


async def linger_for_more(consumer: AIOKafkaConsumer, batch: dict, most: int, linger_s: float) -> dict:
    """`batch` (a `getmany`'s records), joined by what came within
    `linger_s` when it was short of `most`: the client fetches on in the
    background meanwhile. Not held when the broker has more already (a
    high watermark past the batch: a backlog, read at full speed); a
    backlog's last, short batch may wait one linger."""
    count = sum(map(len, batch.values()))
    if not linger_s or not count or count >= most:
        return batch
    if all((consumer.highwater(tp) or 0) <= records[-1].offset + 1 for tp, records in batch.items()):
        await asyncio.sleep(linger_s)  # a trickle, not a backlog: wait for more
    for tp, records in (await consumer.getmany(timeout_ms=0, max_records=most - count)).items():
        batch[tp] = batch.get(tp, []) + records
    return batch
