"""The node agent's GPU device plugin: the kubelet device plugin API v1beta1
over gRPC on unix sockets in the kubelet's plugin directory. The rule is
pure: the units and the response in `gpu_units`, matching a call to its
pod's decision in `gpu_ledger`; this is its wiring to gRPC and the socket
directory.

One instance per node; several can run in one process (the simulator runs
one per simulated node, each with its own plugin directory)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


from tidal_clock import Clock, wall_clock
from tidal_kubelet_api import grpc, pb2, pb2_grpc, HEALTHY, KUBELET_SOCKET, UNHEALTHY, VERSION
from tidal_schemas import BindResult, Gpu, PlacementDecision, PodLifecycle

from . import gpu_ledger
from .gpu_ledger import Handed, Outcome
from .gpu_units import healthy_gpus, unit_ids

RESOURCE = "tidal.dev/gpu-milli"
SOCKET_NAME = "tidal-gpu.sock"
RETRY_FIRST_S, RETRY_MAX_S = 0.1, 5.0  # Register retried with waits doubling up to the cap
REGISTER_TIMEOUT_S = 5.0
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with its terminating NUL


def _identity(path: Path) -> tuple[int, int, int] | None:
    """What tells one kubelet.sock from the next one created at the same path."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


@functools.lru_cache(maxsize=1024)
def _units_wire(gpu_id: str, healthy: bool, numa: int | None) -> bytes:
    """One GPU's 1000 units as a serialized `ListAndWatchResponse`. Building
    the messages is nearly all of a device list's cost (80 ms for 8 GPUs,
    a simulator runs a plugin per node), and serialized messages concatenate
    into one whose repeated fields hold all their entries, so each GPU's are
    built once, for every plugin of the process."""
    health = HEALTHY if healthy else UNHEALTHY
    topology = pb2.TopologyInfo(nodes=[pb2.NUMANode(ID=numa)]) if numa is not None else None
    return pb2.ListAndWatchResponse(devices=[pb2.Device(ID=unit, health=health, topology=topology)
                                             for unit in unit_ids(gpu_id)]).SerializeToString()


