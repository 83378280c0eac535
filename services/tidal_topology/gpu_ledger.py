"""The GPU device plugin's rule (pure, no I/O): what the node agent
advertises to the kubelet as `tidal.dev/gpu-milli`, and which devices a
container gets (docs/last-mile.md, "GPUs: the device plugin").

**Units.** Every GPU device d — a physical GPU, or a MIG instance, which is a
device of its own — is advertised as 1000 unit devices `<p(d)>-m<k>`,
k = 0..999. p(d) is d's id (NVML's id is the UUID, 40 characters), or
`gpu-<20 hex digits of sha256(id)>` when the id would make a unit id longer
than the API's 63 characters. A unit is healthy when its device is and, for
a MIG instance, its parent is.

**Matching.** The kubelet tells a plugin nothing of the pod: it admits one
pod at a time and, for a container asking n units, calls
`GetPreferredAllocation` then `Allocate` back to back. So:

- the decisions for this node not yet handed to a container wait in the
  ledger, oldest first by (decision time, arrival order); a newer decision
  for the same pod replaces its older one;
- `prefer` takes the oldest whose total milli is n and reserves for it, per
  share (gpu, milli), `milli` units of that GPU free in the kubelet's
  `available` (units are the kubelet's tokens for counting: when that GPU has
  too few, others fill the count; the devices handed are still the decision's);
- `allocate` takes the decision whose reservation is exactly the requested
  units, else the oldest whose total milli is n; the decision is then spent,
  handed or refused, and never matched again;
- it is refused (never guessed) when no decision matches, or when a GPU it
  names is not on this node or not healthy;
- a failed bind, a pod deleted or bound elsewhere, a decision elsewhere or
  given up, or no bind within the bind timeout drops a waiting decision; a
  pod seen running here has been admitted, so its decision is spent.

**Response** (`container_response`): `NVIDIA_VISIBLE_DEVICES` = the decided
GPUs' runtime names (the GPU id: a UUID, `GPU-…` or `MIG-…`, where NVML
reported it) comma-separated in the decision's order, `TIDAL_DECISION_ID`, and
CDI devices `nvidia.com/gpu=<name>` each. A share below 1000 milli shares its
GPU through NVIDIA MPS, whose client limits are (NVIDIA MPS docs, "Appendix:
Environment Variables"):

- `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`: an integer percentage of each visible
  device's threads (Volta and later), which can only narrow the control
  daemon's own setting; here milli / 10 (at least 1), the smallest share's
  when several are partial (one value covers every device);
- `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`: comma-separated `<device>=<amount>`
  pairs, the device by ordinal or UUID, the amount with a unit suffix
  (`0=1G`, `0=512M`); here `<uuid>=<MiB>M` with
  MiB = ⌊memory_mib · milli / 1000⌋, left out for a GPU of unknown memory
  (no figure to share). NVIDIA's own device plugin (v0.15.0) moved to
  ordinals because limits set by UUID were not applied on some drivers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tidal_schemas import HOLDING_PHASES, BindResult, Gpu, PlacementDecision, PodLifecycle
from tidal_schemas.common import GPU_MILLI

MAX_DEVICE_ID = 63  # the device plugin API's limit on a device ID
CDI_KIND = "nvidia.com/gpu"
SPENT_KEPT = 4096  # spent decision ids remembered, so a redelivery is not matched again


def unit_prefix(gpu_id: str) -> str:
    """The prefix of a GPU's unit ids (see the module docstring)."""
    if len(gpu_id) + len(f"-m{GPU_MILLI - 1}") <= MAX_DEVICE_ID:
        return gpu_id
    return "gpu-" + hashlib.sha256(gpu_id.encode()).hexdigest()[:20]


def unit_ids(gpu_id: str) -> tuple[str, ...]:
    """The 1000 unit device ids of a GPU, k = 0..999."""
    prefix = unit_prefix(gpu_id)
    return tuple(f"{prefix}-m{k}" for k in range(GPU_MILLI))


def split_unit(unit: str) -> tuple[str, int]:
    """(prefix, k) of a unit id; (unit, -1) when it is not one."""
    prefix, sep, k = unit.rpartition("-m")
    return (prefix, int(k)) if sep and k.isascii() and k.isdigit() else (unit, -1)


def healthy_gpus(gpus: Sequence[Gpu], health: Mapping[str, bool]) -> frozenset[str]:
    """Ids of the GPUs that are healthy, with their parent for a MIG instance."""
    own = {g.id: health.get(g.id, g.healthy) for g in gpus}
    return frozenset(g.id for g in gpus if own[g.id] and (g.parent is None or own.get(g.parent, True)))


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
    kept = {**spent, d.decision_id: d.pod}
    return dict(list(kept.items())[-SPENT_KEPT:]) if len(kept) > SPENT_KEPT else kept


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
    free = sorted((u for u in available if u not in others and u not in chosen), key=split_unit)
    for gpu, milli in d.shares:
        prefix = unit_prefix(gpu)
        chosen += [u for u in free if split_unit(u)[0] == prefix][:milli]
    taken = set(chosen)
    rest = [u for u in free if u not in taken] + sorted(set(available) & others, key=split_unit)
    chosen = (chosen + rest)[:size]
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
    envs, cdi = container_response(d, gpus)
    handed = Handed(d.pod, d.uid, d.decision_id, tuple(g for g, _ in d.shares), tuple(units), envs, cdi)
    return Outcome(replace(spent, handed={**spent.handed, d.pod: handed}), True, units=tuple(units), handed=handed)


def runtime_name(gpu: Gpu) -> str:
    """How the container runtime knows the GPU: its id, the UUID where NVML
    named it (an inventory file should list UUIDs too)."""
    return gpu.id


def container_response(d: Decided, gpus: Mapping[str, Gpu]) -> tuple[dict[str, str], tuple[str, ...]]:
    """(envs, CDI device names) for a container given decision `d` (see the
    module docstring); every GPU `d` names is in `gpus`."""
    names = [runtime_name(gpus[g]) for g, _ in d.shares]
    envs = {"NVIDIA_VISIBLE_DEVICES": ",".join(names), "TIDAL_DECISION_ID": d.decision_id}
    partial = [(gpus[g], m) for g, m in d.shares if m < GPU_MILLI]
    if partial:
        envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, min(m for _, m in partial) // 10))
        pins = [f"{runtime_name(g)}={max(1, g.memory_mib * m // GPU_MILLI)}M" for g, m in partial if g.memory_mib]
        if pins:
            envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(pins)
    return envs, tuple(f"{CDI_KIND}={name}" for name in names)
