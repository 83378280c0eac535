"""The node agent: publishes this node's topology and usage, is the one
authority over the node's CPU sets (exclusive CPUs tied to their bind, the
shared pool, NUMA pinning, moves — see `books.py` and `authority.py`), and
carries out freeze / thaw / set-cpuset actions on the pod cgroups. One
instance per node (a DaemonSet). What it does with each event is the
agent's core (`agent_core.py`); this is its wiring to the bus and the
machine."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from pathlib import Path
from typing import Any

from prometheus_client import Gauge

from tidal_bus import Bus, Delivery
from tidal_bus.auth import BusAuth
from tidal_bus.node_login import NodeLogin
from tidal_bus.tracing import processing
from tidal_clock import Clock, now_utc, wall_clock
from tidal_schemas import BindResult, Envelope, NodeAction, PlacementDecisions, PodLifecycle

from tidal_runtime import Service, Subscription

from . import cgroups, checkpoint
from .agent_core import AgentCore
from .cgroup_paths import detect_version
from .cgroup_watch import CgroupWatch, follow_cgroups
from .gpu_devices import device_plugin_for, serve_gpu_devices
from .gpus import discover_gpus
from .inventory import build_node_topology
from .kubelet import check_kubelet
from .sampling import build_metrics
from .settings import TopologySettings
from .sysfs import memory_nodes, read_topology
from .usage import cpu_utilisation, pod_usage, read_meminfo, read_pod_counters, read_proc_stat

_TOPOLOGY_IDS = uuid.UUID("0c1f0f5e-2d8b-4a61-a7a2-0e4b7d0b3c11")


class TopologyService(Service):
    name = "topology"
    settings_class = TopologySettings
    produces = ("node.topology", "node.metrics")

    def __init__(self, settings: TopologySettings | None = None, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        s: TopologySettings = self.settings  # type: ignore[assignment]
        self.node = s.node_name
        self.clock: Clock = wall_clock  # a sample's time, bind timeouts, when the node is audited again
        machine = read_topology(s.sysfs_root, s.parse_override(s.numa_override) or None)
        found = discover_gpus(s.gpu_inventory_file)
        if found.error:
            raise ValueError(f"GPU inventory: {found.reason}")
        self.gpu_source, self.gpus_from = found.reason, found.source
        self.topology = build_node_topology(machine, self.node, reserved_cpus=s.reserved,
                                            exclusive_cpus=s.exclusive_cpus, gpus=found.gpus, pool=s.pool)
        may_start, why = check_kubelet(s.kubelet_cpu_state, s.exclusive_cpus)
        if not may_start:
            raise ValueError(why)
        self.kubelet_note = why
        root = Path(s.cgroup_root)
        version = detect_version(root) if s.cgroup_version == "auto" else s.cgroup_version
        self.cgroups = cgroups.CgroupFs(root=root, parent=s.cgroup_parent, version=version)
        self.audit_gauge = Gauge("tidal_node_audit_violations", "Violations the last node audit found, by kind "
                                 "(see tidal_topology.audit): each must be 0", ["service", "kind"],
                                 registry=self.metrics.registry)
        # the core and the plugin read the time through self.clock: a clock set later is theirs too
        self.gpu_plugin = device_plugin_for(s, found, log=self.log, clock=lambda: self.clock())
        self.core = AgentCore(
            topology=self.topology, fs=self.cgroups, state=self._load_checkpoint(),
            memory_nodes=frozenset(memory_nodes(Path(s.sysfs_root))), exclusive_cpus=s.exclusive_cpus,
            state_file=s.state_file, publish=self.publish, clock=lambda: self.clock(),
            on_audit=lambda found: [self.audit_gauge.labels(self.name, k).set(n) for k, n in found.items()],
            log=self.log, devices=self.gpu_plugin)
        self.pods, self.cpus = self.core.pods, self.core.cpus
        self.login: NodeLogin | None = None  # credentials from the issuer, when s.credentials_url is set

    @property
    def cpu_state(self) -> checkpoint.CpuState:
        return self.cpus.state

    def _load_checkpoint(self) -> checkpoint.CpuState:
        loaded = checkpoint.load_state(self.settings.state_file)
        fresh = checkpoint.new_state([c.cpu for c in self.topology.cpus], self.settings.reserved)
        if loaded.status == "ok" and loaded.state.cpus == fresh.cpus and loaded.state.reserved == fresh.reserved:
            return loaded.state
        if loaded.status == "corrupt":
            self.log.error("CPU checkpoint %s is corrupt (%s): rebuilding from the decision stream",
                           self.settings.state_file, loaded.reason)
        elif loaded.status == "ok":
            self.log.warning("CPU checkpoint is for another CPU layout: rebuilding from the decision stream")
        return fresh

    @property
    def group(self) -> str:
        """This node's agent's own consumer group."""
        return f"topology-{self.node}"

    def subscriptions(self) -> list[Subscription]:
        return [
            Subscription("placement.decision", self.on_decision, group=self.group),
            # Actions act on the machine: replaying them on restart would repeat effects.
            Subscription("node.action", self.on_action, group=self.group, replay_on_assign=False),
        ]

    def loops(self):
        loops = [self.follow_pods, self.follow_binds, self.expire_binds, self.watch_cgroups, self.sample_usage]
        loops += [self.renew_credentials] if self.login is not None else []
        return loops + ([self.serve_gpu_devices] if self.gpu_plugin is not None else [])

    async def run(self) -> None:
        s: TopologySettings = self.settings  # type: ignore[assignment]
        if s.credentials_url and self._owns_bus:
            if not s.bus_url.startswith(("nats://", "tls://")):
                raise ValueError("TIDAL_TOPOLOGY_CREDENTIALS_URL issues NATS credentials: the bus is not NATS")
            self.login = NodeLogin(s.credentials_url, s.credentials_token_file, s.credentials_file,
                                   ca_file=s.credentials_ca_file, clock=lambda: self.clock())
            await self.login.obtain_retrying()
            self.bus = Bus.from_url(s.bus_url, namespace=s.namespace, cluster=s.cluster, source=self.name,
                                    auth=BusAuth(creds_file=s.credentials_file), **s.bus_options())
        await super().run()

    async def renew_credentials(self) -> None:
        """Renew the bus credentials before they expire, and log in with them."""
        assert self.login is not None
        await self.login.keep_renewed(self.bus.backend.reconnect)  # type: ignore[attr-defined]

    async def on_start(self) -> None:
        self.log.info("node %s: %d cpus, %d NUMA nodes, GPUs: %s", self.node, len(self.topology.cpus),
                      len(self.topology.numa_nodes), self.gpu_source)
        if self.kubelet_note:
            self.log.warning("%s", self.kubelet_note)
        # The same inventory always gets the same id, so restarts add no copies.
        digest = hashlib.sha256(encode_payload(self.topology)).hexdigest()
        await self.publish(self.topology, event_id=str(uuid.uuid5(_TOPOLOGY_IDS, f"{self.node}/{digest}")))

    # -- pods and their CPUs (the books: books.py) -----------------------------
    async def follow_pods(self) -> None:
        async def on_event(envelope: Envelope[Any]) -> None:
            if isinstance(envelope.payload, PodLifecycle) and self._mine(envelope):
                await self.core.on_pod(envelope.payload, cause=envelope)

        async def done() -> None:
            self.log.info("pod table caught up: %d pods here", len(self.pods.here()))
            async with self.cpus.lock:
                self.cpus.live = True
                await self.cpus.apply()

        # pending pods are on no node yet: the broker leaves them out (StreamSpec.side_lane)
        await self.bus.catch_up_then_follow("pod.lifecycle", on_event, done, main_lane_only=True)

    def _mine(self, envelope: Envelope[Any]) -> bool:
        return envelope.cluster == self.settings.cluster

    async def on_decision(self, envelope: Envelope[PlacementDecisions], delivery: Delivery) -> None:
        for decision in envelope.payload.items:
            # every decision goes through the fence, but only this node's enter its pod's trace: one
            # agent, not each of the cluster's, answers for a pod (and pays for reading its trace)
            here = decision.node == self.node
            with processing(self.name, self.group, envelope, decision) if here else contextlib.nullcontext():
                await self.core.on_decision(decision, cause=envelope, delivery=delivery)

    async def follow_binds(self) -> None:
        async def on_event(envelope: Envelope[Any]) -> None:
            if isinstance(envelope.payload, BindResult) and self._mine(envelope):
                await self.core.on_bind_result(envelope.payload, cause=envelope)

        async def done() -> None:
            return None

        await self.bus.catch_up_then_follow("bind.result", on_event, done)

    async def expire_binds(self) -> None:
        timeout = self.settings.bind_timeout_s
        while True:
            await asyncio.sleep(min(1.0, timeout / 4))
            await self.core.expire(timeout)

    async def watch_cgroups(self) -> None:
        """New pod and container cgroups are pinned the moment they appear
        (`cgroup_watch`: inotify, with a scan every `rescan_s` as the safety
        net); the node is audited every `audit_interval_s` besides after
        every change."""
        last_audit = self.clock()

        async def rescan() -> None:
            nonlocal last_audit
            if not self.cpus.live:
                return
            await self.cpus.rescan()
            if self.clock() - last_audit >= self.settings.audit_interval_s:
                last_audit = self.clock()
                async with self.cpus.lock:
                    await self.cpus.audit()

        async with CgroupWatch(self.cgroups.pods_root()) as watch:
            await follow_cgroups(rescan, watch, self.settings.rescan_s)

    async def serve_gpu_devices(self) -> None:
        """The GPU device plugin, served to the kubelet while the agent runs (`gpu_devices.py`)."""
        s: TopologySettings = self.settings  # type: ignore[assignment]
        await serve_gpu_devices(self.gpu_plugin, self.gpus_from, s.gpu_inventory_file, s.gpu_health_s, self.log)

    # -- actions --------------------------------------------------------------
    async def on_action(self, envelope: Envelope[NodeAction], delivery: Delivery) -> None:
        await self.core.on_action(envelope.payload, cause=envelope, delivery=delivery)

    async def _execute(self, action: NodeAction) -> tuple[str, str]:
        return await self.core.execute(action)

    # -- usage ----------------------------------------------------------------
    async def sample_usage(self) -> None:
        s: TopologySettings = self.settings  # type: ignore[assignment]
        stat, counters = await asyncio.to_thread(self._read_counters)
        while True:
            await asyncio.sleep(s.interval_s)
            stat_now, counters_now = await asyncio.to_thread(self._read_counters)
            # The pod table is read here, on the event loop that applies pod events to it: read in
            # the worker thread, a pod event applied meanwhile stopped the agent ("dictionary changed
            # size during iteration", with 150,000 pods in the cluster)
            metrics = await asyncio.to_thread(self._metrics, stat, stat_now, counters, counters_now,
                                              self.pods.by_uid())
            stat, counters = stat_now, counters_now
            await self.publish(metrics)

    def _read_counters(self):
        return (read_proc_stat(self.settings.procfs_root),
                read_pod_counters(self.cgroups.root, self.cgroups.parent, self.cgroups.version))

    def _metrics(self, stat, stat_now, counters, counters_now, by_uid: dict[str, PodLifecycle]):
        memory = read_meminfo(self.settings.procfs_root)
        return build_metrics(
            self.topology, at=now_utc(self.clock), interval_s=self.settings.interval_s,
            cpu_util=cpu_utilisation(stat, stat_now), memory_used_mib=memory.used_mib,
            memory_total_mib=memory.total_mib, pod_samples=pod_usage(counters, counters_now),
            pods_by_uid=by_uid,
            cpusets=self.core.actual_cpusets(by_uid),
            shared_pool=sorted(self.cpu_state.shared_pool),  # kubelet's default set: reserved CPUs included
            frozen={uid: bool(self.cgroups.pod_frozen(uid)) for uid in by_uid},
        )


def encode_payload(payload) -> bytes:
    return payload.model_dump_json().encode()
