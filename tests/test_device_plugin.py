"""The node agent's GPU device plugin over real gRPC on unix sockets: the
test plays the kubelet — a Registration server on kubelet.sock, and a
client calling the plugin on the socket it registered — over the device
plugin API v1beta1 (tidal_kubelet_api)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from pathlib import Path

import grpc
import pytest

from conftest import wait_until
from tidal_kubelet_api import HEALTHY, KUBELET_SOCKET, UNHEALTHY, VERSION, pb2, pb2_grpc
from tidal_schemas import Gpu, GpuShare, PlacementDecision
from tidal_topology.device_plugin import GpuDevicePlugin
from tidal_topology.gpu_units import unit_ids

UUIDS = [f"GPU-{k}{k}{k}{k}{k}{k}{k}{k}-0000-1111-2222-333333333333" for k in range(4)]
MIG = "MIG-99999999-0000-1111-2222-333333333333"


def gpus(count: int = 2, memory_mib: int = 40960) -> list[Gpu]:
    return [Gpu(id=UUIDS[i], index=i, model="A100", memory_mib=memory_mib, numa=i % 2) for i in range(count)]


def placed(name: str, *shares: tuple[str, int], node: str = "n1") -> PlacementDecision:
    return PlacementDecision(decision_id=f"d-{name}", namespace="ns", name=name, outcome="placed", node=node,
                             gpus=[GpuShare(gpu=g, milli=m) for g, m in shares])


@pytest.fixture
def plugin_dir():
    # a socket address holds 107 bytes: pytest's tmp_path (named after the test) can be longer
    path = Path(tempfile.mkdtemp(prefix="tdp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Kubelet(pb2_grpc.RegistrationServicer):
    """The kubelet's side: takes registrations on kubelet.sock, then calls the
    registered plugin the way the kubelet does."""

    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir, self.requests, self.server = plugin_dir, [], None
        self.registered = asyncio.Event()

    async def Register(self, request, context):
        self.requests.append(request)
        self.registered.set()
        return pb2.Empty()

    async def start(self) -> "Kubelet":
        self.server = grpc.aio.server()
        pb2_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{self.plugin_dir / KUBELET_SOCKET}")
        await self.server.start()
        return self

    async def stop(self) -> None:
        await self.server.stop(grace=None)
        with contextlib.suppress(FileNotFoundError):
            (self.plugin_dir / KUBELET_SOCKET).unlink()

    async def wait_registered(self, count: int = 1, timeout: float = 10.0) -> pb2.RegisterRequest:
        async def enough():
            while len(self.requests) < count:
                self.registered.clear()
                await self.registered.wait()
        await asyncio.wait_for(enough(), timeout)
        return self.requests[-1]

    @contextlib.asynccontextmanager
    async def plugin(self, endpoint: str):
        async with grpc.aio.insecure_channel(f"unix://{self.plugin_dir / endpoint}") as channel:
            yield pb2_grpc.DevicePluginStub(channel)


@contextlib.asynccontextmanager
async def running(plugin_dir: Path, node_gpus: list[Gpu], **options):
    """A registered plugin and the kubelet's client of it."""
    kubelet = await Kubelet(plugin_dir).start()
    plugin = GpuDevicePlugin("n1", node_gpus, plugin_dir=plugin_dir, **options)
    await plugin.start()
    try:
        request = await kubelet.wait_registered()
        async with kubelet.plugin(request.endpoint) as stub:
            yield plugin, stub, kubelet
    finally:
        await plugin.stop()
        await kubelet.stop()


async def admit(stub, size: int, available: list[str]) -> tuple[list[str], pb2.ContainerAllocateResponse]:
    """What the kubelet does for one container asking `size` units: ask a
    preference, make up what it lacks from the available units, Allocate them."""
    preferred = await stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
        pb2.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=size)]))
    units = list(preferred.container_responses[0].deviceIDs)
    units += [u for u in available if u not in units][:size - len(units)]
    given = await stub.Allocate(pb2.AllocateRequest(container_requests=[
        pb2.ContainerAllocateRequest(devices_ids=units)]))
    return units, given.container_responses[0]


async def allocate(stub, units: list[str]) -> pb2.ContainerAllocateResponse:
    """Allocate without a preference (a kubelet that did not ask for one)."""
    given = await stub.Allocate(pb2.AllocateRequest(container_requests=[pb2.ContainerAllocateRequest(
        devices_ids=units)]))
    return given.container_responses[0]


def all_units(node_gpus: list[Gpu]) -> list[str]:
    return [u for g in node_gpus for u in unit_ids(g.id)]


