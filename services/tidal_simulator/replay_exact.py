"""The unchanged replay: every placement replica's journal of a cluster run
again (tidal_placement's `replay_journal`) against the recording, with the
settings the replica ran with, and the verdict: equal, or the first
divergence (tidal_placement.replay's module docstring). And the what-if:
the same journal with some settings changed, the world answering the
replay's decisions (tidal_placement.replay_answers), and where each pod
ended up.

Reads the live streams only (`LiveStreams`); publishes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tidal_placement import (PlacementSettings, ReplayAnswers, first_difference, gather_journals,
                             recorded_outputs, replay_journal)
from tidal_runtime.journal import digest
from tidal_schemas import SchemaError

from .replay_actions import first_action_difference, recorded_actions, replay_acting
from .replay_compare import Placed
from .replay_plan import INPUT_STREAMS, Recorded
from .replay_run import LiveStreams

# What placement follows (tidal_placement.service.FOLLOWED), less the state
# streams, whose events the journal carries whole.
READ_STREAMS = ("node.topology", "node.allocatable", "score.node", "score.user", "node.action", "pod.lifecycle",
                "bind.result", "placement.decision", "cpu.assignment", "node.metrics", "action.result")
ACTING = ("oversell", "remediation")  # the stages whose actions are replayed beside placement's decisions


@dataclass
class ExactReplay:
    cluster: str
    members: int = 0
    steps: int = 0
    decision_events: int = 0
    decisions: int = 0
    actions: dict[str, int] = field(default_factory=dict)  # acting stage -> outputs replayed and checked
    divergences: list[str] = field(default_factory=list)  # the first per replica, one line each
    unreplayable: list[str] = field(default_factory=list)  # replicas whose journal is incomplete, and why

    @property
    def equal(self) -> bool:
        return self.members > 0 and not self.divergences and not self.unreplayable

    def describe(self) -> str:
        if not self.members and not self.unreplayable:
            return (f"exact replay of cluster {self.cluster}: no placement journal recorded (placement before "
                    "this version journals nothing)")
        head = (f"exact replay of cluster {self.cluster}: {self.members} stage replica(s), {self.steps} "
                f"journal steps, {self.decision_events} decision events ({self.decisions} decisions)")
        if self.actions:
            head += "; " + ", ".join(f"{stage}: {n} actions and allocatables" for stage, n in self.actions.items())
        if self.equal:
            return f"{head}: every decision and action equal to the recording"
        lines = [f"{head}: NOT equal to the recording"]
        lines += [f"  first divergence: {d}" for d in self.divergences]
        lines += [f"  not replayed: {u}" for u in self.unreplayable]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "members": self.members, "steps": self.steps, "equal": self.equal,
                "decision_events": self.decision_events, "decisions": self.decisions, "actions": self.actions,
                "divergences": self.divergences, "unreplayable": self.unreplayable}


@dataclass
class Recording:
    """What an exact replay of one cluster reads: placement's journal, its
    inputs by (stream, event id) with the digest of their bytes, and the
    decision log."""

    journal: list[Any] = field(default_factory=list)
    inputs: dict[tuple[str, str], tuple[Any, str]] = field(default_factory=dict)
    log: list[Any] = field(default_factory=list)
    acting_journal: list[Any] = field(default_factory=list)  # oversell's and remediation's
    acting_log: list[Any] = field(default_factory=list)  # node.action, action.result, node.allocatable
    timeline: list[Recorded] = field(default_factory=list)  # placement's inputs, what a what-if's window cuts


async def read_recording(live: LiveStreams, cluster: str) -> Recording:
    recording = Recording()
    journal = [e.payload async for _, e in live.read("stage.journal")
               if not isinstance(e, SchemaError) and e.cluster == cluster]
    recording.journal = [j for j in journal if j.stage == "placement"]
    recording.acting_journal = [j for j in journal if j.stage in ACTING]
    for stream in dict.fromkeys((*READ_STREAMS, *INPUT_STREAMS)):
        async for raw, event in live.read(stream):
            if isinstance(event, SchemaError) or event.cluster != cluster:
                continue
            if stream in INPUT_STREAMS:
                recording.timeline.append(Recorded(stream, raw.position, event, raw.stored_at))
            if stream not in READ_STREAMS:
                continue
            recording.inputs.setdefault((stream, event.id), (event, digest(raw.data)))
            if stream == "placement.decision":
                recording.log.append(event)
            elif stream in ("node.action", "action.result", "node.allocatable"):
                recording.acting_log.append(event)
    return recording


def replay_recording(recording: Recording, cluster: str, namespace: str) -> ExactReplay:
    """Replay each placement replica of `cluster` from its journal."""
    journals = gather_journals(recording.journal)
    result = ExactReplay(cluster, unreplayable=[f"replica {m}: {why}" for m, why in journals.problems.items()])
    for member, steps in journals.steps.items():
        settings = PlacementSettings(**journals.settings[member], cluster=cluster, namespace=namespace)
        run = replay_journal(member, steps, settings, cluster, recording.inputs)
        recorded = recorded_outputs(recording.log, member)
        result.members += 1
        result.steps += len(steps)
        result.decision_events += len(recorded)
        result.decisions += sum(len(items) for items in recorded)
        divergence = run.divergence or first_difference(member, steps, run, recorded)
        if divergence is not None:
            result.divergences.append(divergence.describe())
    return result


async def replay_acting_stages(recording: Recording, cluster: str, result: ExactReplay) -> None:
    """Oversell's and remediation's journals replayed into `result`."""
    for stage in ACTING:
        journals = gather_journals(j for j in recording.acting_journal if j.stage == stage)
        result.unreplayable += [f"{stage} replica {m}: {why}" for m, why in journals.problems.items()]
        replayed = []
        for member, steps in journals.steps.items():
            run = await replay_acting(stage, member, steps, journals.settings[member], cluster, recording.inputs)
            result.members += 1
            result.steps += len(steps)
            if run.problem:
                result.divergences.append(f"{stage} replica {member}: {run.problem}")
            replayed += run.outputs
        if not journals.steps:
            continue
        recorded = recorded_actions(recording.acting_log, stage)
        result.actions[stage] = len(recorded)
        if (difference := first_action_difference(stage, replayed, recorded)) is not None:
            result.divergences.append(difference)


@dataclass
class WhatIf:
    placed: dict[str, Placed] = field(default_factory=dict)  # pod -> where the changed run placed it last
    why: dict[str, str] = field(default_factory=dict)  # pod -> why the changed run left it pending
    invented: set[str] = field(default_factory=set)  # pods bound on answers the recording does not hold
    dropped: int = 0  # recorded answers to decisions the changed run did not take
    last: dict[str, Any] = field(default_factory=dict)  # pod -> its last decision (what `tidal explain` shows)


    def decided(self, batches: list[list[Any]]) -> None:
        """Each pod's last decision in `batches` (events of decisions, in order)."""
        for d in (d for batch in batches for d in batch if d.outcome != "fence"):
            key = d.event_key()
            self.last[key] = d
            if d.outcome == "placed" and d.node:
                self.placed[key] = Placed(d.node, tuple((g.gpu, g.milli) for g in d.gpus))
                self.why.pop(key, None)
            elif d.outcome == "pending":
                self.placed.pop(key, None)
                self.why[key] = d.reason or "pending"


def recorded_run(recording: Recording) -> WhatIf:
    """Where each pod ended up in the recording, by the same reading as a
    what-if's (the unchanged replay is checked equal to it first)."""
    result = WhatIf()
    for member in gather_journals(recording.journal).steps:
        result.decided(recorded_outputs(recording.log, member))
    return result


def what_if(recording: Recording, cluster: str, namespace: str, overrides: dict[str, Any]) -> WhatIf:
    """Each replica's journal replayed with `overrides` over its own settings."""
    journals = gather_journals(recording.journal)
    result = WhatIf()
    for member, steps in journals.steps.items():
        settings = PlacementSettings(**{**journals.settings[member], **overrides}, cluster=cluster,
                                     namespace=namespace)
        answers = ReplayAnswers(member, recorded_outputs(recording.log, member))
        result.decided(replay_journal(member, steps, settings, cluster, recording.inputs, answers).outputs)
        result.invented |= answers.invented
        result.dropped += answers.dropped
    return result
