"""The placement service over a real NATS server: pending pod to decision,
rollback on a failed bind, and two replicas that never double-book."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict

from builders import pod
from conftest import make_bus, patience, start_service, stop_service, wait_until
from tidal_bus import StartAt
from tidal_cli.sample import node
from tidal_placement.cycle import in_events
from tidal_placement.service import PlacementService
from tidal_placement.settings import PlacementSettings
from tidal_schemas import BindResult, GpuAsk
from tidal_schemas.fence import DecisionFence


def _settings(url, namespace, **overrides) -> PlacementSettings:
    values = dict(bus_url=url, namespace=namespace, cluster="c1", http_port=0, http_host="127.0.0.1",
                  gpu_strategy="best-fit", bind_timeout_s=patience(30), takeover_settle_s=1.5)
    values.update(overrides)
    return PlacementSettings(**values)


async def _start(settings):
    service = PlacementService(settings)
    return service, await start_service(service)


_stop = stop_service


async def _admitted(bus) -> list:
    """Placed decisions that count, by the same fence rule every reader uses."""
    fence, counted = DecisionFence(), []
    async for _, event in bus.read("placement.decision", StartAt.earliest()):
        counted += [d for d in event.payload.items if fence.admit(d) and d.outcome == "placed"]
    return counted


async def test_a_cycles_decisions_go_out_publish_window_to_an_event_in_the_order_taken(nats_server, namespace):
    async with make_bus(nats_server.url, namespace) as bus:  # five pods queued before placement starts
        await bus.publish(node("n1", 1, 2, 4, 1, 64 * 1024, reserved=0))
        for i in range(5):
            await bus.publish(pod(f"p{i}", cpu_milli=1000))
        service, task = await _start(_settings(nats_server.url, namespace, publish_window=2))
        await wait_until(lambda: service.decisions >= 5, timeout=20, what="five decisions")
        events = [e.payload.items async for _, e in bus.read("placement.decision", StartAt.earliest())]
    await _stop(service, task)
    assert [[d.outcome for d in items] for items in events] == [["fence"], ["placed"] * 2, ["placed"] * 2, ["placed"]]
    taken = [d for items in events[1:] for d in items]
    assert sorted(d.name for d in taken) == [f"p{i}" for i in range(5)]
    assert [d.queue_position for d in taken] == sorted(d.queue_position for d in taken)  # the order taken
    assert all(d.trace for d in taken)  # each in its own pod's trace
    assert len({d.trace.split("-")[1] for d in taken}) == 5


def test_in_events_yields_each_event_as_soon_as_it_is_full():
    taken: list[int] = []

    def decide():
        for i in range(5):
            taken.append(i)
            yield i
    events = in_events(decide(), 2)
    assert next(events) == [0, 1] and taken == [0, 1]  # nothing decided past a full event before it is published
    assert list(events) == [[2, 3], [4]]
    assert list(in_events(iter(()), 2)) == []


async def test_pending_pod_to_decision_and_rollback(nats_server, namespace):
    service, task = await _start(_settings(nats_server.url, namespace))
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(node("n1", 1, 2, 4, 1, 64 * 1024, reserved=0))   # 2 NUMA x 4 CPUs
        await bus.publish(node("g1", 1, 1, 8, 1, 64 * 1024, gpus=[("A100", 40960)] * 2, reserved=0))
        await bus.publish(pod("spread", cpu_milli=4000, exclusive_cpus=True, cpu_policy="spread"))
        await bus.publish(pod("gpu", cpu_milli=1000, gpu=GpuAsk(count=1, models=["A100"])))
        await wait_until(lambda: service.decisions >= 2, timeout=20, what="two decisions")
        placed = {d.name: d for d in await _admitted(bus)}
        assert placed["spread"].numa_cpus in ({0: 2, 1: 2},)  # 4 CPUs spread over 2 NUMA nodes = 2 + 2
        assert placed["spread"].node in ("n1", "g1")
        # the other node that could take it is named as the runner-up, with its score
        assert [r.node for r in placed["spread"].runners_up] == list({"n1", "g1"} - {placed["spread"].node})
        assert placed["gpu"].node == "g1" and [g.model for g in placed["gpu"].gpus] == ["A100"]
        assert placed["gpu"].queue_position is not None and placed["gpu"].epoch >= 1

        # the bind of "gpu" fails: the cache rolls back and the pod is placed again
        first = placed["gpu"]
        await bus.publish(BindResult(decision_id=first.decision_id, namespace="default", name="gpu", node="g1",
                                     ok=False, reason="node gone"))
        await wait_until(lambda: service.decisions >= 3, timeout=20, what="a new decision after the failed bind")
        again = [d for d in await _admitted(bus) if d.name == "gpu"]
        assert len(again) == 2 and again[1].decision_id != first.decision_id

        # a pod that fits nowhere stays pending with its reasons
        await bus.publish(pod("huge", cpu_milli=64000))
        pending = None
        for _ in range(100):
            found = [d async for _, e in bus.read("placement.decision", StartAt.earliest()) for d in e.payload.items
                     if d.name == "huge" and d.outcome == "pending"]
            if found:
                pending = found[0]
                break
            await asyncio.sleep(0.1)
        assert pending is not None and "0/2 nodes fit" in pending.reason and pending.filtered

        # room appears (a bigger node joins): the waiting pod is placed without being re-published
        await bus.publish(node("big", 2, 1, 40, 1, 256 * 1024, reserved=0))
        await wait_until(lambda: any(d.name == "huge" for d in service.requested_names()), timeout=20,
                         what="the waiting pod to be placed once room appeared")
    await _stop(service, task)


async def test_two_replicas_never_double_book(nats_server, namespace):
    a, task_a = await _start(_settings(nats_server.url, namespace))
    b, task_b = await _start(_settings(nats_server.url, namespace))
    async with make_bus(nats_server.url, namespace) as bus:
        for i in range(3):   # 3 nodes x 2 NUMA x 4 CPUs = 24 exclusive CPUs
            await bus.publish(node(f"n{i}", 1, 2, 4, 1, 64 * 1024, reserved=0))
        for i in range(10):
            await bus.publish(pod(f"p{i}", cpu_milli=2000, exclusive_cpus=True, cpu_policy="single-numa"))
        await wait_until(lambda: a.decisions + b.decisions >= 10, timeout=20, what="first 10 placed")
        leader, leader_task = (a, task_a) if a.active else (b, task_b)
        standby = b if leader is a else a
        leader_task.cancel()   # the leader dies abruptly: the standby must take over
        await asyncio.wait({leader_task}, timeout=patience(10))
        await asyncio.wait_for(leader.bus.backend.close(), patience(10))
        for i in range(10, 16):   # 16 pods x 2 CPUs > 24 CPUs: 12 fit, 4 stay pending
            await bus.publish(pod(f"p{i}", cpu_milli=2000, exclusive_cpus=True, cpu_policy="single-numa"))
        await wait_until(lambda: standby.active and len(standby.clusters["c1"].queue.entries) == 4, timeout=30,
                         what="the standby to take over and place what fits")
        placed = await _admitted(bus)
        await _stop(standby, task_b if standby is b else task_a)
    assert len(placed) == 12
    assert max(Counter(d.name for d in placed).values()) == 1, "no pod placed twice"
    per_numa = defaultdict(int)
    for d in placed:
        for numa, count in d.numa_cpus.items():
            per_numa[(d.node, numa)] += count
    assert max(per_numa.values()) <= 4, f"a NUMA node was double-booked: {dict(per_numa)}"
    assert len({d.leader for d in placed}) == 2, "both replicas led in turn, each under its own fence"
