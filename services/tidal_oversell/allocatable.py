"""The node allocatable event for either policy, from a node's facts (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tidal_schemas import NodeAllocatable, NodeMetrics, NodeTopology, PeakEstimate, PodLifecycle, Resources

from .bounded import BoundedSettings, bounded_node_allocatable
from .factor import FactorSettings, decide_factor, oversold_allocatable


def _sum(pods: Sequence[PodLifecycle]) -> Resources:
    return Resources(cpu_milli=sum(p.requests.cpu_milli for p in pods),
                     memory_mib=sum(p.requests.memory_mib for p in pods))


def factor_allocatable(topology: NodeTopology, pods: Sequence[PodLifecycle], peak: PeakEstimate | None,
                       previous: float | None, now: datetime, settings: FactorSettings) -> NodeAllocatable:
    """Seed 003: factor = requested memory / peak memory (clamped, smoothed,
    1.0 in warm-up or without a peak); allocatable = node allocatable × factor."""
    requested = _sum(pods).memory_mib
    peak_mib = peak.memory_mib if peak is not None else None
    no_peak = peak.reason if peak is not None and peak.reason else "no peak estimate from scoring yet"
    decision = decide_factor(float(requested), float(peak_mib) if peak_mib else None, previous,
                             [p.started_at for p in pods], now, settings, no_peak_reason=no_peak)
    inputs = {"requested_memory_mib": float(requested), **decision.inputs()}
    if peak_mib is not None:
        inputs["peak_memory_mib"] = float(peak_mib)
    return NodeAllocatable(node=topology.node, policy="factor", capacity=topology.capacity,
                           allocatable=oversold_allocatable(topology.allocatable, decision.factor),
                           factor=decision.factor, inputs=inputs, reason=decision.reason)


def bounded_allocatable_event(topology: NodeTopology, pods: Sequence[PodLifecycle], metrics: NodeMetrics,
                              settings: BoundedSettings) -> NodeAllocatable:
    """Seed 004: the bounded formula over allocated/used, totals and LS only."""
    ls = [p for p in pods if p.qos == "LS"]
    ls_keys = {p.event_key() for p in ls}
    used_ls = [u for u in metrics.pods if u.pod in ls_keys]
    result = bounded_node_allocatable(
        topology.capacity, _sum(pods),
        Resources(cpu_milli=metrics.cpu_used_milli, memory_mib=metrics.memory_used_mib),
        _sum(ls), Resources(cpu_milli=sum(u.cpu_milli for u in used_ls), memory_mib=sum(u.memory_mib for u in used_ls)),
        metrics.node_cpu_util, settings)
    factor = result.allocatable.cpu_milli / topology.capacity.cpu_milli if topology.capacity.cpu_milli else None
    return NodeAllocatable(node=topology.node, policy="bounded", capacity=topology.capacity,
                           allocatable=result.allocatable, factor=factor, inputs=result.inputs(),
                           reason=result.reason)


def unchanged_allocatable(topology: NodeTopology) -> NodeAllocatable:
    return NodeAllocatable(node=topology.node, policy="none", capacity=topology.capacity,
                           allocatable=topology.allocatable, factor=1.0, reason="oversell disabled for this pool")
