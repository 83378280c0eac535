"""The kubelet stand-in behaves like the kubelet: it admits a bound pod by
the node object's `status.allocatable` less the pods it runs (kube's
reasons and messages when it cannot), gets every container's devices from
the node agent's device plugin (the real `tidal_topology.GpuDevicePlugin`)
over gRPC on unix sockets, writes its node's status from what the plugin
lists, and never reads a `tidal.dev/` annotation. The simulator's API
server, kubelets and node agents run here without a bus: decisions are
handed to the node agents as the simulator's subscription would."""

from __future__ import annotations

import ast
import asyncio
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import wait_until
from tidal_schemas import Gpu, GpuAsk, GpuShare, PlacementDecision
from tidal_simulator.kubelet_admit import allocatable_of, fits, pod_requests, quantity
from tidal_simulator.pods import node_manifest, pod_manifest, sim_pod
from tidal_simulator.service import SimulatorService
from tidal_simulator.settings import SimulatorSettings
from tidal_simulator.topology_builder import make_topology
from tidal_simulator.workload import SimNode, SimPodSpec, Workload

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
UUIDS = [f"GPU-{i:08x}-1b2c-4d5e-8f90-a1b2c3d4e5f6" for i in range(4)]  # a GPU UUID as NVML names it
GPU = "tidal.dev/gpu-milli"


def gpu_node(name: str = "g1", gpus: int = 4, cpus: int = 8, memory_mib: int = 16384):
    """A node whose GPUs carry UUIDs and 16 GiB each."""
    topology = make_topology(name, (cpus,), gpus=gpus, memory_mib=memory_mib)
    devices = [Gpu(id=UUIDS[i], index=i, model="A100", memory_mib=16384) for i in range(gpus)]
    return topology.model_copy(update={"gpus": devices})


class Cluster:
    """The simulator's API server and kubelets over `topologies`, without a bus."""

    def __init__(self, topologies, *pods: SimPodSpec) -> None:
        workload = Workload("kubelet", tuple(SimNode(t) for t in topologies), tuple(pods))
        self.sim = SimulatorService(SimulatorSettings(bus_url="nats://127.0.0.1:1", start=T0, tick_s=5),
                                    workload=workload)
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> "Cluster":
        sim = self.sim
        await sim.api.start()
        for node in sim.model.nodes.values():
            sim.api.create_node(node_manifest(node.topology))
        await sim.kubelets.start()
        self.task = asyncio.create_task(sim.kubelets.run())
        return self

    async def __aexit__(self, *exc) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.sim.kubelets.stop()
        await self.sim.api.stop()

    def allocatable(self, node: str) -> dict[str, str]:
        return self.sim.api.node(node)["status"]["allocatable"]

    async def submit(self, name: str) -> None:
        sim = self.sim
        sim.model.arrive(f"t/{name}", T0)
        sim.api.create_pod(pod_manifest(sim.model.pods[f"t/{name}"].request, T0))

    async def decide(self, name: str, node: str, gpus=(), decision_id: str | None = None) -> None:
        """What the node agents read of placement's decision (the bridge binds on its own)."""
        pod = self.sim.model.pods[f"t/{name}"].request
        await self.sim.agents.on_decision(PlacementDecision(
            decision_id=decision_id or f"d-{name}", namespace="t", name=name, uid=pod.uid, outcome="placed",
            node=node, gpus=[GpuShare(gpu=g, milli=m) for g, m in gpus]))

    def bind(self, name: str, node: str) -> None:
        """A Binding, as the API server stores it: no resource check there."""
        self.sim.api.update_pod("t", name, lambda obj: obj["spec"].__setitem__("nodeName", node))

    async def settled(self, name: str) -> dict:
        await wait_until(lambda: self.status(name).get("phase") in ("Running", "Failed"), 15, f"{name} admitted")
        await self.sim.kubelets.idle.wait()
        return self.status(name)

    def status(self, name: str) -> dict:
        return (self.sim.api.pod("t", name) or {}).get("status") or {}

    def envs(self, name: str) -> dict[str, str]:
        (handed,) = self.sim.kubelets.handed[f"t/{name}"]
        return handed.envs


def pod(name: str, cpu: int = 1000, gpu: GpuAsk = GpuAsk(), mem: int = 1024) -> SimPodSpec:
    return SimPodSpec(sim_pod("t", name, cpu_milli=cpu, memory_mib=mem, gpu=gpu))


