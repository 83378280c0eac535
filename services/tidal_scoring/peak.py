"""Peak usage of a node over a window of samples (SPEC §D), three ways.

Each estimator reduces two per-sample series, CPU and memory utilisation
(fractions of node capacity), to a peak:

- `weighted`: series = node CPU / memory utilisation; peak = max over the
  window of w_cpu·cpu + w_mem·mem.
- `percentile`: series = Σ over pods of (pod usage / node capacity); peak =
  95th percentile across samples of w_cpu·cpu + w_mem·mem, nearest-rank:
  the value of rank ⌈p/100 · N⌉ in the sorted samples (an actual sample,
  never interpolated).
- `statistical`: series = node CPU / memory utilisation; peak = μ + 3σ of
  w_cpu·cpu + w_mem·mem, σ the sample standard deviation (N − 1), capped
  at 1 (a node cannot use more than it has).

`utilisation` is that combined peak. `cpu_milli` / `memory_mib` apply the
same statistic to each series alone, times capacity, for consumers that need
one resource (oversell's requested / peak).

Weights follow the node's task load profile (`load_profile_weights`): each
resource's share of capacity used by the node's pods over the window,
normalised to sum to 1 — a node whose pods use 60 % of its CPU and 20 % of
its memory is CPU-bound, weights 0.75/0.25. With nothing used the weights
are 0.5/0.5. A fixed `weight_cpu` setting overrides them.

With fewer samples than the minimum the estimate has no utilisation and the
reason says "too few samples: N < min": never a made-up number.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from tidal_schemas import NodeMetrics, PeakEstimate, Resources

DEFAULT_WINDOW_S = 300.0
DEFAULT_MIN_SAMPLES = 3
DEFAULT_PERCENTILE = 95.0


@dataclass(frozen=True)
class Sample:
    """One usage sample of a node, as fractions of its capacity."""

    at: datetime
    cpu_util: float
    memory_util: float
    pods_cpu_util: float = 0.0
    pods_memory_util: float = 0.0


def sample_from_metrics(metrics: NodeMetrics, capacity: Resources) -> Sample:
    """A `Sample` from a metrics event: memory utilisation is used / total
    as the agent reported it (capacity when it gave no total); pod sums are
    Σ pod usage / node capacity (0 when the capacity is unknown)."""
    memory_total = metrics.memory_total_mib or capacity.memory_mib
    memory_util = metrics.memory_used_mib / memory_total if memory_total else 0.0
    pod_cpu = sum(p.cpu_milli for p in metrics.pods)
    pod_memory = sum(p.memory_mib for p in metrics.pods)
    return Sample(
        at=metrics.sampled_at,
        cpu_util=metrics.node_cpu_util,
        memory_util=min(memory_util, 1.0),
        pods_cpu_util=pod_cpu / capacity.cpu_milli if capacity.cpu_milli else 0.0,
        pods_memory_util=pod_memory / capacity.memory_mib if capacity.memory_mib else 0.0,
    )


@dataclass(frozen=True)
class Weights:
    """w_cpu and w_mem of the combined peak; they sum to 1."""

    cpu: float = 0.5
    memory: float = 0.5


def load_profile_weights(samples: Sequence[Sample]) -> Weights:
    """Weights from the node's task load profile: w_r = share_r / (share_cpu
    + share_mem), share_r the mean over the window of what the node's pods
    use of resource r, as a fraction of capacity. Nothing used → 0.5/0.5."""
    cpu_share = sum(s.pods_cpu_util for s in samples) / len(samples) if samples else 0.0
    memory_share = sum(s.pods_memory_util for s in samples) / len(samples) if samples else 0.0
    total = cpu_share + memory_share
    if total <= 0:
        return Weights()
    return Weights(cpu=cpu_share / total, memory=memory_share / total)


def nearest_rank(values: Sequence[float], pct: float) -> float:
    """The pct-th percentile by nearest rank: sorted(values)[⌈pct/100·N⌉ − 1]."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered) - 1e-9))
    return ordered[rank - 1]


def _mean_plus_3_sigma(values: Sequence[float]) -> float:
    return statistics.fmean(values) + 3.0 * statistics.stdev(values)


Statistic = Callable[[Sequence[float]], float]


