"""The node agent's books (pure): a claim per pod it pins, tied to the bind
of the decision that made it, and the exclusive CPUs the pod holds.

Every transition returns a `Step`: the new state, the CPU changes to
publish, and a note for the log. Two events name the same pod when their
uids agree or either is unknown.

- **decision placed here**: replaces the pod's claim (the same decision
  again changes nothing, except that a claim adopted from its pod learns
  the NUMA nodes a shared pod does not carry). Its exclusive CPUs are
  kubelet's packed choice within each NUMA node it names
  (`tidal_policy.cpu_pick.pick_per_numa`), from the free CPUs. A decision
  other than the one the pod is bound by is ignored.
- **decision placed elsewhere**, or the pod given up (`pending`): the claim
  is released while it still awaits its bind (or it was for another uid).
- **pod bound or running here**: the claim is confirmed and learns the uid;
  a Tidal pod bound here by a decision the books lack is adopted from what
  it carries (its `numa_cpus`) — the cluster is right.
- **pod bound elsewhere, or deleted anywhere**: released.
- **bind result** failed for the claim's decision: released.
- **expiry**: a claim still awaiting its bind after the timeout: released.
- **move**: the pod's exclusive CPUs taken again, as many, on the target
  NUMA node (packed; its own CPUs count as available), or a shared pod
  pinned to the target's shared CPUs; otherwise refused with the reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from tidal_schemas import HOLDING_PHASES, BindResult, PlacementDecision, PodLifecycle

from .checkpoint import Claim, CpuState, assign, release
from tidal_policy.cpu_pick import CpuLike, pick_per_numa, take_packed
from .cpuset import format_cpuset


class PodSeen(Protocol):
    """What a decision is checked against of its pod's latest event: a
    `PodLifecycle`, or what the agent keeps of a pod elsewhere
    (`node_pods.PodElsewhere`)."""

    @property
    def uid(self) -> str: ...
    @property
    def phase(self) -> str: ...
    @property
    def node(self) -> str | None: ...
    @property
    def decision_id(self) -> str: ...


@dataclass(frozen=True)
class Published:
    """One change of a pod's exclusive CPUs, to announce on `cpu.assignment`."""

    pod: str
    cpus: tuple[int, ...]
    released: bool
    numa_cpus: Mapping[int, int]
    decision_id: str
    reason: str


@dataclass(frozen=True)
class Step:
    state: CpuState
    changed: bool = False
    changes: tuple[Published, ...] = ()
    note: str = ""
    refused: str = ""


def _same(a: str, b: str) -> bool:
    return not a or not b or a == b


def numa_counts(topology: Sequence[CpuLike], cpus) -> dict[int, int]:
    """CPUs of `cpus` on each NUMA node."""
    numa_of = {c.cpu: c.numa for c in topology}
    return dict(sorted(Counter(numa_of[c] for c in cpus).items()))


def _release(state: CpuState, key: str, reason: str) -> Step:
    claim, change = state.claims.get(key), release(state, key)
    if claim is None and not change.cpus:
        return Step(state)
    claims = {k: v for k, v in change.state.claims.items() if k != key}
    freed = (Published(key, tuple(sorted(change.cpus)), True, {}, claim.decision_id if claim else "", reason),) \
        if change.cpus else ()
    what = f"cpus {format_cpuset(change.cpus)} released" if change.cpus else "claim dropped"
    return Step(replace(change.state, claims=claims), True, freed, f"{key}: {what} ({reason})")


def _take(state: CpuState, key: str, claim: Claim, wanted: Mapping[int, int], topology: Sequence[CpuLike],
          reason: str) -> Step:
    """Replace the pod's claim by `claim`, with `wanted` exclusive CPUs per NUMA node."""
    before = _release(state, key, f"replaced: {reason}")
    base, cpus = before.state, ()
    if any(wanted.values()):
        picked = pick_per_numa(topology, base.free, wanted)
        if picked.cpus is None:
            return replace(before, refused=f"{key}: cannot take {dict(wanted)} exclusive CPUs: {picked.reason}")
        base, cpus = assign(base, key, "", picked.cpus).state, tuple(picked.cpus)
    base = replace(base, claims={**base.claims, key: claim})
    given = (Published(key, cpus, False, numa_counts(topology, cpus), claim.decision_id, reason),) if cpus else ()
    return Step(base, True, before.changes + given,
                f"{key}: {reason}" + (f", cpus {format_cpuset(cpus)}" if cpus else ""))


def on_decision(state: CpuState, d: PlacementDecision, node: str, topology: Sequence[CpuLike], now: float,
                pod: PodSeen | None) -> Step:
    """A placement decision read (see the module docstring); `pod` is what
    the agent knows of that pod's latest event, if anything."""
    key, claim = d.event_key(), state.claims.get(d.event_key())
    if d.outcome != "placed" or d.node != node:
        if claim is None or not claim.decision_id:
            return Step(state)
        if d.outcome == "placed" and (claim.stage == "decided" or not _same(claim.uid, d.uid)):
            return _release(state, key, f"placed on {d.node}")
        if d.outcome == "pending" and claim.stage == "decided":
            return _release(state, key, "placement gave the decision up")
        return Step(state)
    if claim is not None and claim.decision_id == d.decision_id:
        return _learn_numa_nodes(state, key, claim, d)
    held = pod is not None and pod.phase in HOLDING_PHASES and _same(pod.uid, d.uid)
    if held and pod.decision_id and pod.decision_id != d.decision_id:
        return Step(state, note=f"{key}: decision {d.decision_id} ignored, the pod is bound by {pod.decision_id}")
    bound_here = held and pod.node == node and pod.decision_id == d.decision_id
    stage = ("running" if pod.phase == "running" else "bound") if bound_here else "decided"
    fresh = Claim(d.uid or (pod.uid if held else ""), d.decision_id,
                  tuple(sorted(set(d.numa_nodes) | set(d.numa_cpus))), stage, now)
    return _take(state, key, fresh, d.numa_cpus, topology, f"decision {d.decision_id}")


