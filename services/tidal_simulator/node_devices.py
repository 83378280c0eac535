"""The GPUs of the simulated machines as the kubelet meets them: on every
GPU node the node agent's own device plugin (`tidal_topology.GpuDevicePlugin`)
and that node's kubelet device manager (`device_manager.py`), talking gRPC
over unix sockets in a directory of the run (one sub directory per node,
removed at the end).

Each plugin is handed to its node's agent (`on_plugin`, `agents.NodeAgents.attach`),
whose core feeds it what the agent reads, on the agent's clock; the device
manager is all the kubelet stand-in asks.
`shares` turns what a container was handed (`Allocate`'s envs) into GPU
shares: the `NVIDIA_VISIBLE_DEVICES` GPUs, each whole, or — with MPS limits
(`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`) on one GPU — a share of it: as many
milli as units the kubelet allocated (the percentage is whole, milli / 10).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from tidal_clock import elapsed
from tidal_kubelet_api import pb2
from tidal_schemas import NodeTopology

from .device_manager import DeviceManager, Handed

GPU_RESOURCE = "tidal.dev/gpu-milli"
VISIBLE = "NVIDIA_VISIBLE_DEVICES"
MPS_THREADS = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
WATCH_S = 10.0  # how often a plugin looks for a restarted kubelet: these never restart, and 1213 plugins
# looking twice a second took a tenth of the simulator's time
MAX_SOCKET_PATH = 100  # a unix socket path has 108 bytes, the plugin's own socket name included


def shares(envs: Mapping[str, str], units: int) -> tuple[tuple[str, int], ...]:
    """(GPU id, milli) of each GPU a container sees, given `units` devices
    (see the module docstring)."""
    visible = [g.strip() for g in envs.get(VISIBLE, "").split(",") if g.strip() and g.strip() not in ("none", "void")]
    if envs.get(MPS_THREADS) and len(visible) == 1:
        return ((visible[0], units if 0 < units < 1000 else max(1, min(1000, int(envs[MPS_THREADS]) * 10))),)
    return tuple((gpu, 1000) for gpu in visible)


class NodeDevices:
    def __init__(self, topologies: Iterable[NodeTopology], on_change: Callable[[str, str], None],
                 on_plugin: Callable[[str, object], None]) -> None:
        self.topologies = [t for t in topologies if t.gpus]
        self.on_change, self.on_plugin = on_change, on_plugin
        self.managers: dict[str, DeviceManager] = {}
        self.plugins: dict[str, object] = {}
        self.root: Path | None = None

    async def start(self, timeout_s: float = 30.0) -> None:
        """Every GPU node's device manager and plugin, and wait until each
        plugin registered and listed its devices."""
        if not self.topologies:
            return
        from tidal_topology import GpuDevicePlugin

        self.root = Path(tempfile.mkdtemp(prefix="tidal-dp-"))
        for i, topology in enumerate(self.topologies):
            node = topology.node
            folder = self.root / (node if len(str(self.root / node)) + 20 < MAX_SOCKET_PATH else f"n{i}")
            manager = DeviceManager(node, folder, lambda resource, node=node: self.on_change(node, resource))
            await manager.start()
            self.managers[node] = manager
            plugin = GpuDevicePlugin(node, list(topology.gpus), plugin_dir=folder, resource=GPU_RESOURCE,
                                     watch_s=WATCH_S)
            self.on_plugin(node, plugin)
            await plugin.start()
            self.plugins[node] = plugin
        deadline = elapsed() + timeout_s
        while missing := [n for n, m in self.managers.items() if not m.counts(GPU_RESOURCE)[0]]:
            if elapsed() > deadline:
                raise RuntimeError(f"the device plugins of {len(missing)} node(s) did not register and list their "
                                   f"devices in {timeout_s:.0f} s, e.g. {missing[0]}")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        """The managers first (their ListAndWatch calls end, so no plugin waits
        out its grace for them), then the plugins; all at once."""
        await asyncio.gather(*(manager.stop() for manager in self.managers.values()))
        await asyncio.gather(*(plugin.stop() for plugin in self.plugins.values()))
        self.plugins.clear()
        self.managers.clear()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def restore(self, node: str, pod_uid: str, gpus: Iterable[tuple[str, int]], decision_id: str = "") -> None:
        """A pod that held `gpus` before the run started: its node's kubelet
        knows its devices from its checkpoint (the first free units of each
        GPU, and the response its container was given then)."""
        from tidal_topology import gpu_units

        manager, gpus = self.managers.get(node), list(gpus)
        if manager is None or not gpus:
            return
        free, ids = manager.free(GPU_RESOURCE), []
        for gpu, milli in gpus:
            prefix = gpu_units.unit_prefix(gpu)
            ids += [d for d in free if gpu_units.split_unit(d)[0] == prefix][:milli]
        topology = next(t for t in self.topologies if t.node == node)
        envs, cdi = gpu_units.container_response(decision_id, gpus, {g.id: g for g in topology.gpus})
        response = pb2.ContainerAllocateResponse(envs=envs, cdi_devices=[pb2.CDIDevice(name=n) for n in cdi])
        manager.restore(pod_uid, "main", Handed(GPU_RESOURCE, tuple(ids), response))
