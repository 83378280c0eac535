"""The node agents of the simulated machines: the seam where each
simulated node's agent plugs in.

A `NodeAgent` is what the cluster model asks of a node's agent: give a pod
exclusive CPUs per NUMA node as decided (or say why not), take them back,
and name the shared pool. `BookAgent`, the one plugged in today, keeps the
books with the node agent's own code — `tidal_topology.checkpoint.CpuState`
(assign / release / free CPUs / shared pool), `tidal_topology.cpu_allocator`
(kubelet-exact CPU choice), `tidal_topology.books.move` (a move to another
NUMA node) and `tidal_topology.cpuset_plan.pinning_of` (the cpuset a pod
should run on) — over no machine: its "cgroups" are the model's fields
(cpuset, frozen).

What the agent's `tidal_topology.authority.CpuAuthority` would add, plugged
here per node through `make_agent` with a cgroup tree of its own: the books'
lifecycle (claims at the decision, released on a failed bind or after the
bind timeout, adopted from bound pods — `books.on_decision`, `on_pod`,
`on_bind_result`, `expire`), the cgroup writes and the node audit; freeze
and thaw by the agent's cgroup code. Today a pod is booked when its kubelet
admits the binding and released when it is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from tidal_schemas import NodeTopology
from tidal_topology import books, checkpoint
from tidal_topology.cpu_allocator import pick_cpus, pick_per_numa
from tidal_topology.cpuset_plan import pinning_of


class NodeAgent(Protocol):
    def assign(self, pod: str, numa_cpus: Mapping[int, int]) -> tuple[tuple[int, ...], str]:
        """Exclusive CPUs for `pod`, so many per NUMA node; ((), why) when not possible."""

    def assign_count(self, pod: str, count: int) -> tuple[tuple[int, ...], str]:
        """`count` exclusive CPUs wherever the agent packs them (a pod running before the start)."""

    def release(self, pod: str) -> tuple[int, ...]:
        """The CPUs `pod` held, now back in the shared pool."""

    def shared_pool(self) -> list[int]:
        """CPUs no pod holds exclusively: where every other pod runs."""

    def move(self, pod: str, uid: str, target: int, count: int) -> tuple[bool, str]:
        """Move `pod` to NUMA node `target` (`count`: the exclusive CPUs the
        requester believes it holds); (done, why)."""

    def cpuset(self, pod: str) -> list[int]:
        """The CPUs `pod` should run on, by the books."""


class BookAgent:
    """A node agent's CPU books, by the agent's own functions (see the module docstring)."""

    def __init__(self, topology: NodeTopology) -> None:
        self.cpus = topology.cpus
        self.numa_of = {c.cpu: c.numa for c in topology.cpus}
        self.state = checkpoint.new_state([c.cpu for c in topology.cpus], topology.reserved_cpus)

    def _take(self, pod: str, picked) -> tuple[tuple[int, ...], str]:
        if picked.cpus is None:
            return (), picked.reason
        change = checkpoint.assign(self.state, pod, "", picked.cpus)
        if not change.ok:
            return (), change.reason
        self.state = change.state
        return tuple(sorted(change.cpus)), ""

    def assign(self, pod: str, numa_cpus: Mapping[int, int]) -> tuple[tuple[int, ...], str]:
        return self._take(pod, pick_per_numa(self.cpus, self.state.free, numa_cpus))

    def assign_count(self, pod: str, count: int) -> tuple[tuple[int, ...], str]:
        return self._take(pod, pick_cpus(self.cpus, self.state.free, count))

    def release(self, pod: str) -> tuple[int, ...]:
        change = checkpoint.release(self.state, pod)
        self.state = change.state
        return tuple(sorted(change.cpus))

    def shared_pool(self) -> list[int]:
        return sorted(self.state.shared_pool)

    def move(self, pod: str, uid: str, target: int, count: int) -> tuple[bool, str]:
        step = books.move(self.state, pod, uid, target, count, self.cpus)
        if step.refused:
            return False, step.refused
        self.state = step.state
        return True, step.note or "already there"

    def cpuset(self, pod: str) -> list[int]:
        return list(pinning_of(self.state, pod, self.numa_of, frozenset()).cpus)


def make_agent(topology: NodeTopology) -> NodeAgent:
    """The agent of one simulated node."""
    return BookAgent(topology)
