"""One simulated kubelet's device manager, over the kubelet device plugin
API v1beta1 (`tidal_kubelet_api`), as the kubelet's `cm/devicemanager`:

- it serves `Registration` on `<plugin dir>/kubelet.sock`; a plugin that
  registers (version v1beta1) is dialled on its endpoint in that dir and
  its `ListAndWatch` followed: every list replaces the resource's devices,
  and `on_change(resource)` is called (the kubelet then writes its node
  status: capacity = every device, allocatable = the healthy ones). A
  stream that ends leaves the resource's devices unhealthy. A list is kept
  as it came (serialized, its counts apart) and read at an admission: a
  thousand nodes of 8 GPUs list 8 million unit devices;
- `allocate` picks a container's devices among the healthy ones no
  container holds — the plugin's `GetPreferredAllocation` when its options
  offer it (its ids that are free, the rest from the free ones in sorted
  order, as the kubelet fills up), else the free ones in sorted order —
  and calls `Allocate`; the response is what the container gets. Any
  failure is a `DeviceError` whose text is the kubelet's (a gRPC error as
  Go prints it), and nothing stays allocated;
- `release` gives back what a pod's containers hold (the pod is gone);
  `restore` records what a pod held before the kubelet started (its
  checkpoint).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


from tidal_kubelet_api import grpc, pb2, pb2_grpc, HEALTHY, KUBELET_SOCKET, UNHEALTHY, VERSION

LOG = logging.getLogger("tidal.simulator.devices")


class DeviceError(Exception):
    """A container's devices could not be allocated (the kubelet's message)."""


def rpc_error(exc: grpc.RpcError) -> str:
    """A gRPC error as the kubelet's Go client prints it."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    name = "".join(part.capitalize() for part in code.name.split("_"))
    return f"rpc error: code = {name} desc = {exc.details() if hasattr(exc, 'details') else exc}"


@dataclass
class Plugin:
    resource: str
    endpoint: str
    options: pb2.DevicePluginOptions
    channel: grpc.aio.Channel
    stub: pb2_grpc.DevicePluginStub
    watch: asyncio.Task | None = None

    def list_and_watch(self):
        """The plugin's device lists, each as its serialized bytes."""
        call = self.channel.unary_stream("/v1beta1.DevicePlugin/ListAndWatch",
                                         request_serializer=pb2.Empty.SerializeToString,
                                         response_deserializer=lambda data: data)
        return call(pb2.Empty())


@dataclass(frozen=True)
class Handed:
    """What one container got from a plugin: its device ids and the Allocate response."""

    resource: str
    device_ids: tuple[str, ...]
    response: pb2.ContainerAllocateResponse


