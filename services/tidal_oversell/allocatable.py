"""The node allocatable event for either policy, from a node's facts (pure).

Each resource follows its own evidence: CPU allocatable is scaled by the CPU
factor (requested CPU / peak CPU), memory by the memory factor; a node whose
CPU runs flat out is never advertised with more CPU because its memory is
idle. Without usage evidence (no peak estimate from scoring yet, too few
samples, or a pod in its warm-up) neither policy oversells.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tidal_schemas import NodeAllocatable, NodeMetrics, NodeTopology, PeakEstimate, Resources

from .bounded import BoundedSettings, bounded_node_allocatable
from .factor import FactorDecision, FactorSettings, decide_factor, scaled, warming_up
from .pods_by_node import HeldPod

RESOURCES = (("cpu", "cpu_milli"), ("memory", "memory_mib"))


def requested_on(pods: Sequence[HeldPod]) -> Resources:
    """Σ CPU and memory requests of the pods on a node."""
    return Resources(cpu_milli=sum(p.cpu_milli for p in pods), memory_mib=sum(p.memory_mib for p in pods))


def no_evidence(peak: PeakEstimate | None, pods: Sequence[HeldPod], now: datetime,
                warmup_s: float) -> str:
    """Why the node's usage says nothing yet ('' when it does): no peak
    estimate, too few samples, or a pod still warming up."""
    started = warming_up([p.started_at for p in pods], now, warmup_s)
    if started is not None:
        return f"warm-up: a pod started at {started.isoformat()}, within {warmup_s:g}s"
    if peak is None:
        return "no peak estimate from scoring yet"
    if peak.utilisation is None:
        return peak.reason or "no peak estimate"
    return ""


def factor_allocatable(topology: NodeTopology, pods: Sequence[HeldPod], peak: PeakEstimate | None,
                       previous: dict[str, float], now: datetime, settings: FactorSettings) -> NodeAllocatable:
    """Seed 003, per resource: factor_r = requested_r / peak_r (clamped,
    smoothed from `previous[r]`, 1.0 in warm-up or without a peak);
    allocatable_r = node allocatable_r × factor_r. `factor` is the smaller
    of the two, `factors` both."""
    requested = requested_on(pods)
    no_peak = peak.reason if peak is not None and peak.reason else "no peak estimate from scoring yet"
    decisions: dict[str, FactorDecision] = {}
    inputs: dict[str, float] = {}
    started = [p.started_at for p in pods]  # once for both resources: each read builds a datetime
    for resource, field in RESOURCES:
        asked = float(getattr(requested, field))
        peak_value = getattr(peak, field) if peak is not None else None
        decision = decide_factor(asked, float(peak_value) if peak_value else None, previous.get(resource),
                                 started, now, settings, no_peak_reason=no_peak)
        decisions[resource] = decision
        inputs[f"requested_{field}"] = asked
        if peak_value is not None:
            inputs[f"peak_{field}"] = float(peak_value)
        inputs.update({f"{resource}.{k}": v for k, v in decision.inputs().items()})
    factors = {resource: d.factor for resource, d in decisions.items()}
    allocatable = Resources(cpu_milli=scaled(topology.allocatable.cpu_milli, factors["cpu"]),
                            memory_mib=scaled(topology.allocatable.memory_mib, factors["memory"]),
                            gpu_milli=topology.allocatable.gpu_milli)
    reason = "; ".join(f"{resource}: {d.reason}" for resource, d in decisions.items())
    return NodeAllocatable(node=topology.node, policy="factor", capacity=topology.capacity, allocatable=allocatable,
                           factor=min(factors.values()), factors=factors, inputs=inputs, reason=reason)


def bounded_allocatable_event(topology: NodeTopology, pods: Sequence[HeldPod], metrics: NodeMetrics,
                              peak: PeakEstimate | None, settings: BoundedSettings,
                              warmup_s: float) -> NodeAllocatable:
    """Seed 004: the bounded formula over allocated/used, totals and LS only;
    capacity, not more, while the node's usage says nothing yet."""
    why_not = no_evidence(peak, pods, metrics.sampled_at, warmup_s)
    if why_not:
        return NodeAllocatable(node=topology.node, policy="bounded", capacity=topology.capacity,
                               allocatable=topology.capacity, factor=1.0, factors={"cpu": 1.0, "memory": 1.0},
                               reason=f"{why_not}: no usage evidence, allocatable = capacity")
    ls = [p for p in pods if p.qos == "LS"]
    ls_keys = {p.event_key() for p in ls}
    used_ls = [u for u in metrics.pods if u.pod in ls_keys]
    result = bounded_node_allocatable(
        topology.capacity, requested_on(pods),
        Resources(cpu_milli=metrics.cpu_used_milli, memory_mib=metrics.memory_used_mib),
        requested_on(ls), Resources(cpu_milli=sum(u.cpu_milli for u in used_ls),
                                    memory_mib=sum(u.memory_mib for u in used_ls)),
        metrics.node_cpu_util, settings)
    factors = {resource: getattr(result.allocatable, field) / getattr(topology.capacity, field)
               for resource, field in RESOURCES if getattr(topology.capacity, field)}
    return NodeAllocatable(node=topology.node, policy="bounded", capacity=topology.capacity,
                           allocatable=result.allocatable, factor=min(factors.values(), default=None),
                           factors=factors, inputs=result.inputs(), reason=result.reason)


def unchanged_allocatable(topology: NodeTopology) -> NodeAllocatable:
    """No oversell: the node's own allocatable."""
    return NodeAllocatable(node=topology.node, policy="none", capacity=topology.capacity,
                           allocatable=topology.allocatable, factor=1.0, reason="oversell disabled for this pool")
