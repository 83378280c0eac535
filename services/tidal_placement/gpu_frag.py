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

With `no_access_is_fragment=False` (Tidal's `fgd-cpu`) a GPU shape whose
constraint excludes the node's model counts nothing on that node instead
of all its idle GPU: such pods cannot use the node, so its GPUs are not
fragmented for them — they are out of their reach however the node is
filled. FGD's class `no_access` adds p_m · idle instead, which makes every
GPU taken from a node fewer shapes may use look like fragmentation removed:
FGD then fills the scarce models first, the very ones constrained pods
need (on the `spec35` variant most GPUs left idle are G2 while T4- and
P100-constrained pods fail).

Computed per GPU demand d = (milli, count) — shapes differing only in CPU
or models share its `can`/`small` figures — with the q3 weight read from a
table: W[k, i, d] = Σ p_m over shapes of demand d that may use model k
and whose CPU fits in i thresholds (i = how many distinct shape CPUs are
≤ c). A row's figures come from its own values only, the same whatever
other rows are computed with it (`gpu_score_cache` relies on that).
`after_share` evaluates the node after putting `milli` on each device in
turn with a per-device delta, so no (node × device) copies are built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .gpu_workload import TargetWorkload


@dataclass
class FragModel:
    """The fragmentation measure for one target workload."""

    workload: TargetWorkload
    no_access_is_fragment: bool = True
    _tables: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        gpu = [(s, p) for s, p in zip(self.workload.shapes, self.workload.popularity) if s.gpu_milli > 0]
        self.demands = sorted({(s.gpu_milli, s.gpu_count) for s, _ in gpu})
        self.milli = np.array([d[0] for d in self.demands], dtype=np.int64)
        self.count = np.array([d[1] for d in self.demands], dtype=np.int64)
        self.thresholds = np.array(sorted({s.cpu_milli for s, _ in gpu}), dtype=np.int64)
        self._gpu_shapes = gpu
        self._milli_3d = self.milli[None, None, :]

    def tables(self, models: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """W ((models+1) · (thresholds+1) rows × demands: model-major, so a
        node's row is model · (thresholds+1) + how many thresholds its CPU
        reaches) and the idle weight per model ((models+1)); the last model
        stands for "no GPU"."""
        tables = self._tables.get(models)
        if tables is None:
            k, d = len(models) + 1, {dem: j for j, dem in enumerate(self.demands)}
            steps = np.zeros((k, len(self.thresholds) + 1, len(self.demands)))
            barred = np.zeros(k)
            for s, p in self._gpu_shapes:
                fits_from = int(np.searchsorted(self.thresholds, s.cpu_milli)) + 1
                for m, name in enumerate(models):
                    if not s.models or name in s.models:
                        steps[m, fits_from, d[(s.gpu_milli, s.gpu_count)]] += p
                    else:
                        barred[m] += p
            idle_weight = np.ones(k) if self.no_access_is_fragment else 1.0 - barred
            idle_weight[-1] = 1.0
            tables = (np.cumsum(steps, axis=1).reshape(k * (len(self.thresholds) + 1), -1), idle_weight)
            self._tables[models] = tables
        return tables

    def figures(self, gpu_left: np.ndarray, model: np.ndarray, models: tuple[str, ...]) -> "Figures":
        """The CPU-independent figures of every row, computed once per call."""
        left = gpu_left[:, :, None]
        small = left < self._milli_3d
        weight, idle_weight = self.tables(models)
        k = np.where(model < 0, len(models), model)
        return Figures(idle=gpu_left.sum(axis=1), can=gpu_left.shape[1] - small.sum(axis=1),
                       small=(left * small).sum(axis=1), table_row=k * (len(self.thresholds) + 1),
                       idle_weight=idle_weight[k], table=weight)

    def q3_weight(self, fig: "Figures", cpu_left: np.ndarray) -> np.ndarray:
        """(nodes × demands): Σ p_m of the shapes of demand d whose CPU fits
        and whose model constraint admits the node's model."""
        return fig.table[fig.table_row + self.thresholds.searchsorted(cpu_left, side="right")]

    def frag_of(self, fig: "Figures", cpu_left: np.ndarray) -> np.ndarray:
        """F_n for every row (milli-GPU), CPU left `cpu_left`."""
        q3 = self.q3_weight(fig, cpu_left) * (fig.can >= self.count[None, :])
        return fig.idle * fig.idle_weight - (q3 * (fig.idle[:, None] - fig.small)).sum(axis=1)

    def whole_after(self, fig: "Figures", cpu_left: np.ndarray, gpus: int | np.ndarray) -> np.ndarray:
        """F_n after taking `gpus` (per row, or one number) whole free devices
        (which ones does not matter: a full device is never "too small") and
        the CPU already subtracted from `cpu_left`."""
        gpus = np.asarray(gpus)
        idle = fig.idle - 1000 * gpus
        q3 = self.q3_weight(fig, cpu_left) * (fig.can - gpus.reshape(-1, 1) >= self.count[None, :])
        return idle * fig.idle_weight - (q3 * (idle[:, None] - fig.small)).sum(axis=1)

    def share_after(self, fig: "Figures", gpu_left: np.ndarray, cpu_left: np.ndarray,
                    milli: int | np.ndarray) -> np.ndarray:
        """(nodes × devices): F_n after putting `milli` (per row, or one
        number) on device g (CPU already subtracted from `cpu_left`);
        meaningless where L_g < milli."""
        milli = np.asarray(milli).reshape(-1, 1)
        left = gpu_left[:, :, None]
        after = left - milli[:, :, None]
        m = self.milli[None, None, :]
        can2 = fig.can[:, None, :] + (after >= m).astype(np.int64) - (left >= m)
        small2 = fig.small[:, None, :] + after * (after < m) - left * (left < m)
        idle2 = (fig.idle[:, None] - milli)[:, :, None]
        q3 = self.q3_weight(fig, cpu_left)[:, None, :] * (can2 >= self.count[None, None, :])
        return idle2[:, :, 0] * fig.idle_weight[:, None] - (q3 * (idle2 - small2)).sum(axis=2)

    # the same figures for callers holding plain arrays (replay logs, tests)
    def node_frag(self, cpu_left, gpu_left, model, models) -> np.ndarray:
        """F_n for every row (milli-GPU)."""
        return self.frag_of(self.figures(gpu_left, model, models), cpu_left)

    def after_whole(self, cpu_left, gpu_left, model, models, gpus) -> np.ndarray:
        """F_n after taking `gpus` whole free devices (see `whole_after`)."""
        return self.whole_after(self.figures(gpu_left, model, models), cpu_left, gpus)

    def after_share(self, cpu_left, gpu_left, model, models, milli) -> np.ndarray:
        """(nodes × devices): F_n after a `milli` share on each device (see `share_after`)."""
        return self.share_after(self.figures(gpu_left, model, models), gpu_left, cpu_left, milli)


class Figures(NamedTuple):
    """Per row: idle milli-GPU, per demand the devices able to host it and
    the milli left on those too small, the first row of its model in W and
    the idle weight; and W itself."""

    idle: np.ndarray
    can: np.ndarray
    small: np.ndarray
    table_row: np.ndarray
    idle_weight: np.ndarray
    table: np.ndarray
