"""Which GPUs a container gets (pure, no I/O): the GPU device plugin's books
of the decisions placing pods' GPU shares on this node, and the rule that
matches a kubelet call to one of them (docs/last-mile.md, "GPUs: the device
plugin"). The units it counts and the response are `gpu_units`.

**Matching.** The kubelet tells a plugin nothing of the pod: it admits one
pod at a time and, for a container asking n units, calls
`GetPreferredAllocation` then `Allocate` back to back. So:

- the decisions for this node not yet handed to a container wait in the
  ledger, oldest first by (decision time, arrival order); a newer decision
  for the same pod replaces its older one. Oldest first is the kubelet's
  order because the bridge binds a GPU pod only once the one of the same node
  and size before it was admitted (services/tidal_bridge/binds_in_flight.py);
- `prefer` takes the oldest whose total milli is n and reserves for it, per
  share (gpu, milli), `milli` units of that GPU free in the kubelet's
  `available` (units are the kubelet's tokens for counting: when that GPU has
  too few, others fill the count; the devices handed are still the decision's);
- `allocate` takes the decision whose reservation is exactly the requested
  units, else the oldest whose total milli is n; the decision is then spent,
  handed or refused, and never matched again;
- refused (never guessed) when no decision matches, or a GPU it names is
  not on this node or not healthy;
- a failed bind, a pod deleted or bound elsewhere, a decision elsewhere or
  given up, or no bind within the bind timeout drops a waiting decision; a
  pod seen running here has been admitted, so its decision is spent.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tidal_schemas import HOLDING_PHASES, BindResult, Gpu, PlacementDecision, PodLifecycle

from .gpu_units import container_response, split_unit, unit_prefix

SPENT_KEPT = 4096  # spent decision ids remembered, so a redelivery is not matched again


@dataclass(frozen=True)
class Decided:
    """A decision placing a pod's GPU shares on this node, not yet handed."""

    pod: str
    uid: str
    decision_id: str
    shares: tuple[tuple[str, int], ...]  # (gpu id, milli), in the decision's order
    at: float  # decision time
    seq: int  # arrival order, which breaks ties of time
    bound: bool = False  # the bind is known to have succeeded: no bind timeout
    reserved: tuple[str, ...] = ()  # the units `prefer` chose for it

    @property
    def milli(self) -> int:
        return sum(m for _, m in self.shares)


@dataclass(frozen=True)
class Handed:
    """What Allocate gave a pod's container."""

    pod: str
    uid: str
    decision_id: str
    gpus: tuple[str, ...]
    units: tuple[str, ...]
    envs: Mapping[str, str]
    cdi_devices: tuple[str, ...]


@dataclass(frozen=True)
class Ledger:
    """The plugin's books: decisions waiting for a container, what was handed, what is spent."""

    pending: Mapping[str, Decided] = field(default_factory=dict)  # by pod key
    handed: Mapping[str, Handed] = field(default_factory=dict)  # by pod key
    spent: Mapping[str, str] = field(default_factory=dict)  # decision id -> pod, oldest first
    seq: int = 0


@dataclass(frozen=True)
class Outcome:
    """A ledger after a request, with what it found: `found` is False when no
    decision matched (worth waiting for one); `refusal` says why nothing is given."""

    ledger: Ledger
    found: bool
    units: tuple[str, ...] = ()
    handed: Handed | None = None
    refusal: str = ""


def _same(a: str, b: str) -> bool:
    return not a or not b or a == b


def _drop(ledger: Ledger, pod: str) -> Ledger:
    """The pod's waiting decision spent: out of the ledger, its id remembered."""
    gone = ledger.pending.get(pod)
    if gone is None:
        return ledger
    pending = {k: v for k, v in ledger.pending.items() if k != pod}
    return replace(ledger, pending=pending, spent=_spend(ledger.spent, gone))


def _spend(spent: Mapping[str, str], d: Decided) -> dict[str, str]:
    return dict(list({**spent, d.decision_id: d.pod}.items())[-SPENT_KEPT:])


def on_decision(ledger: Ledger, d: PlacementDecision, node: str, at: float) -> Ledger:
    """A placement decision read (see the module docstring)."""
    key, waiting = d.event_key(), ledger.pending.get(d.event_key())
    if d.outcome == "fence" or d.decision_id in ledger.spent:
        return ledger
    if waiting is not None and waiting.decision_id == d.decision_id:
        return ledger  # a redelivery: it keeps its time and place
    if d.outcome != "placed" or d.node != node or not d.gpus:
        # placed elsewhere, given up, or without GPUs: a waiting decision of the pod is void, unless its
        # bind succeeded (the cluster is right) and this is not a newer placement of another pod incarnation
        void = waiting is not None and not (waiting.bound and (d.outcome != "placed" or _same(waiting.uid, d.uid)))
        return _drop(ledger, key) if void else ledger
    if waiting is not None and waiting.bound and _same(waiting.uid, d.uid):
        return ledger  # a decision other than the one the pod is bound by is ignored
    fresh = Decided(key, d.uid, d.decision_id, tuple((s.gpu, s.milli) for s in d.gpus), at, ledger.seq + 1)
    return replace(ledger, pending={**ledger.pending, key: fresh}, seq=ledger.seq + 1)


def release(ledger: Ledger, pod: str, uid: str = "") -> Ledger:
    """The pod's claim is gone: its waiting decision and what it was handed."""
    waiting, handed = ledger.pending.get(pod), ledger.handed.get(pod)
    if waiting is not None and _same(waiting.uid, uid):
        ledger = _drop(ledger, pod)
    if handed is not None and _same(handed.uid, uid):
        ledger = replace(ledger, handed={k: v for k, v in ledger.handed.items() if k != pod})
    return ledger


