"""The oversell service over a real NATS server: a node's memory rises
through the stop and evict thresholds and falls back; the taint, the
evictions in §D order and the untaint appear in order, and a restart in the
middle repeats no eviction."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from builders import figures_in, pod
from conftest import make_bus, patience, start_service, stop_service, wait_until
from tidal_bus import StartAt
from tidal_oversell.service import OversellService
from tidal_oversell.settings import OversellSettings
from tidal_schemas import NodeMetrics, NodeScore, NodeScores, NodeTopology, PeakEstimate, PodUsage, Resources

LONG_AGO = datetime.now(timezone.utc) - timedelta(hours=2)
# name, qos, priority, evictable, requested MiB, used MiB
PODS = [("be-evictable", "BE", 0, True, 100, 100), ("low", "LS", 0, False, 100, 100),
        ("high-a", "LS", 100, False, 80, 100), ("high-b", "LS", 100, False, 50, 100)]


def _settings(url, namespace) -> OversellSettings:
    return OversellSettings(bus_url=url, namespace=namespace, cluster="c1", http_port=0, http_host="127.0.0.1",
                            eviction_cooldown_s=0, max_evictions_per_round=3, evict="enabled")


def _metrics(used_mib: int, at: datetime, gone: set[str] = frozenset()) -> NodeMetrics:
    usages = [PodUsage(pod=f"default/{name}", cpu_milli=100, memory_mib=used, qos=qos)
              for name, qos, _, _, _, used in PODS if name not in gone]
    return NodeMetrics(node="n1", sampled_at=at, interval_s=10, node_cpu_util=0.3, numa_load={0: 0.3},
                       cpu_used_milli=2000, memory_used_mib=used_mib, memory_total_mib=10000, pods=usages)


async def _start(settings):
    service = OversellService(settings)
    return service, await start_service(service, ready=lambda s: s.action_log_ready.is_set())


_stop = stop_service


async def _actions(bus) -> list:
    return [e.payload async for _, e in bus.read("node.action", StartAt.earliest())]


async def test_thresholds_evictions_and_restart(nats_server, namespace):
    settings = _settings(nats_server.url, namespace)
    now = datetime.now(timezone.utc)
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(NodeTopology(node="n1", capacity=Resources(cpu_milli=8000, memory_mib=10000),
                                       allocatable=Resources(cpu_milli=8000, memory_mib=9000)))
        for name, qos, priority, evictable, requested, _ in PODS:
            await bus.publish(pod(name, phase="running", node="n1", qos=qos, priority=priority, evictable=evictable,
                                  memory_mib=requested, cpu_milli=1000, started_at=LONG_AGO, created_at=LONG_AGO))
        await bus.publish(NodeScores.of(NodeScore(node="n1", load=0.3, sampled_at=now, peak=PeakEstimate(
            estimator="percentile", window_s=300, samples=10, utilisation=0.2, memory_mib=200))))
        service, task = await _start(settings)

        async def count(kind=None):
            return len([a for a in await _actions(bus) if kind is None or a.kind == kind])

        await bus.publish(_metrics(5000, now))
        await wait_until(lambda: service.metrics.events_out.labels("oversell", "node.allocatable")._value.get() >= 1,
                         what="allocatable")
        await bus.publish(_metrics(8800, now + timedelta(seconds=10)))   # 0.88 >= stop 0.85
        await bus.publish(_metrics(9900, now + timedelta(seconds=20)))   # 0.99 >= evict 0.95
        deadline = asyncio.get_running_loop().time() + patience(10)
        while await count("evict") < 3 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        await _stop(service, task)

        service, task = await _start(settings)   # restart while the evictions are pending
        await bus.publish(_metrics(9900, now + timedelta(seconds=30)))
        deadline = asyncio.get_running_loop().time() + patience(10)
        while await count("evict") < 4 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        for name, *_ in PODS:
            await bus.publish(pod(name, phase="deleted", node="n1"))
        await bus.publish(_metrics(7000, now + timedelta(seconds=40), gone={p[0] for p in PODS}))
        deadline = asyncio.get_running_loop().time() + patience(10)
        while await count("untaint") < 1 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        await _stop(service, task)
        actions = await _actions(bus)
        allocatable = figures_in([e async for _, e in bus.read("node.allocatable", StartAt.earliest())])

    sequence = [(a.kind, a.pod) for a in actions]
    assert sequence == [
        ("taint", None),
        ("evict", "default/be-evictable"),   # rule 1: labelled evictable
        ("evict", "default/low"),            # rule 2: below the highest priority
        ("evict", "default/high-b"),         # rule 3: reserved/used 50/100 = 0.5 before 80/100
        ("evict", "default/high-a"),         # after the restart: only the one not already asked
        ("untaint", None),                   # 0.70 < 0.85 - 0.05
    ], sequence
    assert all(a.requested_by == "oversell" and a.reason and "utilisation" in a.measured for a in actions)
    assert "rule 3" in actions[3].reason and "0.500" in actions[3].reason
    first = allocatable[0]
    assert first.policy == "factor" and first.factor is not None and "requested_memory_mib" in first.inputs
    assert first.allocatable.memory_mib >= 9000  # never below the node's own allocatable


def test_a_node_view_keeps_the_inventory_not_the_cpu_lists():
    from tidal_oversell.node_state import inventory
    from tidal_schemas import Cpu, NumaNode

    total = Resources(cpu_milli=8000, memory_mib=10000)
    topology = NodeTopology(node="n1", pool="batch", capacity=total, allocatable=total, labels={"a": "b"},
                            cpus=[Cpu(cpu=c, core=c // 2, socket=0, numa=c // 4) for c in range(8)],
                            numa_nodes=[NumaNode(id=n, cpus=list(range(4 * n, 4 * n + 4))) for n in range(2)])
    kept = inventory(topology)
    assert (kept.node, kept.pool, kept.capacity, kept.allocatable) == ("n1", "batch", total, total)
    assert (kept.cpus, kept.numa_nodes, kept.gpus, kept.labels) == ([], [], [], {})