async def test_registers_when_the_kubelet_comes_and_again_when_it_restarts(plugin_dir):
    plugin = GpuDevicePlugin("n1", gpus(), plugin_dir=plugin_dir, watch_s=0.05)
    await plugin.start()  # no kubelet yet: the plugin keeps trying
    kubelet = await Kubelet(plugin_dir).start()
    try:
        request = await kubelet.wait_registered()
        assert (request.version, request.endpoint, request.resource_name) == (VERSION, "tidal-gpu.sock",
                                                                              "tidal.dev/gpu-milli")
        assert request.options.get_preferred_allocation_available and not request.options.pre_start_required
        async with kubelet.plugin(request.endpoint) as stub:
            options = await stub.GetDevicePluginOptions(pb2.Empty())
        assert options.get_preferred_allocation_available

        # a restarting kubelet removes every socket in the directory and makes kubelet.sock anew
        await kubelet.stop()
        (plugin_dir / request.endpoint).unlink()
        kubelet = await Kubelet(plugin_dir).start()
        request = await kubelet.wait_registered()
        async with kubelet.plugin(request.endpoint) as stub:  # served again on a socket of its own
            assert (await stub.GetDevicePluginOptions(pb2.Empty())).get_preferred_allocation_available
        # the kubelet has the request before the plugin has its answer and counts it
        await wait_until(lambda: plugin.registrations == 2, what="the second registration counted")
    finally:
        await plugin.stop()
        await kubelet.stop()
    assert not (plugin_dir / "tidal-gpu.sock").exists()


async def test_list_and_watch_sends_an_unhealthy_gpu_at_once(plugin_dir):
    async with running(plugin_dir, gpus()) as (plugin, stub, _):
        stream = stub.ListAndWatch(pb2.Empty())
        first = await asyncio.wait_for(stream.read(), 5)
        assert [d.ID for d in first.devices] == all_units(gpus())  # 1000 units per GPU
        assert {d.health for d in first.devices} == {HEALTHY}
        assert {d.topology.nodes[0].ID for d in first.devices[1000:]} == {1}  # GPU 1's NUMA node
        plugin.set_health(UUIDS[1], False)
        second = await asyncio.wait_for(stream.read(), 5)  # pushed by set_health: nothing else would send it
        health = {d.ID: d.health for d in second.devices}
        assert {health[u] for u in unit_ids(UUIDS[1])} == {UNHEALTHY}
        assert {health[u] for u in unit_ids(UUIDS[0])} == {HEALTHY}
        stream.cancel()


async def test_preferred_units_are_the_decided_gpus(plugin_dir):
    async with running(plugin_dir, gpus()) as (plugin, stub, _):
        plugin.decided(placed("a", (UUIDS[1], 300)))
        preferred = await stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
            pb2.ContainerPreferredAllocationRequest(available_deviceIDs=all_units(gpus()), allocation_size=300)]))
    assert list(preferred.container_responses[0].deviceIDs) == list(unit_ids(UUIDS[1])[:300])


async def test_a_two_gpu_pod_gets_exactly_the_gpus_placement_chose(plugin_dir):
    node = gpus(4)
    async with running(plugin_dir, node) as (plugin, stub, _):
        plugin.decided(placed("train", (UUIDS[3], 1000), (UUIDS[1], 1000)))
        units, given = await admit(stub, 2000, all_units(node))
    assert sorted(units) == sorted(unit_ids(UUIDS[3]) + unit_ids(UUIDS[1]))
    assert given.envs["NVIDIA_VISIBLE_DEVICES"] == f"{UUIDS[3]},{UUIDS[1]}"
    assert [c.name for c in given.cdi_devices] == [f"nvidia.com/gpu={UUIDS[3]}", f"nvidia.com/gpu={UUIDS[1]}"]
    assert given.envs["TIDAL_DECISION_ID"] == "d-train" and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in given.envs
    assert plugin.allocations["ns/train"].gpus == (UUIDS[3], UUIDS[1])


async def test_two_half_gpu_pods_share_one_gpu_under_mps_limits(plugin_dir):
    async with running(plugin_dir, gpus()) as (plugin, stub, _):
        plugin.decided(placed("a", (UUIDS[0], 500)))
        plugin.decided(placed("b", (UUIDS[0], 500)))
        available = all_units(gpus())
        units_a, a = await admit(stub, 500, available)
        units_b, b = await admit(stub, 500, [u for u in available if u not in units_a])  # the kubelet's count
    assert not set(units_a) & set(units_b) and len(units_a) == len(units_b) == 500
    for given, decision in ((a, "d-a"), (b, "d-b")):
        assert given.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[0] and given.envs["TIDAL_DECISION_ID"] == decision
        assert given.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"  # 500 / 10
        assert given.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"  # 40960 MiB / 2


