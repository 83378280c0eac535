"""The last mile of oversold CPU over a real NATS server, through the real
bridge and placement: placement books a node no more than its Node object's
status.allocatable says (the kubelet admits against it), so oversell's extra
room is used only once the status carries it (docs/last-mile.md). The
webhook's part, writing the oversold figure into the status, is played by
updating the node in the fake API server."""

from __future__ import annotations

from test_cluster_path import CLUSTER, cluster_path, cpu_node

from conftest import wait_until
from tidal_schemas import NodeAllocatable, NodeAllocatables, Resources

KUBELET_CPU, OVERSOLD_CPU = 8000, 12000  # 2 NUMA nodes × 4 CPUs; oversell's factor 1.5


def oversold(node: str, cpu_milli: int) -> NodeAllocatables:
    return NodeAllocatables.of(NodeAllocatable(
        node=node, policy="factor", factor=1.5, capacity=Resources(cpu_milli=KUBELET_CPU, memory_mib=64 * 1024),
        allocatable=Resources(cpu_milli=cpu_milli, memory_mib=64 * 1024)))


def booked_cpu(path, node: str) -> int | None:
    figures = path.placement.clusters[CLUSTER].state.allocatable(node)
    return None if figures is None else figures.cpu_milli


async def test_oversold_room_is_used_only_once_the_node_status_carries_it(nats_server, namespace):
    async with cluster_path(nats_server, namespace, cpu_node("n1")) as path:
        await path.bus.publish(oversold("n1", OVERSOLD_CPU))
        await path.start_placement(permit_timeout_s=2)
        books = path.placement.clusters[CLUSTER].allocatable
        await wait_until(lambda: "n1" in books.oversold and "n1" in books.status, 20,
                         "oversell's figure and the node's status read")
        assert booked_cpu(path, "n1") == KUBELET_CPU  # min(12000 oversold, 8000 in the status)
        # big waits for room and holds back CPU pods for the permit timeout (2 s here, not 30), then small binds
        path.pod("big", cpu="10")  # fits oversell's 12 CPUs, not the kubelet's 8
        path.pod("small", cpu="1")
        await path.wait_bound("small")
        await path.wait_pending("big", "1 cpu")
        assert path.bound("big") is None

        # the kubelet's next status update, with the webhook up: the oversold figure in the status
        path.kube.update_node("n1", lambda n: n["status"]["allocatable"].update(cpu=f"{OVERSOLD_CPU}m"))
        await path.wait_bound("big")
        assert booked_cpu(path, "n1") == OVERSOLD_CPU

        # the webhook down again: the kubelet writes its own figure, and a new replica, rebuilt
        # from the streams, books that, not oversell's, whatever order it read them in
        path.kube.update_node("n1", lambda n: n["status"]["allocatable"].update(cpu=f"{KUBELET_CPU}m"))
        await wait_until(lambda: booked_cpu(path, "n1") == KUBELET_CPU, 20, "the kubelet's figure booked")
        path.kill(path.placement)
        await path.start_placement(permit_timeout_s=2)
        await wait_until(lambda: booked_cpu(path, "n1") is not None, 20, "n1 known again")
        assert booked_cpu(path, "n1") == KUBELET_CPU
        path.pod("more", cpu="1")  # 11 CPUs held of 8: nothing more fits
        await path.wait_pending("more", "1 cpu")