# -- the admission predicate (pure) --------------------------------------------------------
@pytest.mark.parametrize("text, value", [("500m", 0.5), ("2", 2), ("1Gi", 2 ** 30), ("1500Mi", 1500 * 2 ** 20),
                                         ("1e3", 1000), ("4k", 4000)])
def test_quantities(text, value):
    assert quantity(text) == value


ALLOCATABLE = {"cpu": 8000, "memory": 16 * 2 ** 30, "pods": 110, GPU: 2000}


@pytest.mark.parametrize("asked, running, reason, message", [
    # 7000 running + 2000 > 8000
    ({"cpu": 2000}, [{"cpu": 7000}], "OutOfcpu", "cpu, requested: 2000, used: 7000, capacity: 8000"),
    ({"cpu": 1000, "memory": 2 ** 30}, [{"memory": 16 * 2 ** 30}], "OutOfmemory",
     f"memory, requested: {2 ** 30}, used: {16 * 2 ** 30}, capacity: {16 * 2 ** 30}"),
    ({GPU: 1500}, [{GPU: 1000}], f"OutOf{GPU}", f"{GPU}, requested: 1500, used: 1000, capacity: 2000"),
    ({"cpu": 1}, [{}] * 110, "OutOfpods", "pods, requested: 1, used: 110, capacity: 110"),
    ({"cpu": 9000, "memory": 32 * 2 ** 30}, [], "OutOfcpu", "cpu, requested: 9000"),  # the first shortfall
    ({"example.com/fpga": 1}, [], None, None),  # not on the node at all: the kubelet drops it
    ({"cpu": 0, GPU: 0}, [{"cpu": 8000, GPU: 2000}], None, None),  # nothing asked, nothing checked
    ({"cpu": 1000, GPU: 1000}, [{"cpu": 7000, GPU: 1000}], None, None),  # exactly full
])
def test_the_admission_predicate(asked, running, reason, message):
    refusal = fits(asked, ALLOCATABLE, running)
    if reason is None:
        assert refusal is None
    else:
        assert refusal.reason == reason
        assert refusal.message.startswith("Pod was rejected: Node didn't have enough resource: ")
        assert message in refusal.message


