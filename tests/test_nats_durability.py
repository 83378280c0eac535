"""NATS-specific guarantees: file storage survives a server restart, and a
member that dies without leaving loses its partitions to the others."""

from __future__ import annotations

import asyncio


from builders import metrics
from conftest import make_bus, patience, wait_until


async def test_restart_with_file_storage_loses_nothing_acknowledged(own_nats, namespace):
    handled: list[str] = []

    async def handler(envelope, delivery):
        handled.append(envelope.id)

    async with make_bus(own_nats.url, namespace) as bus:
        before = [await bus.publish(metrics(f"n{i}")) for i in range(20)]
        consumer = bus.consumer("node.metrics", "g", handler)
        task = asyncio.create_task(consumer.run())
        await wait_until(lambda: len(handled) == 20, what="first 20 events")

        own_nats.stop()  # SIGTERM; the client keeps trying to reconnect
        assert not own_nats.running
        own_nats.start()  # same port, same store
        await wait_until(lambda: bus.backend.connected, timeout=15, what="reconnect")

        after = []
        for i in range(20, 40):
            after.append(await bus.publish(metrics(f"n{i}")))
        await wait_until(lambda: len(handled) >= 40, timeout=20, what="events published after restart")
        consumer.stop()
        await asyncio.wait_for(task, patience(30))

        stored = [e.id async for _, e in bus.read("node.metrics", __import__("tidal_bus").StartAt.earliest())]
    assert stored == [e.id for e in before + after], "every acknowledged publish is still in the stream"
    assert sorted(handled) == sorted(e.id for e in before + after), "each event handled exactly once"


async def test_member_that_dies_without_leaving_loses_its_partitions(nats_server, namespace):
    a_seen: list[str] = []
    b_seen: list[str] = []

    async def on_a(envelope, delivery):
        a_seen.append(envelope.payload.node)

    async def on_b(envelope, delivery):
        b_seen.append(envelope.payload.node)

    async with make_bus(nats_server.url, namespace) as bus_a:
        consumer_a = bus_a.consumer("node.metrics", "g", on_a)
        task_a = asyncio.create_task(consumer_a.run())
        await asyncio.wait_for(consumer_a.ready.wait(), patience(10))
        bus_b = make_bus(nats_server.url, namespace)
        await bus_b.__aenter__()
        consumer_b = bus_b.consumer("node.metrics", "g", on_b)
        task_b = asyncio.create_task(consumer_b.run())
        await asyncio.wait_for(consumer_b.ready.wait(), patience(10))
        await wait_until(lambda: consumer_b.subscription.owned() and
                         not consumer_a.subscription.owned() & consumer_b.subscription.owned(),
                         timeout=10, what="b to own partitions")
        owned_by_b = set(consumer_b.subscription.owned())

        # Crash b: its member key is not removed (as after kill -9), its tasks
        # die and its connection drops; only the key's expiry tells a.
        async def no_leave() -> None:
            return None

        consumer_b.subscription._membership.leave = no_leave
        task_b.cancel()
        await asyncio.gather(task_b, return_exceptions=True)
        await bus_b.backend._nc.close()

        await wait_until(lambda: owned_by_b <= consumer_a.subscription.owned(), timeout=10,
                         what="a to take b's partitions after b's heartbeat expired")
        for i in range(16):
            await bus_a.publish(metrics(f"after-{i}"))
        await wait_until(lambda: len([n for n in a_seen if n.startswith("after-")]) == 16, timeout=10,
                         what="a to handle every key")
        consumer_a.stop()
        await asyncio.wait_for(task_a, patience(30))
