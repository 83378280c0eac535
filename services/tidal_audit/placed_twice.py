"""No pod placed twice under the same fence (§F 1, `tidal_schemas.fence`):
once a decision that counts places a pod, no other decision of the same
fence places it again until that placement ended — its bind failed, or the
pod was deleted. A redelivered decision (same id) is the same placement."""

from __future__ import annotations

from typing import Any

from tidal_schemas import BindResult, Envelope, PlacementDecision, PlacementDecisions, PodLifecycle
from tidal_schemas.fence import DecisionFence

from .violation import Violation, cite

NAME = "placed-twice"


class PlacedTwice:
    def __init__(self) -> None:
        self.fence = DecisionFence()
        self.live: dict[str, tuple[PlacementDecision, Envelope[Any]]] = {}

    def feed(self, envelope: Envelope[Any]) -> list[Violation]:
        p = envelope.payload
        if isinstance(p, PlacementDecisions):
            return [found for d in p.items for found in self._decision(d, envelope)]
        if isinstance(p, BindResult) and not p.ok:
            held = self.live.get(p.event_key())
            if held is not None and held[0].decision_id == p.decision_id:
                del self.live[p.event_key()]
        elif isinstance(p, PodLifecycle) and p.phase == "deleted":
            self.live.pop(p.event_key(), None)
        return []

    def _decision(self, d: PlacementDecision, envelope: Envelope[Any]) -> list[Violation]:
        if not self.fence.admit(d) or d.outcome != "placed":
            return []
        key, found = d.event_key(), []
        held = self.live.get(key)
        if held is not None and held[0].decision_id != d.decision_id \
                and (held[0].epoch, held[0].leader) == (d.epoch, d.leader):
            first, where = held
            found.append(Violation(NAME, f"pod {key} placed on {d.node} while still placed on {first.node} "
                                         f"under the same fence (epoch {d.epoch}, leader {d.leader or '-'})",
                                   (cite(where, f"placed {first.decision_id}"), cite(envelope, "placed again"))))
        self.live[key] = (d, envelope)
        return found
