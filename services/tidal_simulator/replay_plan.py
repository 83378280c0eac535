"""What a what-if replay re-runs: recorded events cut at a window.

Placement's inputs are read from the live streams. Everything before the
window start becomes the *initial state* (the latest topology, allocatable,
taint, tenant config and scores of each key, and the pods bound at the
start). Inside the window the inputs are replayed in time order, except
that the recorded cluster's binds of the pods the replay decides itself are
dropped: the replay's own decisions bind those pods, and the recorded binds
become the answer to compare with.

Pods pending at the window start arrive at its start. A pod that is first
seen bound (placed by something other than Tidal) keeps its recorded node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from tidal_schemas import (
    HOLDING_PHASES, STOP_SCHEDULING_TAINT, Envelope, NodeAction, NodeTopology, PodLifecycle,
    TenantConfig, UserScore, derived_id,
)
from tidal_schemas.node_batch import NodeBatch

# Placement's inputs, as the replay feeds them (the decision log is read apart).
INPUT_STREAMS = ("node.topology", "node.allocatable", "node.action", "tenant.config", "score.user",
                 "score.node", "pod.lifecycle")


@dataclass(frozen=True)
class Recorded:
    """One event read from a live stream, with where it was in that stream
    and when the broker stored it."""

    stream: str
    position: int
    envelope: Envelope[Any]
    stored_at: datetime | None = None

    @property
    def time(self) -> datetime:
        """The broker's time when known: one clock for every producer (a
        simulator stamps its own simulated time on what it plays), and the
        order events really reached placement in."""
        return self.stored_at or self.envelope.time


@dataclass(frozen=True)
class Window:
    """[start, end] in event time; None = open."""

    start: datetime | None = None
    end: datetime | None = None

    def before(self, t: datetime) -> bool:
        return self.start is not None and t < self.start

    def after(self, t: datetime) -> bool:
        return self.end is not None and t > self.end


@dataclass(frozen=True)
class RecordedOutcome:
    """What the recorded run did with a pod the replay decides."""

    node: str | None
    gpus: tuple[tuple[str, int], ...] = ()
    reason: str = ""


@dataclass
class ReplayPlan:
    initial: list[Envelope[Any]] = field(default_factory=list)
    timeline: list[Recorded] = field(default_factory=list)
    arrivals: list[str] = field(default_factory=list)  # pod keys the replay decides, in arrival order
    recorded: dict[str, RecordedOutcome] = field(default_factory=dict)
    nodes: dict[str, NodeTopology] = field(default_factory=dict)  # latest inventory by the window end
    pods: dict[str, PodLifecycle] = field(default_factory=dict)  # latest request of every pod seen
    bound_at_start: dict[str, PodLifecycle] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)  # pods deleted inside the window


def state_key(envelope: Envelope[Any]) -> tuple[str, str] | None:
    """The key under which only the latest event matters for the initial
    state; None for events that are not state (non-taint node actions)."""
    p = envelope.payload
    if isinstance(p, NodeAction):
        if p.kind not in ("taint", "untaint") or p.taint_key != STOP_SCHEDULING_TAINT or p.dry_run:
            return None
        return ("taint", p.node)
    if isinstance(p, (NodeTopology, NodeBatch, TenantConfig, UserScore, PodLifecycle)):
        return (envelope.type, envelope.key)
    return None


def in_order(events: Iterable[Recorded]) -> list[Recorded]:
    """Time order across streams; a stream's own order breaks ties."""
    return sorted(events, key=lambda r: (r.time, r.stream, r.position))


def one_per_node(r: Recorded) -> list[Recorded]:
    """A batch of nodes' figures (scores, allocatable) as one event per
    node: a node's latest figures are state, and a batch holds several nodes'."""
    e = r.envelope
    if not isinstance(e.payload, NodeBatch) or len(e.payload.items) == 1:
        return [r]
    return [replace(r, envelope=e.model_copy(update={
        "payload": type(e.payload).of(item), "key": item.node,
        "id": derived_id(e.id, e.type, item.node, "one per node")})) for item in e.payload.items]


