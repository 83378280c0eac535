"""Which nodes of a cluster are taken out for stale metrics, as samples
come in (the rule is `staleness.stale_nodes`): the part of `ClusterCache`
that follows each node's newest sample."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from .cluster_state import ClusterState
from .staleness import stale_nodes, stale_reason, too_old

log = logging.getLogger("tidal.placement")


class NodeFreshness:
    """Mixed into `ClusterCache`, whose fields these are."""

    name: str
    state: ClusterState
    stale_after_s: float
    last_sample: dict[str, datetime]  # node -> time of its newest sample
    stale: set[str]  # nodes taken out for stale metrics
    room_changed: bool

    def sampled(self, node: str, at: datetime, now: float) -> bool:
        """Note a node's sample time; True when the node was stale and its
        sample is fresh at `now`: it takes pods again at once. Only that node
        is looked at. Others going stale are found by the periodic
        `check_stale`, a pass over every node: too much for every sample
        (5,000 nodes sampled every 10 s are 500 samples a second)."""
        if node not in self.last_sample or at > self.last_sample[node]:
            self.last_sample[node] = at
        if node not in self.stale or too_old(self.last_sample[node], datetime.fromtimestamp(now, timezone.utc),
                                             self.stale_after_s):
            return False
        self.stale.discard(node)
        self.state.set_blocked(node, stale_reason(self.stale_after_s), blocked=False)
        log.info("node %s/%s: sampled again; it takes new pods", self.name, node)
        self.room_changed = True
        return True

    def check_stale(self, now: float) -> tuple[list[str], list[str]]:
        """Take out the nodes gone stale and put back those no longer stale
        (the rule is `staleness.stale_nodes`); (newly stale, back) nodes."""
        after = self.stale_after_s
        stale = set(stale_nodes(self.last_sample, datetime.fromtimestamp(now, timezone.utc), after))
        before, reason = self.stale, stale_reason(after)
        for node in stale:  # again each time: a node may have been unknown to the cache before
            self.state.set_blocked(node, reason)
        for node in sorted(stale - before):
            log.warning("node %s/%s: %s; it takes no new pods until it sends one", self.name, node, reason)
        for node in sorted(before - stale):
            self.state.set_blocked(node, reason, blocked=False)
            log.info("node %s/%s: sampled again; it takes new pods", self.name, node)
        if before - stale:
            self.room_changed = True
        self.stale = stale
        return sorted(stale - before), sorted(before - stale)