def _estimate(name: str, series: Callable[[Sample], tuple[float, float]], statistic: Statistic,
              samples: Sequence[Sample], window_s: float, capacity: Resources, weights: Weights,
              min_samples: int) -> PeakEstimate:
    if len(samples) < min_samples:
        return PeakEstimate(estimator=name, window_s=window_s, samples=len(samples),
                            reason=f"too few samples: {len(samples)} < {min_samples}")
    pairs = [series(s) for s in samples]
    combined = [weights.cpu * cpu + weights.memory * memory for cpu, memory in pairs]

    def peak(values: Sequence[float]) -> float:
        return min(max(statistic(values), 0.0), 1.0)

    def absolute(values: Sequence[float], total: int) -> int | None:
        return round(peak(values) * total) if total else None

    return PeakEstimate(
        estimator=name, window_s=window_s, samples=len(samples),
        utilisation=peak(combined),
        cpu_milli=absolute([cpu for cpu, _ in pairs], capacity.cpu_milli),
        memory_mib=absolute([memory for _, memory in pairs], capacity.memory_mib),
        reason=f"weights cpu={weights.cpu:.3f} memory={weights.memory:.3f}",
    )


def _node_series(s: Sample) -> tuple[float, float]:
    return s.cpu_util, s.memory_util


def _pod_series(s: Sample) -> tuple[float, float]:
    return s.pods_cpu_util, s.pods_memory_util


def weighted(samples: Sequence[Sample], window_s: float, capacity: Resources, weights: Weights = Weights(),
             min_samples: int = DEFAULT_MIN_SAMPLES) -> PeakEstimate:
    """Peak = max over the window of w_cpu·cpu_util + w_mem·mem_util."""
    return _estimate("weighted", _node_series, max, samples, window_s, capacity, weights, min_samples)


def percentile(samples: Sequence[Sample], window_s: float, capacity: Resources, weights: Weights = Weights(),
               min_samples: int = DEFAULT_MIN_SAMPLES, pct: float = DEFAULT_PERCENTILE) -> PeakEstimate:
    """Peak = nearest-rank `pct`th percentile across samples of the summed
    per-pod usage fractions (weighted over CPU and memory)."""
    return _estimate("percentile", _pod_series, lambda values: nearest_rank(values, pct),
                     samples, window_s, capacity, weights, min_samples)


def statistical(samples: Sequence[Sample], window_s: float, capacity: Resources, weights: Weights = Weights(),
                min_samples: int = DEFAULT_MIN_SAMPLES) -> PeakEstimate:
    """Peak = μ + 3σ of the per-sample node utilisation (σ needs ≥ 2
    samples, so the minimum is at least 2), capped at 1."""
    return _estimate("statistical", _node_series, _mean_plus_3_sigma,
                     samples, window_s, capacity, weights, max(min_samples, 2))


ESTIMATORS: dict[str, Callable[..., PeakEstimate]] = {
    "weighted": weighted,
    "percentile": percentile,
    "statistical": statistical,
}


class SampleWindow:
    """The last `window_s` seconds of samples of every node, oldest first.

    A sample is kept while newest.at − sample.at < window_s. A sample with
    the same time as a kept one replaces it (a redelivered event counts
    once); one older than the window is dropped on arrival.
    """

    def __init__(self, window_s: float = DEFAULT_WINDOW_S) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.window_s = window_s
        self._samples: dict[str, list[Sample]] = {}
        self._times: dict[str, list[datetime]] = {}

    def add(self, node: str, sample: Sample) -> None:
        """Record a sample of `node` and drop the ones that left the window."""
        samples = self._samples.setdefault(node, [])
        times = self._times.setdefault(node, [])
        i = bisect.bisect_left(times, sample.at)
        if i < len(times) and times[i] == sample.at:
            samples[i] = sample
        else:
            samples.insert(i, sample)
            times.insert(i, sample.at)
        cutoff = times[-1] - timedelta(seconds=self.window_s)
        keep_from = bisect.bisect_right(times, cutoff)
        del samples[:keep_from], times[:keep_from]

    def samples(self, node: str) -> list[Sample]:
        """The samples of `node` in the window, oldest first."""
        return list(self._samples.get(node, ()))

    def forget(self, node: str) -> None:
        """Drop every sample of a node (it left the cluster)."""
        self._samples.pop(node, None)
        self._times.pop(node, None)

    def nodes(self) -> list[str]:
        """Nodes with samples, sorted."""
        return sorted(self._samples)
