"""A small placement double for the simulator's tests, speaking the event
contract of the placement service (`placement.decision` for pending pods,
rollback on a failed `bind.result`), built on the placement team's policy
core; and the tests of the double itself.

Contract kept: a pending pod gets one decision per attempt (placed with node,
NUMA CPUs and GPUs, or pending with the reason and per-reason node counts);
a failed bind returns the assumed resources and the pod is decided again;
running pods the double did not place (already there) are held; deleted
pods are released; `node.allocatable` replaces node-level allocatable.
"""

from __future__ import annotations

import asyncio
from typing import Any

from conftest import make_bus, wait_until
from tidal_placement.cluster_state import Allocation, ClusterState
from tidal_placement.decide import decide
from tidal_placement.gpu_strategies import make_strategy
from tidal_placement.pod_request import PodRequest, placement_decision
from tidal_runtime import Service, ServiceSettings, Subscription
from tidal_bus import StartAt
from tidal_simulator.topology_builder import make_topology
from tidal_schemas import BindResult, PodLifecycle
from tidal_bridge.pods import pod_lifecycle
from tidal_simulator.pods import EPOCH, pod_manifest, sim_pod


class DoubleSettings(ServiceSettings):
    model_config = {"env_prefix": "TIDAL_PLACEMENTDOUBLE_"}


class PlacementDouble(Service):
    name = "placement-double"
    settings_class = DoubleSettings

    def __init__(self, settings: DoubleSettings, strategy: str = "best-fit", **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.state = ClusterState(capacity=8)
        self.strategy = make_strategy(strategy)
        self.pods: dict[str, PodLifecycle] = {}
        self.decided = 0
        self.rolled_back = 0

    def subscriptions(self) -> list[Subscription]:
        # one consumer for everything would need one stream; order between streams is not promised
        return [Subscription("node.topology", self.on_topology), Subscription("pod.lifecycle", self.on_pod),
                Subscription("bind.result", self.on_bind), Subscription("node.allocatable", self.on_allocatable)]

    async def on_topology(self, envelope, delivery) -> None:
        self.state.upsert_node(envelope.payload)

    async def on_allocatable(self, envelope, delivery) -> None:
        self.state.set_allocatable(envelope.payload.node, envelope.payload.allocatable)

    async def on_pod(self, envelope, delivery) -> None:
        pod: PodLifecycle = envelope.payload
        key = pod.event_key()
        if pod.phase == "pending":
            self.pods[key] = pod
            await self.place(key, envelope)
        elif pod.phase == "running" and self.state.held(key) is None and pod.node:
            held = Allocation.of(pod.node, pod.requests.cpu_milli, pod.requests.memory_mib, pod.numa_cpus,
                                 {g.gpu: g.milli for g in pod.gpus})
            self.state.assume(key, held)
            self.state.confirm(key)
        elif pod.phase == "deleted":
            self.state.release(key)
            self.pods.pop(key, None)

    async def on_bind(self, envelope, delivery) -> None:
        result: BindResult = envelope.payload
        key = result.event_key()
        if result.ok:
            self.state.confirm(key)
            return
        self.state.forget(key)
        self.rolled_back += 1
        if key in self.pods:
            await self.place(key, envelope)

    async def place(self, key: str, cause) -> None:
        pod = self.pods[key]
        placement = decide(self.state, PodRequest.from_pod(pod), self.strategy)
        if placement.ok:
            self.state.assume(key, placement.allocation)
        self.decided += 1
        await self.publish(placement_decision(pod, placement, f"d-{self.decided}"), cause=cause)


def double(nats_url: str, namespace: str, cluster: str = "sim", strategy: str = "best-fit") -> PlacementDouble:
    return PlacementDouble(DoubleSettings(bus_url=nats_url, namespace=namespace, cluster=cluster, http_port=0,
                                          http_host="127.0.0.1"), strategy=strategy)


def waits_for_nodes(placement: PlacementDouble, count: int):
    """A warm-up for `simulate`: pods arrive once the double knows every node."""
    async def warmup(sim) -> None:
        await wait_until(lambda: placement.state.size >= count, timeout=15, what="double saw every node")
    return warmup


# -- the double itself ----------------------------------------------------------

async def test_double_places_a_pod_and_rolls_back_a_failed_bind(nats_server, namespace):
    placement = double(nats_server.url, namespace, cluster="c1")
    task = asyncio.create_task(placement.run())
    await wait_until(lambda: placement.ready()[0], what="double ready")
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(make_topology("n1", (4,), gpus=1))
        await wait_until(lambda: placement.state.size == 1, what="node seen")
        pod = pod_lifecycle(pod_manifest(sim_pod("t", "p", cpu_milli=1000, memory_mib=512), EPOCH))
        await bus.publish(pod)
        await wait_until(lambda: placement.decided == 1, what="first decision")
        assert placement.state.held("t/p") is not None  # assumed
        await bus.publish(BindResult(decision_id="d-1", namespace="t", name="p", node="n1", ok=False, reason="x"))
        await wait_until(lambda: placement.decided == 2, what="decided again after rollback")
        decisions = [e.payload async for _, e in bus.read("placement.decision", StartAt.earliest())]
    placement.stop()
    await asyncio.wait_for(task, 30)
    assert [d.outcome for d in decisions] == ["placed", "placed"]
    assert placement.rolled_back == 1 and placement.state.held("t/p") is not None  # forgotten, then assumed anew
