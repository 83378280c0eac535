"""Exact replay: a placement replica's journal run again on a fresh stage.

The journal (tidal_schemas.journal) holds every step the replica took, in
order, with its clock: which input it read and when, when it was elected,
claimed, ran a cycle, took each event of decisions, timed out binds and
looked for stale nodes. Running the same steps on a `PlacementStage` with
the same settings, each input looked up in the recording by stream and id
(checked against the digest the replica noted of its bytes), gives the same
decisions: the stage reads no clock, no randomness and nothing else. The
replay says so, or names the first place it does not hold: an input the
recording no longer has or holds changed, or the first event of decisions
that differs from the recorded one, field by field.

No I/O here: the caller reads the streams (`tidal replay`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidal_runtime.journal import recorded_input
from tidal_schemas import Envelope, PlacementDecision, StageJournal, decode

from .replay_answers import Answers
from .settings import PlacementSettings
from .stage import PlacementStage

NOT_COMPARED = {"trace", "trace_state"}  # the spans a decision continues are the tracer's, not the decision's


@dataclass(frozen=True)
class Divergence:
    """Where a replay first parts from the recording."""

    member: str
    step: int  # index in the member's journal
    at: float  # the step's time
    what: str  # one line: which input or which decision, and how

    def describe(self) -> str:
        return f"replica {self.member}, journal step {self.step} (t={self.at:.3f}): {self.what}"


@dataclass
class MemberReplay:
    member: str
    steps: int = 0
    outputs: list[list[PlacementDecision]] = field(default_factory=list)
    output_steps: list[int] = field(default_factory=list)  # the journal step each output came from
    answers: Answers | None = None
    divergence: Divergence | None = None

    def add(self, step: int, outputs: list[list[PlacementDecision]], in_recorded_place: bool = True) -> None:
        """Outputs of journal step `step`; `in_recorded_place`: each stands
        where the recording has an event (what a what-if's answers pair by)."""
        self.outputs += outputs
        self.output_steps += [step] * len(outputs)
        for batch in outputs if self.answers is not None and in_recorded_place else ():
            self.answers.took(batch)


@dataclass
class Journals:
    """A cluster's journal events, per replica in `seq` order, and what is wrong with them."""

    steps: dict[str, list[tuple[str, float, str, str]]] = field(default_factory=dict)
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)  # member -> why its journal cannot be replayed


def gather(events: Iterable[StageJournal]) -> Journals:
    """Each replica's steps, its journal events in `seq` order; a replica
    whose journal does not start at 0 or skips an event is a problem."""
    by_member: dict[str, dict[int, StageJournal]] = {}
    for event in events:
        by_member.setdefault(event.member, {}).setdefault(event.seq, event)
    journals = Journals()
    for member, parts in by_member.items():
        seqs = sorted(parts)
        if seqs != list(range(len(seqs))):
            missing = sorted(set(range(seqs[-1] + 1)) - set(seqs))
            journals.problems[member] = f"journal events missing (seq {', '.join(map(str, missing[:5]))})"
            continue
        journals.steps[member] = [step for seq in seqs for step in parts[seq].steps]
        journals.settings[member] = parts[0].settings
    return journals


def replay_member(member: str, steps: list[tuple[str, float, str, str]], settings: PlacementSettings,
                  cluster: str, inputs: Mapping[tuple[str, str], tuple[Envelope[Any], str]],
                  answers: Answers | None = None) -> MemberReplay:
    """Run `steps` on a fresh stage; its outputs (fences and decisions, in
    the order they were published), or the first input it could not read
    as the replica did. With `answers` (a what-if), what answers the
    replica's decisions is the answer to the replay's (replay_answers.py)."""
    stage, run, decisions = PlacementStage(settings, member), MemberReplay(member, answers=answers), None
    for index, (op, t, a, b) in enumerate(steps):
        run.steps = index + 1
        if op == "read":
            envelope, problem = recorded_input(inputs, a, b)
            if envelope is None:
                run.divergence = Divergence(member, index, t, problem)
                return run
            for read in answers.answer(envelope) if answers is not None else (envelope,):
                stage.read(read, t)
        elif op == "held":
            stage.read(decode(b), t)
        elif op == "elected":
            stage.elected("gained" in a, "lost" in a, t)
        elif op == "claim":
            run.add(index, [list(fence.items) for name, fence in stage.claim(t) if name == cluster])
        elif op == "cycle":
            decisions = stage.decide(cluster, t)
        elif op == "took":
            taken = next(decisions, None) if decisions is not None else None
            run.add(index, [taken or []])
        elif op == "ended":
            rest = list(decisions) if decisions is not None else []
            decisions = None
            if answers is None:
                run.add(index, rest)  # more than recorded: a divergence
                continue
            # a what-if's cycle decided more than the recorded one published: no recorded event
            # answers these, so they take no output's place and are bound at once
            run.add(index, rest, in_recorded_place=False)
            for read in answers.bound_at_once([d for batch in rest for d in batch], cluster):
                stage.read(read, t)
        elif op == "binds":
            stage.expire_binds(t)
        elif op == "stale":
            stage.check_stale(t)
    return run


def recorded_outputs(log: Iterable[Envelope[Any]], member: str) -> list[list[PlacementDecision]]:
    """The events of decisions `member` published, in log order."""
    return [list(e.payload.items) for e in log if e.payload.items and e.payload.items[0].leader == member]


def first_difference(member: str, steps: list[tuple[str, float, str, str]], replayed: MemberReplay,
                     recorded: list[list[PlacementDecision]]) -> Divergence | None:
    """The first event of decisions where the replay and the recording
    differ (which pod, which fields), or None when every one is equal."""
    at = replayed.output_steps
    for n, (mine, theirs) in enumerate(zip(replayed.outputs, recorded)):
        for d_mine, d_theirs in zip(mine, theirs):
            a, b = d_mine.model_dump(exclude=NOT_COMPARED), d_theirs.model_dump(exclude=NOT_COMPARED)
            if a != b:
                fields = sorted(k for k in a if a[k] != b.get(k))
                shown = ", ".join(f"{k}: recorded {b.get(k)!r}, replayed {a[k]!r}" for k in fields[:3])
                return _at(member, steps, at, n, f"decision {n} for {d_theirs.namespace}/{d_theirs.name} "
                                                f"differs ({shown})")
        if len(mine) != len(theirs):
            return _at(member, steps, at, n, f"decision event {n} holds {len(theirs)} decisions recorded, "
                                            f"{len(mine)} replayed")
    if len(replayed.outputs) != len(recorded):
        n = min(len(replayed.outputs), len(recorded))
        return _at(member, steps, at, n, f"{len(recorded)} decision events recorded, {len(replayed.outputs)} "
                                        "replayed")
    return None


def _at(member: str, steps, output_steps: list[int], n: int, what: str) -> Divergence:
    index = output_steps[n] if n < len(output_steps) else len(steps) - 1
    return Divergence(member, index, steps[index][1] if steps else 0.0, what)