def _learn_numa_nodes(state: CpuState, key: str, claim: Claim, d: PlacementDecision) -> Step:
    """The claim's own decision read again. A redelivery, or one restored
    from the checkpoint, changes nothing; but a claim adopted from its pod
    before the decision arrived knows only the pod's exclusive CPUs, and a
    shared pod placed on NUMA nodes carries none: its NUMA nodes come from
    the decision. A claim that has NUMA nodes keeps them (a move set them)."""
    placed_on = tuple(sorted(set(d.numa_nodes) | set(d.numa_cpus)))
    if claim.numa_nodes or not placed_on:
        return Step(state)
    learnt = replace(claim, numa_nodes=placed_on)
    return Step(replace(state, claims={**state.claims, key: learnt}), True,
                note=f"{key}: NUMA nodes {list(placed_on)} learnt from decision {d.decision_id}")


def on_pod(state: CpuState, pod: PodLifecycle, node: str, topology: Sequence[CpuLike], now: float,
           adopt: bool) -> Step:
    """A pod lifecycle event read; `adopt`: take up Tidal pods bound here
    that the books lack (off when the node offers no exclusive CPUs)."""
    key, claim = pod.event_key(), state.claims.get(pod.event_key())
    mine = claim is not None and _same(claim.uid, pod.uid)
    if pod.phase == "deleted":
        return _release(state, key, "pod deleted") if mine or (claim is None and state.held_by(key)) else Step(state)
    if pod.phase not in HOLDING_PHASES:
        return Step(state)
    if pod.node != node:
        return _release(state, key, f"bound to {pod.node}") if mine else Step(state)
    if mine and (not pod.decision_id or not claim.decision_id or pod.decision_id == claim.decision_id):
        stage = "running" if "running" in (pod.phase, claim.stage) else "bound"
        confirmed = replace(claim, uid=pod.uid or claim.uid, stage=stage)
        if confirmed == claim:
            return Step(state)
        return Step(replace(state, claims={**state.claims, key: confirmed}), True,
                    note=f"{key}: {stage} here" if stage != claim.stage else "")
    if adopt and not pod.foreign and pod.decision_id:
        stage = "running" if pod.phase == "running" else "bound"
        adopted = Claim(pod.uid, pod.decision_id, tuple(sorted(pod.numa_cpus)), stage, now)
        return _take(state, key, adopted, pod.numa_cpus, topology, f"adopted: bound here by {pod.decision_id}")
    return Step(state)


def on_bind_result(state: CpuState, result: BindResult, node: str) -> Step:
    """A bind result read: a failed bind of the claim's decision releases it."""
    key = f"{result.namespace}/{result.name}"
    claim = state.claims.get(key)
    if claim is None or claim.decision_id != result.decision_id or claim.stage != "decided":
        return Step(state)
    if not result.ok:
        return _release(state, key, f"bind failed: {result.reason or 'no reason given'}")
    if result.node != node:
        return _release(state, key, f"bound to {result.node}")
    return Step(replace(state, claims={**state.claims, key: replace(claim, stage="bound")}), True)


def expire(state: CpuState, now: float, timeout_s: float) -> Step:
    """Release every claim still awaiting its bind `timeout_s` after it was made."""
    step = Step(state)
    for key, claim in sorted(state.claims.items()):
        if claim.stage == "decided" and claim.decision_id and now - claim.at >= timeout_s:
            done = _release(step.state, key, f"no bind within {timeout_s:g}s")
            step = Step(done.state, True, step.changes + done.changes, "; ".join(filter(None, (step.note, done.note))))
    return step


def move(state: CpuState, key: str, uid: str, target: int, count: int, topology: Sequence[CpuLike]) -> Step:
    """Move pod `key` to NUMA node `target` (see the module docstring);
    `count` is the exclusive CPUs the requester believes the pod holds."""
    on_target = frozenset(c.cpu for c in topology if c.numa == target)
    if not on_target:
        return Step(state, refused=f"NUMA node {target} is not on this node")
    held = state.held_by(key)
    claim = state.claims.get(key) or Claim(uid=uid, stage="running")
    pinned = replace(claim, uid=claim.uid or uid, numa_nodes=(target,))
    if not held:
        if count:
            return Step(state, refused=f"{key} holds no exclusive CPUs, not {count}: the requester's view is stale")
        if not state.shared_pool & on_target:
            return Step(state, refused=f"NUMA node {target} has no shared CPU left")
        return Step(replace(state, claims={**state.claims, key: pinned}), True,
                    note=f"{key}: pinned to the shared CPUs of NUMA {target}")
    if count and count != len(held):
        return Step(state, refused=f"{key} holds {len(held)} exclusive CPUs, not {count}: "
                                   "the requester's view is stale")
    available = (state.free | held) & on_target
    picked = take_packed(topology, available, len(held))
    if picked.cpus is None:
        return Step(state, refused=f"NUMA node {target} has {len(available)} CPU(s) free for the {len(held)} "
                                   f"{key} holds")
    base = assign(release(state, key).state, key, "", picked.cpus).state
    cpus = tuple(picked.cpus)
    moved = Published(key, cpus, False, numa_counts(topology, cpus), claim.decision_id, f"moved to NUMA {target}")
    return Step(replace(base, claims={**base.claims, key: pinned}), True, (moved,),
                f"{key}: moved from cpus {format_cpuset(held)} to {format_cpuset(cpus)} on NUMA {target}")
