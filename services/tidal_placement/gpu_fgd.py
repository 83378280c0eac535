"""Fragmentation Gradient Descent (Weng et al., ATC '23), as the simulator
runs it (`fgd_score.go`; openb METHOD.md §2.5).

For each feasible node, with F the fragmentation of `gpu_frag`:

    Δ     = F_n(before) − F_n(after placing the pod)
    score = ⌊100 · sigmoid(Δ / 1000)⌋          (higher is better; cost = −score)

A GPU-share pod tries every device that fits and keeps the first device
with the highest score; whole-GPU pods take the lowest-index free devices
(which ones does not change F). CPU-only pods are scored too: their CPU
can strand a node's GPUs. Ties between nodes are left to `decide`; the
published numbers are reproduced when they go to the first node of a
random node order (the simulator's permuted node names), not when they go
uniformly at random (see gpu_fgd_cpu).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .gpu_candidates import Candidates, Scored, is_share, share_options, sigmoid_score
from .gpu_fgd_few import PlainFrag, plain_scored
from .gpu_frag import Figures, FragModel
from .gpu_workload import Shape, TargetWorkload

NAME = "fgd"


def frag_deltas(frag: FragModel, c: Candidates, shape: Shape) -> np.ndarray:
    """Δ = F(before) − F(after): (nodes,) for whole-GPU and CPU-only pods,
    (nodes × devices) for a GPU share (−inf where the device cannot take it)."""
    fig, before = frag_before(frag, c)
    cpu_after = c.cpu_free - shape.cpu_milli
    if is_share(shape):
        after = frag.share_after(fig, c.gpu_free, cpu_after, shape.gpu_milli)
        return np.where(share_options(c, shape.gpu_milli), before[:, None] - after, -np.inf)
    if shape.gpu_count:
        return before - frag.whole_after(fig, cpu_after, shape.gpu_count)
    return before - frag.frag_of(fig, cpu_after)


def frag_before(frag: FragModel, c: Candidates) -> tuple[Figures, np.ndarray]:
    """The candidates' figures and F before the pod. When they are a score
    cache's node states (which keep `derived` figures), these are kept per
    state: they are the same for every shape, and a rebuilt strategy
    scores every state again for each shape."""
    derived = getattr(c.state, "derived", None)
    if derived is None:
        fig = frag.figures(c.gpu_free, c.model, c.models)
        return fig, frag.frag_of(fig, c.cpu_free)
    models = c.models
    kept = derived.get(NAME)
    if kept is None or kept.frag is not frag or kept.models != models:
        kept = derived[NAME] = _KeptBefore(frag, models)
    return kept.read(c)


class _KeptBefore:
    """`frag_before` of node states, by state id (`known`: computed yet)."""

    FIELDS = ("idle", "can", "small", "table_row", "idle_weight", "before")

    def __init__(self, frag: FragModel, models: tuple[str, ...]):
        self.frag, self.models = frag, models
        self.known = np.zeros(0, dtype=bool)

    def read(self, c: Candidates) -> tuple[Figures, np.ndarray]:
        sids = c.rows
        if len(self.known) <= sids.max(initial=-1):
            self._grow(2 * int(sids.max()) + 1)
        missing = sids[~self.known[sids]]
        if missing.size:
            state = c.state
            fig = self.frag.figures(state.gpu_free[missing], state.gpu_model[missing], self.models)
            for name, values in zip(self.FIELDS, (*fig[:5], self.frag.frag_of(fig, state.cpu_free[missing]))):
                getattr(self, name)[missing] = values
            self.known[missing] = True
        idle, can, small, table_row, idle_weight, before = (getattr(self, name)[sids] for name in self.FIELDS)
        return Figures(idle, can, small, table_row, idle_weight, self.frag.tables(self.models)[0]), before

    @property
    def nbytes(self) -> int:
        return self.known.nbytes + sum(getattr(self, name).nbytes for name in self.FIELDS if hasattr(self, name))

    def _grow(self, size: int) -> None:
        demands, old = len(self.frag.demands), len(self.known)
        self.known = np.concatenate([self.known, np.zeros(size - old, dtype=bool)])
        for name in self.FIELDS:
            wide = name in ("can", "small")
            current = getattr(self, name, None)
            fresh = np.zeros((size, demands) if wide else size,
                             dtype=np.float64 if name in ("idle_weight", "before") else np.int64)
            if current is not None:
                fresh[:old] = current
            setattr(self, name, fresh)


@dataclass
class Fgd:
    frag: FragModel
    name: str = NAME
    scores_cpu_pods: bool = True
    _plain: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def score(self, c: Candidates, shape: Shape) -> Scored:
        """Cost = −FGD score per node; for shares the device chosen."""
        delta = frag_deltas(self.frag, c, shape)
        if delta.ndim == 1:
            return Scored(cost=-sigmoid_score(delta))
        score = np.where(np.isfinite(delta), sigmoid_score(delta), -1.0)
        device = np.argmax(score, axis=1)  # first device among equal scores, as the plugin's strict '>'
        return Scored(cost=-score[np.arange(len(device)), device], device=device)

    def score_few(self, c: Candidates, shape: Shape) -> Scored | None:
        """`score` of a few candidates in plain Python (`gpu_fgd_few`); None
        when `score` itself must answer."""
        scored = PlainFrag.of(self.frag, c.models, self._plain).scores(c.plain(), shape, fullest_on_ties=False)
        if scored is None:
            return None
        return plain_scored(scored, shape)


def new(workload: TargetWorkload | None = None, **options) -> Fgd:
    """Factory for the registry; FGD needs the target workload."""
    if workload is None:
        raise ValueError("fgd needs a target workload (typical pod shapes)")
    return Fgd(FragModel(workload), **options)
