"""Which placement decisions count: the rule every reader of the decision
log applies, so that two placement replicas can never double-book.

The `placement.decision` stream has one partition, so all readers see the
same order. A placement replica that becomes leader publishes a *fence*
(outcome "fence", its epoch and leader id) with epoch = highest seen + 1.
In log order:

- a fence is valid when its epoch is higher than the current valid fence's
  (of two replicas claiming the same epoch, the first in the log wins);
- a placed or pending decision counts only when it carries the current
  valid fence's (epoch, leader); a deposed leader's late decisions are
  ignored by everyone, and it learns from the log that it lost;
- before any fence, unfenced decisions (epoch 0, from a tool or a single
  scheduler that does not fence) count; after the first fence they do not.

A leader starts deciding only after reading its own fence back as valid, so
it has seen every decision that counts before its first one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .placement import PlacementDecision


@dataclass
class DecisionFence:
    """The current valid fence, advanced by reading the decision log in order."""

    epoch: int = 0
    leader: str = ""

    def admit(self, decision: PlacementDecision) -> bool:
        """Read one decision in log order; True when it counts."""
        if decision.outcome == "fence":
            if decision.epoch > self.epoch:
                self.epoch, self.leader = decision.epoch, decision.leader
                return True
            return False
        return (decision.epoch, decision.leader) == (self.epoch, self.leader)


def fence_decision(epoch: int, leader: str) -> PlacementDecision:
    """The fence a new leader publishes."""
    return PlacementDecision(decision_id=f"fence-{epoch}-{leader}", namespace="-", name="fence",
                             outcome="fence", epoch=epoch, leader=leader, reason=f"leader {leader} claims epoch {epoch}")
