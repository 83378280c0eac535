"""A decision id names one pod: a decision that counts never takes the id
of a decision of another pod, nor of an earlier pod of the same name (a
StatefulSet's pod deleted and made again has a new uid). Every reader
keys what it did by that id: the bridge the Binding it wrote, a node agent
the CPUs it gave; a reused id reads as the first pod's decision,
redelivered. The same decision read again (a redelivery) names the same
pod."""

from __future__ import annotations

from typing import Any

from tidal_schemas import Envelope, PlacementDecision, PlacementDecisions

from .violation import Violation, cite

NAME = "decision-id-reused"


class DecisionIdReused:
    def __init__(self) -> None:
        self.named: dict[str, tuple[str, str, Envelope[Any]]] = {}  # decision id -> (pod key, uid, its event)

    def feed(self, envelope: Envelope[Any]) -> list[Violation]:
        p = envelope.payload
        if not isinstance(p, PlacementDecisions):
            return []
        return [found for d in p.items if d.outcome != "fence" for found in self._decision(d, envelope)]

    def _decision(self, d: PlacementDecision, envelope: Envelope[Any]) -> list[Violation]:
        key = d.event_key()
        first = self.named.setdefault(d.decision_id, (key, d.uid, envelope))
        first_key, first_uid, where = first
        if first_key == key and (first_uid == d.uid or not first_uid or not d.uid):
            return []
        return [Violation(NAME, f"decision {d.decision_id} names pod {key} (uid {d.uid or '-'}), as an earlier "
                                f"decision named pod {first_key} (uid {first_uid or '-'})",
                          (cite(where, f"{first_key} {first_uid}"), cite(envelope, f"{key} {d.uid}")))]
