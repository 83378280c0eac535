"""Bounded allocatable (SPEC §D, seed 004), node level only.

    load > threshold:  allocatable = capacity
    otherwise:         allocatable = max(floor, min(w · capacity,
                                                    capacity · allocated / used,
                                                    capacity · allocated_LS / used_LS))
    floor = floor_fraction · capacity,  w > 1

A ratio term whose `used` is 0 is skipped — equivalently +∞, it never wins
the min — because nothing running says nothing about how much of the
allocation goes unused. With both skipped the result is w · capacity.

Worked example: 100 CPUs, 1 allocated, 10 used → 100 · 1/10 = 10 → floor 80.

NUMA nodes are never oversold: exclusive CPUs are physical, so oversell
publishes node totals only and every per-NUMA figure stays the agent's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tidal_schemas import Resources

POLICY = "bounded"


@dataclass(frozen=True)
class BoundedSettings:
    """Load threshold, cap multiplier w and floor of the bounded policy."""

    threshold: float = 0.75
    w: float = 1.5
    floor_fraction: float = 0.8

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if not self.w > 1:
            raise ValueError(f"w must be greater than 1, got {self.w}")
        if not 0.5 <= self.floor_fraction <= 1:
            raise ValueError(f"floor_fraction must be in [0.5, 1], got {self.floor_fraction}")


@dataclass(frozen=True)
class BoundedResult:
    """The allocatable of one resource, the term that set it, and all the
    figures an operator needs to redo the arithmetic."""

    allocatable: float
    chosen: str
    terms: dict[str, float]
    skipped: list[str]
    inputs: dict[str, float]
    reason: str
    policy: str = POLICY


def bounded_allocatable(capacity: float, allocated_total: float, used_total: float,
                        allocated_ls: float, used_ls: float, load: float,
                        threshold: float = 0.75, w: float = 1.5, floor_fraction: float = 0.8) -> BoundedResult:
    """Seed 004's allocatable of one resource (see the module docstring for
    the formula); `load` and `threshold` are fractions."""
    BoundedSettings(threshold, w, floor_fraction)  # validates
    inputs = {"capacity": capacity, "allocated_total": allocated_total, "used_total": used_total,
              "allocated_ls": allocated_ls, "used_ls": used_ls, "load": load, "threshold": threshold,
              "w": w, "floor_fraction": floor_fraction}
    if load > threshold:
        return BoundedResult(capacity, "capacity", {"capacity": capacity}, [], inputs,
                             f"load {load:.3f} > threshold {threshold:.3f}: no oversell, allocatable = capacity")
    terms = {"w*capacity": w * capacity}
    skipped = []
    for name, allocated, used in (("capacity*allocated/used", allocated_total, used_total),
                                  ("capacity*allocated_ls/used_ls", allocated_ls, used_ls)):
        if used > 0:
            terms[name] = capacity * allocated / used
        else:
            skipped.append(name)
    smallest = min(terms, key=lambda name: terms[name])  # insertion order breaks ties
    floor = floor_fraction * capacity
    terms["floor"] = floor
    chosen = "floor" if floor > terms[smallest] else smallest
    listed = ", ".join(f"{name}={value:g}" for name, value in terms.items() if name != "floor")
    skip_note = f" (skipped, used = 0: {', '.join(skipped)})" if skipped else ""
    return BoundedResult(terms[chosen], chosen, terms, skipped, inputs,
                         f"load {load:.3f} <= threshold {threshold:.3f}: max(floor={floor:g}, "
                         f"min({listed})){skip_note} = {terms[chosen]:g} from {chosen}")


@dataclass(frozen=True)
class NodeBounded:
    """Bounded allocatable of a whole node: CPU and memory by the formula,
    GPU unchanged (never oversold)."""

    allocatable: Resources
    cpu: BoundedResult
    memory: BoundedResult
    capacity: Resources = field(default_factory=Resources)

    def inputs(self) -> dict[str, float]:
        """Every figure, prefixed by resource, for `NodeAllocatable.inputs`."""
        flat = {}
        for prefix, result in (("cpu", self.cpu), ("memory", self.memory)):
            flat.update({f"{prefix}.{k}": v for k, v in result.inputs.items()})
            flat.update({f"{prefix}.term.{k}": v for k, v in result.terms.items()})
        return flat

    @property
    def reason(self) -> str:
        """Both resources' reasons, for `NodeAllocatable.reason`."""
        return f"cpu: {self.cpu.reason}; memory: {self.memory.reason}"


def bounded_node_allocatable(capacity: Resources, allocated: Resources, used: Resources,
                             allocated_ls: Resources, used_ls: Resources, load: float,
                             settings: BoundedSettings = BoundedSettings()) -> NodeBounded:
    """`bounded_allocatable` for CPU and memory of a node (rounded down to
    whole milli-CPU / MiB); GPU allocatable = GPU capacity."""
    def one(field_name: str) -> BoundedResult:
        return bounded_allocatable(getattr(capacity, field_name), getattr(allocated, field_name),
                                   getattr(used, field_name), getattr(allocated_ls, field_name),
                                   getattr(used_ls, field_name), load,
                                   settings.threshold, settings.w, settings.floor_fraction)

    cpu, memory = one("cpu_milli"), one("memory_mib")
    allocatable = Resources(cpu_milli=math.floor(cpu.allocatable), memory_mib=math.floor(memory.allocatable),
                            gpu_milli=capacity.gpu_milli)
    return NodeBounded(allocatable, cpu, memory, capacity)
