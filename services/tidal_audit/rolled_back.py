"""Every failed bind is rolled back (§F 2): once the bridge reported a
decision's bind failed, the pod never holds anything by that decision (its
decision annotations were cleared, nothing is bound under its id)."""

from __future__ import annotations

from typing import Any

from tidal_schemas import BindResult, Envelope, PodLifecycle

from .holdings import holding
from .violation import Violation, cite

NAME = "bind-not-rolled-back"


class BindNotRolledBack:
    def __init__(self) -> None:
        self.failed: dict[str, Envelope[Any]] = {}  # decision id -> its failed bind result

    def feed(self, envelope: Envelope[Any]) -> list[Violation]:
        p = envelope.payload
        if isinstance(p, BindResult) and not p.ok:
            self.failed[p.decision_id] = envelope
        elif isinstance(p, PodLifecycle) and p.decision_id in self.failed and holding(p) is not None:
            failure = self.failed[p.decision_id]
            return [Violation(NAME, f"pod {p.event_key()} is {p.phase} on {p.node} by decision {p.decision_id}, "
                                    "whose bind failed", (cite(failure, failure.payload.reason[:80]),
                                                          cite(envelope, p.phase)))]
        return []
