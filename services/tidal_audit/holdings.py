"""What each pod holds, from the bridge's pod events (pure): the node,
requests, exclusive CPUs per NUMA node and named GPU shares — or GPUs Tidal
cannot name (a foreign pod's, or a pod whose decision could not be read),
counted as whole floating GPUs of its node."""

from __future__ import annotations

from dataclasses import dataclass, field

from tidal_schemas import HOLDING_PHASES, PodLifecycle


@dataclass(frozen=True)
class Holding:
    node: str
    cpu_milli: int
    memory_mib: int
    numa_cpus: dict[int, int] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)  # GPU id -> milli
    floating_gpus: int = 0  # whole GPUs held on devices nobody named
    decision_id: str = ""


def holding(pod: PodLifecycle) -> Holding | None:
    """What `pod` holds now (None when it holds nothing: pending or gone)."""
    if pod.phase not in HOLDING_PHASES or not pod.node:
        return None
    named = {g.gpu: g.milli for g in pod.gpus}
    floating = pod.gpu.count if pod.gpu.count and not named else 0
    return Holding(pod.node, pod.requests.cpu_milli, pod.requests.memory_mib, dict(pod.numa_cpus), named,
                   floating, pod.decision_id or "")


def grew(before: Holding | None, after: Holding | None) -> bool:
    """Whether `after` takes anything `before` did not (a new node, or more of anything)."""
    if after is None:
        return False
    if before is None or before.node != after.node:
        return True
    return (after.cpu_milli > before.cpu_milli or after.memory_mib > before.memory_mib
            or after.floating_gpus > before.floating_gpus
            or any(v > before.numa_cpus.get(k, 0) for k, v in after.numa_cpus.items())
            or any(v > before.gpus.get(k, 0) for k, v in after.gpus.items()))
