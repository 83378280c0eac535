"""The GPU device plugin in the real node agent: the settings that turn it on,
GPU health from NVML or the inventory file, and the agent service feeding it
the decisions, bind results and pod events it reads from the bus."""

from __future__ import annotations

import asyncio
import json
import uuid

import grpc
import pytest

from builders import pod
from conftest import make_bus, start_service, stop_service, wait_until
from test_device_plugin import UUIDS, Kubelet, admit, all_units, allocate, plugin_dir  # noqa: F401
from test_topology_agent import _settings
from tidal_kubelet_api import UNHEALTHY, pb2
from tidal_schemas import BindResult, Gpu, GpuShare, PlacementDecision, PlacementDecisions
from tidal_topology.gpu_devices import device_plugin_for, read_health
from tidal_topology.gpu_units import unit_ids
from tidal_topology.gpus import GpuDiscovery
from tidal_topology.service import TopologyService

NODE = "node-under-test"


class FakeNvml:
    """NVML as pynvml exposes it, for devices that answer or not."""

    def __init__(self, answering: set[str], initialises: bool = True) -> None:
        self.answering, self.initialises, self.shut = answering, initialises, False

    def nvmlInit(self):
        if not self.initialises:
            raise RuntimeError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.answering:
            raise RuntimeError("GPU is lost")
        return uuid

    def nvmlDeviceGetMemoryInfo(self, handle):
        return object()


def test_nvml_health_is_whether_each_gpu_answers():
    nvml = FakeNvml({UUIDS[0]})
    assert read_health("nvml", UUIDS[:2], None, nvml).healthy == {UUIDS[0]: True, UUIDS[1]: False}
    assert nvml.shut
    gone = read_health("nvml", UUIDS[:2], None, FakeNvml(set(UUIDS), initialises=False))
    assert gone.healthy == {UUIDS[0]: False, UUIDS[1]: False} and "did not initialise" in gone.reason


def test_inventory_file_health(tmp_path):
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps([{"id": UUIDS[0], "model": "A100"}, {"id": UUIDS[1], "model": "A100",
                                                                   "healthy": False}]))
    assert read_health("file", UUIDS[:3], path).healthy == {UUIDS[0]: True, UUIDS[1]: False, UUIDS[2]: False}
    path.write_text("{not json")
    assert read_health("file", UUIDS[:2], path).error  # unread: the health stays as it was


@pytest.mark.parametrize("setting, found, serves", [
    (None, [Gpu(id=UUIDS[0], model="A100")], True),  # unset: on when the node has GPUs
    (None, [], False),
    (False, [Gpu(id=UUIDS[0], model="A100")], False),
    (True, [], True),
])
def test_the_device_plugin_setting(tmp_path, setting, found, serves):
    settings = _settings("nats://127.0.0.1:1", "ns", tmp_path, device_plugin=setting,
                         device_plugin_dir=str(tmp_path / "dp"))
    plugin = device_plugin_for(settings, GpuDiscovery(found, "file"))
    assert (plugin is not None) == serves
    if plugin is not None:
        assert plugin.socket_path == tmp_path / "dp" / "tidal-gpu.sock" and plugin.node == NODE


def test_the_plugin_dir_defaults_to_the_kubelets(tmp_path):
    assert _settings("nats://127.0.0.1:1", "ns", tmp_path).device_plugin_dir == "/var/lib/kubelet/device-plugins/"


def _decision(name: str, *shares: tuple[str, int]) -> PlacementDecision:
    return PlacementDecision(decision_id=f"d-{name}-{uuid.uuid4().hex[:6]}", namespace="ns", name=name,
                             outcome="placed", node=NODE, gpus=[GpuShare(gpu=g, milli=m) for g, m in shares])


async def test_the_agent_feeds_its_plugin_from_the_bus(nats_server, namespace, tmp_path, plugin_dir):  # noqa: F811
    inventory = tmp_path / "gpus.json"
    listed = [{"id": UUIDS[i], "model": "A100", "memory_mib": 40960} for i in range(2)]
    inventory.write_text(json.dumps(listed))
    kubelet = await Kubelet(plugin_dir).start()
    service, task = await _start(nats_server.url, namespace, tmp_path, plugin_dir, inventory)
    try:
        request = await kubelet.wait_registered()
        async with make_bus(nats_server.url, namespace) as bus, kubelet.plugin(request.endpoint) as stub:
            half = _decision("half", (UUIDS[1], 500))
            failed = _decision("failed", (UUIDS[0], 1000))
            gone = _decision("gone", (UUIDS[0], 1000))
            await bus.publish(PlacementDecisions.of(half, failed, gone))
            await bus.publish(BindResult(decision_id=failed.decision_id, namespace="ns", name="failed", node=NODE,
                                         ok=False, reason="conflict"))
            await bus.publish(pod("gone", namespace="ns", phase="deleted", node=NODE))
            await wait_until(lambda: set(service.gpu_plugin.ledger.pending) == {"ns/half"},
                             what="the failed bind and the deleted pod dropped")

            _, given = await admit(stub, 500, all_units(_gpus(listed)))
            assert given.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
            assert given.envs["TIDAL_DECISION_ID"] == half.decision_id
            assert given.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"
            with pytest.raises(grpc.aio.AioRpcError) as refused:  # neither dropped decision is matched
                await allocate(stub, list(unit_ids(UUIDS[0])))
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION

            # the inventory file now says GPU 0 is unhealthy: sent on the open stream
            stream = stub.ListAndWatch(pb2.Empty())
            await asyncio.wait_for(stream.read(), 10)
            inventory.write_text(json.dumps([listed[0] | {"healthy": False}, listed[1]]))
            health = {d.ID: d.health for d in (await asyncio.wait_for(stream.read(), 10)).devices}
            assert {health[u] for u in unit_ids(UUIDS[0])} == {UNHEALTHY}
            stream.cancel()
    finally:
        await stop_service(service, task)
        await kubelet.stop()
    assert not (plugin_dir / "tidal-gpu.sock").exists()  # the agent's stop took its socket away


def _gpus(listed) -> list[Gpu]:
    return [Gpu.model_validate(entry) for entry in listed]


async def _start(url, namespace, tmp_path, plugin_dir, inventory):  # noqa: F811
    settings = _settings(url, namespace, tmp_path, gpu_inventory_file=str(inventory),
                         device_plugin_dir=str(plugin_dir), gpu_health_s=0.1, exclusive_cpus=False)
    service = TopologyService(settings)
    return service, await start_service(service)