def test_a_pods_requests_are_what_its_containers_ask():
    obj = pod_manifest(sim_pod("t", "p", cpu_milli=1500, memory_mib=512, gpu=GpuAsk(count=2)), T0)
    obj["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "3"}}}]
    # Σ containers 1500 m, the init container 3000 m: the larger counts
    assert pod_requests(obj) == {"cpu": 3000, "memory": 512 * 2 ** 20, GPU: 2000}
    assert allocatable_of(node_manifest(gpu_node())) == {"cpu": 8000, "memory": 16384 * 2 ** 20, "pods": 110, GPU: 4000}


# -- over the device plugin ------------------------------------------------------------------
async def test_a_two_gpu_pod_gets_the_two_gpus_its_decision_chose_from_allocate():
    async with Cluster([gpu_node()], pod("two", gpu=GpuAsk(count=2))) as c:
        assert c.allocatable("g1")[GPU] == "4000"  # 4 GPUs × 1000 units, listed by the plugin
        await c.submit("two")
        await c.decide("two", "g1", [(UUIDS[3], 1000), (UUIDS[1], 1000)])
        c.bind("two", "g1")
        assert (await c.settled("two"))["phase"] == "Running"
        (handed,) = c.sim.kubelets.handed["t/two"]
        assert handed.envs["NVIDIA_VISIBLE_DEVICES"] == f"{UUIDS[3]},{UUIDS[1]}"  # the decision's, in its order
        assert handed.cdi_devices == (f"nvidia.com/gpu={UUIDS[3]}", f"nvidia.com/gpu={UUIDS[1]}")
        assert len(handed.device_ids) == 2000 and handed.gpus == ((UUIDS[3], 1000), (UUIDS[1], 1000))
        assert [(g.gpu, g.milli) for g in c.sim.model.pods["t/two"].gpus] == [(UUIDS[3], 1000), (UUIDS[1], 1000)]
        assert c.sim.kubelets.devices.managers["g1"].counts(GPU) == (4000, 4000)
        # deleted: its 2000 units are free again
        c.sim.api.delete_pod("t", "two")
        assert len(c.sim.kubelets.devices.managers["g1"].free(GPU)) == 4000


async def test_two_half_gpu_pods_share_one_device_with_mps_limits():
    half = GpuAsk(count=1, milli=500)
    async with Cluster([gpu_node(gpus=2)], pod("a", gpu=half), pod("b", gpu=half)) as c:
        for name in ("a", "b"):
            await c.submit(name)
            await c.decide(name, "g1", [(UUIDS[1], 500)])
            c.bind(name, "g1")
            assert (await c.settled(name))["phase"] == "Running"
        for name in ("a", "b"):
            envs = c.envs(name)
            assert envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
            assert envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"  # 500 milli / 10
            assert envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M"  # 16384 MiB · 500 / 1000
            assert c.sim.kubelets.handed[f"t/{name}"][0].gpus == ((UUIDS[1], 500),)
        assert c.sim.model.gpu_free("g1") == {UUIDS[0]: 1000, UUIDS[1]: 0}


async def test_a_pod_bound_where_the_allocatable_has_no_room_fails_out_of_cpu():
    async with Cluster([gpu_node(gpus=0)], pod("big", cpu=6000), pod("more", cpu=3000)) as c:
        for name in ("big", "more"):
            await c.submit(name)
            c.bind(name, "g1")  # accepted by the API server: the kubelet is the one to refuse
        assert (await c.settled("big"))["phase"] == "Running"
        status = await c.settled("more")
        # 6000 running + 3000 > 8000
        assert (status["phase"], status["reason"]) == ("Failed", "OutOfcpu")
        assert status["message"] == ("Pod was rejected: Node didn't have enough resource: cpu, requested: 3000, "
                                     "used: 6000, capacity: 8000")
        (rejected,) = c.sim.kubelets.rejected
        assert (rejected.pod, rejected.reason) == ("t/more", "OutOfcpu")
        assert c.sim.model.pods["t/more"].phase == "failed" and c.sim.model.cgroups["g1"].pod_cpuset(
            c.sim.model.pods["t/more"].request.uid) is None
        # a larger allocatable in the node object (as the webhook would write it) admits the next one
        c.sim.api.update_node("g1", lambda obj: obj["status"]["allocatable"].update(cpu="12000m"))
        assert c.sim.model.allocatable["g1"].cpu_milli == 12000


async def test_a_pod_the_plugin_has_no_decision_for_fails_with_an_unexpected_admission_error():
    async with Cluster([gpu_node(gpus=1)], pod("lost", gpu=GpuAsk(count=1))) as c:
        c.sim.kubelets.devices.plugins["g1"].wait_s = 0.05  # no decision will come
        await c.submit("lost")
        c.bind("lost", "g1")
        status = await c.settled("lost")
        assert (status["phase"], status["reason"]) == ("Failed", "UnexpectedAdmissionError")
        assert status["message"].startswith("Pod was rejected: Allocate failed due to rpc error: code = "
                                            "FailedPrecondition desc = no placement decision for node g1")
        assert status["message"].endswith(", which is unexpected")
        assert c.sim.kubelets.devices.managers["g1"].held == {}  # nothing stays allocated


async def test_a_pod_running_before_the_start_holds_its_units_from_the_checkpoint():
    old_pod, new_pod = pod("old", gpu=GpuAsk(count=1, milli=600)), pod("new", gpu=GpuAsk(count=1, milli=500))
    async with Cluster([gpu_node(gpus=2)], old_pod, new_pod) as c:
        sim = c.sim
        old = sim.model.pods["t/old"].request
        sim.kubelets.adopt("t/old", "g1", pod_manifest(old, T0, node="g1", phase="Running"), ((UUIDS[0], 600),))
        manager = sim.kubelets.devices.managers["g1"]
        assert len(manager.free(GPU)) == 1400  # 2000 − 600, all 600 taken on the GPU the pod held
        assert manager.held[old.uid]["main"].response.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[0]
        await c.submit("new")
        await c.decide("new", "g1", [(UUIDS[1], 500)])
        c.bind("new", "g1")
        assert (await c.settled("new"))["phase"] == "Running" and c.envs("new")["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
        # the kubelet counts the old pod's ask with the new one's: 600 + 500 units
        assert sum(r.get(GPU, 0) for r in sim.kubelets.running["g1"].values()) == 1100


async def test_a_pod_adopted_before_the_kubelets_start_gets_its_units_when_they_do():
    c = Cluster([gpu_node(gpus=1)], pod("old", gpu=GpuAsk(count=1, milli=250)))
    old = c.sim.model.pods["t/old"].request
    c.sim.kubelets.adopt("t/old", "g1", pod_manifest(old, T0, node="g1", phase="Running"), ((UUIDS[0], 250),))
    async with c:
        assert len(c.sim.kubelets.devices.managers["g1"].free(GPU)) == 750


async def test_a_gpu_turning_unhealthy_is_withdrawn_from_the_node_allocatable():
    async with Cluster([gpu_node(gpus=2)]) as c:
        assert (c.sim.api.node("g1")["status"]["capacity"][GPU], c.allocatable("g1")[GPU]) == ("2000", "2000")
        c.sim.kubelets.devices.plugins["g1"].set_health(UUIDS[0], False)
        await wait_until(lambda: c.allocatable("g1")[GPU] == "1000", 10, "the unhealthy GPU withdrawn")
        assert c.sim.api.node("g1")["status"]["capacity"][GPU] == "2000"  # capacity counts every device
        c.sim.kubelets.devices.plugins["g1"].set_health(UUIDS[0], True)
        await wait_until(lambda: c.allocatable("g1")[GPU] == "2000", 10, "the GPU back")


async def test_a_plugin_that_goes_leaves_its_devices_unhealthy():
    async with Cluster([gpu_node(gpus=2)]) as c:
        await c.sim.kubelets.devices.plugins["g1"].stop()  # its ListAndWatch stream ends
        await wait_until(lambda: c.allocatable("g1")[GPU] == "0", 10, "the plugin's devices withdrawn")
        assert c.sim.kubelets.devices.managers["g1"].free(GPU) == []


async def test_each_kubelet_writes_its_node_status_when_the_node_object_differs_or_every_report_period():
    async with Cluster([gpu_node("a", gpus=0), gpu_node("b", gpus=0)]) as c:
        sim = c.sim
        writes: list[str] = []
        write = sim.api.write_node_status

        async def counted(name, status, **kw):
            writes.append(name)
            return await write(name, status, **kw)

        async def beat(t_s: float) -> list[str]:
            writes.clear()
            while sim.clock.t_s < t_s:  # ticks of 5 s
                sim.clock.advance()
                sim.kubelets.heartbeat()
                await sim.kubelets.idle.wait()
            return sorted(writes)
        sim.api.write_node_status = counted
        assert await beat(10.0) == []  # the node objects say what the kubelets would: nothing to write
        # a webhook's figure in a's allocatable: a's kubelet writes its own again (the webhook raises it again)
        sim.api.update_node("a", lambda obj: obj["status"]["allocatable"].update(cpu="12"))
        assert await beat(20.0) == ["a"] and c.allocatable("a")["cpu"] == "8000m"
        assert await beat(295.0) == []
        assert await beat(300.0) == ["b"]  # unchanged for 300 s (a wrote at 20 s): reported anyway


# -- never a tidal.dev annotation -------------------------------------------------------------
KUBELET_FILES = ["kubelet.py", "kubelet_admit.py", "model.py", "device_manager.py", "node_devices.py"]


def tidal_reads(source: str) -> list[str]:
    """What in `source` reads Tidal's words: a `tidal.dev/` string other than
    the device plugin's resource, an object's annotations, or the decision codec."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("tidal.dev/") \
                and node.value != GPU:
            found.append(node.value)
        elif isinstance(node, ast.Constant) and node.value == "annotations":
            found.append("annotations")
        elif isinstance(node, ast.ImportFrom) and node.module and "decision_codec" in node.module:
            found.append(node.module)
    return found


def test_the_checker_sees_an_annotation_read():
    bad = 'from tidal_schemas.decision_codec import read_decision\nx = pod["metadata"]["annotations"]\n' \
          'y = meta.get("tidal.dev/gpu-models")\n'
    assert tidal_reads(bad) == ["tidal_schemas.decision_codec", "annotations", "tidal.dev/gpu-models"]


@pytest.mark.parametrize("name", KUBELET_FILES)
def test_the_kubelet_stand_in_and_the_model_never_read_a_tidal_annotation(name):
    assert tidal_reads((ROOT / "services" / "tidal_simulator" / name).read_text()) == []