class GpuDevicePlugin:
    """Serves `resource` for the GPUs of `node` on `plugin_dir/socket_name`
    and keeps it registered with the kubelet on `plugin_dir/kubelet.sock`.

    Fed by the node agent: `decided` (each decision read), `released` (a
    claim gone), `pod_seen` / `bind_result` (pod and bind events), `expire`
    (the bind timeout), and `set_health`. `allocations` is what Allocate
    handed out, by pod key. `wait_s` bounds how long a call waits for a
    decision that has not reached the agent yet: the kubelet sees the bound
    pod from the API server while the agent reads the decision from the
    bus, and on a busy node the bus can be seconds behind; a refusal fails
    the pod, so the bound is generous, but the kubelet admits one pod at a
    time and a pod no decision will ever come for (another scheduler's)
    holds the others back while it waits. `watch_s` is how often the socket directory is looked at
    for a restarted kubelet."""

    def __init__(self, node: str, gpus: Sequence[Gpu], *, plugin_dir: Path, resource: str = RESOURCE,
                 socket_name: str | None = None, log: logging.Logger | None = None, wait_s: float = 10.0,
                 watch_s: float = 0.5, clock: Clock = wall_clock) -> None:
        self.node, self.resource, self.wait_s, self.watch_s, self.clock = node, resource, wait_s, watch_s, clock
        self.gpus: dict[str, Gpu] = {g.id: g for g in gpus}
        self.health: dict[str, bool] = {g.id: g.healthy for g in gpus}
        self.plugin_dir = Path(plugin_dir)
        self.socket_name = socket_name or SOCKET_NAME
        self.log = log or logging.getLogger("tidal.topology.device_plugin")
        self.ledger = gpu_ledger.Ledger()
        self.registrations = 0  # Register calls the kubelet accepted
        self.refusals: list[str] = []  # the reasons of refused Allocate calls, newest last (the last 100)
        self._healthy = healthy_gpus(list(self.gpus.values()), self.health)
        self._devices = self._device_list()
        self._arrival = asyncio.Event()  # replaced each time a decision arrives: waiters hold the old one
        self._changed = asyncio.Event()  # replaced each time a device's health changes
        self._server: grpc.aio.Server | None = None
        self._task: asyncio.Task | None = None
        for path in (self.socket_path, self.kubelet_socket):
            if len(os.fsencode(path)) > MAX_SOCKET_PATH:
                raise ValueError(f"socket path {path} is longer than a unix socket address takes "
                                 f"({MAX_SOCKET_PATH} bytes)")

    @property
    def socket_path(self) -> Path:
        return self.plugin_dir / self.socket_name

    @property
    def kubelet_socket(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET

    @property
    def allocations(self) -> Mapping[str, Handed]:
        return self.ledger.handed

    # -- lifecycle ------------------------------------------------------------
    async def start(self) -> None:
        """Serve, then register in an owned task that retries until the
        kubelet is there and registers again whenever it restarts."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        await self._serve()
        self._task = asyncio.create_task(self._keep_registered(), name=f"device-plugin:{self.node}")
        self._task.add_done_callback(self._surface)

    async def stop(self) -> None:
        """Cancel and await the registration task, stop serving, remove the socket."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._stop_server()

    def _surface(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.log.error("device plugin of %s stopped registering: %r", self.node, task.exception())

    async def _serve(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()  # left by an earlier run: binding would fail
        server = grpc.aio.server()
        pb2_grpc.add_DevicePluginServicer_to_server(_Servicer(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server

    async def _stop_server(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=0.2)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def _keep_registered(self) -> None:
        # Polled, not watched with inotify: a stat every watch_s costs nothing and needs no extra library.
        registered_with, wait = None, RETRY_FIRST_S
        while True:
            if not self.socket_path.exists():  # a restarting kubelet removes every socket in the directory
                self.log.warning("device plugin socket %s is gone: serving again", self.socket_path)
                await self._stop_server()
                await self._serve()
                registered_with = None
            kubelet = _identity(self.kubelet_socket)
            if kubelet is not None and kubelet != registered_with:
                try:
                    await self._register()
                except grpc.aio.AioRpcError as exc:
                    self.log.info("kubelet at %s did not take the registration (%s): again in %.1fs",
                                  self.kubelet_socket, exc.code().name, wait)
                    await asyncio.sleep(wait)
                    wait = min(2 * wait, RETRY_MAX_S)
                    continue
                registered_with, wait = kubelet, RETRY_FIRST_S
            await asyncio.sleep(self.watch_s)

    async def _register(self) -> None:
        request = pb2.RegisterRequest(version=VERSION, endpoint=self.socket_name, resource_name=self.resource,
                                      options=self.options())
        async with grpc.aio.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            await pb2_grpc.RegistrationStub(channel).Register(request, timeout=REGISTER_TIMEOUT_S)
        self.registrations += 1
        self.log.info("registered %s (%d GPU devices) with the kubelet at %s", self.resource, len(self.gpus),
                      self.kubelet_socket)

    @staticmethod
    def options() -> pb2.DevicePluginOptions:
        return pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    # -- what the agent feeds it ----------------------------------------------
    def decided(self, decision: PlacementDecision, *, at: float | None = None) -> None:
        """A placement decision read; `at` its time (default: now)."""
        before = self.ledger
        self.ledger = gpu_ledger.on_decision(before, decision, self.node, self.clock() if at is None else at)
        if self.ledger.seq != before.seq:
            self._arrival.set()
            self._arrival = asyncio.Event()

    def released(self, pod_key: str, uid: str = "") -> None:
        """The pod's claim is gone (failed bind, bind timeout, deleted)."""
        self.ledger = gpu_ledger.release(self.ledger, pod_key, uid)

    def pod_seen(self, pod: PodLifecycle) -> None:
        self.ledger = gpu_ledger.on_pod(self.ledger, pod, self.node)

    def bind_result(self, result: BindResult) -> None:
        self.ledger = gpu_ledger.on_bind_result(self.ledger, result, self.node)

    def expire(self, timeout_s: float, now: float | None = None) -> None:
        self.ledger = gpu_ledger.expire(self.ledger, self.clock() if now is None else now, timeout_s)

    def set_health(self, gpu_id: str, healthy: bool) -> None:
        """A GPU's health; a change is sent at once on every open ListAndWatch stream."""
        if gpu_id not in self.gpus:
            self.log.warning("health of GPU %s, which node %s does not have: ignored", gpu_id, self.node)
            return
        if self.health[gpu_id] == healthy:
            return
        self.health[gpu_id] = healthy
        self._healthy = healthy_gpus(list(self.gpus.values()), self.health)
        self._devices = self._device_list()
        self.log.warning("GPU %s on %s is now %s", gpu_id, self.node, HEALTHY if healthy else UNHEALTHY)
        self._changed.set()
        self._changed = asyncio.Event()

    def _device_list(self) -> pb2.ListAndWatchResponse:
        return pb2.ListAndWatchResponse.FromString(b"".join(
            _units_wire(gpu.id, gpu.id in self._healthy, gpu.numa) for gpu in self.gpus.values()))

    async def _awaiting(self, attempt: Callable[[gpu_ledger.Ledger], Outcome]) -> Outcome:
        """`attempt` on the ledger, again as decisions arrive, until it finds a
        decision or `wait_s` has passed; the ledger it leaves is kept."""
        deadline = asyncio.get_running_loop().time() + self.wait_s
        while True:
            arrival = self._arrival
            outcome = attempt(self.ledger)
            self.ledger = outcome.ledger
            left = deadline - asyncio.get_running_loop().time()
            if outcome.found or left <= 0:
                return outcome
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(arrival.wait(), left)


class _Servicer(pb2_grpc.DevicePluginServicer):
    def __init__(self, plugin: GpuDevicePlugin) -> None:
        self.plugin = plugin

    async def GetDevicePluginOptions(self, request, context):
        return self.plugin.options()

    async def ListAndWatch(self, request, context):
        while True:
            changed = self.plugin._changed
            yield self.plugin._devices
            await changed.wait()

    async def GetPreferredAllocation(self, request, context):
        plugin, answers = self.plugin, []
        for ask in request.container_requests:
            outcome = await plugin._awaiting(lambda ledger: gpu_ledger.prefer(
                ledger, ask.allocation_size, list(ask.available_deviceIDs), list(ask.must_include_deviceIDs),
                plugin.gpus, plugin._healthy, plugin.node))
            if outcome.refusal:  # no preference: Allocate refuses the container with the reason
                plugin.log.warning("no preferred GPU units for %d: %s", ask.allocation_size, outcome.refusal)
            answers.append(pb2.ContainerPreferredAllocationResponse(deviceIDs=list(outcome.units)))
        return pb2.PreferredAllocationResponse(container_responses=answers)

    async def Allocate(self, request, context):
        plugin, answers = self.plugin, []
        for ask in request.container_requests:
            outcome = await plugin._awaiting(lambda ledger: gpu_ledger.allocate(
                ledger, list(ask.devices_ids), plugin.gpus, plugin._healthy, plugin.node))
            if outcome.handed is None:
                plugin.refusals = [*plugin.refusals[-99:], outcome.refusal]
                plugin.log.error("Allocate of %d GPU units refused: %s", len(ask.devices_ids), outcome.refusal)
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, outcome.refusal)
            handed = outcome.handed
            plugin.log.info("%s: GPUs %s by decision %s", handed.pod, ",".join(handed.gpus), handed.decision_id)
            answers.append(pb2.ContainerAllocateResponse(
                envs=dict(handed.envs), cdi_devices=[pb2.CDIDevice(name=name) for name in handed.cdi_devices]))
        return pb2.AllocateResponse(container_responses=answers)

    async def PreStartContainer(self, request, context):
        return pb2.PreStartContainerResponse()
