"""Best fit: the node left with the least free resources after the pod.

    leftover = ½ · (cpu_free − cpu) / cpu_norm + ½ · (gpu_idle − gpu) / gpu_norm

lowest wins (the simulator's BestFit, normalised by 128 CPUs and 8 GPUs).
A GPU share goes to the fullest device that still fits. With `quantised`
the leftover is turned into the simulator's integer score —
⌊(1 − leftover) · 100⌋ min-max normalised to 0..100 — so ties appear as
they do in kube-scheduler (used to reproduce the published baseline).
By default CPU-only pods are left to §E NUMA scoring.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .gpu_candidates import Candidates, Scored
from .gpu_workload import Shape, TargetWorkload

NAME = "best-fit"


@dataclass(frozen=True)
class BestFit:
    name: str = NAME
    scores_cpu_pods: bool = False
    cpu_norm: float = 128_000.0
    gpu_norm: float = 8_000.0
    quantised: bool = False

    def score(self, c: Candidates, shape: Shape) -> Scored:
        """Leftover per candidate (lower is better) and the share device."""
        leftover = (0.5 * (c.cpu_free - shape.cpu_milli) / self.cpu_norm
                    + 0.5 * (c.gpu_idle - shape.gpu_total) / self.gpu_norm)
        cost = -_normalised(np.trunc((1.0 - leftover) * 100.0)) if self.quantised else leftover
        return Scored(cost=cost)  # a share then goes to the fullest device that fits


def _normalised(score: np.ndarray) -> np.ndarray:
    # kube-scheduler NormalizeScore: integer min-max scaling to 0..100
    low, high = score.min(), score.max()
    if high == low:
        return np.zeros_like(score)
    return np.floor((score - low) * 100.0 / (high - low))


def new(workload: TargetWorkload | None = None, **options) -> BestFit:
    """Factory for the registry (the workload is not used)."""
    return BestFit(**options)
