"""GPU fragmentation of a node w.r.t. a target workload (FGD, ATC '23;
openb METHOD.md §2), vectorised over nodes.

A target workload is a set of pod shapes m = (cpu_m, milli_m per GPU,
count_m GPUs, allowed models) with popularity p_m (Σ p_m = 1). For a node
with CPU left c and per-device milli-GPU left L_g, idle = Σ_g L_g and

    frag_n(m) = Σ_g L_g·[L_g < milli_m]   if m asks GPUs, may use the node's model,
                                          c ≥ cpu_m and #{g: L_g ≥ milli_m} ≥ count_m   (q3)
              = idle                      otherwise (CPU-only shape, no access,
                                          lacking CPU and/or GPU)
    F_n       = Σ_m p_m · frag_n(m)
              = idle − Σ_{m in q3} p_m · (idle − small_m)

Shapes with the same GPU part (milli, count, models) share one column `j`,
weighted by Σ p_m over their members whose CPU fits. `after_share`
evaluates the node after putting `milli` on each device in turn with a
per-device delta, so no (node × device) copies of the node are built.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .gpu_workload import TargetWorkload


@dataclass
class FragModel:
    """The fragmentation measure for one target workload."""

    workload: TargetWorkload
    _access: dict[tuple[str, ...], np.ndarray] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        gpu_parts = sorted({(s.gpu_milli, s.gpu_count, s.models) for s in self.workload.shapes if s.gpu_milli > 0})
        self.parts = gpu_parts
        self.milli = np.array([p[0] for p in gpu_parts], dtype=np.int64)
        self.count = np.array([p[1] for p in gpu_parts], dtype=np.int64)
        self.shape_cpu = np.array([s.cpu_milli for s in self.workload.shapes], dtype=np.int64)
        weight = np.zeros((len(self.workload.shapes), len(gpu_parts)))
        index = {p: j for j, p in enumerate(gpu_parts)}
        for i, (s, p) in enumerate(zip(self.workload.shapes, self.workload.popularity)):
            if s.gpu_milli > 0:
                weight[i, index[(s.gpu_milli, s.gpu_count, s.models)]] = p
        self.weight = weight

    def access(self, models: tuple[str, ...]) -> np.ndarray:
        """(parts × (len(models)+1)): may part j use model id k; the last
        column stands for "node without GPUs" and is always False."""
        table = self._access.get(models)
        if table is None:
            table = np.zeros((len(self.parts), len(models) + 1), dtype=bool)
            for j, (_, _, allowed) in enumerate(self.parts):
                table[j, :len(models)] = [not allowed or m in allowed for m in models]
            self._access[models] = table
        return table

    def q3_weight(self, cpu_left: np.ndarray, model: np.ndarray, models: tuple[str, ...]) -> np.ndarray:
        """(nodes × parts): Σ p_m of the shapes in part j whose CPU fits and
        whose model constraint admits the node's model."""
        fits = (cpu_left[:, None] >= self.shape_cpu[None, :]).astype(np.float64)
        access = self.access(models)
        return (fits @ self.weight) * access[:, np.where(model < 0, len(models), model)].T

    def counts(self, gpu_left: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(nodes × parts): devices able to host a part's per-GPU milli, and
        the milli left on the devices too small for it."""
        left = gpu_left[:, :, None]
        small = left < self.milli[None, None, :]
        return (~small).sum(axis=1), (left * small).sum(axis=1)

    def node_frag(self, cpu_left: np.ndarray, gpu_left: np.ndarray, model: np.ndarray,
                  models: tuple[str, ...]) -> np.ndarray:
        """F_n for every row (milli-GPU)."""
        idle = gpu_left.sum(axis=1)
        can, small = self.counts(gpu_left)
        q3 = self.q3_weight(cpu_left, model, models) * (can >= self.count[None, :])
        return idle - (q3 * (idle[:, None] - small)).sum(axis=1)

    def after_whole(self, cpu_left: np.ndarray, gpu_left: np.ndarray, model: np.ndarray,
                    models: tuple[str, ...], gpus: int) -> np.ndarray:
        """F_n after taking `gpus` whole free devices (which ones does not
        matter: a full device is never "too small") and the CPU already
        subtracted from `cpu_left`."""
        idle = gpu_left.sum(axis=1) - 1000 * gpus
        can, small = self.counts(gpu_left)
        q3 = self.q3_weight(cpu_left, model, models) * (can - gpus >= self.count[None, :])
        return idle - (q3 * (idle[:, None] - small)).sum(axis=1)

    def after_share(self, cpu_left: np.ndarray, gpu_left: np.ndarray, model: np.ndarray,
                    models: tuple[str, ...], milli: int) -> np.ndarray:
        """(nodes × devices): F_n after putting `milli` on device g (CPU
        already subtracted from `cpu_left`); meaningless where L_g < milli."""
        can, small = self.counts(gpu_left)
        left = gpu_left[:, :, None]
        after = left - milli
        m = self.milli[None, None, :]
        can2 = can[:, None, :] + (after >= m).astype(np.int64) - (left >= m)
        small2 = small[:, None, :] + after * (after < m) - left * (left < m)
        idle2 = (gpu_left.sum(axis=1) - milli)[:, None, None]
        q3 = self.q3_weight(cpu_left, model, models)[:, None, :] * (can2 >= self.count[None, None, :])
        return idle2[:, :, 0] - (q3 * (idle2 - small2)).sum(axis=2)
