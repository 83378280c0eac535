"""A what-if replays the journal with other settings; the world then answers
the replay's decisions, not the recorded ones.

The steps, their times and every input that is not an answer stay as
recorded (samples, nodes, pods arriving, taints), so the only difference
between the changed run and the recording is the change and what follows
from it. What answers a decision of this replica is translated:

- its own decision events read back are the replay's event taken at the
  same step (the k-th read back is the k-th taken);
- a bind result of a recorded decision answers the replay's decision for the
  same pod taken at the same step, on the replay's node; with none, it is
  dropped;
- a pod event that says where a pod Tidal placed is bound or runs says so of
  the replay's node and resources; a pod the replay did not place stays
  pending (the event is dropped); a CPU assignment on another node than the
  replay's is dropped;
- a decision the recording has no counterpart for is bound at once when read
  back (a bind result, then the pod bound): what the cluster would answer
  had nothing failed. So is a decision of a cycle that decided more than
  the recorded one published: it has no event of its own to be read back in. These answers were not recorded: `invented` counts
  them, the report names them as the decisions that rest on them.

With unchanged settings every answer translates to itself, which is why
the exact replay does not use this at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tidal_schemas import (HOLDING_PHASES, BindResult, CpuAssignment, PlacementDecision, PlacementDecisions, PodLifecycle,
                           make_envelope)


@dataclass
class Answers:
    member: str
    recorded: list[list[PlacementDecision]]  # the member's decision events, in log order
    replayed: list[list[PlacementDecision]] = field(default_factory=list)
    paired: dict[str, PlacementDecision] = field(default_factory=dict)  # recorded decision id -> the replay's
    paired_ids: set[str] = field(default_factory=set)  # the replay's decisions that have a recorded twin
    placed: dict[str, PlacementDecision] = field(default_factory=dict)  # pod -> the replay's last placed decision
    placed_in_recording: set[str] = field(default_factory=set)
    pending_pod: dict[str, Any] = field(default_factory=dict)  # pod -> its last pending event (to bind it)
    read_back: int = 0
    invented: set[str] = field(default_factory=set)  # pods bound on an answer the recording does not hold
    dropped: int = 0

    def took(self, batch: list[PlacementDecision]) -> None:
        """The replay took its next decision event (in output order)."""
        theirs = self.recorded[len(self.replayed)] if len(self.replayed) < len(self.recorded) else []
        self.replayed.append(batch)
        by_pod = {d.event_key(): d for d in theirs if d.outcome != "fence"}
        for d in theirs:
            if d.outcome == "placed":
                self.placed_in_recording.add(d.event_key())
        for d in batch:
            if d.outcome == "placed":
                self.placed[d.event_key()] = d
            if (twin := by_pod.get(d.event_key())) is not None:
                self.paired[twin.decision_id] = d
                self.paired_ids.add(d.decision_id)

    def answer(self, envelope: Any) -> list[Any]:
        """What the replay reads instead of the recorded `envelope`."""
        p = envelope.payload
        if isinstance(p, PlacementDecisions):
            return self._read_back(envelope) if p.items[0].leader == self.member else [envelope]
        if isinstance(p, BindResult):
            mine = self.paired.get(p.decision_id)
            if mine is None or mine.outcome != "placed":
                return self._drop()
            return self._as(envelope, p.model_copy(update={"decision_id": mine.decision_id, "node": mine.node}))
        if isinstance(p, PodLifecycle):
            key = p.event_key()
            if p.phase == "pending" and not p.node:
                self.pending_pod[key] = p
            if key not in self.placed_in_recording or p.phase not in HOLDING_PHASES or not p.node:
                return [envelope]
            mine = self.placed.get(key)
            if mine is None:
                return self._drop()
            return self._as(envelope, held_as(p, mine))
        if isinstance(p, CpuAssignment) and p.decision_id:
            mine = self.paired.get(p.decision_id)
            if mine is None or mine.node != p.node:
                return self._drop()
            return self._as(envelope, p.model_copy(update={"decision_id": mine.decision_id}))
        return [envelope]

    def _read_back(self, envelope: Any) -> list[Any]:
        k, self.read_back = self.read_back, self.read_back + 1
        mine = self.replayed[k] if k < len(self.replayed) else []
        if not mine:
            return []
        return [envelope.model_copy(update={"payload": PlacementDecisions(items=mine)}),
                *self.bound_at_once([d for d in mine if d.decision_id not in self.paired_ids], envelope.cluster)]

    def bound_at_once(self, decisions: list[PlacementDecision], cluster: str) -> list[Any]:
        """The answers the recording does not hold, for `decisions` placed
        without a recorded twin: a good bind result, then the pod bound."""
        out = []
        for d in decisions:
            pod = self.pending_pod.get(d.event_key())
            if d.outcome != "placed" or pod is None:
                continue
            self.invented.add(d.event_key())
            self.placed[d.event_key()] = d
            result = BindResult(decision_id=d.decision_id, namespace=d.namespace, name=d.name, node=d.node, ok=True)
            bound = held_as(pod.model_copy(update={"phase": "bound"}), d)
            out += [make_envelope(result, cluster=cluster, source="replay"),
                    make_envelope(bound, cluster=cluster, source="replay")]
        return out

    def _as(self, envelope: Any, payload: Any) -> list[Any]:
        return [envelope.model_copy(update={"payload": payload})]

    def _drop(self) -> list[Any]:
        self.dropped += 1
        return []


def held_as(pod: PodLifecycle, d: PlacementDecision) -> PodLifecycle:
    """`pod` holding what decision `d` gave it."""
    return pod.model_copy(update={"node": d.node, "numa_cpus": dict(d.numa_cpus), "gpus": list(d.gpus)})
