"""A consumer with an output window (`Consumer(window=…)`): a handler's
outputs are not waited for one by one, yet an event is acked only once its
outputs are stored, events are acked in the order they came, and an output
the bus cannot store dead-letters its event. Over a real NATS server and a
real Kafka-protocol broker; acks are watched at the subscription."""

from __future__ import annotations

import asyncio
import gc

import pytest

from builders import T0, metrics
from conftest import make_bus, patience, wait_until
from tidal_bus import BusError, StartAt, defer
from tidal_schemas import Envelope, NodeMetrics, NodeScore, NodeScores

KEYS = [f"node-{i}" for i in range(4)]


def score_of(envelope) -> NodeScores:
    m = envelope.payload
    return NodeScores.of(NodeScore(node=m.node, load=m.node_cpu_util, numa_load={0: m.node_cpu_util}, sampled_at=T0))


def watch_acks(bus, acked: list[str]) -> None:
    """Record the key and load of every message the consumer acks, in order."""
    subscribe = bus.backend.subscribe

    async def watched(*args, **kwargs):
        sub = await subscribe(*args, **kwargs)
        messages = sub.messages

        async def wrapped():
            async for raw in messages():
                ack = raw.ack

                async def recorded(raw=raw, ack=ack):
                    acked.append(raw.data)
                    await ack()
                raw.ack = recorded
                yield raw
        sub.messages = wrapped
        return sub
    bus.backend.subscribe = watched


async def samples_watched(bus, count: int, acked: list[str]) -> None:
    """`count` samples of node-a published (loads 0.00, 0.01, …), and every ack recorded in `acked`."""
    for i in range(count):
        await bus.publish(metrics("node-a", load=i / 100))
    watch_acks(bus, acked)


def on_ack_of(bus, marker: bytes, instead) -> None:
    """The ack of the score whose bytes hold `marker` becomes `instead(its ack)`."""
    send = bus.backend.send

    async def altered(spec, cluster, key, data, msg_id, trace=None, lane=None):
        stored = await send(spec, cluster, key, data, msg_id, trace, lane)
        return instead(stored) if spec.name == "score.node" and marker in data else stored
    bus.backend.send = altered


async def stored(bus, stream_name: str) -> list:
    return [e.payload async for _, e in bus.read(stream_name, StartAt.earliest())]


async def stored_scores(bus) -> list:
    return [score for batch in await stored(bus, "score.node") for score in batch.items]


async def run_until(consumer, done) -> None:
    task = asyncio.create_task(consumer.run())
    await wait_until(done, timeout=30, what="the events handled")
    consumer.stop()
    await asyncio.wait_for(task, patience(30))


