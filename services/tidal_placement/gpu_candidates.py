"""What every GPU strategy scores: the nodes that passed the filters, as
arrays, and the small device-choice rules strategies share.

A strategy is an object with `name`, `scores_cpu_pods` and
`score(candidates, shape) -> Scored`; `cost` is lower-is-better per
candidate, `device` the device a GPU-share pod would take on each
candidate (−1 otherwise), `tiebreak` an optional second key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from .gpu_workload import Shape

GPU_MILLI = 1000


@dataclass(frozen=True)
class Candidates:
    """Feasible nodes for one pod. `gpu_free` is (nodes × devices) milli
    left, `eligible` the devices this pod may use, `model` the node GPU
    model id (−1 = none) into `models`."""

    rows: np.ndarray
    cpu_free: np.ndarray
    gpu_free: np.ndarray
    eligible: np.ndarray
    model: np.ndarray
    models: tuple[str, ...]


class Scored(NamedTuple):
    cost: np.ndarray
    device: np.ndarray
    tiebreak: np.ndarray | None = None


class GpuStrategy(Protocol):
    name: str
    scores_cpu_pods: bool

    def score(self, candidates: Candidates, shape: Shape) -> Scored: ...


def is_share(shape: Shape) -> bool:
    """A pod asking part of one GPU."""
    return shape.gpu_count == 1 and 0 < shape.gpu_milli < GPU_MILLI


def share_options(c: Candidates, milli: int) -> np.ndarray:
    """(nodes × devices): devices that can take a `milli` share."""
    return c.eligible & (c.gpu_free >= milli)


def best_fit_device(gpu_free: np.ndarray, options: np.ndarray) -> np.ndarray:
    """Per row, the option with the least milli left (ties: lowest index),
    so shares of one physical GPU are packed until it is full; −1 if none."""
    masked = np.where(options, gpu_free, np.iinfo(np.int64).max)
    device = np.argmin(masked, axis=1)
    return np.where(options.any(axis=1), device, -1)


def whole_devices(gpu_free: np.ndarray, eligible: np.ndarray, count: int) -> list[int]:
    """The `count` lowest-index whole free devices of one node (as the
    simulator's `AllocateExclusiveGpuId`), or [] when there are too few."""
    free = np.flatnonzero(eligible & (gpu_free == GPU_MILLI))
    return [int(g) for g in free[:count]] if len(free) >= count else []


def no_device(n: int) -> np.ndarray:
    """The `device` column for pods that do not share a GPU."""
    return np.full(n, -1, dtype=np.int64)


def sigmoid_score(delta: np.ndarray) -> np.ndarray:
    """FGD's integer node score: ⌊100 · sigmoid(Δ / 1000)⌋ (higher is better)."""
    with np.errstate(over="ignore"):
        return np.floor(100.0 / (1.0 + np.exp(-delta / 1000.0)))
