"""What a check reports: one violated invariant, in a sentence, with the
events that prove it; and the evidence line of one event."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tidal_schemas import Envelope


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str
    evidence: tuple[str, ...] = ()

    def line(self) -> str:
        """One line: the invariant, what happened, and the proving events."""
        proof = f" [{'; '.join(self.evidence)}]" if self.evidence else ""
        return f"{self.invariant}: {self.message}{proof}"


def cite(envelope: Envelope[Any], detail: str = "") -> str:
    """How a violation names an event: its type, id and, when given, what it said."""
    return f"{envelope.type} {envelope.id}" + (f" ({detail})" if detail else "")


class Check(Protocol):
    """One invariant: fed every event of the cluster in order, it answers
    the violations each event proves."""

    def feed(self, envelope: Envelope[Any]) -> list[Violation]: ...
