"""The node agent: publishes this node's topology and usage, gives pods
their exclusive CPUs, and carries out freeze / thaw / set-cpuset actions on
the pod cgroups. One instance per node (a DaemonSet)."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tidal_bus import Delivery
from tidal_schemas import ActionResult, CpuAssignment, Envelope, NodeAction, PlacementDecision, PodLifecycle

from tidal_schemas.fence import DecisionFence

from tidal_runtime import Service, Subscription

from . import cgroups, checkpoint
from .cgroup_paths import detect_version
from .cpu_allocator import pick_per_numa
from .gpus import discover_gpus
from .inventory import build_node_topology
from .node_pods import NodePods, shown
from .sampling import build_metrics
from .settings import TopologySettings
from .sysfs import read_topology
from .usage import cpu_utilisation, pod_usage, read_meminfo, read_pod_counters, read_proc_stat

_TOPOLOGY_IDS = uuid.UUID("0c1f0f5e-2d8b-4a61-a7a2-0e4b7d0b3c11")
_AGENT_ACTIONS = {"freeze", "thaw", "set-cpuset"}


class TopologyService(Service):
    name = "topology"
    settings_class = TopologySettings
    produces = ("node.topology", "node.metrics")

    def __init__(self, settings: TopologySettings | None = None, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        s: TopologySettings = self.settings  # type: ignore[assignment]
        self.node = s.node_name
        machine = read_topology(s.sysfs_root, s.parse_override(s.numa_override) or None)
        found = discover_gpus(s.gpu_inventory_file)
        if found.error:
            raise ValueError(f"GPU inventory: {found.reason}")
        self.gpu_source = found.reason
        self.topology = build_node_topology(machine, self.node, reserved_cpus=s.reserved,
                                            exclusive_cpus=s.exclusive_cpus, gpus=found.gpus, pool=s.pool)
        root = Path(s.cgroup_root)
        version = detect_version(root) if s.cgroup_version == "auto" else s.cgroup_version
        self.cgroups = cgroups.CgroupFs(root=root, parent=s.cgroup_parent, version=version)
        self.pods = NodePods(self.node)
        self.fence = DecisionFence()
        self.memory_nodes = _memory_nodes(Path(s.sysfs_root))
        self.cpu_state = self._load_checkpoint()

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

    def subscriptions(self) -> list[Subscription]:
        group = f"topology-{self.node}"
        return [
            Subscription("placement.decision", self.on_decision, group=group),
            # Actions act on the machine: replaying them on restart would repeat effects.
            Subscription("node.action", self.on_action, group=group, replay_on_assign=False),
        ]

    def loops(self):
        return [self.follow_pods, self.sample_usage]

    async def on_start(self) -> None:
        self.log.info("node %s: %d cpus, %d NUMA nodes, GPUs: %s", self.node, len(self.topology.cpus),
                      len(self.topology.numa_nodes), self.gpu_source)
        # The same inventory always gets the same id, so restarts add no copies.
        digest = hashlib.sha256(encode_payload(self.topology)).hexdigest()
        await self.publish(self.topology, event_id=str(uuid.uuid5(_TOPOLOGY_IDS, f"{self.node}/{digest}")))

    # -- pods and exclusive CPUs ----------------------------------------------
    async def follow_pods(self) -> None:
        async def on_event(envelope: Envelope[Any]) -> None:
            pod = envelope.payload
            if not isinstance(pod, PodLifecycle) or not self._mine(envelope):
                return
            self.pods.apply(pod)
            if pod.phase == "deleted" and pod.node == self.node:
                await self._release(pod.event_key(), envelope)
            elif pod.phase == "running" and pod.node == self.node:
                await self._apply_cpuset(pod.event_key())

        async def done() -> None:
            self.log.info("pod table caught up: %d pods here", len(self.pods.here()))

        await self.bus.catch_up_then_follow("pod.lifecycle", on_event, done)

    def _mine(self, envelope: Envelope[Any]) -> bool:
        return envelope.cluster == self.settings.cluster

    async def on_decision(self, envelope: Envelope[PlacementDecision], delivery: Delivery) -> None:
        decision = envelope.payload
        if not self.fence.admit(decision):  # a deposed placement leader's decision: see tidal_schemas.fence
            return
        if decision.outcome != "placed" or decision.node != self.node or not decision.numa_cpus:
            return
        key = decision.event_key()
        if any(pod == key for pod, _ in self.cpu_state.assignments):
            return  # already given (a redelivery, or restored from the checkpoint)
        picked = pick_per_numa(self.topology.cpus, self.cpu_state.shared_pool, decision.numa_cpus)
        if picked.cpus is None:
            self.log.error("pod %s: cannot take %s exclusive CPUs here: %s", key, decision.numa_cpus, picked.reason)
            return
        change = checkpoint.assign(self.cpu_state, key, "", picked.cpus)
        if not change.ok:
            self.log.error("pod %s: assignment refused: %s", key, change.reason)
            return
        self.cpu_state = change.state
        checkpoint.save_state(self.cpu_state, self.settings.state_file)
        await self.publish(CpuAssignment(node=self.node, pod=key, cpuset=sorted(picked.cpus)),
                           cause=envelope, delivery=delivery)
        if not delivery.replaying:
            await self._apply_cpuset(key)

    async def _release(self, key: str, cause: Envelope[Any]) -> None:
        change = checkpoint.release(self.cpu_state, key)
        if not change.cpus:
            return
        self.cpu_state = change.state
        checkpoint.save_state(self.cpu_state, self.settings.state_file)
        await self.publish(CpuAssignment(node=self.node, pod=key, cpuset=sorted(change.cpus), released=True),
                           cause=cause)

    def _cpuset_of(self, key: str) -> list[int] | None:
        held = [cpus for (pod, _), cpus in self.cpu_state.assignments.items() if pod == key]
        return sorted(set().union(*held)) if held else None

    async def _apply_cpuset(self, key: str) -> None:
        (pod, refusal, why), cpus = self.pods.owned(key), self._cpuset_of(key)
        if pod is None or cpus is None:
            if refusal == "refused":
                self.log.warning("pod %s: cpuset not applied: %s", shown(key), why)
            return
        mems = sorted({c.numa for c in self.topology.cpus if c.cpu in cpus})
        outcome = await asyncio.to_thread(cgroups.set_pod_cpuset, self.cgroups, pod.uid, cpus, mems)
        if outcome.status not in ("done", "unknown-pod"):  # unknown: its cgroup is not there yet
            self.log.warning("pod %s: cpuset %s not applied: %s", key, cpus, outcome.reason)

    # -- actions --------------------------------------------------------------
    async def on_action(self, envelope: Envelope[NodeAction], delivery: Delivery) -> None:
        action = envelope.payload
        if action.node != self.node or action.kind not in _AGENT_ACTIONS:
            return
        status, reason = await self._execute(action)
        self.log.info("action %s %s on %s: %s %s", shown(action.action_id), action.kind, shown(action.pod), status,
                      reason)
        await self.publish(ActionResult(action_id=action.action_id, node=self.node, kind=action.kind,
                                        pod=action.pod, status=status, reason=reason),
                           cause=envelope, delivery=delivery)

    async def _execute(self, action: NodeAction) -> tuple[str, str]:
        if action.dry_run:
            return "skipped", "dry run"
        # Only pods placed on this node, with a uid of their own, are touched:
        # the action names a pod, never a path.
        pod, refusal, why = self.pods.owned(action.pod)
        if pod is None:
            return refusal or "refused", why
        if action.kind == "freeze" and pod.system_critical:
            return "refused", f"pod {action.pod} is system-critical: never frozen"
        if action.kind == "freeze":
            outcome = await asyncio.to_thread(cgroups.freeze_pod, self.cgroups, pod.uid)
        elif action.kind == "thaw":
            outcome = await asyncio.to_thread(cgroups.thaw_pod, self.cgroups, pod.uid)
        else:
            known = {c.cpu for c in self.topology.cpus}
            if not set(action.cpuset) <= known:
                unknown = sorted(set(action.cpuset) - known)
                return "refused", f"cpuset names CPUs this node does not have: {shown(unknown)}"
            # NUMA ids declared by an override need not be memory nodes of the machine:
            # pin memory only to nodes that exist, otherwise leave it where it is.
            mems = action.mems if action.mems and set(action.mems) <= self.memory_nodes else None
            outcome = await asyncio.to_thread(cgroups.set_pod_cpuset, self.cgroups, pod.uid, action.cpuset, mems)
        return outcome.status, outcome.reason

    def _actual_cpusets(self, by_uid: dict[str, PodLifecycle]) -> dict[str, list[int]]:
        """Each pod's cpuset as its cgroup has it (what the kernel enforces,
        including moves made by actions); the agent's own assignment where
        the cgroup cannot be read."""
        found = {pod: sorted(cpus) for (pod, _), cpus in self.cpu_state.assignments.items()}
        for uid, pod in by_uid.items():
            actual = cgroups.pod_cpuset(self.cgroups, uid)
            if actual:
                found[pod.event_key()] = actual
        return found

    # -- usage ----------------------------------------------------------------
    async def sample_usage(self) -> None:
        s: TopologySettings = self.settings  # type: ignore[assignment]
        stat, counters = await asyncio.to_thread(self._read_counters)
        while True:
            await asyncio.sleep(s.interval_s)
            stat_now, counters_now = await asyncio.to_thread(self._read_counters)
            metrics = await asyncio.to_thread(self._metrics, stat, stat_now, counters, counters_now)
            stat, counters = stat_now, counters_now
            await self.publish(metrics)

    def _read_counters(self):
        return (read_proc_stat(self.settings.procfs_root),
                read_pod_counters(self.cgroups.root, self.cgroups.parent, self.cgroups.version))

    def _metrics(self, stat, stat_now, counters, counters_now):
        memory = read_meminfo(self.settings.procfs_root)
        by_uid = self.pods.by_uid()
        return build_metrics(
            self.topology, at=datetime.now(timezone.utc), interval_s=self.settings.interval_s,
            cpu_util=cpu_utilisation(stat, stat_now), memory_used_mib=memory.used_mib,
            memory_total_mib=memory.total_mib, pod_samples=pod_usage(counters, counters_now),
            pods_by_uid=by_uid,
            cpusets=self._actual_cpusets(by_uid),
            shared_pool=sorted(self.cpu_state.shared_pool),
            frozen={uid: bool(cgroups.pod_frozen(self.cgroups, uid)) for uid in by_uid},
        )


def _memory_nodes(sysfs: Path) -> set[int]:
    """NUMA memory nodes the kernel has (node0 only on machines without NUMA)."""
    found = {int(p.name[4:]) for p in (sysfs / "devices/system/node").glob("node[0-9]*")}
    return found or {0}


def encode_payload(payload) -> bytes:
    return payload.model_dump_json().encode()
