"""When an oversold node stops taking pods or sheds them (SPEC §D, seed 003).

    utilisation = memory used / basis
    stop  ≤ utilisation < evict  → stop scheduling (taint the node)
    utilisation ≥ evict          → evict (see `eviction.py`)

`basis` is what utilisation is measured against: the memory allocatable the
node advertises after oversell (or its memory limit when not oversold). The
evict threshold is derived from the node's fixed memory limit — memory is not
compressible, so the point where pods must go is fixed in MiB by the
hardware, whatever allocatable oversell advertises:

    evict_mib = evict_fraction · memory_limit,  evict = evict_mib / basis

The taint has hysteresis: set at utilisation ≥ stop, removed only below
stop − hysteresis, so a node hovering at the threshold does not flap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TaintAction = Literal["taint", "untaint", "keep"]


@dataclass(frozen=True)
class TaintDecision:
    """Whether to taint, untaint or leave the node, and why."""

    action: TaintAction
    reason: str


def taint_decision(utilisation: float, tainted: bool, stop_threshold: float, hysteresis: float) -> TaintDecision:
    """Untainted and utilisation ≥ stop → taint; tainted and utilisation <
    stop − hysteresis → untaint; anything else → keep."""
    if not tainted:
        if utilisation >= stop_threshold:
            return TaintDecision("taint", f"utilisation {utilisation:.3f} >= stop threshold {stop_threshold:.3f}")
        return TaintDecision("keep", f"utilisation {utilisation:.3f} < stop threshold {stop_threshold:.3f}")
    release = stop_threshold - hysteresis
    if utilisation < release:
        return TaintDecision("untaint", f"utilisation {utilisation:.3f} < stop threshold {stop_threshold:.3f} "
                                        f"- hysteresis {hysteresis:.3f} = {release:.3f}")
    return TaintDecision("keep", f"tainted and utilisation {utilisation:.3f} >= release point {release:.3f}")


@dataclass(frozen=True)
class EvictThreshold:
    """The evict point in MiB, and as a utilisation of the basis."""

    mib: float
    utilisation: float
    reason: str


def evict_threshold(memory_limit_mib: float, basis_mib: float, evict_fraction: float = 0.95) -> EvictThreshold:
    """evict_mib = evict_fraction · memory_limit; as utilisation of the
    basis: evict_mib / basis (= evict_fraction when basis = limit)."""
    if memory_limit_mib <= 0 or basis_mib <= 0:
        raise ValueError(f"memory limit and basis must be positive, got {memory_limit_mib}, {basis_mib}")
    mib = evict_fraction * memory_limit_mib
    return EvictThreshold(mib, mib / basis_mib,
                          f"evict at {evict_fraction:g} x memory limit {memory_limit_mib:g} MiB = {mib:g} MiB "
                          f"= {mib / basis_mib:.3f} of {basis_mib:g} MiB")


def utilisation(memory_used_mib: float, basis_mib: float) -> float:
    """memory used / basis (may exceed 1 on an oversold node)."""
    if basis_mib <= 0:
        raise ValueError(f"basis must be positive, got {basis_mib}")
    return memory_used_mib / basis_mib
