"""One contract for the event bus, run against a real NATS JetStream server
and a real Kafka-protocol broker. Each test has its own namespace."""

from __future__ import annotations

import asyncio
import base64
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from builders import metrics
from conftest import make_bus, patience, wait_until
from tidal_bus import Delivery, HandlerError, RetryPolicy, StartAt
from tidal_schemas import make_envelope
from tidal_schemas.streams import stream


class _Collector:
    """A handler that records what it saw, per member."""

    def __init__(self) -> None:
        self.events: list = []
        self.deliveries: list[Delivery] = []

    async def __call__(self, envelope, delivery: Delivery) -> None:
        self.events.append(envelope)
        self.deliveries.append(delivery)

    @property
    def keys(self) -> set[str]:
        return {e.key for e in self.events}


async def _run(consumer):
    task = asyncio.create_task(consumer.run())
    task.consumer = consumer
    ready = asyncio.create_task(consumer.ready.wait())
    await asyncio.wait([ready, task], timeout=patience(30), return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # surface why it could not start
    assert consumer.ready.is_set(), f"consumer did not join its group in {patience(30):g} s"
    return task


async def _stop(*tasks):
    """Graceful stop, as a service does on SIGTERM."""
    for task in tasks:
        task.consumer.stop()
    await asyncio.wait_for(asyncio.gather(*tasks), patience(30))


async def _dead_letters(bus, count: int, timeout: float = 10.0):
    letters = []

    async def collect():
        async for _, event in bus.read("dead.letter", StartAt.earliest(), follow=True):
            letters.append(event)
            if len(letters) >= count:
                return

    await asyncio.wait_for(collect(), patience(timeout))
    return letters


class BusContract:
    """Behaviour every backend must have. Subclasses provide `bus_url`."""

    @pytest.fixture
    def bus_url(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    async def test_round_trip(self, bus_url, namespace):
        async with make_bus(bus_url, namespace) as bus:
            sent = [await bus.publish(metrics(f"node-{i}", load=i / 10)) for i in range(5)]
            seen = _Collector()
            task = await _run(bus.consumer("node.metrics", "g", seen))
            await wait_until(lambda: len(seen.events) == 5, what="5 events")
            await _stop(task)
        assert {e.id for e in seen.events} == {e.id for e in sent}
        by_id = {e.id: e for e in seen.events}
        assert all(by_id[e.id].payload == e.payload for e in sent)
        assert all(not d.replaying for d in seen.deliveries)

    async def test_order_kept_within_a_key(self, bus_url, namespace):
        async with make_bus(bus_url, namespace) as bus:
            for i in range(30):
                await bus.publish(metrics("node-a", load=i / 100))
            seen = _Collector()
            task = await _run(bus.consumer("node.metrics", "g", seen))
            await wait_until(lambda: len(seen.events) == 30, what="30 events")
            await _stop(task)
        assert [e.payload.node_cpu_util for e in seen.events] == [i / 100 for i in range(30)]

    async def test_a_lingering_consumer_takes_a_trickle_with_its_first_event(self, bus_url, namespace):
        """`linger_s`: an event is handed over only after the linger, with
        those that came meanwhile; every one of them, in order per key."""
        async with make_bus(bus_url, namespace) as bus:
            await bus.ensure_streams(["node.metrics"])
            seen = _Collector()
            task = await _run(bus.consumer("node.metrics", "g", seen, linger_s=2.0))
            await bus.publish(metrics("node-a", load=0.0))
            await asyncio.sleep(0.3)
            assert not seen.events, "handed over before its linger"
            for i in range(1, 5):
                await bus.publish(metrics("node-a", load=i / 100))
            await wait_until(lambda: len(seen.events) == 5, what="the first event and the trickle")
            await bus.publish(metrics("node-b", load=0.5))  # and after the batch, the next
            await wait_until(lambda: len(seen.events) == 6, what="an event after the batch")
            await _stop(task)
        assert [e.payload.node_cpu_util for e in seen.events] == [0.0, 0.01, 0.02, 0.03, 0.04, 0.5]

    async def test_a_lingering_follower_takes_a_trickle_with_its_first_event(self, bus_url, namespace):
        """`catch_up_then_follow(linger_s=…)`: the history at once, then
        each live event held its linger, with those that came meanwhile."""
        seen: list[float] = []
        caught_up = asyncio.Event()

        async def on_event(envelope) -> None:
            seen.append(envelope.payload.node_cpu_util)

        async def done() -> None:
            caught_up.set()

        async with make_bus(bus_url, namespace) as bus:
            await bus.publish(metrics("node-a", load=0.0))
            task = asyncio.create_task(bus.catch_up_then_follow("node.metrics", on_event, done, linger_s=2.0))
            try:
                await asyncio.wait_for(caught_up.wait(), patience(30))
                assert seen == [0.0]
                await asyncio.sleep(1.0)  # the follower under way
                await bus.publish(metrics("node-a", load=0.01))
                await asyncio.sleep(0.5)
                assert seen == [0.0], "handed over before its linger"
                for i in range(2, 5):
                    await bus.publish(metrics("node-a", load=i / 100))
                await wait_until(lambda: len(seen) == 5, what="the trickle after the linger")
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        assert seen == [0.0, 0.01, 0.02, 0.03, 0.04]

    async def test_a_lingering_consumer_reads_a_backlog_without_lingering(self, bus_url, namespace):
        async with make_bus(bus_url, namespace) as bus:
            for i in range(300):  # one key, one partition: a backlog of several batches
                await bus.publish(metrics("node-a", load=i / 1000))
            seen = _Collector()
            task = await _run(bus.consumer("node.metrics", "g", seen, linger_s=30.0))
            try:  # every full batch before a linger could end (a last, short one may wait its linger)
                await wait_until(lambda: len(seen.events) >= 256, timeout=20, what="the backlog's full batches")
            finally:
                task.cancel()  # abrupt: a graceful stop would wait out that last batch's linger
                await asyncio.gather(task, return_exceptions=True)
        assert [e.payload.node_cpu_util for e in seen.events] == [i / 1000 for i in range(len(seen.events))]

    async def test_group_splits_keys_and_takes_over(self, bus_url, namespace):
        keys = [f"node-{i}" for i in range(24)]
        async with make_bus(bus_url, namespace) as bus:
            await bus.ensure_streams(["node.metrics"])
            a, b = _Collector(), _Collector()
            consumer_a = bus.consumer("node.metrics", "g", a)
            task_a = await _run(consumer_a)
            async with make_bus(bus_url, namespace) as bus_b:
                consumer_b = bus_b.consumer("node.metrics", "g", b)
                task_b = await _run(consumer_b)
                partitions = stream("node.metrics").partitions
                owned_a = lambda: consumer_a.subscription.owned()  # noqa: E731
                owned_b = lambda: consumer_b.subscription.owned()  # noqa: E731
                # members may overlap for a moment while the others notice a newcomer
                await wait_until(
                    lambda: owned_a() and owned_b() and not owned_a() & owned_b()
                    and len(owned_a() | owned_b()) == partitions,
                    timeout=20, what="both members to split the partitions")
                for key in keys:
                    await bus.publish(metrics(key))
                await wait_until(lambda: len(a.events) + len(b.events) == len(keys), what="all keys handled")
                assert a.keys and b.keys, "both members must get keys"
                assert not a.keys & b.keys, "a key goes to one member only"
                await _stop(task_b)  # member b leaves: a must take over its keys
            await wait_until(lambda: len(consumer_a.subscription.owned()) == partitions, timeout=20,
                             what="a to own every partition")
            for key in keys:
                await bus.publish(metrics(key, load=0.9))
            await wait_until(lambda: sum(e.payload.node_cpu_util == 0.9 for e in a.events) == len(keys),
                             timeout=20, what="a to handle every key after takeover")
            await _stop(task_a)

    async def test_a_taken_over_partition_is_replayed_before_its_new_events(self, bus_url, namespace):
        """A running member that gains partitions rebuilds them from history
        before it is given anything new on them: a handler never sees a key's
        new event ahead of that key's past (a window of samples counting the
        newest alone). The replay is slow, and the new events are already
        stored when the takeover starts, so a member that lets fetched events
        through during the replay is caught."""
        keys = [f"node-{i}" for i in range(16)]

        class SlowReplay(_Collector):
            async def __call__(self, envelope, delivery: Delivery) -> None:
                if delivery.replaying:
                    await asyncio.sleep(0.1)
                await super().__call__(envelope, delivery)

        async with make_bus(bus_url, namespace) as bus:
            await bus.ensure_streams(["node.metrics"])
            a, b = SlowReplay(), _Collector()
            consumer_a = bus.consumer("node.metrics", "g", a, replay_on_assign=True)
            task_a = await _run(consumer_a)
            async with make_bus(bus_url, namespace) as bus_b:
                consumer_b = bus_b.consumer("node.metrics", "g", b, replay_on_assign=True)
                task_b = await _run(consumer_b)
                owned_a = lambda: consumer_a.subscription.owned()  # noqa: E731
                owned_b = lambda: consumer_b.subscription.owned()  # noqa: E731
                await wait_until(lambda: owned_a() and owned_b() and not owned_a() & owned_b(),
                                 timeout=20, what="both members to split the partitions")
                for key in keys:
                    await bus.publish(metrics(key, load=0.25))
                await wait_until(lambda: len(a.events) + len(b.events) == len(keys), what="all keys handled")
                moved = b.keys
                assert moved, "b must have keys to hand over"
                await _stop(task_b)
            for key in keys:
                await bus.publish(metrics(key, load=0.75))
            await wait_until(lambda: sum(e.payload.node_cpu_util == 0.75 for e in a.events) == len(keys),
                             timeout=30, what="a to handle every key's new event")
            await _stop(task_a)
        for key in moved:
            seen = [(d.replaying, e.payload.node_cpu_util) for e, d in zip(a.events, a.deliveries)
                    if e.key == key]
            assert seen == [(True, 0.25), (False, 0.75)], f"{key}: {seen}"

    async def test_a_read_to_the_end_sees_a_burst_published_at_once(self, bus_url, namespace):
        # sends in flight together travel as one batch per partition (Kafka); the
        # embedded Kafka-protocol broker reports a partition's end short of such a batch
        async with make_bus(bus_url, namespace) as bus:
            await bus.ensure_streams(["node.metrics"])
            sent = await asyncio.gather(*(bus.publish(metrics(f"node-{i % 3}", load=i / 100)) for i in range(30)))
            read = [e.id async for _, e in bus.read("node.metrics", StartAt.earliest())]
            assert sorted(read) == sorted(e.id for e in sent)
            # a later read sees what came since too
            later = await bus.publish(metrics("node-9"))
            read_again = [e.id async for _, e in bus.read("node.metrics", StartAt.earliest())]
            assert sorted(read_again) == sorted([e.id for e in sent] + [later.id])

    async def test_replay_from_earliest_time_and_sequence(self, bus_url, namespace):
        async with make_bus(bus_url, namespace) as bus:
            positions = []
            for i in range(6):
                envelope = await bus.publish(metrics("node-x", load=i / 10))
                positions.append(envelope)
            events = [e async for _, e in bus.read("node.metrics", StartAt.earliest())]
            assert [e.payload.node_cpu_util for e in events] == [i / 10 for i in range(6)]

            raws = [r async for r, _ in bus.read("node.metrics", StartAt.earliest())]
            third = raws[3].position
            from_seq = [e async for _, e in bus.read("node.metrics", StartAt.at_sequence(third))]
            assert [e.payload.node_cpu_util for e in from_seq] == [0.3, 0.4, 0.5]

            future = datetime.now(timezone.utc) + timedelta(hours=1)
            assert [e async for _, e in bus.read("node.metrics", StartAt.at_time(future))] == []
            past = datetime.now(timezone.utc) - timedelta(hours=1)
            assert len([e async for _, e in bus.read("node.metrics", StartAt.at_time(past))]) == 6

            # a new group starting at `latest` sees only what comes after it joined
            late = _Collector()
            task = await _run(bus.consumer("node.metrics", "late", late, start=StartAt.latest()))
            await asyncio.sleep(0.5)  # let the group settle before the next publish
            await bus.publish(metrics("node-x", load=1.0))
            await wait_until(lambda: len(late.events) == 1, what="the new event")
            await _stop(task)
            assert late.events[0].payload.node_cpu_util == 1.0

    async def test_redelivered_event_id_is_handled_once(self, bus_url, namespace):
        async with make_bus(bus_url, namespace) as bus:
            envelope = make_envelope(metrics("node-d"), cluster="c1", source="test")
            for _ in range(3):  # a producer retrying the same event
                await bus.publish_envelope(envelope)
            await bus.publish(metrics("node-d", load=0.7))
            seen = _Collector()
            task = await _run(bus.consumer("node.metrics", "g", seen))
            await wait_until(lambda: any(e.payload.node_cpu_util == 0.7 for e in seen.events), what="marker event")
            await _stop(task)
        assert Counter(e.id for e in seen.events)[envelope.id] == 1

    async def test_poison_messages_go_to_dead_letter_and_consumer_goes_on(self, bus_url, namespace):
        calls = Counter()

        async def handler(envelope, delivery):
            calls[envelope.payload.node] += 1
            if envelope.payload.node == "bad-permanent":
                raise HandlerError("cannot handle this node", retriable=False)
            if envelope.payload.node == "bad-transient":
                raise ConnectionError("store away")

        async with make_bus(bus_url, namespace) as bus:
            await bus.publish_raw("node.metrics", "garbage", b"\x00\xffnot json")
            await bus.publish_raw("node.metrics", "wrong", b'{"type": "node.metrics", "version": 1}')
            await bus.publish(metrics("bad-permanent"))
            await bus.publish(metrics("bad-transient"))
            await bus.publish(metrics("good"))
            consumer = bus.consumer("node.metrics", "g", handler,
                                    retry=RetryPolicy(max_attempts=3, base_delay_s=0.01))
            task = await _run(consumer)
            await wait_until(lambda: calls["good"] == 1, what="the good event")
            letters = await _dead_letters(bus, 4)
            await _stop(task)
        reasons = {base64.b64decode(l.payload.original_b64)[:8]: l.payload for l in letters}
        assert reasons[b"\x00\xffnot js"].reason.startswith("undecodable: not JSON")
        assert "field 'cluster'" in reasons[b'{"type":'].reason or "field" in reasons[b'{"type":'].reason
        by_reason = [l.payload for l in letters if "handler failed" in l.payload.reason]
        assert len(by_reason) == 2
        permanent = next(p for p in by_reason if "cannot handle" in p.reason)
        transient = next(p for p in by_reason if "store away" in p.reason)
        assert permanent.deliveries == 1 and not permanent.retriable
        assert transient.deliveries == 3 and transient.retriable
        assert calls["bad-permanent"] == 1 and calls["bad-transient"] == 3
        assert all(l.payload.consumer == "g" and l.payload.stream == "node.metrics" for l in letters)

    async def test_nak_with_delay_redelivers(self, bus_url, namespace):
        attempts: list[tuple[int, float]] = []
        loop = asyncio.get_running_loop()

        async def flaky(envelope, delivery):
            attempts.append((delivery.attempt, loop.time()))
            if delivery.attempt < 3:
                raise ConnectionError("try later")

        async with make_bus(bus_url, namespace) as bus:
            await bus.publish(metrics("node-n"))
            consumer = bus.consumer("node.metrics", "g", flaky, ordered=False,
                                    retry=RetryPolicy(max_attempts=5, base_delay_s=0.3))
            task = await _run(consumer)
            await wait_until(lambda: len(attempts) == 3, timeout=15, what="three attempts")
            await _stop(task)
        assert [a for a, _ in attempts] == [1, 2, 3]
        assert attempts[1][1] - attempts[0][1] >= 0.25  # the nak delay was honoured

    async def test_consumer_filters_by_cluster(self, bus_url, namespace):
        async with make_bus(bus_url, namespace, cluster="east") as east, \
                make_bus(bus_url, namespace, cluster="west") as west:
            await east.publish(metrics("n1"))
            await west.publish(metrics("n1"))
            seen = _Collector()
            task = await _run(east.consumer("node.metrics", "g", seen, clusters=frozenset({"west"})))
            await wait_until(lambda: len(seen.events) == 1, what="west event")
            await asyncio.sleep(0.3)
            await _stop(task)
        assert [e.cluster for e in seen.events] == ["west"]

    async def test_restarted_member_rebuilds_state_by_replay(self, bus_url, namespace):
        """Handled events come back with replaying=True; new ones live, once."""
        async with make_bus(bus_url, namespace) as bus:
            for i in range(5):
                await bus.publish(metrics(f"node-{i}"))
            first = _Collector()
            task = await _run(bus.consumer("node.metrics", "g", first, replay_on_assign=True))
            await wait_until(lambda: len(first.events) == 5, what="first pass")
            await _stop(task)

            await bus.publish(metrics("node-new"))
            second = _Collector()
            task = await _run(bus.consumer("node.metrics", "g", second, replay_on_assign=True))
            await wait_until(lambda: len(second.events) == 6, timeout=15, what="replay + new")
            await _stop(task)
        replayed = {e.payload.node for e, d in zip(second.events, second.deliveries) if d.replaying}
        live = [e.payload.node for e, d in zip(second.events, second.deliveries) if not d.replaying]
        assert replayed == {f"node-{i}" for i in range(5)}
        assert live == ["node-new"]


class TestNatsBus(BusContract):
    @pytest.fixture
    def bus_url(self, nats_server) -> str:
        return nats_server.url


class TestKafkaBus(BusContract):
    @pytest.fixture
    def bus_url(self, kafka_server) -> str:
        return kafka_server.url


class CatchUpContract:
    """Group-less readers: drain the backlog, say so, then follow."""

    async def test_catch_up_then_follow(self, bus_url, namespace):
        seen, caught_up_at = [], []
        async with make_bus(bus_url, namespace) as bus:
            for i in range(5):
                await bus.publish(metrics(f"n{i}"))

            async def on_event(event):
                seen.append(event.payload.node)

            async def on_caught_up():
                caught_up_at.append(len(seen))

            task = asyncio.create_task(bus.catch_up_then_follow("node.metrics", on_event, on_caught_up))
            await wait_until(lambda: caught_up_at, what="caught up")
            for i in range(5, 8):
                await bus.publish(metrics(f"n{i}"))
            await wait_until(lambda: len(seen) == 8, what="followed events")
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert caught_up_at == [5]
        assert sorted(seen) == sorted(f"n{i}" for i in range(8)) and len(set(seen)) == 8


class TestNatsCatchUp(CatchUpContract):
    @pytest.fixture
    def bus_url(self, nats_server) -> str:
        return nats_server.url


class TestKafkaCatchUp(CatchUpContract):
    @pytest.fixture
    def bus_url(self, kafka_server) -> str:
        return kafka_server.url


class AlignmentContract:
    """A process owns the same partitions of every stream it reads, so
    state joined across node-keyed streams stays on one replica."""

    async def test_partitions_align_across_streams(self, bus_url, namespace):
        async def ignore(envelope, delivery):
            return None

        async with make_bus(bus_url, namespace) as a, make_bus(bus_url, namespace) as b:
            consumers = {(name, bus): bus.consumer(name, "g", ignore)
                         for name in ("node.metrics", "node.topology") for bus in (a, b)}
            tasks = [await _run(c) for c in consumers.values()]
            owned = lambda name, bus: consumers[(name, bus)].subscription.owned()  # noqa: E731
            await wait_until(lambda: all(owned(n, x) for n in ("node.metrics", "node.topology") for x in (a, b))
                             and owned("node.metrics", a) == owned("node.topology", a)
                             and owned("node.metrics", b) == owned("node.topology", b)
                             and not owned("node.metrics", a) & owned("node.metrics", b),
                             timeout=30, what="aligned, disjoint ownership")
            await _stop(*tasks)


class TestNatsAlignment(AlignmentContract):
    @pytest.fixture
    def bus_url(self, nats_server) -> str:
        return nats_server.url


class TestKafkaAlignment(AlignmentContract):
    @pytest.fixture
    def bus_url(self, kafka_server) -> str:
        return kafka_server.url