def build_plan(events: Iterable[Recorded], window: Window) -> ReplayPlan:
    """Cut the recorded inputs at `window` (see the module docstring)."""
    plan = ReplayPlan()
    latest: dict[tuple[str, str], Recorded] = {}
    decided_by_replay: set[str] = set()
    started = False
    for r in in_order(split for r in events for split in one_per_node(r)):
        if window.after(r.time):
            break
        e, p = r.envelope, r.envelope.payload
        if isinstance(p, NodeTopology):
            plan.nodes[p.node] = p
        if window.before(r.time):
            key = state_key(e)
            if key is not None:
                latest[key] = r
            continue
        if not started:
            started = True
            _start(plan, latest, decided_by_replay)
        if isinstance(p, PodLifecycle):
            _pod_in_window(plan, r, decided_by_replay)
        elif state_key(e) is not None:
            plan.timeline.append(r)
    if not started:  # the window holds no event
        _start(plan, latest, decided_by_replay)
    return plan


def _start(plan: ReplayPlan, latest: dict[tuple[str, str], Recorded], decided_by_replay: set[str]) -> None:
    plan.initial = _initial_state(latest, plan)
    for pending in _pending_at_start(latest):
        _arrive(plan, pending, decided_by_replay)


def _initial_state(latest: dict[tuple[str, str], Recorded], plan: ReplayPlan) -> list[Envelope[Any]]:
    initial = []
    for (kind, key), r in latest.items():
        p = r.envelope.payload
        if isinstance(p, PodLifecycle):
            plan.pods[key] = p
            if p.phase in HOLDING_PHASES:
                plan.bound_at_start[key] = p
                initial.append(r)
        else:
            initial.append(r)
    return [r.envelope for r in in_order(initial)]


def _pending_at_start(latest: dict[tuple[str, str], Recorded]) -> list[Recorded]:
    return in_order(r for (kind, _), r in latest.items()
                    if kind == "pod.lifecycle" and r.envelope.payload.phase == "pending" and not r.envelope.payload.node)


def _arrive(plan: ReplayPlan, r: Recorded, decided_by_replay: set[str]) -> None:
    key = r.envelope.payload.event_key()
    plan.pods[key] = r.envelope.payload
    plan.timeline.append(r)
    if key in plan.deleted:  # the same name created again: a new pod
        plan.deleted.discard(key)
        plan.recorded.pop(key, None)
    if key not in decided_by_replay:
        decided_by_replay.add(key)
        plan.arrivals.append(key)
    plan.recorded.setdefault(key, RecordedOutcome(None, reason="never bound in the window"))


def _pod_in_window(plan: ReplayPlan, r: Recorded, decided_by_replay: set[str]) -> None:
    pod: PodLifecycle = r.envelope.payload
    key = pod.event_key()
    if pod.phase == "pending" and not pod.node:
        _arrive(plan, r, decided_by_replay)
        return
    plan.pods[key] = pod
    if pod.phase == "deleted":
        plan.deleted.add(key)
        plan.timeline.append(r)
        return
    if key in decided_by_replay:  # the recorded answer; the replay binds its own
        plan.recorded[key] = RecordedOutcome(pod.node, tuple((g.gpu, g.milli) for g in pod.gpus))
        return
    plan.timeline.append(r)  # bound by someone else: part of the world


@dataclass(frozen=True)
class Point:
    """Where a window starts or ends: an event time, or a position in the
    pod.lifecycle stream (NATS stream sequence; Kafka offset, any partition)."""

    time: datetime | None = None
    sequence: int | None = None


def resolve_window(start: Point | None, end: Point | None, events: Iterable[Recorded]) -> Window:
    """A window in event time; sequences are turned into the time of the
    first pod event at or after the start sequence and the last one at or
    before the end sequence."""
    pods = [r for r in events if r.stream == "pod.lifecycle"]

    def at(point: Point | None, first: bool) -> datetime | None:
        if point is None or point.sequence is None:
            return point.time if point is not None else None
        chosen = [r.time for r in pods if (r.position >= point.sequence if first else r.position <= point.sequence)]
        if not chosen:
            span = f"{min(r.position for r in pods)}..{max(r.position for r in pods)}" if pods else "none"
            raise ValueError(f"no pod event {'at or after' if first else 'at or before'} sequence "
                             f"{point.sequence} (pod.lifecycle positions: {span})")
        return min(chosen) if first else max(chosen)

    window = Window(at(start, True), at(end, False))
    if window.start and window.end and window.end < window.start:
        raise ValueError(f"the window ends ({window.end.isoformat()}) before it starts ({window.start.isoformat()})")
    return window
