"""Oversell factor (SPEC §D, seed 003).

    raw factor  = requested / peak                     (50 GiB / 20 GiB = 2.5)
    target      = clamp(raw, min_factor, max_factor)   (default 1.0 – 1.5)
    factor      = next_factor(previous, target)        (falls at once,
                                                        rises ≤ max_rise per update)
    allocatable = reserved × factor                    (128 GiB × 2.5 = 320 GiB)

per resource: CPU by the CPU requests and peak, memory by the memory ones
(`allocatable.factor_allocatable`).

While any pod on the node is within its warm-up period, or when there is no
peak estimate (too few samples), the factor is 1.0: requests are the
prediction. GPUs are never oversold: a GPU share is a hard partition.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta



@dataclass(frozen=True)
class FactorSettings:
    """Limits of the oversell factor and how fast it may move."""

    min_factor: float = 1.0
    max_factor: float = 1.5
    max_rise_per_update: float = 0.05
    warmup_s: float = 600.0

    def __post_init__(self) -> None:
        if not 0 < self.min_factor <= self.max_factor:
            raise ValueError(f"need 0 < min_factor <= max_factor, got {self.min_factor}, {self.max_factor}")
        if self.max_rise_per_update < 0 or self.warmup_s < 0:
            raise ValueError("max_rise_per_update and warmup_s must not be negative")


def oversell_factor(requested: float, peak: float) -> float:
    """requested / peak, before clamping. No requests → 0.0 (clamps to the
    minimum); a zero peak with requests → +inf (clamps to the maximum)."""
    if requested < 0 or peak < 0:
        raise ValueError(f"requested and peak must not be negative, got {requested}, {peak}")
    if requested == 0:
        return 0.0
    return requested / peak if peak > 0 else math.inf


def clamp_factor(factor: float, min_factor: float, max_factor: float) -> float:
    """The factor limited to [min_factor, max_factor]."""
    return min(max(factor, min_factor), max_factor)


def next_factor(previous: float, target: float, max_rise_per_update: float) -> float:
    """One smoothing step: a lower target is taken at once (usage rose, be
    safe now); a higher one is approached by at most `max_rise_per_update`."""
    if target <= previous:
        return target
    return min(target, previous + max_rise_per_update)


def warming_up(pod_started_at: Iterable[datetime | None], now: datetime, warmup_s: float) -> datetime | None:
    """The most recent pod start within `warmup_s` before `now`, or None
    when no pod is warming up. A pod not yet started is warming up."""
    horizon = now - timedelta(seconds=warmup_s)
    recent = [now if started is None else started for started in pod_started_at]
    recent = [started for started in recent if started > horizon]
    return max(recent) if recent else None


def scaled(amount: int, factor: float) -> int:
    """amount × factor, rounded down: never grant a fraction that is not there."""
    return math.floor(amount * factor)


@dataclass(frozen=True)
class FactorDecision:
    """The factor to apply and why, with the figures behind it."""

    factor: float
    raw: float | None
    target: float
    reason: str
    warming_up: bool = False

    def inputs(self) -> dict[str, float]:
        """The figures as a flat dict, for `NodeAllocatable.inputs`."""
        found = {"factor": self.factor, "target": self.target}
        if self.raw is not None:
            found["raw_factor"] = self.raw
        return found


def decide_factor(requested: float, peak: float | None, previous: float | None,
                  pod_started_at: Iterable[datetime | None], now: datetime,
                  settings: FactorSettings = FactorSettings(),
                  no_peak_reason: str = "no peak estimate") -> FactorDecision:
    """The node's factor for this update.

    Warm-up (a pod started within `warmup_s`) or no peak → 1.0 at once
    (`no_peak_reason`, e.g. the peak estimate's own reason, says why).
    Otherwise target = clamp(requested / peak) and the factor moves from
    `previous` by `next_factor`; with no previous factor (first decision,
    or after a restart without state) it starts from `min_factor`.
    """
    started = warming_up(pod_started_at, now, settings.warmup_s)
    if started is not None:
        return FactorDecision(1.0, None, 1.0, warming_up=True,
                              reason=f"warm-up: a pod started at {started.isoformat()}, within "
                                     f"{settings.warmup_s:g}s; requests are the prediction")
    if peak is None:
        return FactorDecision(1.0, None, 1.0, reason=f"{no_peak_reason}; requests are the prediction")
    raw = oversell_factor(requested, peak)
    target = clamp_factor(raw, settings.min_factor, settings.max_factor)
    start = settings.min_factor if previous is None else previous
    factor = next_factor(start, target, settings.max_rise_per_update)
    if factor < target:
        how = f"rising toward {target:.3f} by at most {settings.max_rise_per_update:g} per update"
    elif target < start:
        how = "fell at once"
    else:
        how = "at target"
    return FactorDecision(factor, raw, target,
                          reason=f"requested {requested:g} / peak {peak:g} = {raw:.3f}, clamped to "
                                 f"[{settings.min_factor:g}, {settings.max_factor:g}] = {target:.3f}; {how}")
