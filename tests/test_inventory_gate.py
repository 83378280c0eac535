"""A node's sample read before its topology (two consumers, read apart):
the stage waits for the inventory instead of dropping the sample; a node
whose inventory never comes is refused with the reason, once waited for.

Over a real NATS server, oversell answers a sample published before its
node's topology as soon as the topology is read; a node without one gets
its samples dead-lettered, and answered again once its topology comes.
(A first sample dropped unanswered made `tidal simulate` wait its whole
settling time, 60 s in the fault tests, and fail "every sample answered".)"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from builders import figures_in
from conftest import make_bus, patience, start_service, stop_service, wait_until
from tidal_bus import StartAt
from tidal_bus.errors import HandlerError
from tidal_oversell.service import OversellService
from tidal_oversell.settings import OversellSettings
from tidal_runtime import InventoryGate
from tidal_schemas import NodeMetrics, NodeTopology, Resources


async def test_a_sample_waits_for_its_inventory_and_is_let_through_when_it_comes():
    gate, known = InventoryGate(wait_s=5), set()
    waiting = asyncio.create_task(gate.admit("n1", lambda: "n1" in known, "node n1"))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    known.add("n1")
    gate.arrived("n1")
    await asyncio.wait_for(waiting, patience(1))  # let through, no error
    await gate.admit("n1", lambda: True, "node n1")  # known: at once


async def test_a_node_never_inventoried_is_waited_for_once_then_refused_at_once_until_it_comes():
    gate, known = InventoryGate(wait_s=0.2), set()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(HandlerError, match="node n2: no node.topology read for it within 0.2s") as refused:
        await gate.admit("n2", lambda: "n2" in known, "node n2")
    assert loop.time() - started >= 0.2 and not refused.value.retriable
    second = gate.admit("n2", lambda: "n2" in known, "node n2")
    with pytest.raises(HandlerError):
        second.send(None)  # refused at its first step: it never suspends, no second wait
    known.add("n2")
    gate.arrived("n2")
    await gate.admit("n2", lambda: "n2" in known, "node n2")


def _topology(node: str) -> NodeTopology:
    return NodeTopology(node=node, capacity=Resources(cpu_milli=8000, memory_mib=10000),
                        allocatable=Resources(cpu_milli=8000, memory_mib=9000))


def _metrics(node: str, at: datetime) -> NodeMetrics:
    return NodeMetrics(node=node, sampled_at=at, interval_s=10, node_cpu_util=0.3, numa_load={0: 0.3},
                       cpu_used_milli=2000, memory_used_mib=3000, memory_total_mib=10000)


async def test_oversell_answers_a_sample_read_before_its_topology_and_refuses_a_node_without_one(
        nats_server, namespace):
    settings = OversellSettings(bus_url=nats_server.url, namespace=namespace, cluster="c1", http_port=0,
                                http_host="127.0.0.1", topology_wait_s=1.0)
    now = datetime.now(timezone.utc)
    async with make_bus(nats_server.url, namespace) as bus:
        service = OversellService(settings)
        task = await start_service(service, ready=lambda s: s.action_log_ready.is_set())
        try:
            answered: set[str] = set()
            letters: list = []

            async def read(stream: str, into) -> None:
                async for _, event in bus.read(stream, StartAt.earliest(), follow=True):
                    into(event)

            readers = [asyncio.create_task(read("node.allocatable", lambda e: answered.update(
                           f.sample for f in figures_in([e])))),
                       asyncio.create_task(read("dead.letter", letters.append))]
            early = await bus.publish(_metrics("n1", now))
            await asyncio.sleep(0.3)  # the sample is in hand, its node unknown
            assert early.id not in answered
            await bus.publish(_topology("n1"))
            await wait_until(lambda: early.id in answered, what="the early sample answered once its topology came")

            orphan = await bus.publish(_metrics("n2", now))
            await wait_until(lambda: letters, timeout=10, what="the sample of a node without topology dead-lettered")
            assert orphan.id not in answered
            assert "node c1/n2: no node.topology read for it" in letters[0].payload.reason
            assert letters[0].payload.consumer.startswith("oversell") and letters[0].payload.stream == "node.metrics"
            later = await bus.publish(_metrics("n2", now + timedelta(seconds=10)))
            await wait_until(lambda: len(letters) >= 2, what="the next one refused too")
            await bus.publish(_topology("n2"))
            await wait_until(lambda: ("c1", "n2") not in service.inventories._missing, what="n2's topology read")
            last = await bus.publish(_metrics("n2", now + timedelta(seconds=20)))
            await wait_until(lambda: last.id in answered, what="the node answered again once its topology came")
            assert later.id not in answered and len(letters) == 2
            for reader in readers:
                reader.cancel()
        finally:
            await stop_service(service, task)
