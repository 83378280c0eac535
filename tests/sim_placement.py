"""The placement the simulator's tests run against: the real placement
service, in this process, on the test's bus (a simulated run exercises the
product, never a double of it); and a warm-up that lets pods arrive once it
leads the cluster and knows every node."""

from __future__ import annotations

from conftest import wait_until
from tidal_placement.service import PlacementService
from tidal_placement.settings import PlacementSettings


def placement(nats_url: str, namespace: str, cluster: str = "sim", strategy: str = "best-fit") -> PlacementService:
    """Placement with the settings `tidal simulate` gives it for short runs:
    a pod that does not fit is decided pending at once, not held back."""
    return PlacementService(PlacementSettings(bus_url=nats_url, namespace=namespace, cluster=cluster, http_port=0,
                                              http_host="127.0.0.1", gpu_strategy=strategy, permit_timeout_s=0.05,
                                              takeover_settle_s=0))


def waits_for_nodes(service: PlacementService, count: int, cluster: str = "sim"):
    """A warm-up for `simulate`: pods arrive once placement leads `cluster`
    and has read every node's inventory."""
    def ready() -> bool:
        cache = service.clusters.get(cluster)
        return cluster in service.active and cache is not None and len(cache.inventory) >= count

    async def warmup(sim) -> None:
        await wait_until(ready, timeout=30, what="placement leads the cluster and knows every node")
    return warmup
