"""Outputs gathered into one event per partition (`OutputBatches`), behind
a real consumer over a real NATS server and a real Kafka-protocol broker:
samples in hand go out together, every sample answered exactly once and a
node's in order, nothing of another partition in a batch, every event
acked (nothing comes back to the group), a batch never over its size, a
batch that cannot be stored dead-letters its events while the others go
on, a handler without an output window returns once its batch is
stored, and samples that come one at a time are gathered for `linger_s`,
but never so long that a consumer's window waits on the timer."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from builders import T0, metrics
from conftest import make_bus, patience, wait_until
from tidal_bus import BusError, StartAt
from tidal_runtime import OutputBatches
from tidal_schemas import NodeScore, NodeScores
from tidal_schemas.streams import partition_for, stream

NODES = [f"node-{i}" for i in range(8)]
PARTITIONS = stream("score.node").partitions


def score_of(envelope) -> NodeScore:
    m = envelope.payload
    return NodeScore(node=m.node, load=m.node_cpu_util, sampled_at=m.sampled_at, sample=envelope.id)


async def stored_batches(bus) -> list[NodeScores]:
    return [e.payload async for _, e in bus.read("score.node", StartAt.earliest())]


async def handle_all(bus, batches: OutputBatches, count: int, window: int, group: str = "g",
                     check=None) -> list[str]:
    """Run a consumer of node.metrics adding each sample's score to
    `batches` until `count` are handled; the ids handled."""
    handled: list[str] = []

    async def handler(envelope, delivery):
        await batches.add(score_of(envelope), key=envelope.payload.node, cause=envelope)
        if check is not None:
            check(envelope)
        handled.append(envelope.id)

    consumer = bus.consumer("node.metrics", group, handler, window=window)
    task = asyncio.create_task(consumer.run())
    await wait_until(lambda: len(handled) >= count, timeout=30, what="the samples handled")
    consumer.stop()
    await asyncio.wait_for(task, patience(30))
    return handled


async def nothing_comes_back(bus, group: str = "g") -> bool:
    seen: list[str] = []

    async def handler(envelope, delivery):
        seen.append(envelope.id)
    consumer = bus.consumer("node.metrics", group, handler)
    task = asyncio.create_task(consumer.run())
    await wait_until(consumer.ready.is_set, what="the consumer in its group")  # the window starts once it reads
    await asyncio.sleep(1.5)
    consumer.stop()
    await asyncio.wait_for(task, patience(30))
    return seen == []


def batches_of(bus, max_items: int = 256, publish=None, **options) -> OutputBatches:
    return OutputBatches(NodeScores, publish or bus.publish, max_items=max_items, **options)


async def handle_trickle(bus, batches: OutputBatches, count: int, window: int, gap_s: float) -> list:
    """The samples published one at a time, `gap_s` apart, while a consumer
    handles them; what was sent."""
    handled: list[str] = []

    async def handler(envelope, delivery):
        await batches.add(score_of(envelope), key=envelope.payload.node, cause=envelope)
        handled.append(envelope.id)

    consumer = bus.consumer("node.metrics", "g", handler, window=window)
    task = asyncio.create_task(consumer.run())
    sent = []
    for i in range(count):
        sent.append(await bus.publish(metrics(NODES[i % 8], load=i / 100)))
        await asyncio.sleep(gap_s)
    await wait_until(lambda: len(handled) >= count, timeout=20, what="the samples handled")
    consumer.stop()
    await asyncio.wait_for(task, patience(30))
    return sent


async def test_samples_in_hand_go_out_together_each_answered_once_and_in_order(bus_url, namespace):
    async with make_bus(bus_url, namespace) as bus:
        sent = [await bus.publish(metrics(NODES[i % 8], load=i / 100)) for i in range(64)]
        await handle_all(bus, batches_of(bus), 64, window=64)
        batches = await stored_batches(bus)
        scores = [s for b in batches for s in b.items]
        assert Counter(s.sample for s in scores) == Counter(e.id for e in sent)  # each exactly once
        assert len(batches) < len(sent) / 2, "the samples fetched together went out together"
        for batch in batches:
            assert len({partition_for(s.node, PARTITIONS) for s in batch.items}) == 1
        for node in NODES:  # a node's scores in the order of its samples
            assert [s.load for s in scores if s.node == node] == \
                [e.payload.node_cpu_util for e in sent if e.payload.node == node]
        assert await nothing_comes_back(bus), "every sample acked"


async def test_a_batch_never_holds_more_than_its_size(bus_url, namespace):
    async with make_bus(bus_url, namespace) as bus:
        sent = [await bus.publish(metrics("node-1", load=i / 100)) for i in range(20)]
        await handle_all(bus, batches_of(bus, max_items=3), 20, window=64)
        batches = await stored_batches(bus)
        assert max(len(b.items) for b in batches) <= 3
        assert [s.sample for b in batches for s in b.items] == [e.id for e in sent]


async def test_a_batch_not_stored_dead_letters_its_events_and_the_rest_go_on(bus_url, namespace):
    async with make_bus(bus_url, namespace) as bus:
        sent = [await bus.publish(metrics(NODES[i % 8], load=i / 100)) for i in range(16)]
        refused = partition_for("node-3", PARTITIONS)

        async def publish(payload, **options):
            if partition_for(payload.event_key(), PARTITIONS) == refused:
                raise BusError("publish timeout (as the broker away)")
            return await bus.publish(payload, **options)
        await handle_all(bus, batches_of(bus, publish=publish), 16, window=64)
        lost = {e.id for e in sent if partition_for(e.payload.node, PARTITIONS) == refused}
        letters = [e async for _, e in bus.read("dead.letter", StartAt.earliest())]
        assert {letter.causation_id for letter in letters} == lost
        assert all("publish timeout" in letter.payload.reason for letter in letters)
        scores = [s for b in await stored_batches(bus) for s in b.items]
        assert {s.sample for s in scores} == {e.id for e in sent} - lost
        assert await nothing_comes_back(bus)


async def test_without_a_window_a_handler_returns_once_its_batch_is_stored(bus_url, namespace):
    async with make_bus(bus_url, namespace) as bus:
        for i in range(6):
            await bus.publish(metrics(NODES[i % 3], load=i / 100))
        stored: set[str] = set()

        async def publish(payload, **options):
            envelope = await bus.publish(payload, **options)
            stored.update(s.sample for s in payload.items)
            return envelope

        def check(envelope):
            assert envelope.id in stored, "returned before its score was stored"
        # nor kept waiting for the linger: nothing else would come to its batch meanwhile
        handled = await handle_all(bus, batches_of(bus, publish=publish, linger_s=300.0), 6, window=1, check=check)
        assert set(handled) == stored


async def test_samples_one_at_a_time_are_gathered_for_the_linger(bus_url, namespace):
    async with make_bus(bus_url, namespace) as bus:
        sent = await handle_trickle(bus, batches_of(bus, linger_s=2.0), 24, window=64, gap_s=0.02)
        batches = await stored_batches(bus)
        assert Counter(s.sample for b in batches for s in b.items) == Counter(e.id for e in sent)
        assert len(batches) <= 2 * PARTITIONS, "one at a time, gathered per partition for the linger"
        assert await nothing_comes_back(bus), "every sample acked"


async def test_without_a_linger_samples_one_at_a_time_go_out_one_at_a_time(nats_server, namespace):
    # over NATS: a Kafka fetch waits for more (fetch_max_wait_ms), so there a trickle comes in groups anyway
    async with make_bus(nats_server.url, namespace) as bus:
        sent = await handle_trickle(bus, batches_of(bus), 24, window=64, gap_s=0.02)
        batches = await stored_batches(bus)
        assert Counter(s.sample for b in batches for s in b.items) == Counter(e.id for e in sent)
        assert len(batches) > 2 * PARTITIONS  # what the linger saves


async def test_a_full_window_does_not_wait_for_the_linger(bus_url, namespace):
    async with make_bus(bus_url, namespace) as bus:
        # a linger far past the test's patience: only flush_at sends the batches
        sent = await handle_trickle(bus, batches_of(bus, linger_s=300.0, flush_at=4), 24, window=4, gap_s=0.0)
        batches = await stored_batches(bus)
        assert Counter(s.sample for b in batches for s in b.items) == Counter(e.id for e in sent)
        assert await nothing_comes_back(bus)


def test_a_linger_is_not_negative_and_flush_at_holds_an_event():
    for options in ({"linger_s": -1.0}, {"flush_at": 0}):
        with pytest.raises(ValueError, match="linger_s must be >= 0 and flush_at >= 1"):
            OutputBatches(NodeScores, None, **options)


def test_a_batch_holds_at_least_one_item():
    with pytest.raises(ValueError, match="at least 1 item and at most"):
        OutputBatches(NodeScores, None, max_items=0)


def test_a_batch_of_nodes_of_two_partitions_is_refused():
    first = NodeScore(node="node-0", load=0.1, sampled_at=T0)
    other = next(n for n in (f"n{i}" for i in range(100))
                 if partition_for(n, PARTITIONS) != partition_for("node-0", PARTITIONS))
    with pytest.raises(ValueError, match="another partition"):
        NodeScores.of(first, NodeScore(node=other, load=0.1, sampled_at=T0))


def test_a_version_1_score_reads_as_a_batch_of_one():
    from tidal_schemas import decode, encode, make_envelope
    import orjson

    envelope = make_envelope(NodeScores.of(NodeScore(node="n1", load=0.4, sampled_at=T0)), cluster="c1",
                             source="scoring")
    raw = orjson.loads(encode(envelope))
    raw["version"], raw["payload"] = 1, raw["payload"]["items"][0]  # as scoring wrote it before batches
    read = decode(orjson.dumps(raw)).payload
    assert [(s.node, s.load) for s in read.items] == [("n1", 0.4)]
