"""The exact replay of the acting stages: oversell and remediation, each
replica's journal run again on a fresh service whose outputs are kept, not
sent, and every action (taints, evictions, freezes, moves, thaws, retries,
give-ups) and every oversold allocatable checked equal to the recorded
ones, node by node, or the first that differs named.

Each step of their journals is one of the service's own entry points (what
a handler does once the state it reads is in hand), so the replay calls
the same code with the same inputs in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidal_bus.consumer import Delivery
from tidal_oversell import OversellService, OversellSettings
from tidal_remediation import RemediationService, RemediationSettings
from tidal_runtime.journal import recorded_input
from tidal_schemas import ActionResult, Envelope, NodeAction, NodeAllocatables, make_envelope

LIVE = Delivery(stream="", partition=0, position=0, attempt=1, replaying=False)
# A journal recorded before the per-action switches names none of them: those
# releases carried out every action (unless the service-wide dry_run said otherwise).
BEFORE_SWITCHES = {"oversell": {"evict": "enabled", "taint": "enabled"},
                   "remediation": {"freeze": "enabled", "migrate": "enabled"}}


class CapturedOutputs:
    """The broker of an offline replay: what the stage publishes is kept."""

    class _Backend:
        connected = True

        def __init__(self, member: str) -> None:
            self.member_id = member

    def __init__(self, member: str) -> None:
        self.backend = self._Backend(member)
        self.published: list[Envelope[Any]] = []

    async def publish(self, payload: Any, *, cause: Envelope[Any] | None = None, cluster: str | None = None,
                      event_id: str | None = None, discriminator: str = "", **_: Any) -> Envelope[Any]:
        envelope = make_envelope(payload, cluster=cluster or cause.cluster, source="replay", cause=cause,
                                 event_id=event_id, discriminator=discriminator)
        self.published.append(envelope)
        return envelope


def replay_settings(stage: str, recorded: Mapping[str, Any]) -> dict[str, Any]:
    """The settings `stage`'s journal replays with: the `recorded` ones,
    over what a release before the per-action switches did (acted)."""
    return {**BEFORE_SWITCHES[stage], **recorded}


@dataclass
class StageReplay:
    stage: str
    member: str
    steps: int = 0
    outputs: list[Any] = field(default_factory=list)  # actions, results and allocatables, as published
    problem: str = ""  # an input the recording does not hold


async def replay_acting(stage: str, member: str, steps: list[tuple[str, float, str, str]], settings: dict[str, Any],
                        cluster: str, inputs: Mapping[tuple[str, str], tuple[Envelope[Any], str]]) -> StageReplay:
    """Run `stage`'s (`oversell` or `remediation`) journal `steps` again."""
    bus = CapturedOutputs(member)
    run = StageReplay(stage, member)
    settings = replay_settings(stage, settings)
    if stage == "oversell":
        svc: Any = OversellService(OversellSettings(**settings, cluster=cluster), bus=bus)
        svc.action_log_ready.set()
        reads = {"node.topology": lambda e: svc.on_topology(e, LIVE), "score.node": lambda e: svc.on_score(e, LIVE),
                 "pod.lifecycle": svc.apply_pod, "node.action": svc.apply_log, "action.result": svc.apply_log}
    else:
        svc = RemediationService(RemediationSettings(**settings, cluster=cluster), bus=bus)
        svc.memory_ready.set()
        reads = {"node.topology": lambda e: svc.on_topology(e, LIVE), "node.action": svc._apply_log,
                 "action.result": svc._apply_log, "cpu.assignment": svc.apply_assignment}
    counted: dict[str, Any] = {}  # a granted sample's id -> the pods it counted (for its `act`)
    for index, (op, t, a, b) in enumerate(steps):
        run.steps = index + 1
        if op == "retry":
            await svc.retry(t)
            continue
        envelope, problem = recorded_input(inputs, a, b)
        if envelope is None:
            run.problem = f"journal step {index}: {problem}"
            return run
        if op == "read":
            done = reads[a](envelope)
            if done is not None:
                await done
        elif op in ("grant", "grant/replayed"):
            allocatable, counted[envelope.id] = svc.grant(envelope)
            if op == "grant":
                run.outputs.append(allocatable)
        elif op == "act":
            topology = svc.views[(cluster, envelope.payload.node)].topology
            await svc.act(envelope, topology, counted.pop(envelope.id))
        elif op in ("decide", "decide/unassigned"):
            svc.assignments_read = op == "decide"
            await svc.decide(envelope)
    run.outputs += [e.payload for e in bus.published if not isinstance(e.payload, NodeAllocatables)]
    return run


def recorded_actions(events: Iterable[Envelope[Any]], stage: str) -> list[Any]:
    """What `stage` published that the replay re-decides: its actions and
    results, and (oversell) each node's allocatable."""
    out = []
    for e in events:
        p = e.payload
        if isinstance(p, NodeAction) and p.requested_by == stage or isinstance(p, ActionResult) and e.source == stage:
            out.append(p)
        elif isinstance(p, NodeAllocatables) and stage == "oversell":
            out += p.items
    return out


def first_action_difference(stage: str, replayed: list[Any], recorded: list[Any]) -> str | None:
    """Node by node, in order: the first output that differs, or None."""
    def by_node(items: list[Any]) -> dict[tuple[str, str], list[dict]]:
        nodes: dict[tuple[str, str], list[dict]] = {}
        for item in items:
            nodes.setdefault((type(item).__name__, item.node), []).append(item.model_dump(mode="json"))
        return nodes

    mine, theirs = by_node(replayed), by_node(recorded)
    for key in sorted(set(mine) | set(theirs)):
        a, b = mine.get(key, []), theirs.get(key, [])
        for n, (x, y) in enumerate(zip(a, b)):
            if x != y:
                fields = sorted(k for k in x if x[k] != y.get(k))[:3]
                shown = ", ".join(f"{k}: recorded {y.get(k)!r}, replayed {x[k]!r}" for k in fields)
                return f"{stage}: {key[0]} {n} of node {key[1]} differs ({shown})"
        if len(a) != len(b):
            return f"{stage}: node {key[1]} has {len(b)} {key[0]} recorded, {len(a)} replayed"
    return None
