"""What a simulation run saw, kept for the report: the arrival log (GPU
figures after every arrival), decision latencies, the timeline of
happenings, per-tick NUMA loads and tenant usage, and the actions and their
results. A plain container; `report.py` turns it into figures."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tidal_schemas import BindResult, PlacementDecision, Resources

from .expectations import Happening


@dataclass
class ArrivalLine:
    """After one arrival: cumulative arrived GPU request, allocated, idle and
    fragmented milli-GPU, and whether this pod was running when it settled."""

    pod: str
    arrived: int
    allocated: int
    idle: int
    frag: float
    placed: bool


@dataclass
class TickSample:
    """One tick: scenario time, NUMA loads per node, CPU used and requested
    (milli), and per tenant what its running pods request, by resource type."""

    t_s: float
    numa_load: dict[str, dict[int, float]]
    cpu_used: int
    cpu_requested: int
    tenant_usage: dict[str, dict[str, float]]


@dataclass
class Recorder:
    arrivals: list[ArrivalLine] = field(default_factory=list)
    released_at: dict[str, float] = field(default_factory=dict)  # pod -> wall time released
    latencies_s: dict[str, float] = field(default_factory=dict)  # pod -> first decision latency
    decisions: int = 0
    last_decision: dict[str, tuple[str, str, dict[str, int]]] = field(default_factory=dict)  # outcome, reason, filtered
    bind_results: Counter = field(default_factory=Counter)
    timeline: list[Happening] = field(default_factory=list)
    ticks: list[TickSample] = field(default_factory=list)
    actions: Counter = field(default_factory=Counter)  # (requested_by, kind) -> count
    results: Counter = field(default_factory=Counter)  # (kind, status) -> count
    allocatable: dict[str, dict[str, float]] = field(default_factory=dict)  # node -> last figures
    allocatable_events: int = 0
    asked: dict[tuple[str, str, str | None], str] = field(default_factory=dict)  # (kind, node, pod) -> who

    def asked_by(self, kind: str, node: str | None, pod: str | None) -> str:
        """Who asked for an action the bridge carried out, when known."""
        return self.asked.get((kind, node or "", pod), "")

    def happen(self, t_s: float, kind: str, node: str | None = None, pod: str | None = None, detail: str = "",
               source: str = "") -> None:
        self.timeline.append(Happening(t_s, kind, node, pod, detail, source))

    def decision(self, t_s: float, key: str, decision: PlacementDecision, now: float) -> None:
        """A decision for a pod of this run, read at wall time `now`."""
        self.decisions += 1
        if key in self.released_at and key not in self.latencies_s:
            self.latencies_s[key] = now - self.released_at[key]
        self.last_decision[key] = (decision.outcome, decision.reason, dict(decision.filtered))
        if decision.outcome == "pending":
            self.happen(t_s, "pending", None, key, decision.reason)

    def bind_result(self, t_s: float, result: BindResult) -> None:
        self.bind_results["ok" if result.ok else "failed"] += 1
        if not result.ok:
            self.happen(t_s, "bind-failed", result.node, result.event_key(), result.reason)

    def allocatable_seen(self, node: str, allocatable: Resources) -> None:
        """The node object's `status.allocatable` changed (a kubelet's write, the webhook's figure)."""
        self.allocatable_events += 1
        self.allocatable[node] = {"cpu_milli": allocatable.cpu_milli, "memory_mib": allocatable.memory_mib}


def tick_sample(model, last_metrics, t_s: float) -> TickSample:
    """The tick at `t_s`: NUMA loads and CPU used from each node's latest
    sample, and what the running pods request, per tenant."""
    usage: dict[str, dict[str, float]] = {}
    cpu_requested = 0
    for pod in model.pods.values():
        if pod.phase != "running":
            continue
        held = usage.setdefault(pod.request.tenant, {})
        held["cpu"] = held.get("cpu", 0.0) + pod.request.requests.cpu_milli
        held["memory"] = held.get("memory", 0.0) + pod.request.requests.memory_mib
        for share in pod.gpus:  # by model, and all models together
            held[share.model or "gpu"] = held.get(share.model or "gpu", 0.0) + share.milli
            held["gpu"] = held.get("gpu", 0.0) + share.milli
        cpu_requested += pod.request.requests.cpu_milli
    loads = {n: dict(m.numa_load) for n, m in last_metrics.items() if m.numa_load}
    used = sum(m.cpu_used_milli for m in last_metrics.values())
    return TickSample(t_s, loads, used, cpu_requested, usage)
