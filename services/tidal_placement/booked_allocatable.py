"""The CPU and memory allocatable placement books a node against, from the
three figures it may know of it (docs/last-mile.md):

- own: the node agent's (`node.topology`), capacity less what it reserves;
- oversold: oversell's (`node.allocatable`), which may exceed own;
- status: the Node object's `status.allocatable` (`node.status`, from the
  bridge), what the kubelet admits pods against: oversold only once the
  admission webhook wrote oversell's figure there.

    status known:     min(oversold, status) per resource, status alone when
                      oversell said nothing; 0 when the Node object is gone
    status unknown:   oversold, else own (a cluster without the bridge)

So a node whose status does not carry the oversold figure (the webhook
down) is not oversold in placement's books either, and a lowered oversold
figure is booked at once, before the kubelet's next status write. Each
figure is kept by node name, whatever order the streams are read in, and
what is booked is the rule over the figures known when any of them changes.
"""

from __future__ import annotations

from tidal_schemas import NodeAllocatables, NodeStatus, Resources

from .cluster_state import ClusterState


def booked(own: Resources, oversold: Resources | None, status: Resources | None) -> Resources:
    """The rule of the module docstring (CPU and memory; GPUs are counted by device)."""
    if status is None:
        chosen = oversold or own
        return Resources(cpu_milli=chosen.cpu_milli, memory_mib=chosen.memory_mib)
    if oversold is None:
        return Resources(cpu_milli=status.cpu_milli, memory_mib=status.memory_mib)
    return Resources(cpu_milli=min(oversold.cpu_milli, status.cpu_milli),
                     memory_mib=min(oversold.memory_mib, status.memory_mib))


NO_OBJECT = Resources()  # the status of a node whose Node object is gone: nothing is admitted there


class BookedAllocatable:
    """The oversold and status figures of one cluster's nodes, and what the
    state books from them (the rule above)."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.oversold: dict[str, Resources] = {}
        self.status: dict[str, Resources] = {}

    def apply(self, p: NodeAllocatables | NodeStatus) -> bool:
        """Take oversell's figures or a node's status; whether some known
        node now books more than before (waiting pods may fit)."""
        if isinstance(p, NodeStatus):
            self.status[p.node] = NO_OBJECT if p.deleted else p.allocatable
            return self._rebook(p.node)
        grown = False
        for figures in p.items:
            self.oversold[figures.node] = figures.allocatable
            grown |= self._rebook(figures.node)
        return grown

    def topology(self, node: str) -> None:
        """The node's inventory was (re)read, and with it its own figure booked: book the rule's."""
        self._rebook(node)

    def _rebook(self, node: str) -> bool:
        before, own = self.state.allocatable(node), self.state.own_allocatable(node)
        if before is None or own is None:
            return False  # not known yet: booked when its topology arrives
        after = booked(own, self.oversold.get(node), self.status.get(node))
        self.state.set_allocatable(node, after)
        return after.cpu_milli > before.cpu_milli or after.memory_mib > before.memory_mib