class WindowContract:
    @pytest.fixture
    def bus_url(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    async def test_outputs_are_stored_in_order_and_every_event_acked_in_order(self, bus_url, namespace):
        async with make_bus(bus_url, namespace) as bus:
            sent = [await bus.publish(metrics(KEYS[i % 4], load=i / 100)) for i in range(40)]
            handled, acked = [], []
            watch_acks(bus, acked)

            async def handler(envelope, delivery):
                await bus.publish(score_of(envelope), cause=envelope)
                handled.append(envelope.id)

            consumer = bus.consumer("node.metrics", "g", handler, window=8)
            await run_until(consumer, lambda: len(handled) == 40)
            assert len(acked) == 40  # the last window too, on the graceful stop
            by_data = {e.id: e for e in sent}
            scores = await stored_scores(bus)
            for key in KEYS:  # every output stored, a key's in the order of its events
                assert [s.load for s in scores if s.node == key] == \
                    [e.payload.node_cpu_util for e in by_data.values() if e.payload.node == key]
            # a partition's events acked in the order they came
            order = {raw: i for i, raw in enumerate(acked)}
            raws = [r async for r, _ in bus.read("node.metrics", StartAt.earliest())]  # sent one by one
            assert len(raws) == 40
            for partition in {r.partition for r in raws}:
                mine = [r for r in raws if r.partition == partition]
                assert [order[r.data] for r in mine] == sorted(order[r.data] for r in mine)
            # and committed: the group has nothing left for a new member
            again = []

            async def count(envelope, delivery):
                again.append(envelope.id)
            late = bus.consumer("node.metrics", "g", count)
            task = asyncio.create_task(late.run())
            await wait_until(late.ready.is_set, what="the new member in its group")  # the window starts once it reads
            await asyncio.sleep(3)
            late.stop()
            await asyncio.wait_for(task, patience(30))
            assert again == []

    async def test_outputs_keep_their_order_when_handing_them_over_takes_a_while(self, bus_url, namespace):
        async with make_bus(bus_url, namespace) as bus:
            for i in range(20):
                await bus.publish(metrics("node-a", load=i / 100))
            send, handled = bus.backend.send, []
            delays = iter([0.05, 0.0, 0.02, 0.0] * 5)

            async def slow_at_times(*args, **kwargs):  # a broker connection busy now and then
                await asyncio.sleep(next(delays))
                return await send(*args, **kwargs)
            bus.backend.send = slow_at_times

            async def handler(envelope, delivery):
                await bus.publish(score_of(envelope), cause=envelope)
                handled.append(envelope.id)

            await run_until(bus.consumer("node.metrics", "g", handler, window=8), lambda: len(handled) == 20)
            assert [s.load for s in await stored_scores(bus)] == [i / 100 for i in range(20)]

    async def test_an_event_is_acked_only_once_its_outputs_are_stored(self, bus_url, namespace):
        async with make_bus(bus_url, namespace) as bus:
            release, handled, acked = asyncio.Event(), [], []
            await samples_watched(bus, 12, acked)

            async def held(stored):
                await release.wait()
                return await stored
            on_ack_of(bus, b'"load":0.03', held)

            async def handler(envelope, delivery):
                await bus.publish(score_of(envelope), cause=envelope)
                handled.append(envelope.payload.node_cpu_util)

            consumer = bus.consumer("node.metrics", "g", handler, window=6)
            task = asyncio.create_task(consumer.run())
            # the handler goes on past the held output, up to a full window…
            await wait_until(lambda: len(handled) == 9, timeout=30, what="a window past the held output")
            await asyncio.sleep(0.5)
            assert len(handled) == 9, "no more than the window waits"
            # …but nothing from the held event on is acked
            assert len(acked) == 3
            release.set()
            await wait_until(lambda: len(acked) == 12, timeout=30, what="every event acked")
            consumer.stop()
            await asyncio.wait_for(task, patience(30))
            assert handled == [i / 100 for i in range(12)]

    async def test_an_output_not_stored_dead_letters_its_event_and_the_rest_go_on(self, bus_url, namespace):
        async with make_bus(bus_url, namespace) as bus:
            for i in range(6):
                await bus.publish(metrics("node-a", load=i / 100))
            handled, acked = [], []
            watch_acks(bus, acked)

            async def refused(stored):
                await stored  # sent, but its ack says the bus gave up on it
                raise BusError("broker away for longer than the publish timeout")
            on_ack_of(bus, b'"load":0.02', refused)

            async def handler(envelope, delivery):
                await bus.publish(score_of(envelope), cause=envelope)
                handled.append(envelope.payload.node_cpu_util)

            consumer = bus.consumer("node.metrics", "g", handler, window=4)
            await run_until(consumer, lambda: len(acked) == 6)
            letters = await stored(bus, "dead.letter")
            assert [(letter.stream, letter.retriable) for letter in letters] == [("node.metrics", True)]
            assert "output not published" in letters[0].reason and "publish timeout" in letters[0].reason
            # the others' outputs are all stored (the refused one was sent, its ack said otherwise)
            assert {0.0, 0.01, 0.03, 0.04, 0.05} <= {s.load for s in await stored_scores(bus)}


    async def test_work_a_handler_defers_is_waited_for_as_its_outputs_are(self, bus_url, namespace):
        # tidal_bus.defer (the bridge's binds): the handler returns at once and the next events are
        # handled; an event is acked once its work is done, in turn, and work that failed dead-letters it
        async with make_bus(bus_url, namespace) as bus:
            release, handled, acked = asyncio.Event(), [], []
            await samples_watched(bus, 6, acked)

            async def work(load: float) -> None:
                if load == 0.01:
                    await release.wait()
                if load == 0.04:
                    raise RuntimeError("the bind went wrong")

            async def handler(envelope, delivery):
                load = envelope.payload.node_cpu_util
                assert defer(asyncio.create_task(work(load)))
                handled.append(load)

            consumer = bus.consumer("node.metrics", "g", handler, window=8)
            task = asyncio.create_task(consumer.run())
            await wait_until(lambda: len(handled) == 6, timeout=30, what="every event handled, past the held work")
            await asyncio.sleep(0.5)
            assert len(acked) == 1, "nothing from the held work's event on is acked"
            release.set()
            await wait_until(lambda: len(acked) == 6, timeout=30, what="every event acked")
            consumer.stop()
            await asyncio.wait_for(task, patience(30))
            letters = await stored(bus, "dead.letter")
            assert [letter.stream for letter in letters] == ["node.metrics"]
            assert "the bind went wrong" in letters[0].reason

    async def test_relaying_with_a_window_leaves_no_cycle_to_the_garbage_collector(self, bus_url, namespace):
        """An event's outputs, once stored, are freed by their reference
        counts: nothing of them waits for a full collection, which a service
        makes only every few minutes (tidal_runtime.collector)."""
        async with make_bus(bus_url, namespace) as bus:
            for i in range(30):
                await bus.publish(metrics(KEYS[i % 4], load=i / 100))
            handled = []

            async def handler(envelope, delivery):
                await bus.publish(score_of(envelope), cause=envelope)
                handled.append(envelope.id)

            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds is kept in gc.garbage to be looked at
            try:
                consumer = bus.consumer("node.metrics", "g", handler, window=8)
                await run_until(consumer, lambda: len(handled) == 30)
                gc.collect()
                # the consumer's own tasks, cancelled as it stopped, may hold cycles: once per consumer.
                # Only what this relay made counts: an earlier test's objects in this worker process
                # (a placement decision of another file) may be freed by this collection too.
                ours = (NodeMetrics, NodeScores, NodeScore)
                left = [type(o).__name__ for o in gc.garbage if isinstance(o, ours)
                        or isinstance(o, Envelope) and isinstance(o.payload, ours)
                        or isinstance(o, asyncio.Task) and "_hand_over" in o.get_coro().__qualname__]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
            assert left == []


class TestNatsWindow(WindowContract):
    @pytest.fixture
    def bus_url(self, nats_server) -> str:
        return nats_server.url


class TestKafkaWindow(WindowContract):
    @pytest.fixture
    def bus_url(self, kafka_server) -> str:
        return kafka_server.url


async def test_without_a_window_deferring_is_refused():
    # the handler then waits for its work itself: nothing would wait for it before the ack
    assert defer(asyncio.get_running_loop().create_future()) is False


def test_a_window_holds_at_least_one_event():
    from tidal_bus import Consumer
    from tidal_schemas.streams import stream

    with pytest.raises(ValueError, match="at least 1"):
        Consumer(None, stream("node.metrics"), "g", lambda e, d: None, start=StartAt.earliest(), window=0)


async def test_a_task_a_handler_started_waits_for_its_own_publishes(nats_server, namespace):
    # the event's outputs are closed when its handler returns: a publish from a
    # task it left running waits for its own ack, as outside any handler
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(metrics("node-a", load=0.5))
        later, release, done = asyncio.Event(), asyncio.Event(), []

        async def held(stored):
            await release.wait()
            return await stored
        on_ack_of(bus, b'"load":0.5', held)  # the ack, when handed over to wait for later
        publish = bus.backend.publish

        async def held_publish(spec, cluster, key, data, msg_id, trace=None, lane=None):  # … or waited for at once
            if spec.name == "score.node":
                await release.wait()
            return await publish(spec, cluster, key, data, msg_id, trace, lane)
        bus.backend.publish = held_publish

        async def publish_later(envelope):
            await later.wait()
            await bus.publish(score_of(envelope), cause=envelope)
            done.append(envelope.id)

        async def handler(envelope, delivery):
            asyncio.get_running_loop().create_task(publish_later(envelope))

        consumer = bus.consumer("node.metrics", "g", handler, window=4)
        task = asyncio.create_task(consumer.run())
        await wait_until(lambda: len(consumer.seen) == 1, timeout=30, what="the event acked")
        later.set()
        await asyncio.sleep(0.3)
        assert done == [], "the late publish returned before its ack"
        release.set()
        await wait_until(lambda: done, timeout=30, what="the late publish")
        consumer.stop()
        await asyncio.wait_for(task, patience(30))
