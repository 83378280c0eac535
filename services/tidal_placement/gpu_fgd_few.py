"""FGD's scores of a few node states, in plain Python.

After nearly every decision the score cache (`gpu_score_cache`) meets one
to a few node states it has not scored for the pod's shape: the node the
last decision moved, the nodes pods left. Scoring them with the vectorised
`gpu_frag` costs some sixty numpy calls on arrays of two or three rows, and
that per-call cost was a third of a decision. Here the same formulas run on
Python numbers, one state at a time.

`gpu_frag` stays the reference and the home of the measure: this module
reads its tables and repeats its formulas term for term (see `FragModel`:
`frag_of`, `whole_after`, `share_after`). The sums here may round in
another order than numpy's, so a delta can differ from the reference's in
its last bits. A node's FGD score is a whole step of that delta
(`sigmoid_score`), so `step` returns None for a delta within `MARGIN` of a
step, and the caller then scores the states with the vectorised strategy:
the scores, and so the decisions, are the reference's
(`tests/test_placement_fgd_few.py`).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from itertools import accumulate

from .gpu_candidates import EXP_CAP, GPU_MILLI, PlainRow, Scored, is_share
from .gpu_frag import FragModel
from .gpu_workload import Shape

# A score point is 1. Summing in another order moves a delta by at most a
# few ulps of the node's idle milli-GPU, a score by under 1e-9 of a point
# for nodes with up to a million milli-GPU idle: the margin is far above
# that and far below a point.
MARGIN = 1e-6
FAR = 1 << 62  # more milli than any device has left
REMEMBERED = 1 << 14  # distinct per-device figures kept, at most (a node's GPUs change only by its pods)


class PlainFrag:
    """A FragModel's tables for one list of GPU models, as Python lists."""

    @staticmethod
    def of(frag: FragModel, models: tuple[str, ...], memo: dict) -> "PlainFrag":
        """The PlainFrag of `frag` for `models`, made once per `memo`."""
        plain = memo.get(models)
        if plain is None:
            plain = memo[models] = PlainFrag(frag, models)
        return plain

    def __init__(self, frag: FragModel, models: tuple[str, ...]):
        table, idle_weight = frag.tables(models)
        self.table, self.idle_weight = table.tolist(), idle_weight.tolist()
        self.milli, self.count = frag.milli.tolist(), frag.count.tolist()
        self.thresholds, self.no_model = frag.thresholds.tolist(), len(models)
        self.width = len(self.thresholds) + 1
        # `_gpu_figures` by the milli left per device in device order, and sorted
        self._by_gpus: dict[tuple[int, ...], tuple[int, list[int], list[int], dict]] = {}
        self._by_sorted: dict[tuple[int, ...], tuple[int, list[int], list[int], dict]] = {}

    def scores(self, rows: list[PlainRow], shape: Shape, *, fullest_on_ties: bool) -> list[tuple[float, int]] | None:
        """FGD's score per candidate (`Candidates.plain`) and, for a GPU
        share, the device it takes (−1 otherwise): the best device's score,
        ties to the fullest device (`fullest_on_ties`, as fgd-cpu) or the
        first (as fgd). None when some delta lies within MARGIN of a step."""
        share, out = is_share(shape), []
        # W's row (FragModel.q3_weight) and the hits of `_gpu_figures` and `_known_frag`
        # inline: they run for every state
        by_gpus, width, thresholds, taken = self._by_gpus, self.width, self.thresholds, shape.cpu_milli
        for left, ok, model, cpu, _ in rows:
            k = self.no_model if model < 0 else model
            idle, can, small, known = by_gpus.get(left) or self._gpu_figures(left)
            row = k * width + bisect_right(thresholds, cpu)
            after_row = k * width + bisect_right(thresholds, cpu - taken)
            before = known.get(row)
            if before is None:
                before = self._known_frag(known, row, k, idle, can, small)
            if share:
                milli, by_free = shape.gpu_milli, {}  # devices with as much left score alike
                top, device, fullest = -1.0, -1, FAR  # the best device: its score, column and milli left
                for j, (usable, free) in enumerate(zip(ok, left)):
                    if not usable or free < milli:
                        continue
                    score = by_free.get(free)
                    if score is None:
                        after = known.get((after_row, free, milli))
                        if after is None:
                            after = known[after_row, free, milli] = self._share(after_row, k, idle, can, small,
                                                                                free, milli)
                        score = by_free[free] = step(before - after)
                        if score is None:
                            return None
                    # ties to the fullest device (the first of them), or to the first
                    if score > top or (score == top and fullest_on_ties and free < fullest):
                        top, device, fullest = score, j, free
                if device < 0:  # no device takes the share: every one scores −1, as the reference's
                    device = left.index(min(left)) if fullest_on_ties else 0
                out.append((top, device))
                continue
            if shape.gpu_count:
                gpus = shape.gpu_count
                after = known.get((after_row, gpus))
                if after is None:
                    after = known[after_row, gpus] = self._frag(after_row, k, idle - GPU_MILLI * gpus,
                                                                [n - gpus for n in can], small)
                score = step(before - after)
            elif after_row == row:
                # the reference computes both figures from the same numbers: Δ is 0 exactly,
                # a step (50) that no rounding margin could settle
                score = 50.0
            else:
                score = step(before - self._known_frag(known, after_row, k, idle, can, small))
                if score is None and self._terms(row, idle, can, small) == self._terms(after_row, idle, can, small):
                    score = 50.0  # other rows of W, the same terms: Δ is 0 exactly here too
            if score is None:
                return None
            out.append((score, -1))
        return out

    def _gpu_figures(self, left: tuple[int, ...]) -> tuple[int, list[int], list[int], dict]:
        # idle, and per demand the devices able to host it and the milli left on
        # the others (FragModel.figures): the same for every shape, CPU and model;
        # and the F known for these figures, by W's row, by (row, whole GPUs taken)
        # and by (row, device's milli left, share taken): a node's F before a pod
        # is the same for every shape, and after one often is too. All of it
        # depends on the milli left as a multiset, so one tuple serves every
        # order of the same devices (a node's pods leave in another order than
        # they came: most new orders are of a multiset met before)
        figures = self._by_gpus.get(left)
        if figures is None:
            if len(self._by_gpus) >= REMEMBERED:
                self._by_gpus.clear()
                self._by_sorted.clear()
            ascending = tuple(sorted(left))  # the devices below demand m: the first bisect_left(ascending, m)
            figures = self._by_sorted.get(ascending)
            if figures is None:
                below = [bisect_left(ascending, m) for m in self.milli]
                sums = [0, *accumulate(ascending)]  # sums[k]: the milli left on the first k
                figures = self._by_sorted[ascending] = (sums[-1], [len(left) - k for k in below],
                                                        [sums[k] for k in below], {})
            self._by_gpus[left] = figures
        return figures

    def _known_frag(self, known: dict, row: int, k: int, idle: int, can: list[int], small: list[int]) -> float:
        frag = known.get(row)
        if frag is None:
            frag = known[row] = self._frag(row, k, idle, can, small)
        return frag

    def _frag(self, row: int, k: int, idle: int, can: list[int], small: list[int]) -> float:
        # F = idle·w − Σ_d q3_d·[can_d ≥ count_d]·(idle − small_d)   (FragModel.frag_of, whole_after)
        # summed in order; a demand that does not fit adds 0.0, which changes no sum
        return idle * self.idle_weight[k] - sum(self._terms(row, idle, can, small))

    def _terms(self, row: int, idle: int, can: list[int], small: list[int]) -> list[float]:
        # the terms `_frag` sums, 0.0 where a demand does not fit, each the
        # reference's own product: equal terms give the reference equal sums
        return [weight * (idle - s) if n >= need else 0.0
                for weight, n, need, s in zip(self.table[row], can, self.count, small)]

    def _share(self, row: int, k: int, idle: int, can: list[int], small: list[int], free: int, milli: int) -> float:
        # the node after `milli` on a device with `free` left (FragModel.share_after)
        after = free - milli
        can2 = [n + (after >= m) - (free >= m) for n, m in zip(can, self.milli)]
        small2 = [s + (after if after < m else 0) - (free if free < m else 0) for s, m in zip(small, self.milli)]
        return self._frag(row, k, idle - milli, can2, small2)


def plain_scored(scored: list[tuple[float, int]], shape: Shape, tiebreaks: tuple[list[float], ...] = ()) -> Scored:
    """`PlainFrag.scores` as a strategy's `score_few` answer, in lists: cost
    (−score), for a GPU share the device per candidate, and `tiebreaks`."""
    return Scored(cost=[-score for score, _ in scored], tiebreaks=tiebreaks,
                  device=[device for _, device in scored] if is_share(shape) else None)


def step(delta: float) -> float | None:
    """`sigmoid_score` of one delta, or None when it lies within MARGIN of a step."""
    x = 100.0 / (1.0 + math.exp(min(delta / -1000.0, EXP_CAP)))
    floor = math.floor(x)
    if x - floor < MARGIN or floor + 1 - x < MARGIN:
        return None
    return float(floor)
