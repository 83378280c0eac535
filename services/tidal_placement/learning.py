"""The GPU strategy the service decides with, built from the pod shapes it
has seen (fragmentation-aware strategies need a typical workload)."""

from __future__ import annotations

import logging
import math
from collections import Counter, deque

from .gpu_score_cache import ScoreCache
from .gpu_strategies import make_strategy
from .gpu_workload import Shape, TargetWorkload, drift, workload_of_counts
from .kept import PodLike
from .pod_request import PodRequest

log = logging.getLogger("tidal.placement")

SHAPES_KEPT = 5000


def refresh_due(seen: int, every: int) -> bool:
    """Rebuild the typical workload after the 1st, 2nd, 4th, 8th… pod seen,
    then every `every` pods: a workload learnt from one pod and kept for the
    next `every` decisions cost fgd-cpu 1.2 points of GPU allocation on the
    openb trace (95.72 % with the whole trace's workload, 94.55 % learning it
    every 500 pods, 95.73 % with the doubling start)."""
    return (seen & (seen - 1) == 0 and seen < every) or seen % every == 1 or every == 1


def sampling_drift(shares: dict, window: int, replaced: int) -> float:
    """The drift (`gpu_workload.drift`) two windows of `window` shapes drawn
    from one unchanging mix show on average when `replaced` of their shapes
    differ (the rest shared): sampling noise alone. `shares`: the mix,
    shape -> share. Each shape's share differs by (b − a) / window, a and b
    binomial(replaced, p): normal with σ = √(2·replaced·p(1−p)) / window,
    whose mean absolute value is σ·√(2/π)."""
    if not replaced or not window:
        return 0.0
    scale = math.sqrt(4 * replaced / math.pi) / window
    return 0.5 * scale * sum(math.sqrt(p * (1 - p)) for p in shares.values())


class StrategyLearner:
    """`strategy` is best-fit until the first pod shape is seen, then the
    configured strategy over the last SHAPES_KEPT shapes, rebuilt when
    `refresh_due` and the shapes seen have drifted from those it was built
    from by more than `tolerance` (`drift`; 0: whenever they changed).

    With a tolerance, once the strategy was built from a full window, the
    new window is no better an estimate of an unchanging mix than the old
    one, only another sample of it: the drift must then also exceed what
    sampling alone gives two windows that differ in the shapes seen since
    (`sampling_drift`). With many shapes that noise passes any small
    tolerance (56 evenly mixed shapes, two windows of 5,000 apart: 6 %), and
    every rebuild then rescored every node state for nothing. A mix that
    really moves still rebuilds: its drift grows with the pods seen, the
    noise with their square root."""

    def __init__(self, name: str, every: int, tolerance: float = 0.0) -> None:
        self.name, self.every, self.tolerance = name, every, tolerance
        self.seen = 0
        self.shapes: deque = deque(maxlen=SHAPES_KEPT)
        # `shapes` counted as they come and go: a relearn then costs no count of
        # all 5,000 (1.4 % of placement's CPU in a burst, when it did)
        self.counts: Counter = Counter()
        self.strategy = make_strategy("best-fit")
        self.workload: TargetWorkload | None = None  # what `strategy` was built from
        self.built_at = 0  # `seen` when it was built
        self.rebuilds = 0

    def observe(self, pod: PodLike) -> None:
        self.observe_shape(PodRequest.from_pod(pod).shape)

    def observe_shape(self, shape: Shape) -> None:
        if len(self.shapes) == self.shapes.maxlen:
            gone = self.shapes[0]
            if self.counts[gone] == 1:
                del self.counts[gone]
            else:
                self.counts[gone] -= 1
        self.shapes.append(shape)
        self.counts[shape] += 1
        self.seen += 1
        if not refresh_due(self.seen, self.every):
            return
        workload = workload_of_counts(self.counts)
        # A strategy rebuilt scores every node state afresh for every shape: not
        # worth it for a mix that moved no more than sampling noise (see settings)
        if self.workload is not None and drift(self.workload, workload) <= self.tolerance + self._noise():
            return
        try:
            strategy = make_strategy(self.name, workload)
        except ValueError as exc:
            log.warning("GPU strategy %s unavailable (%s); using best-fit", self.name, exc)
            return
        if isinstance(strategy, ScoreCache):
            strategy.succeed(self.strategy)
        self.strategy, self.workload, self.built_at = strategy, workload, self.seen
        self.rebuilds += 1

    def _noise(self) -> float:
        # `sampling_drift` between the window the strategy was built from and the
        # current one, when both were full (0 before: the new window is the better
        # estimate; and with no tolerance, which rebuilds whenever the mix changed)
        window = self.shapes.maxlen
        if not self.tolerance or sum(n for _, n in self.workload.observed) < window:
            return 0.0
        return sampling_drift({shape: n / window for shape, n in self.counts.items()}, window,
                              min(self.seen - self.built_at, window))
