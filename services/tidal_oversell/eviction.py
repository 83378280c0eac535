"""Which pods to evict from an overloaded oversold node (SPEC §D, seed 003).

Pods are taken in this order until the projected utilisation,
(memory used − Σ memory of the evicted pods) / basis, is below the evict
threshold:

1. pods labelled evictable — most memory used first (decided: the fewest
   evictions reach the threshold), ties youngest first;
2. pods below the highest priority present among the remaining pods
   (or a configured top priority) — lowest priority first, ties youngest
   first;
3. pods at that highest priority — lowest requested/used ratio first (the
   pods that most exceed their reservation), ties youngest first.

Any remaining tie goes to the pod name, so the order is total.

Guard rails: system-critical pods are never chosen; pods that use no memory
are never chosen (evicting them frees nothing); at most `max_evictions` per
round. Every skipped pod is listed with why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from tidal_schemas import PodUsage

from .pods_by_node import HeldPod

DEFAULT_MAX_EVICTIONS = 3


@dataclass(frozen=True)
class EvictionCandidate:
    """What eviction needs to know of one pod on the node."""

    name: str
    priority: int
    created_at: datetime
    requested_memory_mib: float
    used_memory_mib: float
    evictable: bool = False
    system_critical: bool = False


def candidate_from(pod: HeldPod, usage: PodUsage | None) -> EvictionCandidate:
    """A candidate from a pod's lifecycle and its last usage sample (no
    sample → 0 MiB used)."""
    return EvictionCandidate(
        name=pod.event_key(), priority=pod.priority, created_at=pod.created_at,
        requested_memory_mib=pod.memory_mib,
        used_memory_mib=usage.memory_mib if usage else 0,
        evictable=pod.evictable, system_critical=pod.system_critical,
    )


@dataclass(frozen=True)
class EvictionStep:
    """One pod to evict, the rule that chose it, and the projected
    utilisation once it is gone."""

    pod: EvictionCandidate
    rule: int
    reason: str
    projected_utilisation: float


@dataclass(frozen=True)
class EvictionPlan:
    """The pods to evict this round, in order, and whether that is enough."""

    steps: list[EvictionStep]
    start_utilisation: float
    final_utilisation: float
    threshold: float
    satisfied: bool
    reason: str
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _youngest_first(pod: EvictionCandidate) -> tuple[float, str]:
    return (-pod.created_at.timestamp(), pod.name)


def eviction_order(pods: Sequence[EvictionCandidate], top_priority: int | None = None
                   ) -> tuple[list[tuple[EvictionCandidate, int, str]], list[tuple[str, str]]]:
    """Every eligible pod in eviction order as (pod, rule, why), and the
    skipped pods as (name, why). `top_priority` overrides the highest
    priority found among the non-evictable eligible pods."""
    skipped = []
    eligible = []
    for pod in sorted(pods, key=lambda p: p.name):
        if pod.system_critical:
            skipped.append((pod.name, "system-critical: never evicted"))
        elif pod.used_memory_mib <= 0:
            skipped.append((pod.name, "uses no memory: evicting it frees nothing"))
        else:
            eligible.append(pod)

    labelled = sorted((p for p in eligible if p.evictable),
                      key=lambda p: (-p.used_memory_mib, *_youngest_first(p)))
    rest = [p for p in eligible if not p.evictable]
    top = top_priority if top_priority is not None else max((p.priority for p in rest), default=0)
    below = sorted((p for p in rest if p.priority < top), key=lambda p: (p.priority, *_youngest_first(p)))
    at_top = sorted((p for p in rest if p.priority >= top),
                    key=lambda p: (p.requested_memory_mib / p.used_memory_mib, *_youngest_first(p)))

    order = [(p, 1, f"rule 1: labelled evictable, uses {p.used_memory_mib:g} MiB") for p in labelled]
    order += [(p, 2, f"rule 2: priority {p.priority} < highest {top}") for p in below]
    order += [(p, 3, f"rule 3: highest priority {p.priority}, reserved/used = {p.requested_memory_mib:g}/"
                     f"{p.used_memory_mib:g} = {p.requested_memory_mib / p.used_memory_mib:.3f}") for p in at_top]
    return order, skipped


def plan_evictions(pods: Sequence[EvictionCandidate], memory_used_mib: float, basis_mib: float,
                   evict_threshold: float, max_evictions: int = DEFAULT_MAX_EVICTIONS,
                   top_priority: int | None = None) -> EvictionPlan:
    """Pods to evict, in `eviction_order`, until (memory_used − freed) /
    basis < evict_threshold, or `max_evictions` are chosen, or none is left."""
    if basis_mib <= 0:
        raise ValueError(f"basis must be positive, got {basis_mib}")
    start = memory_used_mib / basis_mib
    order, skipped = eviction_order(pods, top_priority)
    if start < evict_threshold:
        return EvictionPlan([], start, start, evict_threshold, True,
                            f"utilisation {start:.3f} < evict threshold {evict_threshold:.3f}: nothing to evict",
                            skipped)
    steps: list[EvictionStep] = []
    projected = start
    remaining = memory_used_mib
    for pod, rule, why in order:
        if len(steps) >= max_evictions:
            return EvictionPlan(steps, start, projected, evict_threshold, False,
                                f"max evictions per round ({max_evictions}) reached at utilisation "
                                f"{projected:.3f} >= {evict_threshold:.3f}", skipped)
        remaining -= pod.used_memory_mib
        before, projected = projected, max(remaining, 0.0) / basis_mib
        steps.append(EvictionStep(pod, rule, f"{why}; utilisation {before:.3f} -> {projected:.3f}", projected))
        if projected < evict_threshold:
            return EvictionPlan(steps, start, projected, evict_threshold, True,
                                f"utilisation {start:.3f} -> {projected:.3f} < evict threshold "
                                f"{evict_threshold:.3f} after {len(steps)} eviction(s)", skipped)
    return EvictionPlan(steps, start, projected, evict_threshold, False,
                        f"no eligible pod left; utilisation {projected:.3f} >= {evict_threshold:.3f}", skipped)
