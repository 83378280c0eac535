"""The target workload FGD measures fragmentation against: the "typical
pods" of a workload (openb METHOD.md §2.4, simulator `GetTypicalPods`).

`typical_workload` (published): count every distinct shape (CPU-only pods
included), sort by count descending — equal counts by the larger shape
first (CPU, then milli-GPU, then GPU count, then model list) as the
simulator's reversed sort does — and keep shapes until they cover ≥
`coverage` of the pods; the kept shapes' frequencies are renormalised to
sum to 1.

`by_model` (Tidal's, for `fgd-cpu`): the same cut made on the shapes
without their GPU-model constraint, then each kept shape's popularity
split over the constraints seen with it, in proportion:

    p(cpu, gpu, models) = p(cpu, gpu) · n(cpu, gpu, models) / n(cpu, gpu)

Why: a constraint multiplies the distinct shapes (one per model set), so
the published cut drops constrained shapes first — each is rare although
together they are common (about a third of production GPU pods; on the
`spec35` stress variant the published cut keeps 32 % of the GPU weight
constrained, and drops whole model sets for some shapes). The demand a
scarce GPU model must keep room for then vanishes from the target.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


class Shape(NamedTuple):
    """A pod's resource shape: CPU, milli-GPU per GPU, GPU count, allowed
    GPU models (empty = any). A tuple: every decision makes one and looks
    it up in the score cache, and a tuple is made, hashed and compared in C
    (a frozen dataclass in Python: 2-3 µs a decision)."""

    cpu_milli: int
    gpu_milli: int = 0
    gpu_count: int = 0
    models: tuple[str, ...] = ()

    @property
    def gpu_total(self) -> int:
        return self.gpu_milli * self.gpu_count

    @property
    def bare(self) -> "Shape":
        """The shape without its GPU-model constraint."""
        return Shape(self.cpu_milli, self.gpu_milli, self.gpu_count)


@dataclass(frozen=True)
class TargetWorkload:
    """Shapes and their popularity (Σ = 1); `observed` the shape counts it
    was drawn from (empty when built by hand) and `coverage` the cut."""

    shapes: tuple[Shape, ...]
    popularity: np.ndarray
    observed: tuple[tuple[Shape, int], ...] = ()
    coverage: float = 0.95


def _ranked(counts: Counter) -> list[tuple[Shape, int]]:
    return sorted(counts.items(), key=lambda kv: (kv[1], kv[0].cpu_milli, kv[0].gpu_milli, kv[0].gpu_count,
                                                  "|".join(kv[0].models)), reverse=True)


def _cut(counts: Counter, coverage: float) -> list[tuple[Shape, int]]:
    # the most popular shapes until they cover ≥ coverage of the pods
    total, covered, kept = sum(counts.values()), 0, []
    for shape, n in _ranked(counts):
        if covered >= coverage * total:
            break
        kept.append((shape, n))
        covered += n
    return kept


def typical_workload(shapes: Iterable[Shape], coverage: float = 0.95) -> TargetWorkload:
    """The most popular shapes covering ≥ `coverage` of `shapes`, renormalised."""
    return workload_of_counts(Counter(shapes), coverage)


def workload_of_counts(counts: Counter, coverage: float = 0.95) -> TargetWorkload:
    """`typical_workload` of the shapes `counts` counts (none counted zero times)."""
    if not counts:
        raise ValueError("a target workload needs at least one pod shape")
    kept = _cut(counts, coverage)
    weights = np.array([n for _, n in kept], dtype=np.float64)
    return TargetWorkload(shapes=tuple(s for s, _ in kept), popularity=weights / weights.sum(),
                          observed=tuple(_ranked(counts)), coverage=coverage)


def drift(old: TargetWorkload, new: TargetWorkload) -> float:
    """The share of pods whose shape would have to change to turn `old`'s
    pods into `new`'s (total variation between the shape counts observed,
    or the targets' popularity when built by hand): 0 for the same mix, 1
    for mixes with no shape in common."""
    def shares(w: TargetWorkload) -> dict[Shape, float]:
        counts = w.observed or tuple(zip(w.shapes, w.popularity.tolist()))
        total = sum(n for _, n in counts)
        return {shape: n / total for shape, n in counts}
    a, b = shares(old), shares(new)
    return 0.5 * sum(abs(a.get(shape, 0.0) - b.get(shape, 0.0)) for shape in a.keys() | b.keys())


def by_model(workload: TargetWorkload) -> TargetWorkload:
    """The workload's target with the cut made on shapes without their model
    constraint and each kept shape split over its constraints (see the
    module docstring); `workload` itself when it records no observations."""
    if not workload.observed:
        return workload
    bare: Counter = Counter()
    constraints: dict[Shape, Counter] = {}
    for shape, n in workload.observed:
        bare[shape.bare] += n
        constraints.setdefault(shape.bare, Counter())[shape.models] += n
    kept = _cut(bare, workload.coverage)
    total = sum(n for _, n in kept)
    shapes, weights = [], []
    for shape, n in kept:
        for models, m in sorted(constraints[shape].items()):
            shapes.append(Shape(shape.cpu_milli, shape.gpu_milli, shape.gpu_count, models))
            weights.append(m / total)  # = p(cpu, gpu) · n(…, models) / n(cpu, gpu)
    return TargetWorkload(tuple(shapes), np.array(weights), workload.observed, workload.coverage)
