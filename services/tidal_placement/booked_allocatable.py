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

from tidal_schemas import NodeAllocatables, NodeStatus

from .cluster_state import ClusterState

Figures = tuple[int, int]  # (cpu_milli, memory_mib): plain ints, read for every node of every oversell sample
NO_OBJECT: Figures = (0, 0)  # the status of a node whose Node object is gone: nothing is admitted there


def booked(own: Figures, oversold: Figures | None, status: Figures | None) -> Figures:
    """The rule of the module docstring, per resource (GPUs are counted by device)."""
    if status is None:
        return oversold or own
    if oversold is None:
        return status
    return min(oversold[0], status[0]), min(oversold[1], status[1])


class BookedAllocatable:
    """The oversold and status figures of one cluster's nodes, and what the
    state books from them (the rule above)."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.oversold: dict[str, Figures] = {}
        self.status: dict[str, Figures] = {}

    def apply(self, p: NodeAllocatables | NodeStatus) -> bool:
        """Take oversell's figures or a node's status; whether some known
        node now books more than before (waiting pods may fit)."""
        if isinstance(p, NodeStatus):
            self.status[p.node] = NO_OBJECT if p.deleted else (p.allocatable.cpu_milli, p.allocatable.memory_mib)
            return self._rebook(p.node)
        grown = False
        for figures in p.items:
            self.oversold[figures.node] = (figures.allocatable.cpu_milli, figures.allocatable.memory_mib)
            grown |= self._rebook(figures.node)
        return grown

    def topology(self, node: str) -> None:
        """The node's inventory was (re)read, and with it its own figure booked: book the rule's."""
        self._rebook(node)

    def _rebook(self, node: str) -> bool:
        known = self.state.figures(node)
        if known is None:
            return False  # not known yet: booked when its topology arrives
        before, own = known
        after = booked(own, self.oversold.get(node), self.status.get(node))
        if after != before:
            self.state.book(node, *after)
        return after[0] > before[0] or after[1] > before[1]