class DeviceManager(pb2_grpc.RegistrationServicer):
    def __init__(self, node: str, plugin_dir: Path, on_change: Callable[[str], None] = lambda resource: None) -> None:
        self.node, self.plugin_dir, self.on_change = node, Path(plugin_dir), on_change
        self.plugins: dict[str, Plugin] = {}
        self.lists: dict[str, bytes] = {}  # resource -> its last ListAndWatchResponse, serialized
        self.count: dict[str, tuple[int, int]] = {}  # resource -> (devices, healthy ones)
        self.held: dict[str, dict[str, Handed]] = {}  # pod uid -> container -> what it holds
        self._server: grpc.aio.Server | None = None

    @property
    def socket(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET

    async def start(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        self._server = grpc.aio.server()
        pb2_grpc.add_RegistrationServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")
        await self._server.start()

    async def stop(self) -> None:
        for plugin in list(self.plugins.values()):
            await self._drop(plugin)
        self.plugins.clear()
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None

    # -- Registration -------------------------------------------------------------
    async def Register(self, request: pb2.RegisterRequest, context) -> pb2.Empty:  # noqa: N802 (the API's name)
        if request.version != VERSION:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Unsupported version {request.version!r}")
        if "/" not in request.resource_name:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"invalid name of device plugin socket: {request.resource_name}")
        old = self.plugins.pop(request.resource_name, None)
        if old is not None:
            await self._drop(old)
        channel = grpc.aio.insecure_channel(f"unix://{self.plugin_dir / request.endpoint}")
        plugin = Plugin(request.resource_name, request.endpoint, request.options, channel,
                        pb2_grpc.DevicePluginStub(channel))
        self.plugins[request.resource_name] = plugin
        plugin.watch = asyncio.get_running_loop().create_task(self._follow(plugin), name=f"ListAndWatch {self.node}")
        plugin.watch.add_done_callback(self._watch_ended)
        return pb2.Empty()

    async def _follow(self, plugin: Plugin) -> None:
        try:
            async for data in plugin.list_and_watch():
                devices = pb2.ListAndWatchResponse.FromString(data).devices
                self.lists[plugin.resource] = data
                self.count[plugin.resource] = (len(devices), sum(1 for d in devices if d.health == HEALTHY))
                self.on_change(plugin.resource)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                LOG.warning("%s: ListAndWatch of %s ended: %s", self.node, plugin.resource, rpc_error(exc))
        if self.plugins.get(plugin.resource) is plugin and plugin.resource in self.lists:  # the plugin went
            gone = pb2.ListAndWatchResponse.FromString(self.lists[plugin.resource])
            for device in gone.devices:
                device.health = UNHEALTHY
            self.lists[plugin.resource] = gone.SerializeToString()
            self.count[plugin.resource] = (len(gone.devices), 0)
            self.on_change(plugin.resource)

    @staticmethod
    def _watch_ended(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            LOG.error("ListAndWatch failed", exc_info=task.exception())

    async def _drop(self, plugin: Plugin) -> None:
        if plugin.watch is not None:
            plugin.watch.cancel()
            await asyncio.gather(plugin.watch, return_exceptions=True)
        await plugin.channel.close()

    # -- what the node status and admission read -------------------------------------
    def counts(self, resource: str) -> tuple[int, int]:
        """(capacity, allocatable) of `resource`: every device, the healthy ones."""
        return self.count.get(resource, (0, 0))

    def free(self, resource: str) -> list[str]:
        """Healthy devices of `resource` no container holds, in the plugin's order."""
        taken = {d for pod in self.held.values() for h in pod.values() if h.resource == resource for d in h.device_ids}
        listed = pb2.ListAndWatchResponse.FromString(self.lists.get(resource, b"")).devices
        return [d.ID for d in listed if d.health == HEALTHY and d.ID not in taken]

    async def allocate(self, pod_uid: str, container: str, resource: str, count: int) -> Handed:
        """`count` devices of `resource` for one container (see the module docstring)."""
        plugin = self.plugins.get(resource)
        if plugin is None:
            raise DeviceError(f"no device plugin registered for {resource}")
        free = self.free(resource)
        if len(free) < count:
            raise DeviceError(f"requested number of devices unavailable for {resource}. Requested: {count}, "
                              f"Available: {len(free)}")
        try:
            chosen = await self._choose(plugin, free, count)
            answer = await plugin.stub.Allocate(pb2.AllocateRequest(
                container_requests=[pb2.ContainerAllocateRequest(devices_ids=chosen)]))
        except grpc.aio.AioRpcError as exc:
            raise DeviceError(rpc_error(exc)) from None
        if len(answer.container_responses) != 1:
            raise DeviceError(f"plugin {resource} answered {len(answer.container_responses)} container responses "
                              "for 1 container")
        handed = Handed(resource, tuple(chosen), answer.container_responses[0])
        self.held.setdefault(pod_uid, {})[container] = handed
        return handed

    async def _choose(self, plugin: Plugin, free: list[str], count: int) -> list[str]:
        chosen: list[str] = []
        if plugin.options.get_preferred_allocation_available:
            answer = await plugin.stub.GetPreferredAllocation(pb2.PreferredAllocationRequest(container_requests=[
                pb2.ContainerPreferredAllocationRequest(available_deviceIDs=free, allocation_size=count)]))
            preferred = answer.container_responses[0].deviceIDs if answer.container_responses else []
            chosen = sorted(set(preferred) & set(free))[:count]
        rest = sorted(set(free) - set(chosen))
        return chosen + rest[:count - len(chosen)]

    def restore(self, pod_uid: str, container: str, handed: Handed) -> None:
        """What a pod's container held before this kubelet started (its checkpoint)."""
        self.held.setdefault(pod_uid, {})[container] = handed

    def release(self, pod_uid: str) -> bool:
        """The pod is gone: its containers' devices are free again."""
        return self.held.pop(pod_uid, None) is not None
