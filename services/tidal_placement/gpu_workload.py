"""The target workload FGD measures fragmentation against: the "typical
pods" of a workload (openb METHOD.md §2.4, simulator `GetTypicalPods`).

Count every distinct shape (CPU-only pods included), sort by count
descending — equal counts by the larger shape first (CPU, then milli-GPU,
then GPU count, then model list) as the simulator's reversed sort does —
and keep shapes until they cover ≥ `coverage` of the pods; the kept shapes'
frequencies are renormalised to sum to 1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Shape:
    """A pod's resource shape: CPU, milli-GPU per GPU, GPU count, allowed
    GPU models (empty = any)."""

    cpu_milli: int
    gpu_milli: int = 0
    gpu_count: int = 0
    models: tuple[str, ...] = ()

    @property
    def gpu_total(self) -> int:
        return self.gpu_milli * self.gpu_count


@dataclass(frozen=True)
class TargetWorkload:
    """Shapes and their popularity (Σ = 1)."""

    shapes: tuple[Shape, ...]
    popularity: np.ndarray


def typical_workload(shapes: Iterable[Shape], coverage: float = 0.95) -> TargetWorkload:
    """The most popular shapes covering ≥ `coverage` of `shapes`, renormalised."""
    counts = Counter(shapes)
    if not counts:
        raise ValueError("a target workload needs at least one pod shape")
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0].cpu_milli, kv[0].gpu_milli, kv[0].gpu_count,
                                                    "|".join(kv[0].models)), reverse=True)
    kept: list[tuple[Shape, int]] = []
    covered = 0
    for shape, n in ranked:
        if covered >= coverage * total:
            break
        kept.append((shape, n))
        covered += n
    weights = np.array([n for _, n in kept], dtype=np.float64)
    return TargetWorkload(shapes=tuple(s for s, _ in kept), popularity=weights / weights.sum())