async def test_a_container_without_a_decision_is_refused(plugin_dir):
    async with running(plugin_dir, gpus(), wait_s=0.2) as (plugin, stub, _):
        plugin.decided(placed("other", (UUIDS[0], 500)))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await allocate(stub, list(unit_ids(UUIDS[1])))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no placement decision for node n1 of 1000 milli-GPU" in refused.value.details()
    assert not plugin.allocations and len(plugin.refusals) == 1


async def test_a_decision_naming_an_unhealthy_gpu_is_refused(plugin_dir):
    async with running(plugin_dir, gpus()) as (plugin, stub, _):
        plugin.set_health(UUIDS[0], False)
        plugin.decided(placed("a", (UUIDS[0], 1000)))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await admit(stub, 1000, list(unit_ids(UUIDS[1])))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"names GPU {UUIDS[0]}, which is not healthy on node n1" in refused.value.details()


async def test_same_sized_decisions_are_matched_oldest_first(plugin_dir):
    async with running(plugin_dir, gpus()) as (plugin, stub, _):
        plugin.decided(placed("later", (UUIDS[1], 1000)), at=20.0)
        plugin.decided(placed("sooner", (UUIDS[0], 1000)), at=10.0)  # arrived second, decided first
        first = await allocate(stub, list(unit_ids(UUIDS[1])))  # the kubelet's own pick names nothing
        second = await allocate(stub, list(unit_ids(UUIDS[0])))
    assert [first.envs["TIDAL_DECISION_ID"], second.envs["TIDAL_DECISION_ID"]] == ["d-sooner", "d-later"]
    assert first.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[0]


async def test_released_decisions_are_not_matched(plugin_dir):
    async with running(plugin_dir, gpus(), wait_s=0.2) as (plugin, stub, _):
        plugin.decided(placed("gone", (UUIDS[0], 1000)), at=1.0)
        plugin.decided(placed("kept", (UUIDS[1], 1000)), at=2.0)
        plugin.released("ns/gone")
        given = await allocate(stub, list(unit_ids(UUIDS[0])))
        assert given.envs["TIDAL_DECISION_ID"] == "d-kept"
        plugin.released("ns/kept")
        assert "ns/kept" not in plugin.allocations  # a deleted pod's devices are no longer its
        with pytest.raises(grpc.aio.AioRpcError):
            await allocate(stub, list(unit_ids(UUIDS[0])))


async def test_allocate_waits_briefly_for_a_decision_on_its_way(plugin_dir):
    async with running(plugin_dir, gpus(), wait_s=120.0) as (plugin, stub, _):
        call = asyncio.ensure_future(allocate(stub, list(unit_ids(UUIDS[0]))))
        await asyncio.sleep(0.2)
        assert not call.done()
        plugin.decided(placed("a", (UUIDS[1], 1000)))
        given = await asyncio.wait_for(call, 10)  # woken by the decision, not at the end of wait_s
    assert given.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]


async def test_a_mig_instance_is_a_device_of_its_own(plugin_dir):
    node = [*gpus(1), Gpu(id=MIG, index=0, model="A100", kind="virtual", parent=UUIDS[0], memory_mib=10240)]
    async with running(plugin_dir, node) as (plugin, stub, _):
        plugin.decided(placed("small", (MIG, 1000)))
        units, given = await admit(stub, 1000, all_units(node))
        stream = stub.ListAndWatch(pb2.Empty())
        assert len((await asyncio.wait_for(stream.read(), 5)).devices) == 2000
        plugin.set_health(UUIDS[0], False)  # the parent goes: its MIG instance with it
        health = {d.ID: d.health for d in (await asyncio.wait_for(stream.read(), 5)).devices}
        stream.cancel()
    assert units == list(unit_ids(MIG)) and given.envs["NVIDIA_VISIBLE_DEVICES"] == MIG
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in given.envs  # the whole instance
    assert {health[u] for u in unit_ids(MIG)} == {UNHEALTHY}


async def test_pre_start_container_answers_and_stop_removes_the_socket(plugin_dir):
    async with running(plugin_dir, gpus()) as (plugin, stub, _):
        assert await stub.PreStartContainer(pb2.PreStartContainerRequest(devices_ids=["x"])) is not None
        assert plugin.socket_path.exists()
    assert not plugin.socket_path.exists()
