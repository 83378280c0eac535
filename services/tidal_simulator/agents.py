"""The node agents of the simulated machines: one node agent core
(`tidal_topology.agent_core.AgentCore`, the agent's own code) per simulated
node, on that machine's pod cgroups kept in memory (`cgroup_tree.py`), with
no checkpoint file.

Each core reads what a node agent reads — pod lifecycle events (published
by the bridge), placement decisions, bind results, node actions — so its
books follow the agent's own lifecycle: CPUs claimed at the decision,
confirmed when bound, released on a failed bind, after the bind timeout or
when the pod is deleted; and it pins, freezes, thaws and moves pods by
writing to its tree. What it publishes (`cpu.assignment`, `action.result`)
goes out through the simulator.

Delivery is by node, as the bus would partition it: an event goes to the
agent of the node it names and to the agents that read of the pod before
(a claim elsewhere to give back); placement's fences go to every agent.

On a GPU node the agent's device plugin (started by the kubelets'
`node_devices.NodeDevices`, given to its core by `attach`) is fed by the
agent's own core: decisions, pod events, bind results, the bind timeout.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from tidal_clock import Clock
from tidal_schemas import ActionResult, BindResult, NodeAction, NodeTopology, PlacementDecision, PodLifecycle
from tidal_topology import books
from tidal_topology import AgentCore
from tidal_topology import AUDIT_KINDS as KINDS
from tidal_topology import Publish
from tidal_topology import TopologySettings

from .cgroup_tree import MemoryCgroups

BIND_TIMEOUT_S = TopologySettings.model_fields["bind_timeout_s"].default
LOG = logging.getLogger("tidal.simulator.agents")
# A thousand agents' notes on every claim, and the node audits' warnings about
# what is only in flight (a bind result read before the pod's event), would
# drown the run's log: their errors (refusals) still show, and the audit at the
# end of the run (`audit`) goes into the report.
LOG.setLevel(logging.ERROR)


class NodeAgents:
    """Every simulated node's agent (see the module docstring)."""

    def __init__(self, topologies: Iterable[NodeTopology], trees: Mapping[str, MemoryCgroups],
                 publish: Publish, sample_clock: Clock | None = None) -> None:
        self.cores: dict[str, AgentCore] = {}
        self.audit_peak: dict[str, int] = dict.fromkeys(KINDS, 0)  # the most any node audit found, by kind
        for topology in topologies:
            core = AgentCore(topology=topology, fs=trees[topology.node], state_file=None, publish=publish,
                             memory_nodes=frozenset(n.id for n in topology.numa_nodes),
                             exclusive_cpus=topology.exclusive_cpus, sample_clock=sample_clock,
                             on_audit=self._audited, log=LOG)
            core.cpus.live = True  # a machine that starts empty: no pod table to catch up with first
            self.cores[topology.node] = core
        self._read: dict[str, set[str]] = {}  # pod key -> nodes whose agent read of it
        self._claiming: set[str] = set()  # nodes whose books may hold a claim awaiting its bind
        self.plugins: dict[str, Any] = {}  # node -> its device plugin

    def _audited(self, found: dict[str, int]) -> None:
        for kind, n in found.items():
            self.audit_peak[kind] = max(self.audit_peak.get(kind, 0), n)

    def _to(self, key: str, node: str | None) -> list[AgentCore]:
        nodes = set(self._read.get(key, ()))
        if node in self.cores:
            nodes.add(node)
            self._read.setdefault(key, set()).add(node)
        return [self.cores[n] for n in sorted(nodes)]

    # -- what the agents read ------------------------------------------------------
    async def on_pod(self, pod: PodLifecycle, cause: Any = None) -> None:
        key = pod.event_key()
        for core in self._to(key, pod.node):
            await core.on_pod(pod, cause=cause)
        if pod.phase == "deleted":
            self._read.pop(key, None)

    async def on_decision(self, decision: PlacementDecision, cause: Any = None) -> None:
        if decision.outcome == "fence":
            targets = list(self.cores.values())
        else:
            targets = self._to(decision.event_key(), decision.node if decision.outcome == "placed" else None)
        for core in targets:
            await core.on_decision(decision, cause=cause)
            self._claiming.add(core.node)

    async def on_bind_result(self, result: BindResult, cause: Any = None) -> None:
        for core in self._to(result.event_key(), result.node):
            await core.on_bind_result(result, cause=cause)

    def attach(self, node: str, plugin: Any) -> None:
        """`node`'s agent serves `plugin` (its GPU device plugin) and feeds it."""
        self.plugins[node] = plugin
        self.cores[node].devices = plugin

    async def on_action(self, action: NodeAction, cause: Any = None) -> ActionResult | None:
        core = self.cores.get(action.node)
        return None if core is None else await core.on_action(action, cause=cause)

    async def expire(self, timeout_s: float = BIND_TIMEOUT_S) -> None:
        """What every agent does each second: give back claims not bound in time."""
        for node, plugin in self.plugins.items():
            if node not in self._claiming:  # the core tells its plugin itself
                plugin.expire(timeout_s)
        for node in sorted(self._claiming):
            core = self.cores[node]
            await core.expire(timeout_s)
            if not any(c.stage == "decided" for c in core.cpus.state.claims.values()):
                self._claiming.discard(node)

    async def rescan(self, node: str) -> None:
        """What the agent does when its periodic scan finds a new pod cgroup: pin it."""
        await self.cores[node].cpus.rescan()

    async def pin(self, node: str, key: str, uid: str, numa: int) -> str:
        """Pin pod `key` to NUMA node `numa` as a move does (a pod pinned
        before the simulation starts); '' or why not."""
        core = self.cores[node]
        step = await core.cpus.change(lambda state: books.move(state, key, uid, numa, 0, core.topology.cpus))
        return step.refused

    # -- what the simulator reads ------------------------------------------------
    async def audit(self) -> dict[str, int]:
        """Every node's audit now (the agent's own, `tidal_topology.audit`):
        violations by kind, summed over the nodes."""
        found = dict.fromkeys(KINDS, 0)
        for core in self.cores.values():
            async with core.cpus.lock:
                for v in await core.cpus.audit():
                    found[v.kind] = found.get(v.kind, 0) + 1
        return found

    async def summary(self) -> dict[str, Any]:
        """For the report: what the node audits find at the end of the run
        (by kind; every one must be 0), the most any found on the way
        (events in flight between streams count there), and the cgroup
        writes the agents made."""
        writes: Counter = Counter()
        for core in self.cores.values():
            writes.update(core.fs.counts)
        return {"audit_violations": await self.audit(), "audit_violations_peak": dict(self.audit_peak),
                "cgroup_writes": dict(sorted(writes.items()))}

    def knows(self, node: str, key: str) -> bool:
        """Whether `node`'s agent has read of pod `key` bound or running there."""
        pod = self.cores[node].pods.get(key)
        return pod is not None and pod.node == node

    def shared_pool(self, node: str) -> list[int]:
        return sorted(self.cores[node].cpus.state.shared_pool)

    def held(self, node: str, key: str) -> tuple[int, ...]:
        """The exclusive CPUs `node`'s agent gives pod `key`."""
        return tuple(sorted(self.cores[node].cpus.state.held_by(key)))
