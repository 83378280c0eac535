"""The GPU placement strategies, by name: an explicit registry of factories
`new(workload=None, **options) -> GpuStrategy` (one module per strategy).
`make_strategy` wraps the row-local ones (ROW_LOCAL) in `ScoreCache`,
which gives the same decisions faster; `reference=True` returns the plain
strategy, the reference the cache is tested against.

- `best-fit`: least leftover CPU/GPU (`gpu_bestfit`).
- `fgd`: Fragmentation Gradient Descent as published (`gpu_fgd`).
- `fgd-cpu`: FGD against a target that keeps GPU-model constraints, with
  CPU-deficit tie-breaks (`gpu_fgd_cpu`): at least FGD's GPU allocation on
  the openb trace and every stress variant, more on most.
- `joint`: a window of pending pods decided together, in the best of
  several orders, by a per-pod strategy (`gpu_joint`); off by default.
  `solver=cpsat` adds a CP-SAT pass (`gpu_joint_cpsat`, OR-Tools installed
  apart).
"""

from __future__ import annotations

from collections.abc import Callable

from . import gpu_bestfit, gpu_fgd, gpu_fgd_cpu, gpu_joint
from .gpu_candidates import GpuStrategy
from .gpu_score_cache import ScoreCache
from .gpu_workload import TargetWorkload

GPU_STRATEGIES: dict[str, Callable[..., GpuStrategy]] = {
    gpu_bestfit.NAME: gpu_bestfit.new,
    gpu_fgd.NAME: gpu_fgd.new,
    gpu_fgd_cpu.NAME: gpu_fgd_cpu.new,
    gpu_joint.NAME: gpu_joint.new,
}

# a candidate's score depends on its own row and the pod only (gpu_score_cache)
ROW_LOCAL = frozenset({gpu_fgd.NAME, gpu_fgd_cpu.NAME})


def make_strategy(name: str, workload: TargetWorkload | None = None, *, reference: bool = False,
                  **options) -> GpuStrategy:
    """Build the strategy registered as `name` (cached unless `reference`)."""
    try:
        factory = GPU_STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown GPU strategy {name!r}; known: {', '.join(sorted(GPU_STRATEGIES))}") from None
    strategy = factory(workload, **options)
    return ScoreCache(strategy) if name in ROW_LOCAL and not reference else strategy
