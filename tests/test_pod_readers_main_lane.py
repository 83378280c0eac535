"""Fair share, oversell and the node agent follow only pod.lifecycle's main
lane: the broker never sends them a pending pod (`StreamSpec.side_lane`),
while placement reads every pod. Each service over a real NATS server holds
a running pod; the same pod's key then comes pending in the side lane (as a
pod made again under its name would), then another pod runs: the first
still counts, because the pending event never reached the service.

A reader of the whole stream would have dropped it (each of them replaces a
pod's entry with its latest event), so these fail if a service reads the
side lane."""

from __future__ import annotations

import uuid

from builders import pod
from conftest import make_bus, start_service, stop_service, wait_until
from tidal_oversell.service import OversellService
from tidal_oversell.settings import OversellSettings
from tidal_scoring.service import ScoringService
from tidal_scoring.settings import ScoringSettings
from tidal_topology.service import TopologyService
from tidal_topology.settings import TopologySettings

NODE = "node-under-test"


def _common(url: str, namespace: str) -> dict:
    return dict(bus_url=url, namespace=namespace, cluster="c1", http_port=0, http_host="127.0.0.1")


async def _held_then_pending_then_another(url: str, namespace: str) -> None:
    async with make_bus(url, namespace, source="bridge") as bus:
        await bus.publish(pod("first", phase="running", node=NODE, user="alice", uid=str(uuid.uuid4())))
        await bus.publish(pod("first", user="alice"))  # pending: the side lane
        await bus.publish(pod("second", phase="running", node=NODE, user="bob", uid=str(uuid.uuid4())))


async def test_fair_share_is_not_sent_pending_pods(nats_server, namespace):
    await _held_then_pending_then_another(nats_server.url, namespace)
    service = ScoringService(ScoringSettings(**_common(nats_server.url, namespace), period_s=0.2))
    task = await start_service(service)
    await wait_until(lambda: {p.user for p in service.running.of_cluster("c1")} >= {"bob"}, what="bob's pod read")
    users = sorted(p.user for p in service.running.of_cluster("c1"))
    await stop_service(service, task)
    assert users == ["alice", "bob"]


async def test_oversell_is_not_sent_pending_pods(nats_server, namespace):
    await _held_then_pending_then_another(nats_server.url, namespace)
    service = OversellService(OversellSettings(**_common(nats_server.url, namespace)))
    task = await start_service(service, ready=lambda s: s.action_log_ready.is_set())
    await wait_until(lambda: "default/second" in {p.key for p in service.pods_on("c1", NODE)},
                     what="the second pod read")
    held = sorted(p.key for p in service.pods_on("c1", NODE))
    await stop_service(service, task)
    assert held == ["default/first", "default/second"]


async def test_the_node_agent_is_not_sent_pending_pods(nats_server, namespace, tmp_path):
    await _held_then_pending_then_another(nats_server.url, namespace)
    settings = TopologySettings(**_common(nats_server.url, namespace), node_name=NODE, numa_override="0:0,1:1",
                                interval_s=0.3, state_file=str(tmp_path / "cpu-state.json"),
                                cgroup_parent="tidal-none")
    service = TopologyService(settings)
    task = await start_service(service)
    await wait_until(lambda: service.pods.get("default/second") is not None, what="the second pod read")
    first = service.pods.get("default/first")
    await stop_service(service, task)
    assert first is not None and first.phase == "running"
