"""Recorded run versus replay: which pods went elsewhere, and the cluster's
allocation and fragmentation at the window end on each side.

Allocation is allocated / allocatable (GPU in milli-GPU, CPU in milli-CPU)
over the nodes known at the window end. Fragmentation is Σ_n F_n by the
placement team's measure (`gpu_frag.FragModel`), against the typical pods
of the pods seen, in milli-GPU and as a share of the GPU capacity.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from tidal_placement import FragModel
from tidal_placement import typical_workload
from tidal_placement import PodRequest
from tidal_schemas import HOLDING_PHASES, NodeTopology

from .replay_plan import ReplayPlan


@dataclass(frozen=True)
class Placed:
    """Where a pod ended up and which GPU shares (gpu id, milli) it holds."""

    node: str
    gpus: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class SideSummary:
    placed: int
    gpu_allocation_pct: float
    cpu_allocation_pct: float
    frag_milli: float
    frag_pct: float


@dataclass
class Comparison:
    arrivals: int
    same: int
    moved: list[tuple[str, str, str]] = field(default_factory=list)  # (pod, recorded node, replay node)
    only_recorded: list[tuple[str, str, str]] = field(default_factory=list)  # (pod, recorded node, replay why)
    only_replay: list[tuple[str, str, str]] = field(default_factory=list)  # (pod, recorded why, replay node)
    neither: int = 0
    recorded: SideSummary | None = None
    replay: SideSummary | None = None

    @property
    def differs(self) -> int:
        return len(self.moved) + len(self.only_recorded) + len(self.only_replay)

    def to_json(self) -> dict:
        data = asdict(self)
        data["differs"] = self.differs
        return data


def compare(plan: ReplayPlan, replay: Mapping[str, Placed], replay_why: Mapping[str, str]) -> Comparison:
    """Pod by pod over the pods the replay decided, then both end states."""
    recorded = {k: Placed(o.node, o.gpus) for k, o in plan.recorded.items() if o.node}
    result = Comparison(arrivals=len(plan.arrivals), same=0)
    for key in plan.arrivals:
        before, after = recorded.get(key), replay.get(key)
        if before and after:
            if before.node == after.node:
                result.same += 1
            else:
                result.moved.append((key, before.node, after.node))
        elif before:
            result.only_recorded.append((key, before.node, replay_why.get(key, "no decision")))
        elif after:
            result.only_replay.append((key, plan.recorded[key].reason, after.node))
        else:
            result.neither += 1
    result.recorded = summarise(plan, recorded)
    result.replay = summarise(plan, replay)
    return result


def held_at_end(plan: ReplayPlan, decided: Mapping[str, Placed]) -> dict[str, Placed]:
    """Pods holding resources at the window end: the pods the replay did
    not decide as recorded, plus one side's decisions, less deletions."""
    held = {k: Placed(p.node, tuple((g.gpu, g.milli) for g in p.gpus))
            for k, p in plan.pods.items()
            if p.phase in HOLDING_PHASES and p.node and k not in plan.recorded}
    held.update({k: v for k, v in decided.items() if k not in plan.deleted})
    return held


def summarise(plan: ReplayPlan, decided: Mapping[str, Placed]) -> SideSummary:
    held = held_at_end(plan, decided)
    nodes = plan.nodes
    cpu_used: Counter[str] = Counter()
    gpu_used: dict[str, Counter[str]] = {n: Counter() for n in nodes}
    for key, placed in held.items():
        if placed.node not in nodes:
            continue
        cpu_used[placed.node] += plan.pods[key].requests.cpu_milli if key in plan.pods else 0
        for gpu, milli in placed.gpus:
            gpu_used[placed.node][gpu] += milli
    cpu_total = sum(n.allocatable.cpu_milli for n in nodes.values())
    gpu_total = 1000 * sum(len(_devices(n)) for n in nodes.values())
    gpu_alloc = sum(min(sum(used.values()), 1000 * len(_devices(nodes[n]))) for n, used in gpu_used.items())
    frag = fragmentation(nodes, cpu_used, gpu_used, plan.pods.values())
    return SideSummary(
        placed=sum(1 for k in decided if k in plan.recorded),
        gpu_allocation_pct=round(100 * gpu_alloc / gpu_total, 2) if gpu_total else 0.0,
        cpu_allocation_pct=round(100 * sum(cpu_used.values()) / cpu_total, 2) if cpu_total else 0.0,
        frag_milli=round(frag, 1),
        frag_pct=round(100 * frag / gpu_total, 2) if gpu_total else 0.0,
    )


def fragmentation(nodes: Mapping[str, NodeTopology], cpu_used: Mapping[str, int],
                  gpu_used: Mapping[str, Mapping[str, int]], pods) -> float:
    """Σ_n F_n over the GPU nodes, against the typical shapes of `pods`."""
    gpu_nodes = sorted(n for n, topo in nodes.items() if _devices(topo))
    shapes = [PodRequest.from_pod(p).shape for p in pods]
    if not gpu_nodes or not shapes:
        return 0.0
    models = tuple(sorted({_devices(nodes[n])[0].model for n in gpu_nodes}))
    width = max(len(_devices(nodes[n])) for n in gpu_nodes)
    cpu_left = np.array([max(nodes[n].allocatable.cpu_milli - cpu_used.get(n, 0), 0) for n in gpu_nodes],
                        dtype=np.int64)
    gpu_left = np.zeros((len(gpu_nodes), width), dtype=np.int64)
    for r, n in enumerate(gpu_nodes):
        for j, gpu in enumerate(_devices(nodes[n])):
            gpu_left[r, j] = max(1000 - gpu_used[n].get(gpu.id, 0), 0)
    model = np.array([models.index(_devices(nodes[n])[0].model) for n in gpu_nodes], dtype=np.int64)
    return float(FragModel(typical_workload(shapes)).node_frag(cpu_left, gpu_left, model, models).sum())


def _devices(node: NodeTopology):
    return [g for g in node.gpus if g.healthy]