def on_bind_result(ledger: Ledger, result: BindResult, node: str) -> Ledger:
    """A bind result of a waiting decision: bound here marks it, else it is dropped."""
    key = result.event_key()
    waiting = ledger.pending.get(key)
    if waiting is None or waiting.decision_id != result.decision_id:
        return ledger
    if not result.ok or result.node != node:
        return _drop(ledger, key)
    return replace(ledger, pending={**ledger.pending, key: replace(waiting, bound=True)})


def on_pod(ledger: Ledger, pod: PodLifecycle, node: str) -> Ledger:
    """A pod event: deleted or bound elsewhere releases; bound here marks the
    decision bound; running here means admitted: the decision is spent."""
    key = pod.event_key()
    if pod.phase == "deleted" or (pod.phase in HOLDING_PHASES and pod.node != node):
        return release(ledger, key, pod.uid)
    waiting = ledger.pending.get(key)
    if pod.phase not in HOLDING_PHASES or waiting is None or pod.decision_id != waiting.decision_id:
        return ledger
    if pod.phase == "running":
        return _drop(ledger, key)
    return replace(ledger, pending={**ledger.pending, key: replace(waiting, bound=True)})


def expire(ledger: Ledger, now: float, timeout_s: float) -> Ledger:
    """Drop every waiting decision not known bound `timeout_s` after its time."""
    for key, d in list(ledger.pending.items()):
        if not d.bound and now - d.at >= timeout_s:
            ledger = _drop(ledger, key)
    return ledger


def oldest(ledger: Ledger, size: int) -> Decided | None:
    """The oldest waiting decision whose total milli is `size`."""
    fits = [d for d in ledger.pending.values() if d.milli == size]
    return min(fits, key=lambda d: (d.at, d.seq)) if fits else None


def _no_decision(ledger: Ledger, size: int, node: str) -> str:
    waiting = sorted(ledger.pending.values(), key=lambda d: (d.at, d.seq))
    shown = ", ".join(f"{d.pod} ({d.milli})" for d in waiting[:5]) + (", …" if len(waiting) > 5 else "")
    return (f"no placement decision for node {node} of {size} milli-GPU awaits a container "
            f"(waiting: {shown or 'none'})")


def check(d: Decided, gpus: Mapping[str, Gpu], healthy: Collection[str], node: str) -> str:
    """Why decision `d` cannot be handed here ("" when it can)."""
    for gpu, _ in d.shares:
        if gpu not in gpus:
            return f"decision {d.decision_id} for {d.pod} names GPU {gpu}, which node {node} does not have"
        if gpu not in healthy:
            return f"decision {d.decision_id} for {d.pod} names GPU {gpu}, which is not healthy on node {node}"
    return ""


def prefer(ledger: Ledger, size: int, available: Sequence[str], must_include: Sequence[str],
           gpus: Mapping[str, Gpu], healthy: Collection[str], node: str) -> Outcome:
    """The units to prefer for a container asking `size`, reserved for the
    oldest matching decision (see the module docstring)."""
    d = oldest(ledger, size)
    if d is None:
        return Outcome(ledger, False, refusal=_no_decision(ledger, size, node))
    refusal = check(d, gpus, healthy, node)
    if refusal:
        return Outcome(ledger, True, refusal=refusal)
    others = {u for o in ledger.pending.values() if o.pod != d.pod for u in o.reserved}
    chosen = list(dict.fromkeys(must_include))
    # one pass over the kubelet's list (8,000 units on a node of 8 GPUs), sorting only the decided GPUs' units
    by_gpu: dict[str, list[str]] = {}
    kept = set(chosen)
    for unit in available:
        if unit not in others and unit not in kept:
            by_gpu.setdefault(split_unit(unit)[0], []).append(unit)
    for gpu, milli in d.shares:
        chosen += sorted(by_gpu.get(unit_prefix(gpu), ()), key=split_unit)[:milli]
    if len(chosen) < size:  # the decided GPUs lack free units: any others fill the kubelet's count
        taken = set(chosen)
        free = sorted((u for units in by_gpu.values() for u in units if u not in taken), key=split_unit)
        chosen += free + sorted(set(available) & others, key=split_unit)
    chosen = chosen[:size]
    reserved = replace(d, reserved=tuple(chosen))
    return Outcome(replace(ledger, pending={**ledger.pending, d.pod: reserved}), True, units=tuple(chosen))


def allocate(ledger: Ledger, units: Sequence[str], gpus: Mapping[str, Gpu], healthy: Collection[str],
             node: str) -> Outcome:
    """Hand a container asking `units` its decision's devices (see the module docstring)."""
    asked = set(units)
    reserved = [d for d in ledger.pending.values() if d.reserved and set(d.reserved) == asked]
    d = min(reserved, key=lambda d: (d.at, d.seq)) if reserved else oldest(ledger, len(units))
    if d is None:
        return Outcome(ledger, False, refusal=_no_decision(ledger, len(units), node))
    spent = _drop(ledger, d.pod)
    refusal = check(d, gpus, healthy, node)
    if refusal:
        return Outcome(spent, True, refusal=refusal)
    envs, cdi = container_response(d.decision_id, d.shares, gpus)
    handed = Handed(d.pod, d.uid, d.decision_id, tuple(g for g, _ in d.shares), tuple(units), envs, cdi)
    return Outcome(replace(spent, handed={**spent.handed, d.pod: handed}), True, units=tuple(units), handed=handed)
