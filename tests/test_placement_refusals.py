"""Refusals are their own outcome (issue 14 part 5), on the placement
service over a real NATS server: a pod refused by its tenant's quota, or
invalid, is pending with the reason but never waits for room, so it does
not hold back another tenant's pod of its resource type; it is placed once
its tenant's configuration gives it room."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from builders import T0, pod
from conftest import make_bus, patience, start_service, stop_service, wait_until
from tidal_bus import StartAt
from tidal_cli.sample import node
from tidal_placement.service import PlacementService
from tidal_placement.settings import PlacementSettings
from tidal_schemas import GpuAsk, TenantConfig


async def _decisions(bus, name: str) -> list:
    return [d async for _, e in bus.read("placement.decision", StartAt.earliest()) for d in e.payload.items
            if d.outcome != "fence" and d.name == name]


async def _pending_reason(bus, name: str, timeout: float = 20.0) -> str:
    for _ in range(int(patience(timeout) / 0.1)):
        pending = [d for d in await _decisions(bus, name) if d.outcome == "pending"]
        if pending:
            return pending[-1].reason
        await asyncio.sleep(0.1)
    raise AssertionError(f"no pending decision for {name} within {patience(timeout):g}s")


def a100_pod(name: str, tenant: str, minutes: int, **fields):
    return pod(name, tenant=tenant, gpu=GpuAsk(count=1, models=["A100"]), created_at=T0 + timedelta(minutes=minutes),
               **fields)


async def test_refused_pods_hold_back_no_one(nats_server, namespace):
    # A permit timeout far beyond the test: a pod that waited would hold the
    # other tenant's A100 pod back for all of it.
    settings = PlacementSettings(bus_url=nats_server.url, namespace=namespace, cluster="c1", http_port=0,
                                 http_host="127.0.0.1", gpu_strategy="best-fit", permit_timeout_s=600)
    service = PlacementService(settings)
    task = await start_service(service)
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(node("g1", 1, 1, 8, 1, 64 * 1024, gpus=[("A100", 40960)] * 2, reserved=0))
        await bus.publish(TenantConfig(tenant="capped", quota={"A100": 0}))
        await wait_until(lambda: "c1" in service.clusters and "capped" in service.clusters["c1"].tenants and service.clusters["c1"].state.rows, timeout=20,
                         what="the node and the tenant configuration")
        # Older than "other", so ahead of it in the queue (same fair-share score 0).
        await bus.publish(a100_pod("capped", "capped", 0))
        await bus.publish(a100_pod("bad", "team", 1, invalid_reason="tidal.dev/gpu-count: not a number"))
        assert (await _pending_reason(bus, "capped")).startswith("quota: tenant capped has no room")
        assert (await _pending_reason(bus, "bad")).startswith("invalid pod: ")
        queue = service.clusters["c1"].queue
        assert all(e.refused and e.waiting_since is None for e in queue.entries.values())

        await bus.publish(a100_pod("other", "team", 2))
        await wait_until(lambda: any(p.name == "other" for p in service.requested_names()), timeout=10,
                         what="another tenant's A100 pod placed, not held back behind the refused ones")

        # The tenant's new quota gives the refused pod room: it is placed, once.
        await bus.publish(TenantConfig(tenant="capped", quota={"A100": 1000}))
        await wait_until(lambda: any(p.name == "capped" for p in service.requested_names()), timeout=10,
                         what="the refused pod placed once its quota has room")
        assert [d.outcome for d in await _decisions(bus, "capped")] == ["pending", "placed"]
        assert [d.outcome for d in await _decisions(bus, "bad")] == ["pending"]   # said once, not every cycle
    await stop_service(service, task)
