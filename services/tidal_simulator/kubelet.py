"""The simulated kubelets, KWOK-style: they follow the API server and play
every node's kubelet over the model, reading only what a kubelet reads —
the pods bound to their node and their node object — never a `tidal.dev/`
annotation, never Tidal's events.

- The API server accepts a binding (no resource check there, as
  kube-apiserver; only the injected bind failures are refused, `bind_fault`).
- The node's kubelet sees the bound pod (in the order of the API's writes)
  and admits it (`kubelet_admit.fits`): its requests against the node
  object's `status.allocatable` less the pods it runs; then, for each
  container asking a device plugin's resource, its devices from the
  plugin (`device_manager.DeviceManager.allocate`). A pod refused is set
  `Failed` with kube's reason and message (`OutOfcpu`, …,
  `UnexpectedAdmissionError`). An admitted pod starts in the model with the
  GPUs its containers were handed, the node's agent finds its cgroup and
  pins it (its scan), and it is marked Running.
- A deleted pod leaves its node: its cgroup and devices with it.
- A node's taints and allocatable, as the node object says, are the node's.
- Each kubelet writes its node's status through the API server (so the
  admission webhooks see it): at start and when its devices change; and
  every `node_status_s` of simulated time (`heartbeat`) it writes it again
  when the node object's capacity or allocatable differ from its own (a
  webhook's figure does) or `node_status_report_s` passed, as a kubelet with node leases.
- A pod whose run time is over is deleted (`finish`).

`observe` runs inside the API server's write (no awaits); the rest (gRPC,
other writes) is queued for `run`, which does it in order.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

from tidal_schemas import Resources

from .device_manager import DeviceError
from .kube_api.protocol import stamp
from .kubelet_admit import Refusal, allocatable_of, amount, fits, pod_requests, unexpected
from .kubelet_records import Handed, Rejected
from .node_devices import NodeDevices, shares
from .pods import node_status, reported

LOG = logging.getLogger("tidal.simulator.kubelet")


class Kubelets:
    def __init__(self, sim, node_status_s: float = 10.0, node_status_report_s: float = 300.0) -> None:
        self.sim = sim
        self.queue: asyncio.Queue = asyncio.Queue()
        self.idle = asyncio.Event()
        self.idle.set()
        self.devices = NodeDevices((n.topology for n in sim.model.nodes.values()), self._devices_changed,
                                   sim.agents.attach)
        self.node_status_s, self.node_status_report_s = node_status_s, node_status_report_s
        self.running: dict[str, dict[str, dict[str, int]]] = {n: {} for n in sim.model.nodes}  # node -> uid -> asks
        self.taken: dict[str, str] = {}  # pod uid -> node whose kubelet took it up
        self.handed: dict[str, list[Handed]] = {}  # pod key -> its containers' devices
        self.admitted_bare: dict[str, tuple[str, str]] = {}  # pod key -> (uid, node): admitted with no devices
        self.rejected: list[Rejected] = []
        self.started = asyncio.Event()
        self._restores: list[tuple] = []  # the devices of pods adopted before `start`
        self.status_at: dict[str, float] = {}  # node -> when its kubelet last looked at its status
        self.written_at: dict[str, float] = {}  # node -> when it last wrote it

    async def start(self) -> None:
        """The device plugins and managers (and the devices of the pods
        adopted), then every node's first status write; admission waits for it."""
        if self.started.is_set():
            return
        await self.devices.start()
        for restore in self._restores:
            self.devices.restore(*restore)
        for node in self.sim.model.nodes:
            await self.write_status(node)
        self.started.set()

    async def stop(self) -> None:
        await self.devices.stop()

    # -- in the API server's hands ------------------------------------------------
    def bind_fault(self, pod: dict[str, Any], node: str) -> str | None:
        """A binding refused at the API server, at the injected rate (seeded)."""
        sim, meta = self.sim, pod["metadata"]
        if f"{meta['namespace']}/{meta['name']}" not in sim.model.pods:
            return None
        rate = sim.settings.bind_failure_rate
        if rate and sim.bind_rng.random() < rate:
            return f"injected bind failure (rate {rate:g})"
        return None

    def adopt(self, key: str, node: str, pod: dict[str, Any], gpus: tuple[tuple[str, int], ...],
              decision_id: str = "") -> None:
        """A pod running on `node` before the start: its kubelet runs it (and
        its devices, from its checkpoint)."""
        uid = pod["metadata"]["uid"]
        self.taken[uid] = node
        self.running[node][uid] = pod_requests(pod)
        if self.started.is_set():
            self.devices.restore(node, uid, gpus, decision_id)
        else:
            self._restores.append((node, uid, gpus, decision_id))

    def observe(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        """A write in the API server (see the module docstring)."""
        sim, meta = self.sim, obj["metadata"]
        if resource == "nodes" and kind != "DELETED":
            self._node(meta["name"], obj)
            return
        if resource != "pods":
            return
        key, uid = f"{meta['namespace']}/{meta['name']}", meta.get("uid", "")
        if kind == "DELETED":
            self._deleted(key, uid, meta)
            return
        node = (obj.get("spec") or {}).get("nodeName")
        phase = (obj.get("status") or {}).get("phase")
        if node in sim.model.nodes and uid not in self.taken and key in sim.model.pods \
                and phase not in ("Succeeded", "Failed"):
            self.taken[uid] = node
            self._later("admit", key, node, uid)

    def _node(self, node: str, obj: dict[str, Any]) -> None:
        sim = self.sim
        keys = sorted({t.get("key", "") for t in (obj.get("spec") or {}).get("taints") or []})
        added, removed = sim.model.set_taints(node, keys)
        for kind_, keys_ in (("taint", added), ("untaint", removed)):
            for taint in sorted(keys_):
                sim.record.happen(sim.clock.t_s, kind_, node, None, taint, sim.record.asked_by(kind_, node, None))
        figures = allocatable_of(obj)
        allocatable = Resources(cpu_milli=figures.get("cpu", 0), memory_mib=figures.get("memory", 0) // 2 ** 20)
        if node in sim.model.allocatable and allocatable != sim.model.allocatable[node]:
            sim.model.set_allocatable(node, allocatable)
            sim.record.allocatable_seen(node, allocatable)
            if sim.ledger is not None:
                sim.ledger.refresh(node)

    def _deleted(self, key: str, uid: str, meta: dict[str, Any]) -> None:
        sim = self.sim
        node = self.taken.pop(uid, None)
        if node is not None:
            self.running[node].pop(uid, None)
            if self.devices.managers.get(node) is not None:
                self.devices.managers[node].release(uid)
        pod = sim.model.pods.get(key)
        if pod is None or pod.phase in ("waiting", "deleted") or pod.request.uid != uid:
            return
        node, was_running = pod.node, pod.phase == "running"
        # The eviction endpoint records the eviction, then deletes: this call is that deletion.
        evicted = (meta["namespace"], meta["name"]) in sim.api.evictions[-1:]
        sim.model.delete(key)
        if evicted:
            sim.record.happen(sim.clock.t_s, "evict", node, key, "", sim.record.asked_by("evict", node, key))
        if was_running:
            sim.record.happen(sim.clock.t_s, "deleted", node, key, "evicted" if evicted else "deleted")
            sim.changed(node)

    def finish(self, keys: list[str]) -> None:
        """Pods whose run time is over: their containers exit, the pods are deleted."""
        for key in keys:
            namespace, name = key.split("/", 1)
            if self.sim.api.pod(namespace, name) is not None:
                self.sim.api.delete_pod(namespace, name)

    def heartbeat(self) -> None:
        """Each node's periodic look at its status, when due (the simulator's clock)."""
        t_s = self.sim.clock.t_s
        for node in self.sim.model.nodes:
            if t_s - self.status_at.get(node, t_s) >= self.node_status_s:
                self.status_at[node] = t_s
                self._later("sync", node, node, "")

    def _devices_changed(self, node: str, resource: str) -> None:
        self._later("status", node, node, "")

    # -- on the event loop ---------------------------------------------------------
    def _later(self, *work: Any) -> None:
        self.idle.clear()
        self.queue.put_nowait(work)

    async def run(self) -> None:
        """Carry out what `observe` queued, in order."""
        while True:
            what, key, node, uid = await self.queue.get()
            try:
                if what == "admit":
                    await self._admit(key, node, uid)
                elif what in ("status", "sync"):
                    await self.write_status(node, if_changed=what == "sync")
            except Exception:  # a bug in one pod's handling must not stop every kubelet
                LOG.exception("kubelet of %s: %s %s failed", node, what, key)
            if self.queue.empty():
                self.idle.set()

    async def write_status(self, node: str, if_changed: bool = False) -> None:
        """The node's capacity and allocatable as its kubelet reports them:
        the machine's own figures and its device plugins' resources (with
        `if_changed`, only when the node object says otherwise or `node_status_report_s` passed)."""
        manager, t = self.devices.managers.get(node), self.sim.clock.t_s
        counts = {r: manager.counts(r) for r in manager.count} if manager is not None else {}
        status = node_status(self.sim.model.nodes[node].topology, counts)
        due = t - self.written_at.get(node, t) >= self.node_status_report_s
        if if_changed and not due and reported(status, self.sim.api.node(node)):
            return
        self.status_at[node] = self.written_at[node] = t
        await self.sim.api.write_node_status(node, status, user=f"system:node:{node}")

    async def _admit(self, key: str, node: str, uid: str) -> None:
        sim = self.sim
        await self.started.wait()
        namespace, name = key.split("/", 1)
        pod = sim.api.pod(namespace, name)
        if pod is None or pod["metadata"].get("uid") != uid:
            return  # deleted before its kubelet got to it
        asked = pod_requests(pod)
        refusal = fits(asked, allocatable_of(sim.api.node(node) or {}), self.running[node].values())
        handed: list[Handed] = []
        if refusal is None:
            handed, refusal = await self._devices(key, uid, node, pod)
        if refusal is not None:
            self._reject(key, uid, node, refusal)
            return
        self.running[node][uid] = asked
        if handed:
            self.handed[key] = handed
        else:
            self.admitted_bare[key] = (uid, node)
        sim.model.start(key, node, [g for h in handed for g in h.gpus], sim.clock.now(), sim.clock.t_s)
        sim.record.happen(sim.clock.t_s, "placed", node, key)
        sim.changed(node)
        await sim.agents.rescan(node)
        self._mark_running(namespace, name, uid)
        sim.settle(key, "running")

    async def _devices(self, key: str, uid: str, node: str, pod: dict[str, Any]) -> tuple[list[Handed], Refusal | None]:
        """Every container's devices from the plugins of this node's device manager."""
        manager = self.devices.managers.get(node)
        if manager is None:
            return [], None
        spec, handed = pod.get("spec") or {}, []
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            limits = (container.get("resources") or {}).get("limits") or {}
            for resource in sorted(set(limits) & set(manager.plugins)):
                count = amount(resource, limits[resource])
                if count <= 0:
                    continue
                try:
                    got = await manager.allocate(uid, container.get("name", ""), resource, count)
                except DeviceError as exc:
                    manager.release(uid)
                    return [], unexpected(str(exc))
                r = got.response
                handed.append(Handed(key, uid, node, container.get("name", ""), resource, got.device_ids,
                                     dict(r.envs), tuple(c.name for c in r.cdi_devices),
                                     tuple(d.host_path for d in r.devices), shares(r.envs, len(got.device_ids))))
        return handed, None

    def _reject(self, key: str, uid: str, node: str, refusal: Refusal) -> None:
        sim = self.sim
        self.taken.pop(uid, None)
        self.rejected.append(Rejected(key, uid, node, refusal.reason, refusal.message, sim.clock.t_s))
        sim.model.fail(key)
        sim.record.happen(sim.clock.t_s, "refused", node, key, f"{refusal.reason}: {refusal.message}"[:200])
        namespace, name = key.split("/", 1)

        def failed(obj: dict[str, Any]) -> None:  # as the kubelet's rejectPod
            obj.setdefault("status", {}).update(phase="Failed", reason=refusal.reason, message=refusal.message)
        if sim.api.pod(namespace, name) is not None:
            sim.api.update_pod(namespace, name, failed)
        sim.settle(key, "failed")

    def _mark_running(self, namespace: str, name: str, uid: str) -> None:
        pod = self.sim.api.pod(namespace, name)
        if pod is None or pod["metadata"].get("uid") != uid:
            return  # deleted before its kubelet got to it

        def running(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            now = stamp(self.sim.clock.now())
            status.update(phase="Running", startTime=now)
            status["conditions"] = [c for c in copy.deepcopy(status.get("conditions") or [])
                                    if c.get("type") not in ("Ready", "ContainersReady")]
            status["conditions"] += [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]
        self.sim.api.update_pod(namespace, name, running)

