"""Exclusive means exclusive (§F 3): no CPU is in two pods' exclusive sets
at once, by the node agents' `cpu.assignment` events (an assignment of a pod
replaces its previous one; a release frees what it names)."""

from __future__ import annotations

from typing import Any

from tidal_schemas import CpuAssignment, Envelope

from .violation import Violation, cite

NAME = "cpu-in-two-sets"


class CpuInTwoSets:
    def __init__(self) -> None:
        self.holder: dict[tuple[str, int], tuple[str, Envelope[Any]]] = {}  # (node, cpu) -> pod, its assignment
        self.sets: dict[tuple[str, str], set[int]] = {}  # (node, pod) -> CPUs

    def feed(self, envelope: Envelope[Any]) -> list[Violation]:
        a = envelope.payload
        if not isinstance(a, CpuAssignment):
            return []
        for cpu in self.sets.pop((a.node, a.pod), set()) if not a.released else set(a.cpuset):
            if self.holder.get((a.node, cpu), ("",))[0] == a.pod:
                del self.holder[(a.node, cpu)]
        if a.released:
            left = self.sets.get((a.node, a.pod), set()) - set(a.cpuset)
            if left:
                self.sets[(a.node, a.pod)] = left
            else:
                self.sets.pop((a.node, a.pod), None)
            return []
        found = []
        for cpu in sorted(a.cpuset):
            other = self.holder.get((a.node, cpu))
            if other is not None and other[0] != a.pod:
                found.append(Violation(NAME, f"node {a.node}: CPU {cpu} given to {a.pod} while {other[0]} holds it "
                                             "exclusively", (cite(other[1], f"to {other[0]}"), cite(envelope, f"to {a.pod}"))))
            self.holder[(a.node, cpu)] = (a.pod, envelope)
        self.sets[(a.node, a.pod)] = set(a.cpuset)
        return found
