"""Which clusters this replica decides for (no I/O; see tidal_schemas.fence).

The replica that owns the single partition of `tenant.config` in the leader
group wants to lead. It then claims each cluster by writing a fence (the
next epoch, itself as leader) into the decision log, and decides for that
cluster only once its own fence reads back as the valid one. Right after an
election two replicas may both think they lead; one that lost a fence claims
again only once `settle_s` has passed, longer than a membership hand-over.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from tidal_schemas import PlacementDecision
from tidal_schemas.fence import DecisionFence

log = logging.getLogger("tidal.placement")


class Leadership:
    def __init__(self, settle_s: float) -> None:
        self.settle_s = settle_s
        self.wants_lead = False
        self.lead_since = 0.0
        self.active: set[str] = set()  # clusters where our fence is the valid one
        self.claimed: dict[str, int] = {}  # cluster -> epoch we claimed
        self.last_claim: dict[str, float] = {}

    @property
    def claiming(self) -> bool:
        """Elected but leading no cluster yet: a claim may soon be due."""
        return self.wants_lead and not self.active

    def assigned(self, gained: bool, lost: bool, now: float) -> None:
        """The leader partition was handed to us (`gained`) or taken away."""
        if lost:
            self.wants_lead = False
            self.active.clear()
            log.info("placement: standing down")
        if gained:
            self.wants_lead = True
            self.lead_since = now
            log.info("placement: elected; fencing the decision log")

    def claims(self, clusters: Iterable[str], fences: Mapping[str, DecisionFence], now: float) -> list[tuple[str, int]]:
        """The (cluster, epoch) fences to write now."""
        if not self.wants_lead:
            return []
        due = []
        for cluster in sorted(set(clusters)):
            fence = fences.get(cluster)
            settled = fence is None or not fence.leader or now - self.lead_since >= self.settle_s
            if cluster not in self.active and cluster not in self.claimed and settled \
                    and now - self.last_claim.get(cluster, 0.0) >= self.settle_s:
                self.last_claim[cluster] = now
                epoch = (fence.epoch if fence is not None else 0) + 1
                self.claimed[cluster] = epoch
                due.append((cluster, epoch))
        return due

    def fence_read(self, cluster: str, fence: PlacementDecision, admitted: bool, me: str) -> None:
        """A fence read back from the decision log (in log order)."""
        if admitted and fence.leader == me and self.wants_lead:
            self.active.add(cluster)
            log.info("placement: leading cluster %s at epoch %d", cluster, fence.epoch)
        elif admitted:
            self.active.discard(cluster)
            self.claimed.pop(cluster, None)
